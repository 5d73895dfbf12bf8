// The GGML tensor types a GGUF file can hold: their numeric ids, names and block layout
// (elements per block, bytes per block). Every type llama.cpp defines is known here so a file
// can be described in full; `supported` says whether DeltaServe's kernels compute with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace deltaserve::common {

// GGML type ids as stored in GGUF tensor infos (ggml.h `enum ggml_type`). Gaps (4, 5, 31-33,
// 36-38) are types that were removed from the format; files that use them are rejected.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// Block layout of a type: a row of `n` elements (n a multiple of block_size) takes
// n / block_size * type_size bytes.
struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;  // as llama.cpp prints it: "f32", "q4_K", "iq2_xxs", ...
  int64_t block_size;     // elements per block
  int64_t type_size;      // bytes per block
  bool supported;         // DeltaServe computes with it (others are recognised, not loaded)
};

// Traits of the type with GGUF id `id`, or nullopt for ids that are unknown or removed.
std::optional<GgmlTypeTraits> GgmlTypeTraitsFor(uint32_t id);

// Traits of a known type (never fails for a valid enumerator).
const GgmlTypeTraits& TraitsOf(GgmlType type);

// Name of `type` ("q8_0"), for messages and tables.
std::string_view GgmlTypeName(GgmlType type);

}  // namespace deltaserve::common
