#include "common/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/str_util.h"

namespace deltaserve::common {

static_assert(std::endian::native == std::endian::little,
              "scalar bits are taken from host memory; GGUF is little-endian");

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" as a little-endian u32
constexpr std::string_view kAlignmentKey = "general.alignment";
// The largest alignment GgufFile accepts.
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
constexpr size_t kMaxDims = 4;

void AppendLe(std::vector<uint8_t>& out, uint64_t v, int n_bytes) {
  for (int i = 0; i < n_bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void AppendString(std::vector<uint8_t>& out, std::string_view s) {
  AppendLe(out, s.size(), 8);
  out.insert(out.end(), s.begin(), s.end());
}

uint64_t AlignUp(uint64_t x, uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;
}

bool IsValidAlignment(uint64_t a) { return a > 0 && a <= kMaxAlignment && (a & (a - 1)) == 0; }

template <typename T>
uint64_t Bits(T v) {
  static_assert(sizeof(T) <= 8);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}

std::string ShapeString(absl::Span<const int64_t> ne) {
  return absl::StrCat("{", absl::StrJoin(ne, ", "), "}");
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

// --- GgufMetadataValue -------------------------------------------------------------------------

GgufMetadataValue GgufMetadataValue::Scalar(GgufValueType type, uint64_t bits) {
  GgufMetadataValue out;
  out.type_ = type;
  out.bits_ = bits;
  return out;
}

GgufMetadataValue GgufMetadataValue::Uint8(uint8_t v) { return Scalar(GgufValueType::kUint8, v); }
GgufMetadataValue GgufMetadataValue::Int8(int8_t v) {
  return Scalar(GgufValueType::kInt8, Bits(v));
}
GgufMetadataValue GgufMetadataValue::Uint16(uint16_t v) {
  return Scalar(GgufValueType::kUint16, v);
}
GgufMetadataValue GgufMetadataValue::Int16(int16_t v) {
  return Scalar(GgufValueType::kInt16, Bits(v));
}
GgufMetadataValue GgufMetadataValue::Uint32(uint32_t v) {
  return Scalar(GgufValueType::kUint32, v);
}
GgufMetadataValue GgufMetadataValue::Int32(int32_t v) {
  return Scalar(GgufValueType::kInt32, Bits(v));
}
GgufMetadataValue GgufMetadataValue::Float32(float v) {
  return Scalar(GgufValueType::kFloat32, Bits(v));
}
GgufMetadataValue GgufMetadataValue::Bool(bool v) { return Scalar(GgufValueType::kBool, v); }
GgufMetadataValue GgufMetadataValue::Uint64(uint64_t v) {
  return Scalar(GgufValueType::kUint64, v);
}
GgufMetadataValue GgufMetadataValue::Int64(int64_t v) {
  return Scalar(GgufValueType::kInt64, Bits(v));
}
GgufMetadataValue GgufMetadataValue::Float64(double v) {
  return Scalar(GgufValueType::kFloat64, Bits(v));
}

GgufMetadataValue GgufMetadataValue::String(std::string_view v) {
  GgufMetadataValue out;
  out.type_ = GgufValueType::kString;
  out.string_ = std::string(v);
  return out;
}

template <typename T>
GgufMetadataValue GgufMetadataValue::PackedArray(GgufValueType type, absl::Span<const T> v) {
  GgufMetadataValue out;
  out.type_ = GgufValueType::kArray;
  out.array_type_ = type;
  out.packed_count_ = v.size();
  const int size = GgufScalarSize(type);
  out.packed_.reserve(v.size() * size);
  for (const T& x : v) AppendLe(out.packed_, Bits(x), size);
  return out;
}

GgufMetadataValue GgufMetadataValue::Uint8Array(absl::Span<const uint8_t> v) {
  return PackedArray(GgufValueType::kUint8, v);
}
GgufMetadataValue GgufMetadataValue::Int8Array(absl::Span<const int8_t> v) {
  return PackedArray(GgufValueType::kInt8, v);
}
GgufMetadataValue GgufMetadataValue::Uint16Array(absl::Span<const uint16_t> v) {
  return PackedArray(GgufValueType::kUint16, v);
}
GgufMetadataValue GgufMetadataValue::Int16Array(absl::Span<const int16_t> v) {
  return PackedArray(GgufValueType::kInt16, v);
}
GgufMetadataValue GgufMetadataValue::Uint32Array(absl::Span<const uint32_t> v) {
  return PackedArray(GgufValueType::kUint32, v);
}
GgufMetadataValue GgufMetadataValue::Int32Array(absl::Span<const int32_t> v) {
  return PackedArray(GgufValueType::kInt32, v);
}
GgufMetadataValue GgufMetadataValue::Float32Array(absl::Span<const float> v) {
  return PackedArray(GgufValueType::kFloat32, v);
}
GgufMetadataValue GgufMetadataValue::BoolArray(absl::Span<const bool> v) {
  return PackedArray(GgufValueType::kBool, v);  // bool is one byte, 0 or 1
}
GgufMetadataValue GgufMetadataValue::Uint64Array(absl::Span<const uint64_t> v) {
  return PackedArray(GgufValueType::kUint64, v);
}
GgufMetadataValue GgufMetadataValue::Int64Array(absl::Span<const int64_t> v) {
  return PackedArray(GgufValueType::kInt64, v);
}
GgufMetadataValue GgufMetadataValue::Float64Array(absl::Span<const double> v) {
  return PackedArray(GgufValueType::kFloat64, v);
}

GgufMetadataValue GgufMetadataValue::StringArray(std::vector<std::string> v) {
  GgufMetadataValue out;
  out.type_ = GgufValueType::kArray;
  out.array_type_ = GgufValueType::kString;
  out.strings_ = std::move(v);
  return out;
}

GgufMetadataValue GgufMetadataValue::ArrayOfArrays(std::vector<GgufMetadataValue> items) {
  GgufMetadataValue out;
  out.type_ = GgufValueType::kArray;
  out.array_type_ = GgufValueType::kArray;
  out.items_ = std::move(items);
  return out;
}

GgufMetadataValue GgufMetadataValue::CopyOf(const GgufValue& v) {
  // Numbers and bools are copied as their stored bits, so every value (a u64 above INT64_MAX,
  // a NaN payload) survives exactly.
  switch (v.type()) {
    case GgufValueType::kString:
      return String(v.AsString().value_or(""));
    case GgufValueType::kArray:
      break;
    default:
      return Scalar(v.type(), v.ScalarBits());
  }
  const uint64_t n = v.ArraySize();
  switch (v.array_type()) {
    case GgufValueType::kString: {
      std::vector<std::string> strings(n);
      for (uint64_t i = 0; i < n; ++i) strings[i] = std::string(v.ArrayString(i).value_or(""));
      return StringArray(std::move(strings));
    }
    case GgufValueType::kArray: {
      std::vector<GgufMetadataValue> items;
      items.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        const GgufValue* item = v.ArrayItem(i);
        items.push_back(item != nullptr ? CopyOf(*item) : Uint8Array({}));
      }
      return ArrayOfArrays(std::move(items));
    }
    default: {
      std::vector<uint64_t> bits(n);
      for (uint64_t i = 0; i < n; ++i) bits[i] = v.ArrayBits(i).value_or(0);
      return PackedArray(v.array_type(), absl::Span<const uint64_t>(bits));
    }
  }
}

uint64_t GgufMetadataValue::ArraySize() const {
  if (type_ != GgufValueType::kArray) return 0;
  if (array_type_ == GgufValueType::kString) return strings_.size();
  if (array_type_ == GgufValueType::kArray) return items_.size();
  return packed_count_;
}

uint64_t GgufMetadataValue::EncodedSize() const {
  if (type_ == GgufValueType::kString) return 8 + string_.size();
  if (type_ != GgufValueType::kArray) return GgufScalarSize(type_);
  uint64_t n = 4 + 8;  // element type, count
  if (array_type_ == GgufValueType::kString) {
    for (const std::string& s : strings_) n += 8 + s.size();
  } else if (array_type_ == GgufValueType::kArray) {
    for (const GgufMetadataValue& item : items_) n += item.EncodedSize();
  } else {
    n += packed_.size();
  }
  return n;
}

void GgufMetadataValue::AppendEncoding(std::vector<uint8_t>& out) const {
  if (type_ == GgufValueType::kString) {
    AppendString(out, string_);
    return;
  }
  if (type_ != GgufValueType::kArray) {
    AppendLe(out, bits_, GgufScalarSize(type_));
    return;
  }
  AppendLe(out, static_cast<uint32_t>(array_type_), 4);
  AppendLe(out, ArraySize(), 8);
  if (array_type_ == GgufValueType::kString) {
    for (const std::string& s : strings_) AppendString(out, s);
  } else if (array_type_ == GgufValueType::kArray) {
    // Items carry no type field of their own: the element type already says "array", and
    // each item starts with its own element type and count (as GgufFile reads them).
    for (const GgufMetadataValue& item : items_) item.AppendEncoding(out);
  } else {
    out.insert(out.end(), packed_.begin(), packed_.end());
  }
}

absl::Status GgufMetadataValue::CheckItemsAreArrays(std::string_view key, const std::string& path,
                                                    int depth) const {
  if (type_ != GgufValueType::kArray) return absl::OkStatus();
  if (depth >= kGgufMaxArrayNesting) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF key '", Sv(key), "': item ", path,
                                                   " nests arrays deeper than ",
                                                   kGgufMaxArrayNesting));
  }
  if (array_type_ != GgufValueType::kArray) return absl::OkStatus();
  for (size_t i = 0; i < items_.size(); ++i) {
    const std::string item_path = absl::StrCat(path, "[", i, "]");
    if (items_[i].type() != GgufValueType::kArray) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF key '", Sv(key), "': item ", item_path, " of an array of arrays is a ",
                       Sv(GgufValueTypeName(items_[i].type())), ", not an array"));
    }
    if (absl::Status s = items_[i].CheckItemsAreArrays(key, item_path, depth + 1); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// --- GgufTensorByteSize ------------------------------------------------------------------------

absl::StatusOr<uint64_t> GgufTensorByteSize(GgmlType type, absl::Span<const int64_t> ne) {
  const GgmlTypeTraits& traits = TraitsOf(type);
  if (ne.empty() || ne.size() > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor shape ", ShapeString(ne), " has ", ne.size(), " dimensions (1..4)"));
  }
  int64_t n_elements = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor shape ", ShapeString(ne), ": dimension ", d, " is negative"));
    }
    if (ne[d] != 0 && n_elements > std::numeric_limits<int64_t>::max() / ne[d]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor shape ", ShapeString(ne), ": dimension ", d, " overflows the element count"));
    }
    n_elements *= ne[d];
  }
  if (ne[0] % traits.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor shape ", ShapeString(ne), ": first dimension ", ne[0], " is not a multiple of the ",
        Sv(traits.name), " block size ", traits.block_size));
  }
  const uint64_t row_bytes = static_cast<uint64_t>(ne[0] / traits.block_size) * traits.type_size;
  const uint64_t rows = ne[0] == 0 ? 0 : static_cast<uint64_t>(n_elements / ne[0]);
  if (rows != 0 && row_bytes > std::numeric_limits<uint64_t>::max() / rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor shape ", ShapeString(ne), ": byte size overflows"));
  }
  return row_bytes * rows;
}

