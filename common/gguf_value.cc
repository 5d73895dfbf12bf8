#include "common/gguf_value.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/str_util.h"

namespace deltaserve::common {
namespace {

// Reads a scalar of `type` from little-endian `p` (host is little-endian; see gguf_file.cc).
bool ReadIntegral(GgufValueType type, const uint8_t* p, int64_t* out) {
  switch (type) {
    case GgufValueType::kUint8: *out = p[0]; return true;
    case GgufValueType::kInt8: *out = static_cast<int8_t>(p[0]); return true;
    case GgufValueType::kBool: *out = p[0] != 0; return true;
    case GgufValueType::kUint16: { uint16_t v; std::memcpy(&v, p, 2); *out = v; return true; }
    case GgufValueType::kInt16: { int16_t v; std::memcpy(&v, p, 2); *out = v; return true; }
    case GgufValueType::kUint32: { uint32_t v; std::memcpy(&v, p, 4); *out = v; return true; }
    case GgufValueType::kInt32: { int32_t v; std::memcpy(&v, p, 4); *out = v; return true; }
    case GgufValueType::kInt64: { int64_t v; std::memcpy(&v, p, 8); *out = v; return true; }
    case GgufValueType::kUint64: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      *out = static_cast<int64_t>(v);
      return true;
    }
    default: return false;
  }
}

bool ReadFloating(GgufValueType type, const uint8_t* p, double* out) {
  if (type == GgufValueType::kFloat32) {
    float v;
    std::memcpy(&v, p, 4);
    *out = v;
    return true;
  }
  if (type == GgufValueType::kFloat64) {
    std::memcpy(out, p, 8);
    return true;
  }
  if (type == GgufValueType::kUint64) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    *out = static_cast<double>(v);
    return true;
  }
  int64_t i;
  if (!ReadIntegral(type, p, &i)) return false;
  *out = static_cast<double>(i);
  return true;
}

std::string QuoteString(std::string_view s) {
  std::string out = "\"";
  size_t n = 0;
  for (char c : s) {
    if (++n > 80) {
      absl::StrAppend(&out, "...");
      break;
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "u8";
    case GgufValueType::kInt8: return "i8";
    case GgufValueType::kUint16: return "u16";
    case GgufValueType::kInt16: return "i16";
    case GgufValueType::kUint32: return "u32";
    case GgufValueType::kInt32: return "i32";
    case GgufValueType::kFloat32: return "f32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "u64";
    case GgufValueType::kInt64: return "i64";
    case GgufValueType::kFloat64: return "f64";
  }
  return "?";
}

int GgufScalarSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64: return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray: return 0;
  }
  return 0;
}

std::optional<int64_t> GgufValue::AsInt() const {
  int64_t v;
  const auto* p = reinterpret_cast<const uint8_t*>(&bits_);
  if (ReadIntegral(type_, p, &v)) return v;
  return std::nullopt;
}

std::optional<double> GgufValue::AsDouble() const {
  double v;
  const auto* p = reinterpret_cast<const uint8_t*>(&bits_);
  if (type_ != GgufValueType::kString && type_ != GgufValueType::kArray &&
      type_ != GgufValueType::kBool && ReadFloating(type_, p, &v)) {
    return v;
  }
  return std::nullopt;
}

std::optional<bool> GgufValue::AsBool() const {
  if (type_ == GgufValueType::kBool) return bits_ != 0;
  std::optional<int64_t> i = AsInt();
  if (i && (*i == 0 || *i == 1)) return *i == 1;
  return std::nullopt;
}

std::optional<std::string_view> GgufValue::AsString() const {
  if (type_ == GgufValueType::kString) return string_;
  return std::nullopt;
}

std::optional<int64_t> GgufValue::ArrayInt(uint64_t i) const {
  if (!is_array() || i >= array_size_ || array_data_ == nullptr) return std::nullopt;
  const int size = GgufScalarSize(array_type_);
  int64_t v;
  if (ReadIntegral(array_type_, array_data_ + i * size, &v)) return v;
  return std::nullopt;
}

std::optional<double> GgufValue::ArrayDouble(uint64_t i) const {
  if (!is_array() || i >= array_size_ || array_data_ == nullptr) return std::nullopt;
  const int size = GgufScalarSize(array_type_);
  double v;
  if (ReadFloating(array_type_, array_data_ + i * size, &v)) return v;
  return std::nullopt;
}

std::optional<std::string_view> GgufValue::ArrayString(uint64_t i) const {
  if (!is_array() || array_type_ != GgufValueType::kString || i >= array_strings_.size()) {
    return std::nullopt;
  }
  return array_strings_[i];
}

std::optional<uint64_t> GgufValue::ArrayBits(uint64_t i) const {
  if (!is_array() || i >= array_size_ || array_data_ == nullptr) return std::nullopt;
  const int size = GgufScalarSize(array_type_);
  uint64_t bits = 0;
  std::memcpy(&bits, array_data_ + i * size, size);
  return bits;
}

const GgufValue* GgufValue::ArrayItem(uint64_t i) const {
  if (!is_array() || array_type_ != GgufValueType::kArray || i >= array_items_.size()) {
    return nullptr;
  }
  return &array_items_[i];
}

std::string GgufValue::DebugString(int max_items) const {
  switch (type_) {
    case GgufValueType::kString: return QuoteString(string_);
    case GgufValueType::kBool: return bits_ ? "true" : "false";
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64: return absl::StrFormat("%g", *AsDouble());
    case GgufValueType::kUint64: return absl::StrCat(bits_);
    case GgufValueType::kArray: {
      std::string out = absl::StrCat("[", Sv(GgufValueTypeName(array_type_)), "; ", array_size_, "]");
      const uint64_t shown = std::min<uint64_t>(array_size_, static_cast<uint64_t>(max_items));
      for (uint64_t i = 0; i < shown; ++i) {
        absl::StrAppend(&out, i == 0 ? " " : ", ");
        if (array_type_ == GgufValueType::kString) {
          absl::StrAppend(&out, QuoteString(array_strings_[i]));
        } else if (array_type_ == GgufValueType::kArray) {
          absl::StrAppend(&out, array_items_[i].DebugString(max_items));
        } else if (array_type_ == GgufValueType::kFloat32 ||
                   array_type_ == GgufValueType::kFloat64) {
          absl::StrAppendFormat(&out, "%g", *ArrayDouble(i));
        } else if (array_type_ == GgufValueType::kBool) {
          absl::StrAppend(&out, *ArrayInt(i) ? "true" : "false");
        } else if (std::optional<int64_t> v = ArrayInt(i)) {
          absl::StrAppend(&out, *v);
        } else {
          absl::StrAppendFormat(&out, "%.0f", *ArrayDouble(i));  // u64 above INT64_MAX
        }
      }
      if (shown < array_size_) absl::StrAppend(&out, ", ...");
      return out;
    }
    default: return absl::StrCat(*AsInt());
  }
}

}  // namespace deltaserve::common
