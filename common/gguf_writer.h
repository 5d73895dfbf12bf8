// GGUF (v2 or v3) writer: collects metadata and tensors, then lays them out as GgufFile reads
// them — header, key/values in insertion order, tensor infos, padding to `general.alignment`,
// and tensor data with every tensor starting on an aligned offset. Everything is validated when
// it is added (duplicate keys and names, shapes against the type's block layout, data sizes),
// so a writer that accepted its inputs always produces a file GgufFile opens.
//
//   GgufWriter w;
//   RETURN_IF_ERROR(w.AddMetadata("general.architecture", GgufMetadataValue::String("qwen35")));
//   RETURN_IF_ERROR(w.AddTensor("output_norm.weight", GgmlType::kF32, {256}, std::move(bytes)));
//   RETURN_IF_ERROR(w.WriteFile("model.gguf"));
//
// Files larger than memory are streamed: DeclareTensor() gives a tensor's name, type and shape
// without data, and WriteFileStreaming() asks a producer for each declared tensor's bytes, in
// file order, as the file is written (peak memory is what the producer holds at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/ggml_types.h"
#include "common/gguf_value.h"

namespace deltaserve::common {

// Alignment of tensor data when a file has no `general.alignment` key (GGUF_DEFAULT_ALIGNMENT).
inline constexpr uint64_t kGgufDefaultAlignment = 32;

// Most levels of arrays one value may have (an array of arrays of ... of scalars), the limit
// GgufFile reads; AddMetadata refuses deeper values.
inline constexpr int kGgufMaxArrayNesting = 8;

// An owned metadata value to write: the counterpart of GgufValue (which is a view into a file).
// Scalars, strings, arrays of scalars, arrays of strings and arrays of arrays (each inner array
// carries its own element type).
class GgufMetadataValue {
 public:
  static GgufMetadataValue Uint8(uint8_t v);
  static GgufMetadataValue Int8(int8_t v);
  static GgufMetadataValue Uint16(uint16_t v);
  static GgufMetadataValue Int16(int16_t v);
  static GgufMetadataValue Uint32(uint32_t v);
  static GgufMetadataValue Int32(int32_t v);
  static GgufMetadataValue Float32(float v);
  static GgufMetadataValue Bool(bool v);
  static GgufMetadataValue Uint64(uint64_t v);
  static GgufMetadataValue Int64(int64_t v);
  static GgufMetadataValue Float64(double v);
  // Bytes as given (GGUF strings are UTF-8 by convention; this is not checked).
  static GgufMetadataValue String(std::string_view v);

  static GgufMetadataValue Uint8Array(absl::Span<const uint8_t> v);
  static GgufMetadataValue Int8Array(absl::Span<const int8_t> v);
  static GgufMetadataValue Uint16Array(absl::Span<const uint16_t> v);
  static GgufMetadataValue Int16Array(absl::Span<const int16_t> v);
  static GgufMetadataValue Uint32Array(absl::Span<const uint32_t> v);
  static GgufMetadataValue Int32Array(absl::Span<const int32_t> v);
  static GgufMetadataValue Float32Array(absl::Span<const float> v);
  static GgufMetadataValue BoolArray(absl::Span<const bool> v);
  static GgufMetadataValue Uint64Array(absl::Span<const uint64_t> v);
  static GgufMetadataValue Int64Array(absl::Span<const int64_t> v);
  static GgufMetadataValue Float64Array(absl::Span<const double> v);
  static GgufMetadataValue StringArray(std::vector<std::string> v);
  // An array whose elements are arrays. GgufWriter::AddMetadata refuses it (naming the index)
  // when an item is not itself an array.
  static GgufMetadataValue ArrayOfArrays(std::vector<GgufMetadataValue> items);
  // An owned copy of a value read from a file, same type and bytes (copying keys such as
  // `tokenizer.*` from one GGUF file into another). `v` is only read during the call. A u64
  // above INT64_MAX passes through a double (GgufValue widens to int64_t), exact up to 2^53.
  static GgufMetadataValue CopyOf(const GgufValue& v);

  GgufValueType type() const { return type_; }
  // Element type of an array value (meaningless for scalars and strings).
  GgufValueType array_type() const { return array_type_; }
  // Number of elements of an array value, 0 otherwise.
  uint64_t ArraySize() const;

 private:
  friend class GgufWriter;
  GgufMetadataValue() = default;
  // Bytes this value takes in a file after its type field.
  uint64_t EncodedSize() const;
  // Appends the encoding counted by EncodedSize() to `out`.
  void AppendEncoding(std::vector<uint8_t>& out) const;
  // Fails, naming `key` and the item's index path, when an array of arrays holds a non-array
  // or arrays nest deeper than kGgufMaxArrayNesting. `depth` counts the arrays around this one.
  absl::Status CheckItemsAreArrays(std::string_view key, const std::string& path, int depth) const;
  static GgufMetadataValue Scalar(GgufValueType type, uint64_t bits);
  template <typename T>
  static GgufMetadataValue PackedArray(GgufValueType type, absl::Span<const T> v);