// --- GgufWriter --------------------------------------------------------------------------------

GgufWriter::GgufWriter(uint32_t version) : version_(version) {}

absl::Status GgufWriter::AddMetadata(std::string_view key, GgufMetadataValue value) {
  if (key.empty()) return absl::InvalidArgumentError("GGUF metadata key is empty");
  for (const Entry& e : metadata_) {
    if (e.key == key) {
      return absl::AlreadyExistsError(absl::StrCat("duplicate GGUF metadata key '", Sv(key), "'"));
    }
  }
  if (absl::Status s = value.CheckItemsAreArrays(key, "", 0); !s.ok()) return s;
  if (key == kAlignmentKey) {
    if (value.type() != GgufValueType::kUint32 || !IsValidAlignment(value.bits_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GGUF key 'general.alignment' must be a u32 power of two up to 2^30, got a ",
          Sv(GgufValueTypeName(value.type())),
          value.type() == GgufValueType::kUint32 ? absl::StrCat(" ", value.bits_) : ""));
    }
    alignment_ = value.bits_;
  }
  metadata_.push_back(Entry{std::string(key), std::move(value)});
  return absl::OkStatus();
}

absl::Status GgufWriter::SetAlignment(uint64_t alignment) {
  if (!IsValidAlignment(alignment)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF alignment must be a power of two between 1 and 2^30, got ", alignment));
  }
  for (Entry& e : metadata_) {
    if (e.key == kAlignmentKey) {
      e.value = GgufMetadataValue::Uint32(static_cast<uint32_t>(alignment));
      alignment_ = alignment;
      return absl::OkStatus();
    }
  }
  return AddMetadata(kAlignmentKey, GgufMetadataValue::Uint32(static_cast<uint32_t>(alignment)));
}

