// Metadata values of a GGUF file: scalars, strings, and (possibly nested) arrays. Values are
// views into the file's bytes: strings and scalar arrays are not copied, so a value is valid
// only while the GgufFile it came from is alive.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::common {

// GGUF metadata value types (gguf.h `enum gguf_type`).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// Name of a value type ("u32", "string", "array"), for messages and `info` output.
std::string_view GgufValueTypeName(GgufValueType type);

// Size in bytes of a scalar value of `type` (0 for string and array).
int GgufScalarSize(GgufValueType type);

// One metadata value. Scalars are widened on access; arrays keep their element type.
class GgufValue {
 public:
  GgufValueType type() const { return type_; }

  // Integer value of an integer or bool scalar (u64 above INT64_MAX is refused).
  std::optional<int64_t> AsInt() const;
  // Floating value of a float or integer scalar.
  std::optional<double> AsDouble() const;
  // Boolean value of a bool scalar (or an integer 0/1).
  std::optional<bool> AsBool() const;
  // Text of a string value (bytes as stored; not checked to be UTF-8).
  std::optional<std::string_view> AsString() const;
  // The stored little-endian bits of a scalar (any numeric or bool type), zero-extended: an
  // exact copy whatever the type (a u64 above INT64_MAX included).
  uint64_t ScalarBits() const { return bits_; }

  // Array accessors; ArraySize() is 0 for non-arrays.
  bool is_array() const { return type_ == GgufValueType::kArray; }
  GgufValueType array_type() const { return array_type_; }
  uint64_t ArraySize() const { return array_size_; }
  // Element i of an integer/bool array (nullopt when out of range or not integral).
  std::optional<int64_t> ArrayInt(uint64_t i) const;
  // Element i of a numeric array as double.
  std::optional<double> ArrayDouble(uint64_t i) const;
  // Element i of a string array.
  std::optional<std::string_view> ArrayString(uint64_t i) const;
  // Element i of an array of arrays.
  const GgufValue* ArrayItem(uint64_t i) const;
  // The stored bits of element i of a numeric or bool array, zero-extended (see ScalarBits).
  std::optional<uint64_t> ArrayBits(uint64_t i) const;

  // Short human-readable rendering: scalars in full, arrays as "[type; n] first, ..." with at
  // most `max_items` elements; strings longer than 80 bytes are cut.
  std::string DebugString(int max_items = 8) const;

 private:
  friend class GgufParser;

  GgufValueType type_ = GgufValueType::kUint8;
  uint64_t bits_ = 0;          // raw little-endian bits of a scalar
  std::string_view string_;    // string value
  GgufValueType array_type_ = GgufValueType::kUint8;
  uint64_t array_size_ = 0;
  const uint8_t* array_data_ = nullptr;  // packed scalar elements (possibly unaligned)
  std::vector<std::string_view> array_strings_;
  std::vector<GgufValue> array_items_;  // nested arrays
};

}  // namespace deltaserve::common