  GgufValueType type_ = GgufValueType::kUint8;
  GgufValueType array_type_ = GgufValueType::kUint8;
  uint64_t bits_ = 0;                     // little-endian bits of a scalar
  std::string string_;                    // string value
  std::vector<uint8_t> packed_;           // little-endian elements of a scalar array
  uint64_t packed_count_ = 0;             // elements in `packed_`
  std::vector<std::string> strings_;      // elements of a string array
  std::vector<GgufMetadataValue> items_;  // elements of an array of arrays
};

// Bytes a tensor of `type` and shape `ne` (GGML order, 1..4 dims, each >= 0) takes: rows of
// ne[0] elements, ne[0] a multiple of the type's block size. Errors name the failing dimension.
absl::StatusOr<uint64_t> GgufTensorByteSize(GgmlType type, absl::Span<const int64_t> ne);

// A tensor as the writer holds it; the views stay valid until the writer changes or dies.
struct GgufTensorDecl {
  std::string_view name;
  GgmlType type;
  absl::Span<const int64_t> ne;  // GGML order
  uint64_t n_bytes;              // GgufTensorByteSize(type, ne)
};

// Receives the bytes of one declared tensor during WriteFileStreaming.
class GgufTensorSink {
 public:
  virtual ~GgufTensorSink() = default;
  // Appends the next `bytes` of the tensor. Fails, naming the tensor or the file, when they go
  // past the tensor's size or cannot be written; the producer then returns that status.
  virtual absl::Status Write(absl::Span<const uint8_t> bytes) = 0;
};

// Produces declared tensor `index` (its position in tensor order) by writing exactly its
// n_bytes to `sink`, in as many pieces as it likes. An error status aborts the write.
using GgufTensorProducer = std::function<absl::Status(size_t index, GgufTensorSink& sink)>;

// Builds a GGUF file; see the file comment. Not thread-safe.
class GgufWriter {
 public:
  // `version` is written in the header; GGUF 2 and 3 share this layout (3 only adds the
  // big-endian variant, which is never written). Other values make Build/WriteFile fail.
  explicit GgufWriter(uint32_t version = 3);

  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;
  GgufWriter(GgufWriter&&) = default;
  GgufWriter& operator=(GgufWriter&&) = default;

  // Adds `key` (non-empty, not yet present) with `value`. `general.alignment` must be a u32
  // power of two (as llama.cpp requires) and sets the alignment used for the tensor data.
  absl::Status AddMetadata(std::string_view key, GgufMetadataValue value);

  // Sets `general.alignment` (a power of two, at most 2^30): replaces the value if the key was
  // added before, else appends the key. Without it, tensors are aligned to 32 bytes and the key
  // is not written.
  absl::Status SetAlignment(uint64_t alignment);

  // Adds a tensor. `ne` is in GGML order (fastest dimension first, 1..4 dims), `data` its
  // bytes in the type's block layout, exactly GgufTensorByteSize(type, ne) of them. Tensors are
  // laid out in the order they are added.
  absl::Status AddTensor(std::string_view name, GgmlType type, absl::Span<const int64_t> ne,
                         std::vector<uint8_t> data);
  // Convenience for F32 tensors: copies `values` (ne[0] * ... * ne[n-1] floats).
  absl::Status AddF32Tensor(std::string_view name, absl::Span<const int64_t> ne,
                            absl::Span<const float> values);
  // Declares a tensor whose bytes WriteFileStreaming asks for while it writes the file. Checked
  // as AddTensor checks (name, shape against the type's blocks); takes its place in the order.
  absl::Status DeclareTensor(std::string_view name, GgmlType type, absl::Span<const int64_t> ne);

  // Tensor `index` in file order (index < tensor_count()).
  GgufTensorDecl tensor(size_t index) const;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t metadata_count() const { return metadata_.size(); }
  size_t tensor_count() const { return tensors_.size(); }

  // Total size of the file that Build/WriteFile produce, in bytes.
  uint64_t FileSize() const;
  // Offset of the tensor data section in that file (a multiple of the alignment).
  uint64_t DataOffset() const;

  // The whole file in memory. Fails when a tensor was declared without data.
  absl::StatusOr<std::vector<uint8_t>> Build() const;
  // Writes the file to `path` through `path`.tmp and a rename, so that `path` is either the
  // complete file or untouched. Tensor data is streamed, not copied into one image. Fails when
  // a tensor was declared without data.
  absl::Status WriteFile(const std::string& path) const;
  // WriteFile for writers with declared tensors: `produce` is called once per declared tensor,
  // in file order, and must write exactly its bytes (tensors added with data are written from
  // memory). A producer error, or a wrong byte count, removes the temporary file and is
  // returned (a short count names the tensor and both sizes).
  absl::Status WriteFileStreaming(const std::string& path, const GgufTensorProducer& produce) const;

 private:
  struct Entry {
    std::string key;
    GgufMetadataValue value;
  };
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t n_bytes;
    bool declared;               // data comes from a GgufTensorProducer
    std::vector<uint8_t> data;   // empty when declared
  };

  absl::Status CheckVersion() const;
  // Fails when a tensor has no data (Build and WriteFile cannot produce it).
  absl::Status CheckAllTensorsHaveData() const;
  // Checks a new tensor's name and shape; its byte size.
  absl::StatusOr<uint64_t> CheckNewTensor(std::string_view name, GgmlType type,
                                          absl::Span<const int64_t> ne) const;
  // WriteFile and WriteFileStreaming; `produce` is null for WriteFile.
  absl::Status WriteFileImpl(const std::string& path, const GgufTensorProducer* produce) const;
  // Header, key/values and tensor infos, padded to the data section.
  std::vector<uint8_t> EncodeHead() const;
  // Offset of each tensor relative to the data section, in tensor order.
  std::vector<uint64_t> TensorOffsets() const;

  uint32_t version_;
  uint64_t alignment_ = kGgufDefaultAlignment;
  std::vector<Entry> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace deltaserve::common