absl::StatusOr<uint64_t> GgufWriter::CheckNewTensor(std::string_view name, GgmlType type,
                                                    absl::Span<const int64_t> ne) const {
  if (name.empty()) return absl::InvalidArgumentError("GGUF tensor name is empty");
  for (const Tensor& t : tensors_) {
    if (t.name == name) {
      return absl::AlreadyExistsError(absl::StrCat("duplicate GGUF tensor '", Sv(name), "'"));
    }
  }
  absl::StatusOr<uint64_t> n_bytes = GgufTensorByteSize(type, ne);
  if (!n_bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF tensor '", Sv(name), "': ", n_bytes.status().message()));
  }
  return *n_bytes;
}

absl::Status GgufWriter::AddTensor(std::string_view name, GgmlType type,
                                   absl::Span<const int64_t> ne, std::vector<uint8_t> data) {
  absl::StatusOr<uint64_t> n_bytes = CheckNewTensor(name, type, ne);
  if (!n_bytes.ok()) return n_bytes.status();
  if (data.size() != *n_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GGUF tensor '", Sv(name), "': ", data.size(), " bytes of data, but ",
        Sv(GgmlTypeName(type)), " ", ShapeString(ne), " takes ", *n_bytes));
  }
  tensors_.push_back(Tensor{std::string(name), type, std::vector<int64_t>(ne.begin(), ne.end()),
                            *n_bytes, /*declared=*/false, std::move(data)});
  return absl::OkStatus();
}

