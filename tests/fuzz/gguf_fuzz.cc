// libFuzzer target for the GGUF reader and writer. Every input goes to GgufFile::FromBuffer;
// when it parses, every metadata value and tensor view is read and checked for consistency,
// then the file is rebuilt with GgufWriter and parsed again, and the two must agree (same keys,
// values, tensor names, types, shapes and bytes). Any disagreement aborts, which libFuzzer
// reports as a crash.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/gguf_file.h"
#include "common/gguf_writer.h"

namespace deltaserve::common {
namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "gguf_fuzz: %s\n", what);
  std::abort();
}

void Require(bool ok, const char* what) {
  if (!ok) Fail(what);
}

// Reads every element of `v`, recursively.
void Touch(const GgufValue& v) {
  volatile size_t sink = v.DebugString().size();
  (void)v.AsInt();
  (void)v.AsDouble();
  (void)v.AsBool();
  (void)v.AsString();
  for (uint64_t i = 0; i < v.ArraySize(); ++i) {
    switch (v.array_type()) {
      case GgufValueType::kString:
        sink = sink + v.ArrayString(i).value().size();
        break;
      case GgufValueType::kArray:
        Touch(*v.ArrayItem(i));
        break;
      default:
        (void)v.ArrayInt(i);
        Require(v.ArrayDouble(i).has_value(), "numeric array element unreadable");
        break;
    }
  }
  (void)sink;
}

void CheckFile(const GgufFile& f, const uint8_t* data, size_t size) {
  Require(f.file_size() == size, "file_size");
  // A file without tensors may end before its (aligned) data section would start.
  Require(f.data_offset() % f.alignment() == 0 && (f.tensors().empty() || f.data_offset() <= size),
          "data offset");
  for (const GgufKeyValue& kv : f.metadata()) {
    Require(f.Find(kv.key) == &kv.value, "key not findable");
    Touch(kv.value);
    (void)f.GetInt(kv.key);
    (void)f.GetDouble(kv.key);
    (void)f.GetBool(kv.key);
    (void)f.GetString(kv.key);
    (void)f.GetArray(kv.key);
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    Require(f.FindTensor(t.name) == &t, "tensor not findable");
    Require(t.n_dims >= 1 && t.n_dims <= kGgufMaxDims, "rank");
    absl::StatusOr<uint64_t> n =
        GgufTensorByteSize(t.type, absl::MakeConstSpan(t.ne.data(), t.n_dims));
    Require(n.ok() && *n == t.n_bytes, "tensor byte size");
    Require(t.offset >= f.data_offset() && t.offset <= size && t.n_bytes <= size - t.offset,
            "tensor outside the buffer");
    absl::Span<const uint8_t> bytes = f.TensorData(t);
    Require(bytes.data() == data + t.offset && bytes.size() == t.n_bytes, "tensor view");
    if (!bytes.empty()) {
      volatile uint8_t edge = bytes.front() ^ bytes.back();
      (void)edge;
    }
    (void)t.ShapeString();
  }
}

