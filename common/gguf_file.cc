#include "common/gguf_file.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/str_util.h"

namespace deltaserve::common {

static_assert(std::endian::native == std::endian::little,
              "GGUF values are little-endian and read in place");

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr int kMaxArrayNesting = 8;
// Smallest encoding of one tensor info: name length (8) + n_dims (4) + type (4) + offset (8).
constexpr uint64_t kMinTensorInfoBytes = 24;
// Smallest encoding of one key/value: key length (8) + type (4) + a 1-byte value.
constexpr uint64_t kMinKeyValueBytes = 13;

}  // namespace

// Reads the GGUF layout from a byte span with every read bounds-checked. Errors carry the file
// name, the byte offset and what was being read.
class GgufParser {
 public:
  GgufParser(GgufFile& file) : file_(file), bytes_(file.bytes_) {}

  absl::Status Parse() {
    uint32_t magic = 0;
    if (auto s = ReadU32(magic, "magic"); !s.ok()) return s;
    if (magic != kGgufMagic) {
      return Error(0, absl::StrCat("not a GGUF file (magic 0x", absl::Hex(magic, absl::kZeroPad8),
                                   ")"));
    }
    uint32_t version = 0;
    if (auto s = ReadU32(version, "version"); !s.ok()) return s;
    if (version != 2 && version != 3) {
      const uint32_t swapped = __builtin_bswap32(version);
      if (swapped == 2 || swapped == 3) {
        return Error(4, "big-endian GGUF files are not supported");
      }
      return Error(4, absl::StrCat("unsupported GGUF version ", version, " (2 and 3 are read)"));
    }
    file_.version_ = version;

    uint64_t n_tensors = 0, n_kv = 0;
    if (auto s = ReadU64(n_tensors, "tensor count"); !s.ok()) return s;
    if (auto s = ReadU64(n_kv, "metadata count"); !s.ok()) return s;
    if (n_kv > Remaining() / kMinKeyValueBytes) {
      return Error(16, absl::StrCat("metadata count ", n_kv, " cannot fit in the ", Remaining(),
                                    " bytes left"));
    }
    if (n_tensors > Remaining() / kMinTensorInfoBytes) {
      return Error(8, absl::StrCat("tensor count ", n_tensors, " cannot fit in the ",
                                   Remaining(), " bytes left"));
    }

    file_.metadata_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      if (auto s = ParseKeyValue(i); !s.ok()) return s;
    }
    if (auto s = ReadAlignment(); !s.ok()) return s;