absl::Status GgufWriter::DeclareTensor(std::string_view name, GgmlType type,
                                       absl::Span<const int64_t> ne) {
  absl::StatusOr<uint64_t> n_bytes = CheckNewTensor(name, type, ne);
  if (!n_bytes.ok()) return n_bytes.status();
  tensors_.push_back(Tensor{std::string(name), type, std::vector<int64_t>(ne.begin(), ne.end()),
                            *n_bytes, /*declared=*/true, {}});
  return absl::OkStatus();
}

GgufTensorDecl GgufWriter::tensor(size_t index) const {
  const Tensor& t = tensors_.at(index);
  return GgufTensorDecl{t.name, t.type, t.ne, t.n_bytes};
}

absl::Status GgufWriter::AddF32Tensor(std::string_view name, absl::Span<const int64_t> ne,
                                      absl::Span<const float> values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return AddTensor(name, GgmlType::kF32, ne, std::move(bytes));
}

absl::Status GgufWriter::CheckAllTensorsHaveData() const {
  for (const Tensor& t : tensors_) {
    if (t.declared) {
      return absl::FailedPreconditionError(absl::StrCat(
          "GGUF tensor '", t.name, "' was declared without data: write with WriteFileStreaming"));
    }
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::CheckVersion() const {
  if (version_ != 2 && version_ != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF version ", version_, " cannot be written (2 and 3 can)"));
  }
  return absl::OkStatus();
}

std::vector<uint64_t> GgufWriter::TensorOffsets() const {
  std::vector<uint64_t> offsets;
  offsets.reserve(tensors_.size());
  uint64_t next = 0;
  for (const Tensor& t : tensors_) {
    offsets.push_back(next);
    next = AlignUp(next + t.n_bytes, alignment_);
  }
  return offsets;
}

std::vector<uint8_t> GgufWriter::EncodeHead() const {
  std::vector<uint8_t> out;
  AppendLe(out, kGgufMagic, 4);
  AppendLe(out, version_, 4);
  AppendLe(out, tensors_.size(), 8);
  AppendLe(out, metadata_.size(), 8);
  for (const Entry& e : metadata_) {
    AppendString(out, e.key);
    AppendLe(out, static_cast<uint32_t>(e.value.type()), 4);
    e.value.AppendEncoding(out);
  }
  const std::vector<uint64_t> offsets = TensorOffsets();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    AppendString(out, t.name);
    AppendLe(out, t.ne.size(), 4);
    for (int64_t n : t.ne) AppendLe(out, static_cast<uint64_t>(n), 8);
    AppendLe(out, static_cast<uint32_t>(t.type), 4);
    AppendLe(out, offsets[i], 8);
  }
  out.resize(AlignUp(out.size(), alignment_), 0);
  return out;
}

uint64_t GgufWriter::DataOffset() const {
  uint64_t n = 4 + 4 + 8 + 8;
  for (const Entry& e : metadata_) n += 8 + e.key.size() + 4 + e.value.EncodedSize();
  for (const Tensor& t : tensors_) n += 8 + t.name.size() + 4 + 8 * t.ne.size() + 4 + 8;
  return AlignUp(n, alignment_);
}

uint64_t GgufWriter::FileSize() const {
  uint64_t n = DataOffset();
  for (const Tensor& t : tensors_) n += AlignUp(t.n_bytes, alignment_);
  return n;
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::Build() const {
  if (absl::Status s = CheckVersion(); !s.ok()) return s;
  if (absl::Status s = CheckAllTensorsHaveData(); !s.ok()) return s;
  std::vector<uint8_t> out = EncodeHead();
  out.reserve(FileSize());
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize(AlignUp(out.size(), alignment_), 0);
  }
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  if (absl::Status s = CheckAllTensorsHaveData(); !s.ok()) return s;
  return WriteFileImpl(path, nullptr);
}

absl::Status GgufWriter::WriteFileStreaming(const std::string& path,
                                            const GgufTensorProducer& produce) const {
  return WriteFileImpl(path, &produce);
}

namespace {

// Writes one declared tensor's bytes to the file and counts them.
class FileTensorSink : public GgufTensorSink {
 public:
  FileTensorSink(std::FILE* f, const std::string& file, std::string_view tensor, uint64_t n_bytes)
      : f_(f), file_(file), tensor_(tensor), n_bytes_(n_bytes) {}

  absl::Status Write(absl::Span<const uint8_t> bytes) override {
    if (bytes.size() > n_bytes_ - written_) {
      return absl::OutOfRangeError(absl::StrCat("GGUF tensor '", Sv(tensor_), "': producer wrote ",
                                                written_ + bytes.size(), " bytes, but it takes ",
                                                n_bytes_));
    }
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size()) {
      return absl::InternalError(
          absl::StrCat("cannot write ", file_, ": ", std::strerror(errno)));
    }
    written_ += bytes.size();
    return absl::OkStatus();
  }
  uint64_t written() const { return written_; }

 private:
  std::FILE* f_;
  const std::string& file_;
  std::string_view tensor_;
  uint64_t n_bytes_;
  uint64_t written_ = 0;
};

}  // namespace

