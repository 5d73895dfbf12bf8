// CRC-32C (Castagnoli, the iSCSI/ext4 polynomial 0x1EDC6F41, reflected 0x82F63B78, initial and
// final XOR 0xFFFFFFFF): the checksum of every section of a session snapshot blob
// (common/snapshot_format.h). Uses the SSE4.2 crc32 instruction when the CPU has it (checked
// once with CPUID) and a portable slicing-by-8 table otherwise; both give the same value.
//
//   uint32_t crc = Crc32c(bytes);                 // whole buffer
//   crc = Crc32cExtend(crc, more_bytes);          // same as Crc32c(bytes + more_bytes)
#pragma once

#include <cstdint>

#include "absl/types/span.h"

namespace deltaserve::common {

// CRC-32C of `bytes`; Crc32c("123456789") == 0xE3069283 (the standard check value).
uint32_t Crc32c(absl::Span<const uint8_t> bytes);

// The CRC-32C of the concatenation of what `crc` was computed over and `bytes`
// (Crc32cExtend(0, b) == Crc32c(b)).
uint32_t Crc32cExtend(uint32_t crc, absl::Span<const uint8_t> bytes);

namespace internal {
// The portable table path, whatever the CPU (tests compare it with the hardware path).
uint32_t Crc32cExtendPortable(uint32_t crc, absl::Span<const uint8_t> bytes);
// Whether Crc32cExtend uses the SSE4.2 instruction on this machine.
bool Crc32cUsesHardware();
}  // namespace internal

}  // namespace deltaserve::common