// The writer's counterpart of a parsed value.
GgufMetadataValue Convert(const GgufValue& v) {
  const GgufValueType type = v.type();
  auto u64 = [](std::optional<int64_t> i, std::optional<double> d) -> uint64_t {
    if (i) return static_cast<uint64_t>(*i);
    return *d >= 18446744073709551615.0 ? ~uint64_t{0} : static_cast<uint64_t>(*d);
  };
  switch (type) {
    case GgufValueType::kUint8:
      return GgufMetadataValue::Uint8(static_cast<uint8_t>(*v.AsInt()));
    case GgufValueType::kInt8:
      return GgufMetadataValue::Int8(static_cast<int8_t>(*v.AsInt()));
    case GgufValueType::kUint16:
      return GgufMetadataValue::Uint16(static_cast<uint16_t>(*v.AsInt()));
    case GgufValueType::kInt16:
      return GgufMetadataValue::Int16(static_cast<int16_t>(*v.AsInt()));
    case GgufValueType::kUint32:
      return GgufMetadataValue::Uint32(static_cast<uint32_t>(*v.AsInt()));
    case GgufValueType::kInt32:
      return GgufMetadataValue::Int32(static_cast<int32_t>(*v.AsInt()));
    case GgufValueType::kFloat32:
      return GgufMetadataValue::Float32(static_cast<float>(*v.AsDouble()));
    case GgufValueType::kBool:
      return GgufMetadataValue::Bool(*v.AsBool());
    case GgufValueType::kString:
      return GgufMetadataValue::String(*v.AsString());
    case GgufValueType::kUint64: {
      uint64_t x = 0;
      Require(absl::SimpleAtoi(v.DebugString(), &x), "u64 rendering");
      return GgufMetadataValue::Uint64(x);
    }
    case GgufValueType::kInt64:
      return GgufMetadataValue::Int64(*v.AsInt());
    case GgufValueType::kFloat64:
      return GgufMetadataValue::Float64(*v.AsDouble());
    case GgufValueType::kArray:
      break;
  }
  const uint64_t n = v.ArraySize();
  auto ints = [&](auto zero) {
    std::vector<decltype(zero)> out(n);
    for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<decltype(zero)>(*v.ArrayInt(i));
    return out;
  };
  switch (v.array_type()) {
    case GgufValueType::kUint8:
      return GgufMetadataValue::Uint8Array(ints(uint8_t{}));
    case GgufValueType::kInt8:
      return GgufMetadataValue::Int8Array(ints(int8_t{}));
    case GgufValueType::kUint16:
      return GgufMetadataValue::Uint16Array(ints(uint16_t{}));
    case GgufValueType::kInt16:
      return GgufMetadataValue::Int16Array(ints(int16_t{}));
    case GgufValueType::kUint32:
      return GgufMetadataValue::Uint32Array(ints(uint32_t{}));
    case GgufValueType::kInt32:
      return GgufMetadataValue::Int32Array(ints(int32_t{}));
    case GgufValueType::kInt64:
      return GgufMetadataValue::Int64Array(ints(int64_t{}));
    case GgufValueType::kBool: {
      std::unique_ptr<bool[]> out(new bool[n + 1]);
      for (uint64_t i = 0; i < n; ++i) out[i] = *v.ArrayInt(i) != 0;
      return GgufMetadataValue::BoolArray(absl::MakeConstSpan(out.get(), n));
    }
    case GgufValueType::kUint64: {
      std::vector<uint64_t> out(n);
      for (uint64_t i = 0; i < n; ++i) out[i] = u64(v.ArrayInt(i), v.ArrayDouble(i));
      return GgufMetadataValue::Uint64Array(out);
    }
    case GgufValueType::kFloat32: {
      std::vector<float> out(n);
      for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<float>(*v.ArrayDouble(i));
      return GgufMetadataValue::Float32Array(out);
    }
    case GgufValueType::kFloat64: {
      std::vector<double> out(n);
      for (uint64_t i = 0; i < n; ++i) out[i] = *v.ArrayDouble(i);
      return GgufMetadataValue::Float64Array(out);
    }
    case GgufValueType::kString: {
      std::vector<std::string> out(n);
      for (uint64_t i = 0; i < n; ++i) out[i] = std::string(*v.ArrayString(i));
      return GgufMetadataValue::StringArray(std::move(out));
    }
    case GgufValueType::kArray: {
      std::vector<GgufMetadataValue> out;
      for (uint64_t i = 0; i < n; ++i) out.push_back(Convert(*v.ArrayItem(i)));
      return GgufMetadataValue::ArrayOfArrays(std::move(out));
    }
  }
  Fail("unreachable value type");
}