absl::Status GgufWriter::WriteFileImpl(const std::string& path,
                                       const GgufTensorProducer* produce) const {
  if (absl::Status s = CheckVersion(); !s.ok()) return s;
  const std::string tmp = absl::StrCat(path, ".tmp");
  // "cannot write model.gguf.tmp: No space left on device"; the partial file is removed.
  auto io_error = [&](std::string_view what) {
    const int err = errno;
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat(Sv(what), ": ", std::strerror(err)));
  };
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
  if (f == nullptr) return io_error(absl::StrCat("cannot create ", tmp));
  const std::vector<uint8_t> head = EncodeHead();
  if (std::fwrite(head.data(), 1, head.size(), f.get()) != head.size()) {
    return io_error(absl::StrCat("cannot write ", tmp));
  }
  static constexpr uint8_t kZeros[4096] = {};
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    if (t.declared) {
      FileTensorSink sink(f.get(), tmp, t.name, t.n_bytes);
      absl::Status s = (*produce)(i, sink);
      if (s.ok() && sink.written() != t.n_bytes) {
        s = absl::DataLossError(absl::StrCat("GGUF tensor '", t.name, "': producer wrote ",
                                             sink.written(), " bytes, but it takes ", t.n_bytes));
      }
      if (!s.ok()) {
        f.reset();
        std::remove(tmp.c_str());
        return s;
      }
    } else if (!t.data.empty() &&
               std::fwrite(t.data.data(), 1, t.data.size(), f.get()) != t.data.size()) {
      return io_error(absl::StrCat("cannot write ", tmp));
    }
    uint64_t pad = AlignUp(t.n_bytes, alignment_) - t.n_bytes;
    while (pad > 0) {
      const size_t n = std::min<uint64_t>(pad, sizeof(kZeros));
      if (std::fwrite(kZeros, 1, n, f.get()) != n) return io_error(absl::StrCat("cannot write ", tmp));
      pad -= n;
    }
  }
  if (std::fclose(f.release()) != 0) return io_error(absl::StrCat("cannot close ", tmp));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return io_error(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace deltaserve::common