    file_.tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      if (auto s = ParseTensorInfo(i); !s.ok()) return s;
    }
    return PlaceTensors();
  }

 private:
  uint64_t Remaining() const { return bytes_.size() - pos_; }

  absl::Status Error(uint64_t offset, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_.name_, ": GGUF offset ", offset, ": ", Sv(what)));
  }

  absl::Status Need(uint64_t n, std::string_view what) const {
    if (n > Remaining()) {
      return Error(pos_, absl::StrCat("truncated: ", Sv(what), " needs ", n, " bytes, ",
                                      Remaining(), " left"));
    }
    return absl::OkStatus();
  }

  absl::Status ReadU32(uint32_t& out, std::string_view what) {
    if (auto s = Need(4, what); !s.ok()) return s;
    std::memcpy(&out, bytes_.data() + pos_, 4);
    pos_ += 4;
    return absl::OkStatus();
  }

  absl::Status ReadU64(uint64_t& out, std::string_view what) {
    if (auto s = Need(8, what); !s.ok()) return s;
    std::memcpy(&out, bytes_.data() + pos_, 8);
    pos_ += 8;
    return absl::OkStatus();
  }

  absl::Status ReadString(std::string_view& out, std::string_view what) {
    uint64_t len = 0;
    if (auto s = ReadU64(len, what); !s.ok()) return s;
    if (len > Remaining()) {
      return Error(pos_ - 8, absl::StrCat(Sv(what), ": string length ", len, " exceeds the ",
                                          Remaining(), " bytes left"));
    }
    out = std::string_view(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

  absl::Status ReadValueType(GgufValueType& out, std::string_view what) {
    const uint64_t at = pos_;
    uint32_t raw = 0;
    if (auto s = ReadU32(raw, what); !s.ok()) return s;
    if (raw > static_cast<uint32_t>(GgufValueType::kFloat64)) {
      return Error(at, absl::StrCat(Sv(what), ": unknown value type ", raw));
    }
    out = static_cast<GgufValueType>(raw);
    return absl::OkStatus();
  }

  absl::Status ParseKeyValue(uint64_t index) {
    const uint64_t at = pos_;
    std::string_view key;
    if (auto s = ReadString(key, absl::StrCat("key of metadata entry ", index)); !s.ok()) {
      return s;
    }
    if (key.empty()) return Error(at, absl::StrCat("metadata entry ", index, " has an empty key"));
    if (file_.metadata_index_.contains(key)) {
      return Error(at, absl::StrCat("duplicate metadata key '", Sv(key), "'"));
    }
    const std::string what = absl::StrCat("key '", Sv(key), "'");
    GgufValueType type;
    if (auto s = ReadValueType(type, what); !s.ok()) return s;
    GgufValue value;
    if (auto s = ParseValue(type, value, what, 0); !s.ok()) return s;
    file_.metadata_index_.emplace(key, file_.metadata_.size());
    file_.metadata_.push_back(GgufKeyValue{key, std::move(value)});
    return absl::OkStatus();
  }

  absl::Status ParseValue(GgufValueType type, GgufValue& value, const std::string& what,
                          int depth) {
    value.type_ = type;
    if (type == GgufValueType::kString) return ReadString(value.string_, what);
    if (type != GgufValueType::kArray) {
      const int size = GgufScalarSize(type);
      if (auto s = Need(size, what); !s.ok()) return s;
      std::memcpy(&value.bits_, bytes_.data() + pos_, size);
      pos_ += size;
      return absl::OkStatus();
    }
    if (depth >= kMaxArrayNesting) {
      return Error(pos_, absl::StrCat(what, ": arrays nested deeper than ", kMaxArrayNesting));
    }
    const uint64_t at = pos_;
    if (auto s = ReadValueType(value.array_type_, what); !s.ok()) return s;
    if (auto s = ReadU64(value.array_size_, what); !s.ok()) return s;
    const uint64_t n = value.array_size_;
    // Minimum bytes per element: its scalar size, a string's length field, or a nested
    // array's type + count. Refusing counts the file cannot back bounds every allocation.
    const int scalar = GgufScalarSize(value.array_type_);
    const uint64_t min_elem = scalar > 0 ? scalar
                              : value.array_type_ == GgufValueType::kString ? 8
                                                                             : 12;
    if (n > Remaining() / min_elem) {
      return Error(at, absl::StrCat(what, ": array of ", n, " ",
                                    Sv(GgufValueTypeName(value.array_type_)),
                                    " cannot fit in the ", Remaining(), " bytes left"));
    }
    if (scalar > 0) {
      value.array_data_ = bytes_.data() + pos_;
      pos_ += n * scalar;
      return absl::OkStatus();
    }
    if (value.array_type_ == GgufValueType::kString) {
      value.array_strings_.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        if (auto s = ReadString(value.array_strings_[i], what); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    value.array_items_.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      const std::string item_what = absl::StrCat(what, "[", i, "]");
      if (auto s = ParseValue(GgufValueType::kArray, value.array_items_[i], item_what, depth + 1);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  absl::Status ReadAlignment() {
    const GgufValue* v = file_.Find("general.alignment");
    if (v == nullptr) return absl::OkStatus();
    std::optional<int64_t> a = v->AsInt();
    if (!a || *a <= 0 || (*a & (*a - 1)) != 0 || *a > (1 << 30)) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_.name_, ": key 'general.alignment' must be a power of two, got ",
          v->DebugString()));
    }
    file_.alignment_ = static_cast<uint64_t>(*a);
    return absl::OkStatus();
  }

  absl::Status ParseTensorInfo(uint64_t index) {
    const uint64_t at = pos_;
    GgufTensorInfo t{};
    if (auto s = ReadString(t.name, absl::StrCat("name of tensor ", index)); !s.ok()) return s;
    if (t.name.empty()) return Error(at, absl::StrCat("tensor ", index, " has an empty name"));
    const std::string what = absl::StrCat("tensor '", Sv(t.name), "'");
    if (file_.tensor_index_.contains(t.name)) {
      return Error(at, absl::StrCat("duplicate ", what));
    }
    uint32_t n_dims = 0;
    if (auto s = ReadU32(n_dims, what); !s.ok()) return s;
    if (n_dims < 1 || n_dims > kGgufMaxDims) {
      return Error(pos_ - 4, absl::StrCat(what, ": ", n_dims, " dimensions (1..4 allowed)"));
    }
    t.n_dims = static_cast<int>(n_dims);
    t.ne.fill(1);
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      if (auto s = ReadU64(ne, what); !s.ok()) return s;
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (ne != 0 && n_elements > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(ne))) {
        return Error(pos_ - 8, absl::StrCat(what, ": dimension ", d, " = ", ne,
                                            " overflows the element count"));
      }
      t.ne[d] = static_cast<int64_t>(ne);
      n_elements *= t.ne[d];
    }
    t.n_elements = n_elements;
    uint32_t type_id = 0;
    if (auto s = ReadU32(type_id, what); !s.ok()) return s;
    std::optional<GgmlTypeTraits> traits = GgmlTypeTraitsFor(type_id);
    if (!traits) {
      return Error(pos_ - 4, absl::StrCat(what, ": unknown ggml type id ", type_id));
    }
    t.type = traits->type;
    if (t.ne[0] % traits->block_size != 0) {
      return Error(at, absl::StrCat(what, ": first dimension ", t.ne[0],
                                    " is not a multiple of the ", Sv(traits->name), " block size ",
                                    traits->block_size));
    }
    // n_bytes = rows * blocks_per_row * type_size; each factor bounded by the element count,
    // which fits int64, so check the products against overflow explicitly.
    const uint64_t row_bytes =
        static_cast<uint64_t>(t.ne[0] / traits->block_size) * traits->type_size;
    const uint64_t rows = static_cast<uint64_t>(t.ne[0] == 0 ? 0 : n_elements / t.ne[0]);
    if (rows != 0 && row_bytes > std::numeric_limits<uint64_t>::max() / rows) {
      return Error(at, absl::StrCat(what, ": byte size overflows"));
    }
    t.n_bytes = row_bytes * rows;
    uint64_t rel_offset = 0;
    if (auto s = ReadU64(rel_offset, what); !s.ok()) return s;
    if (rel_offset % file_.alignment_ != 0) {
      return Error(pos_ - 8, absl::StrCat(what, ": data offset ", rel_offset,
                                          " is not a multiple of the alignment ",
                                          file_.alignment_));
    }
    t.offset = rel_offset;  // made absolute in PlaceTensors
    file_.tensor_index_.emplace(t.name, file_.tensors_.size());
    file_.tensors_.push_back(t);
    return absl::OkStatus();
  }

  // Fixes the data section start and checks every tensor lies inside the file without
  // overlapping another.
  absl::Status PlaceTensors() {
    const uint64_t a = file_.alignment_;
    const uint64_t data = (pos_ + a - 1) / a * a;
    file_.data_offset_ = data;
    const uint64_t size = bytes_.size();
    for (GgufTensorInfo& t : file_.tensors_) {
      if (t.offset > size || data > size - t.offset || t.n_bytes > size - data - t.offset) {
        return absl::InvalidArgumentError(absl::StrCat(
            file_.name_, ": tensor '", Sv(t.name), "': data [", data, " + ", t.offset, ", +",
            t.n_bytes, " bytes) runs past the end of the file (", size, " bytes)"));
      }
      t.offset += data;
    }
    std::vector<const GgufTensorInfo*> by_offset;
    by_offset.reserve(file_.tensors_.size());
    for (const GgufTensorInfo& t : file_.tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensorInfo* x, const GgufTensorInfo* y) { return x->offset < y->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const GgufTensorInfo& prev = *by_offset[i - 1];
      if (prev.offset + prev.n_bytes > by_offset[i]->offset) {
        return absl::InvalidArgumentError(absl::StrCat(
            file_.name_, ": tensors '", Sv(prev.name), "' and '", Sv(by_offset[i]->name),
            "' overlap at offset ", by_offset[i]->offset));
      }
    }
    return absl::OkStatus();
  }

  GgufFile& file_;
  absl::Span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

std::string GgufTensorInfo::ShapeString() const {
  std::vector<int64_t> dims(ne.begin(), ne.begin() + n_dims);
  return absl::StrCat("{", absl::StrJoin(dims, ", "), "}");
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapping = MappedFile::Open(path);
  if (!mapping.ok()) return mapping.status();
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = path;
  file->bytes_ = (*mapping)->bytes();
  file->mapping_ = std::move(*mapping);
  GgufParser parser(*file);
  if (absl::Status s = parser.Parse(); !s.ok()) return s;
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(absl::Span<const uint8_t> bytes,
                                                               std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = std::move(name);
  file->bytes_ = bytes;
  GgufParser parser(*file);
  if (absl::Status s = parser.Parse(); !s.ok()) return s;
  return file;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].value;
}

namespace {

absl::Status KeyError(const std::string& file, std::string_view key, const GgufValue* v,
                      std::string_view wanted) {
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(file, ": missing key '", Sv(key), "'"));
  }
  return absl::InvalidArgumentError(absl::StrCat(file, ": key '", Sv(key), "' should be ", Sv(wanted),
                                                 ", is ", Sv(GgufValueTypeName(v->type())), " ",
                                                 v->DebugString(4)));
}

}  // namespace

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v != nullptr && v->type() != GgufValueType::kBool) {
    if (std::optional<int64_t> i = v->AsInt()) return *i;
  }
  return KeyError(name_, key, v, "an integer");
}

absl::StatusOr<double> GgufFile::GetDouble(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v != nullptr) {
    if (std::optional<double> d = v->AsDouble()) return *d;
  }
  return KeyError(name_, key, v, "a number");
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v != nullptr) {
    if (std::optional<bool> b = v->AsBool()) return *b;
  }
  return KeyError(name_, key, v, "a bool");
}

absl::StatusOr<std::string_view> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v != nullptr) {
    if (std::optional<std::string_view> s = v->AsString()) return *s;
  }
  return KeyError(name_, key, v, "a string");
}

absl::StatusOr<const GgufValue*> GgufFile::GetArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v != nullptr && v->is_array()) return v;
  return KeyError(name_, key, v, "an array");
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::Span<const uint8_t> GgufFile::TensorData(const GgufTensorInfo& tensor) const {
  return bytes_.subspan(tensor.offset, tensor.n_bytes);
}

}  // namespace deltaserve::common
