// Test-only edits of session-snapshot blobs by the byte offsets documented in
// common/snapshot_format.h (not by its internals, so the tests also check that table): patch a
// header field, then Reseal() so that the CRCs match again and the decoder gets past them to the
// check under test. Used by snapshot_format_test and the snapshot_format fuzz target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/crc32c.h"
#include "common/snapshot_format.h"

namespace deltaserve::testing {

inline constexpr size_t kSnapOffVersion = 8;
inline constexpr size_t kSnapOffFingerprint = 24;
inline constexpr size_t kSnapOffKType = 56;
inline constexpr size_t kSnapOffPageTokens = 104;
inline constexpr size_t kSnapOffKey = 112;
inline constexpr size_t kSnapOffNTokens = 128;
inline constexpr size_t kSnapOffNPages = 144;
inline constexpr size_t kSnapOffStateBytes = 152;
inline constexpr size_t kSnapOffSections = 176;  // 3 x {u64 raw, u64 stored, u32 enc, u32 crc}
inline constexpr size_t kSnapSectionBytes = 24;
inline constexpr size_t kSnapOffHeaderCrc = 252;

inline void PutLe(std::string& blob, size_t offset, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) blob[offset + i] = static_cast<char>(v >> (8 * i));
}
inline uint64_t GetLe(const std::string& blob, size_t offset, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(blob[offset + i]);
  return v;
}
// Offset of field `field_offset` (0 raw, 8 stored, 16 encoding, 20 crc) of section `i`.
inline size_t SnapSectionField(int i, size_t field_offset) {
  return kSnapOffSections + i * kSnapSectionBytes + field_offset;
}

inline uint32_t Crc(const std::string& blob, size_t offset, size_t n) {
  return common::Crc32c(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(blob.data()) + offset, n));
}

// Recomputes each section's CRC (as far as the stored lengths fit in the blob) and the header
// CRC. Blobs shorter than the header are left alone.
inline void Reseal(std::string& blob) {
  if (blob.size() < common::kSnapshotHeaderBytes) return;
  uint64_t offset = common::kSnapshotHeaderBytes;
  for (int i = 0; i < 3; ++i) {
    const uint64_t stored = GetLe(blob, SnapSectionField(i, 8), 8);
    if (stored > blob.size() - offset) break;
    PutLe(blob, SnapSectionField(i, 20), Crc(blob, offset, stored), 4);
    offset += stored;
  }
  PutLe(blob, kSnapOffHeaderCrc, Crc(blob, 0, kSnapOffHeaderCrc), 4);
}

}  // namespace deltaserve::testing