bool SameDouble(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Values agree element by element (NaN equals NaN: a float's payload may change in transit).
bool SameValue(const GgufValue& a, const GgufValue& b) {
  if (a.type() != b.type()) return false;
  if (!a.is_array()) {
    if (a.AsString()) return *a.AsString() == *b.AsString();
    if (a.type() == GgufValueType::kFloat32 || a.type() == GgufValueType::kFloat64) {
      return SameDouble(*a.AsDouble(), *b.AsDouble());
    }
    return a.DebugString() == b.DebugString();
  }
  if (a.array_type() != b.array_type() || a.ArraySize() != b.ArraySize()) return false;
  for (uint64_t i = 0; i < a.ArraySize(); ++i) {
    if (a.array_type() == GgufValueType::kString) {
      if (*a.ArrayString(i) != *b.ArrayString(i)) return false;
    } else if (a.array_type() == GgufValueType::kArray) {
      if (!SameValue(*a.ArrayItem(i), *b.ArrayItem(i))) return false;
    } else if (a.ArrayInt(i) != b.ArrayInt(i) ||
               !SameDouble(*a.ArrayDouble(i), *b.ArrayDouble(i))) {
      return false;
    }
  }
  return true;
}

// Rebuilds `f` with GgufWriter and checks that the result parses back to the same content.
void CheckRoundTrip(const GgufFile& f) {
  GgufWriter w(f.version());
  for (const GgufKeyValue& kv : f.metadata()) {
    if (kv.key == "general.alignment") {
      // The reader takes any integer type; the writer always stores a u32.
      Require(w.SetAlignment(f.alignment()).ok(), "writer refused the alignment");
      continue;
    }
    Require(w.AddMetadata(kv.key, Convert(kv.value)).ok(), "writer refused a parsed key");
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    absl::Span<const uint8_t> bytes = f.TensorData(t);
    Require(w.AddTensor(t.name, t.type, absl::MakeConstSpan(t.ne.data(), t.n_dims),
                        std::vector<uint8_t>(bytes.begin(), bytes.end()))
                .ok(),
            "writer refused a parsed tensor");
  }
  absl::StatusOr<std::vector<uint8_t>> image = w.Build();
  Require(image.ok() && image->size() == w.FileSize(), "writer build");
  absl::StatusOr<std::unique_ptr<GgufFile>> again = GgufFile::FromBuffer(*image, "rebuilt");
  if (!again.ok()) {
    std::fprintf(stderr, "%s\n", std::string(again.status().message()).c_str());
    Fail("rebuilt file does not parse");
  }
  const GgufFile& g = **again;
  Require(g.version() == f.version() && g.alignment() == f.alignment(), "header differs");
  Require(g.metadata().size() == f.metadata().size(), "metadata count differs");
  for (const GgufKeyValue& kv : f.metadata()) {
    const GgufValue* other = g.Find(kv.key);
    Require(other != nullptr, "key lost");
    if (kv.key != "general.alignment") Require(SameValue(kv.value, *other), "value differs");
  }
  Require(g.tensors().size() == f.tensors().size(), "tensor count differs");
  for (const GgufTensorInfo& t : f.tensors()) {
    const GgufTensorInfo* u = g.FindTensor(t.name);
    Require(u != nullptr && u->type == t.type && u->ne == t.ne && u->n_dims == t.n_dims,
            "tensor info differs");
    absl::Span<const uint8_t> x = f.TensorData(t), y = g.TensorData(*u);
    Require(x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size()) == 0),
            "tensor bytes differ");
  }
}

}  // namespace
}  // namespace deltaserve::common

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deltaserve::common;
  absl::StatusOr<std::unique_ptr<GgufFile>> f =
      GgufFile::FromBuffer(absl::MakeConstSpan(data, size), "fuzz.gguf");
  if (!f.ok()) {
    if (f.status().message().empty()) Fail("error without a message");
    return 0;
  }
  CheckFile(**f, data, size);
  // The writer pads the header to the alignment (up to 2^30): a rebuilt image could need a
  // gigabyte of zeros, which only slows the search down.
  if ((*f)->alignment() <= 65536) CheckRoundTrip(**f);
  return 0;
}
