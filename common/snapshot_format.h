// The session-snapshot blob (docs/snapshots.md, "Blob format"): one self-contained byte string
// holding a sequence's state after its first n tokens — the tokens, every DeltaNet layer's
// recurrent state and the attention KV pages — stored under one Redis key, so that any worker
// of the same model and cache types can verify it and resume the sequence. Blobs come from the
// network and are untrusted: DecodeSnapshot checks every length against the blob and the
// caller's cap before it allocates, every section against its CRC-32C, the model and cache
// types, the layout, and that the header's key is the key of the tokens it carries; whatever
// fails is a SnapshotRejectReason (the `reason` label of the rejected-snapshots metric) and the
// caller recomputes.
//
//   std::string blob = EncodeSnapshot(contents, SnapshotCompression::kZstd).value();
//   SnapshotRejectReason reason;
//   absl::StatusOr<DecodedSnapshot> s = DecodeSnapshot(blob, expectation, &reason);
//
// Byte layout, version 1 (integers little-endian; offsets in bytes):
//
//   header, 256 bytes:
//     0   u8[8]  magic "DSSNAP\0\0"
//     8   u32    format version (1); bytes 0..11 keep this meaning in every version
//     12  u32    header size (256)
//     16  u32    flags (0)
//     20  u32    reserved (0)
//     24  u8[32] model fingerprint (ModelFingerprint)
//     56  u8[16] K type, 72 u8[16] V type, 88 u8[16] state type: ASCII, NUL-padded
//     104 u64    page tokens
//     112 u8[16] key (SnapshotKeysAt(SnapshotRootKey(domain), tokens, {n_tokens})[0])
//     128 u64    n_tokens (>= 1)
//     136 u32    n_deltanet_layers      140 u32 n_attention_layers
//     144 u32    n_pages (= ceil(n_tokens / page tokens) when there are attention layers, else 0)
//     148 u32    reserved (0)
//     152 u64    state bytes            160 u64 K page bytes      168 u64 V page bytes
//     176        3 section descriptors of 24 bytes, in order tokens, state, kv:
//                  u64 raw bytes, u64 stored bytes, u32 encoding (0 raw, 1 zstd frame),
//                  u32 CRC-32C of the stored bytes
//     248 u32    reserved (0)
//     252 u32    CRC-32C of bytes [0, 252)
//   then the stored bytes of the tokens, state and kv sections, back to back, to the blob's end.
//
//   tokens: n_tokens int32 little-endian.
//   state:  for each DeltaNet layer in model order, its conv window then its delta-rule matrix,
//           as the worker lays them out (state type elements); `state bytes` in total.
//   kv:     for each attention layer in model order, for each page 0..n_pages-1, the K page
//           (K page bytes) then the V page (V page bytes). The last page may hold positions past
//           n_tokens; their bytes are carried but mean nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/snapshot_key.h"

namespace deltaserve::common {

// Format version that EncodeSnapshot writes and DecodeSnapshot reads; blobs of any other
// version are rejected (kVersion), never reinterpreted.
inline constexpr uint32_t kSnapshotFormatVersion = 1;
// Size of the version-1 header, in bytes.
inline constexpr size_t kSnapshotHeaderBytes = 256;
// Longest K/V/state type name a blob can carry (its NUL-padded field).
inline constexpr size_t kSnapshotTypeNameBytes = 16;

// The shape of a worker's cache, which must match exactly for a snapshot to be loadable.
struct SnapshotLayout {
  uint32_t n_deltanet_layers = 0;
  uint32_t n_attention_layers = 0;
  uint64_t state_bytes = 0;   // recurrent state of all DeltaNet layers together, bytes
  uint64_t k_page_bytes = 0;  // one attention layer's K for one page, bytes
  uint64_t v_page_bytes = 0;  // one attention layer's V for one page, bytes

