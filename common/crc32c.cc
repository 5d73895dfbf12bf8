#include "common/crc32c.h"

#include <array>
#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace deltaserve::common {
namespace {

// Words are loaded with memcpy as host integers: x86-64 and aarch64 are little-endian.
static_assert(std::endian::native == std::endian::little);

constexpr uint32_t kPolynomial = 0x82F63B78;  // 0x1EDC6F41 bit-reversed

// kTables[0] is the classic byte-at-a-time table; kTables[k][b] is the CRC of byte b followed
// by k zero bytes, which lets the portable path fold 8 input bytes per step (slicing-by-8).
constexpr std::array<std::array<uint32_t, 256>, 8> MakeTables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kPolynomial : 0);
    t[0][b] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
  return t;
}

constexpr std::array<std::array<uint32_t, 256>, 8> kTables = MakeTables();

// `crc` here is the running register (already inverted).
uint32_t ExtendPortableRaw(uint32_t crc, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint32_t lo;
    uint32_t hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
          kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
          kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ kTables[0][(crc ^ *p++) & 0xFF];
  return crc;
}

#if defined(__x86_64__)
// The crc32 instruction has a 3-cycle latency and a throughput of one per cycle, so one
// dependent chain runs at a third of the unit's speed. Three chains over consecutive
// kStripeBytes stripes run in parallel and are joined with the linear map "append kStripeBytes
// zero bytes" (kShift, 4 table lookups): crc(a|b|c) = Z(Z(crc(a)) ^ crc_0(b)) ^ crc_0(c).
// 96 MiB on this project's 2-core Xeon VM: 28-32 ms with one chain, 12-14 ms with three.
constexpr size_t kStripeBytes = 4096;

__attribute__((target("sse4.2"))) uint32_t ExtendOneChain(uint32_t crc, const uint8_t* p,
                                                          size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

// kShift[k][b]: the register after kStripeBytes zero bytes from the register (b << 8k); the map
// is linear, so a register's image is the XOR of its four bytes' images.
struct ShiftTable {
  std::array<std::array<uint32_t, 256>, 4> t{};
  ShiftTable() {
    static const uint8_t kZeros[kStripeBytes] = {};
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) {
      basis[bit] = ExtendPortableRaw(uint32_t{1} << bit, kZeros, kStripeBytes);
    }
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int bit = 0; bit < 8; ++bit) {
          if (b & (1u << bit)) v ^= basis[8 * k + bit];
        }
        t[k][b] = v;
      }
    }
  }
  uint32_t Shift(uint32_t reg) const {
    return t[0][reg & 0xFF] ^ t[1][(reg >> 8) & 0xFF] ^ t[2][(reg >> 16) & 0xFF] ^ t[3][reg >> 24];
  }
};

__attribute__((target("sse4.2"))) uint32_t ExtendSse42Raw(uint32_t crc, const uint8_t* p,
                                                          size_t n) {
  if (n >= 3 * kStripeBytes) {
    static const ShiftTable shift;
    while (n >= 3 * kStripeBytes) {
      uint64_t c0 = crc;
      uint64_t c1 = 0;
      uint64_t c2 = 0;
      const uint8_t* a = p;
      const uint8_t* b = p + kStripeBytes;
      const uint8_t* c = p + 2 * kStripeBytes;
      for (size_t i = 0; i < kStripeBytes; i += 8) {
        uint64_t va;
        uint64_t vb;
        uint64_t vc;
        std::memcpy(&va, a + i, 8);
        std::memcpy(&vb, b + i, 8);
        std::memcpy(&vc, c + i, 8);
        c0 = _mm_crc32_u64(c0, va);
        c1 = _mm_crc32_u64(c1, vb);
        c2 = _mm_crc32_u64(c2, vc);
      }
      crc = shift.Shift(shift.Shift(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1)) ^
            static_cast<uint32_t>(c2);
      p += 3 * kStripeBytes;
      n -= 3 * kStripeBytes;
    }
  }
  return ExtendOneChain(crc, p, n);
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, absl::Span<const uint8_t> bytes) {
#if defined(__x86_64__)
  if (HasSse42()) return ~ExtendSse42Raw(~crc, bytes.data(), bytes.size());
#endif
  return ~ExtendPortableRaw(~crc, bytes.data(), bytes.size());
}

uint32_t Crc32c(absl::Span<const uint8_t> bytes) { return Crc32cExtend(0, bytes); }

namespace internal {

uint32_t Crc32cExtendPortable(uint32_t crc, absl::Span<const uint8_t> bytes) {
  return ~ExtendPortableRaw(~crc, bytes.data(), bytes.size());
}

bool Crc32cUsesHardware() {
#if defined(__x86_64__)
  return HasSse42();
#else
  return false;
#endif
}

}  // namespace internal
}  // namespace deltaserve::common
