// GGUF (v2 and v3) reader: header, metadata, tensor infos, and zero-copy views of tensor data
// in a memory-mapped file. Every count, length and offset is checked against the file before
// it is used, so a truncated or hostile file yields an absl::Status naming what is wrong (key,
// tensor, byte offset) rather than a crash or an allocation the file size cannot back.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::Open("model.gguf"));
//   const GgufTensorInfo* t = f->FindTensor("token_embd.weight");
//   absl::Span<const uint8_t> bytes = f->TensorData(*t);
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/ggml_types.h"
#include "common/gguf_value.h"
#include "common/mapped_file.h"

namespace deltaserve::common {

// Maximum tensor rank in GGUF (GGML_MAX_DIMS).
inline constexpr int kGgufMaxDims = 4;

// One metadata entry, in file order.
struct GgufKeyValue {
  std::string_view key;
  GgufValue value;
};

// Where one tensor lives and what shape it has. `ne` is in GGML order (fastest dimension
// first): a weight {in, out} means y = W x with rows of `in` elements.
struct GgufTensorInfo {
  std::string_view name;
  GgmlType type;
  int n_dims;                               // 1..4
  std::array<int64_t, kGgufMaxDims> ne;     // unused dims are 1
  uint64_t offset;                          // absolute byte offset in the file
  uint64_t n_bytes;                         // bytes of data
  int64_t n_elements;

  // Shape as "{256, 2048}".
  std::string ShapeString() const;
};

// A parsed GGUF file; see the file comment.
class GgufFile {
 public:
  // Maps and parses `path`.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image that the caller keeps alive (tests and fuzzing). `name` is used
  // in messages.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBuffer(absl::Span<const uint8_t> bytes,
                                                               std::string name);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Byte offset where the tensor data section starts.
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return bytes_.size(); }
  // Bytes [0, data_offset): header, metadata and tensor infos (what a model fingerprint hashes).
  absl::Span<const uint8_t> header_bytes() const { return bytes_.subspan(0, data_offset_); }

  // Metadata in file order.
  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  // The value of `key`, or nullptr.
  const GgufValue* Find(std::string_view key) const;

  // Typed look-ups; errors name the key and say whether it is missing or of another type.
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetDouble(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::string_view> GetString(std::string_view key) const;
  // The array value of `key` (any element type).
  absl::StatusOr<const GgufValue*> GetArray(std::string_view key) const;

  // Tensor infos in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // The tensor called `name`, or nullptr.
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The bytes of `tensor` inside the mapping (no copy; bounds were checked at parse time).
  absl::Span<const uint8_t> TensorData(const GgufTensorInfo& tensor) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

  std::string name_;
  std::unique_ptr<MappedFile> mapping_;  // null when parsed from a caller's buffer
  absl::Span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  absl::flat_hash_map<std::string_view, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string_view, size_t> tensor_index_;
};

}  // namespace deltaserve::common