  bool operator==(const SnapshotLayout& o) const = default;
};

// KV pages a snapshot of `n_tokens` tokens carries per attention layer:
// ceil(n_tokens / page_tokens), or 0 when the layout has no attention layers.
uint64_t SnapshotPages(const SnapshotLayout& layout, int64_t page_tokens, int64_t n_tokens);

// Bytes of the kv section, n_attention_layers * n_pages * (k_page_bytes + v_page_bytes), or
// nullopt when that overflows 64 bits.
std::optional<uint64_t> SnapshotKvBytes(const SnapshotLayout& layout, uint64_t n_pages);

// What a worker hands to EncodeSnapshot. The big sections are scatter-gather views into the
// worker's own buffers (state slots, KV pages), read only during the call.
struct SnapshotContents {
  SnapshotKey key;  // must be SnapshotKeysAt(SnapshotRootKey(domain), tokens, {n})[0]
  SnapshotDomain domain;
  absl::Span<const int32_t> tokens;  // the n-token prefix, n >= 1
  SnapshotLayout layout;
  // The state section (see the file comment), in any number of pieces; their sizes add up to
  // layout.state_bytes.
  std::vector<absl::Span<const uint8_t>> state_parts;
  // The kv section, in any number of pieces; their sizes add up to SnapshotKvBytes(layout,
  // SnapshotPages(layout, domain.page_tokens, tokens.size())).
  std::vector<absl::Span<const uint8_t>> kv_parts;
};

enum class SnapshotCompression {
  kNone,
  // Each section is one zstd frame, or stays raw when zstd does not make it smaller (f32
  // recurrent state is close to incompressible).
  kZstd,
};

// Serializes `c`. InvalidArgument when the contents are inconsistent (key not the tokens' key,
// part sizes not adding up, a type name over kSnapshotTypeNameBytes, no tokens); Internal when
// zstd fails. `zstd_level` is zstd's level (1 is the fastest of the usual ones).
absl::StatusOr<std::string> EncodeSnapshot(const SnapshotContents& c,
                                           SnapshotCompression compression, int zstd_level = 1);

// Why a blob was refused; SnapshotRejectReasonName() is the metric's `reason` label.
enum class SnapshotRejectReason {
  kNone,        // accepted
  kFormat,      // bad magic, truncated, trailing bytes, lengths that do not add up, bad zstd frame
  kVersion,     // another format version
  kChecksum,    // a CRC-32C (header or section) does not match
  kModel,       // another model fingerprint
  kCacheTypes,  // another K, V or state type, or other page tokens
  kKey,         // the key is not the tokens' key, or not the key asked for
  kLayout,      // layer counts or state / page bytes differ from the worker's
  kTooLarge,    // the decoded sections would exceed the caller's cap
};

// "none", "format", "version", "checksum", "model", "cache_types", "key", "layout",
// "too_large".
std::string_view SnapshotRejectReasonName(SnapshotRejectReason reason);

// The fixed-size part of a blob, as read by ParseSnapshotHeader.
struct SnapshotHeader {
  SnapshotDomain domain;
  SnapshotKey key;
  int64_t n_tokens = 0;
  SnapshotLayout layout;
  uint64_t n_pages = 0;
  uint64_t stored_bytes = 0;  // the blob's size
  uint64_t raw_bytes = 0;     // tokens + state + kv once decoded
};

// What the loading worker requires of a blob.
struct SnapshotExpectation {
  SnapshotDomain domain;
  // The key the worker looked up; nullopt accepts any key (the blob must still be the key of
  // its own tokens).
  std::optional<SnapshotKey> key;
  SnapshotLayout layout;
  // Most bytes the decoded sections (tokens + state + kv) may take together.
  uint64_t max_decoded_bytes = uint64_t{1} << 30;
};

// A verified snapshot, owning its bytes: the tokens, and the state and kv sections in one
// buffer (the views stay valid while this object lives, moves included).
struct DecodedSnapshot {
  SnapshotHeader header;
  std::vector<int32_t> tokens;
  absl::Span<const uint8_t> state;  // header.layout.state_bytes bytes
  absl::Span<const uint8_t> kv;     // SnapshotKvBytes(header.layout, header.n_pages) bytes
  std::unique_ptr<uint8_t[]> buffer;
};

// Reads and checks the header only: magic, version, header CRC, reserved fields, type names,
// and that the section lengths add up to the blob's size and to the layout. Checks nothing
// against an expectation and does not touch the sections. On failure `*reason` (when not
// null) says why; on success it is kNone.
absl::StatusOr<SnapshotHeader> ParseSnapshotHeader(std::string_view blob,
                                                   SnapshotRejectReason* reason);

// Verifies `blob` against `expect` and decodes it. Never reads outside `blob`; allocates only
// after the header, the expectation, the cap and the section CRCs have passed, and then only
// what the header declares (zstd sections must also declare that size in their frame and a
// ratio zstd can reach). On failure the status names the field and `*reason` (when not null)
// says which check failed; on success `*reason` is kNone.
absl::StatusOr<DecodedSnapshot> DecodeSnapshot(std::string_view blob,
                                               const SnapshotExpectation& expect,
                                               SnapshotRejectReason* reason);

}  // namespace deltaserve::common
