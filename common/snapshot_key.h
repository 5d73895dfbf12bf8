// Content-addressed keys of session snapshots (docs/snapshots.md, "Keys"). A snapshot of a
// sequence after its first p tokens is found again by any process that sees the same p tokens
// under the same model and cache types, so the key is a pure function of those three things:
//
//   root      = H("deltaserve-snapshot-v1", model fingerprint, K type, V type, state type,
//                 page tokens)
//   block_i   = H("B", block_{i-1}, tokens of span i)   spans of kSnapshotBlockTokens tokens,
//                                                       block_0 = root
//   key(p)    = block_{p/B}                             when p is a multiple of B
//             = H("T", block_{floor(p/B)}, tail tokens, p)                  otherwise
//
// H is SHA-256 truncated to 16 bytes; tokens are hashed as int32 little-endian, p as u64. The
// one-byte tags keep a block's input and a tail's apart (without them a 62-token tail and its
// p, 272 bytes, read as a full block whose last two tokens are p: two prefixes, one key). Fixed
// spans make key(p) independent of where earlier snapshots were taken, so the router and every
// worker compute the same keys from a prompt alone (no per-process seed), in one pass over the
// tokens.
//
//   SnapshotKey root = SnapshotRootKey(domain);
//   std::vector<SnapshotKey> keys = SnapshotKeysAt(root, prompt, {512, 1031, 2048});
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/gguf_file.h"

namespace deltaserve::common {

// Tokens per hashed span of the key chain.
inline constexpr int64_t kSnapshotBlockTokens = 64;

// A 128-bit snapshot key.
struct SnapshotKey {
  std::array<uint8_t, 16> bytes{};

  // 32 lowercase hex digits.
  std::string Hex() const;
  // The first 8 bytes as a little-endian integer: what workers report to the router.
  uint64_t Prefix64() const;
  bool operator==(const SnapshotKey& o) const { return bytes == o.bytes; }
  bool operator!=(const SnapshotKey& o) const { return bytes != o.bytes; }
  template <typename H>
  friend H AbslHashValue(H h, const SnapshotKey& k) {
    return H::combine(std::move(h), k.Prefix64());
  }
};

// Parses 16 raw bytes (ModelInfo.snapshot_key_root); InvalidArgument for another length.
absl::StatusOr<SnapshotKey> SnapshotKeyFromBytes(std::string_view bytes);

// SHA-256 of a model file's header, metadata and tensor infos (bytes [0, data_offset) of the
// GGUF): any change of a hyperparameter, tokenizer entry, tensor type, shape or offset changes
// it, while the tensor data is not read.
std::array<uint8_t, 32> ModelFingerprint(const GgufFile& file);

// What must match for a snapshot to be usable: the model and the cache's types and layout.
struct SnapshotDomain {
  std::array<uint8_t, 32> model_fingerprint{};
  std::string k_type = "f16";      // KV cache K type ("f16", "q8_0", ...)
  std::string v_type = "f16";      // KV cache V type
  std::string state_type = "f32";  // recurrent state element type
  int64_t page_tokens = 256;       // positions per KV page (the serialized page layout)

  bool operator==(const SnapshotDomain& o) const = default;
};

// The chain's root for `domain`.
SnapshotKey SnapshotRootKey(const SnapshotDomain& domain);

// key(p) for each p of `positions` (ascending, each in [1, tokens.size()]), in one pass over
// `tokens[0, positions.back())`. InvalidArgument for positions out of range or not ascending.
absl::StatusOr<std::vector<SnapshotKey>> SnapshotKeysAt(const SnapshotKey& root,
                                                        absl::Span<const int32_t> tokens,
                                                        absl::Span<const int64_t> positions);

// The positions where a sequence is snapshotted (docs/snapshots.md, "When"): each message
// boundary in [1, n_tokens], and inside each span between consecutive boundaries (0, the
// boundaries, n_tokens) every `interval` tokens from the span's start (interval <= 0: none).
// Ascending, unique. Boundaries out of range or out of order are skipped.
std::vector<int64_t> SnapshotPositions(absl::Span<const int32_t> message_boundaries,
                                       int64_t n_tokens, int64_t interval);

}  // namespace deltaserve::common
