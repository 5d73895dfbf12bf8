#include "kernels/cpu/quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

// Built with -ffp-contract=off (quants.cmake): every decoded value is a separate multiply and
// add, exactly as in llama.cpp's dequantize_row_*, which the SIMD paths reproduce bit for bit.

namespace deltaserve::kernels {
namespace {

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void StoreU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, sizeof(v)); }

// --- decoders -----------------------------------------------------------------------------

void DequantizeQ4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQk) {
    const float d = Fp16ToFp32(b[i].d);
    for (int j = 0; j < kQk / 2; ++j) {
      y[j] = static_cast<float>((b[i].qs[j] & 0xF) - 8) * d;
      y[j + kQk / 2] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeQ4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQk) {
    const float d = Fp16ToFp32(b[i].d);
    const float m = Fp16ToFp32(b[i].m);
    for (int j = 0; j < kQk / 2; ++j) {
      y[j] = static_cast<float>(b[i].qs[j] & 0xF) * d + m;
      y[j + kQk / 2] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
    }
  }
}

// Q5 value j of a block: its nibble from qs and bit j of qh as bit 4.
template <class Block>
void Q5Values(const Block& b, int* q) {
  const uint32_t qh = LoadU32(b.qh);
  for (int j = 0; j < kQk / 2; ++j) {
    q[j] = (b.qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
    q[j + kQk / 2] = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
  }
}

void DequantizeQ5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQk) {
    const float d = Fp16ToFp32(b[i].d);
    int q[kQk];
    Q5Values(b[i], q);
    for (int j = 0; j < kQk; ++j) y[j] = static_cast<float>(q[j] - 16) * d;
  }
}

void DequantizeQ5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQk) {
    const float d = Fp16ToFp32(b[i].d);
    const float m = Fp16ToFp32(b[i].m);
    int q[kQk];
    Q5Values(b[i], q);
    for (int j = 0; j < kQk; ++j) y[j] = static_cast<float>(q[j]) * d + m;
  }
}

void DequantizeQ8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQk) {
    const float d = Fp16ToFp32(b[i].d);
    for (int j = 0; j < kQk; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

// Q4_K and Q5_K: `high(c, l)` is the fifth bit (0 or 16) of values 64c + l and 64c + 32 + l.
template <class Block, class High>
void DequantizeKQuant45(const Block* b, float* y, int64_t nb, High high) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(b[i].d);
    const float dmin = Fp16ToFp32(b[i].dmin);
    for (int c = 0; c < 4; ++c, y += 64) {
      uint8_t sc;
      uint8_t m;
      GetScaleMinK4(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = dmin * m;
      GetScaleMinK4(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = dmin * m;
      const uint8_t* qs = b[i].qs + 32 * c;
      for (int l = 0; l < 32; ++l) {
        const int h = high(b[i], c, l);
        y[l] = d1 * static_cast<float>((qs[l] & 0xF) + (h & 16)) - m1;
        y[l + 32] = d2 * static_cast<float>((qs[l] >> 4) + ((h >> 1) & 16)) - m2;
      }
    }
  }
}

void DequantizeQ6_K(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(b[i].d);
    for (int half = 0; half < 2; ++half, y += 128) {
      const uint8_t* ql = b[i].ql + 64 * half;
      const uint8_t* qh = b[i].qh + 32 * half;
      const int8_t* sc = b[i].scales + 8 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// --- encoders: legacy formats, llama.cpp's reference rules -------------------------------

// The signed value of largest magnitude (the first one on ties).
float SignedAbsMax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void QuantizeQ4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQk) {
    const float d = SignedAbsMax(x, kQk) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQk / 2; ++j) {
      // Truncation after +8.5 is round-half-up on [-8, 8]; the largest magnitude maps to -8.
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 =
          std::min(15, static_cast<int>(static_cast<int8_t>(x[j + kQk / 2] * id + 8.5f)));
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void MinMax(const float* x, int n, float* min, float* max) {
  *min = x[0];
  *max = x[0];
  for (int j = 1; j < n; ++j) {
    *min = std::min(*min, x[j]);
    *max = std::max(*max, x[j]);
  }
}

void QuantizeQ4_1(const float* x, BlockQ4_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQk) {
    float min;
    float max;
    MinMax(x, kQk, &min, &max);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = Fp32ToFp16(d);
    b[i].m = Fp32ToFp16(min);
    for (int j = 0; j < kQk / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int q1 =
          std::min(15, static_cast<int>(static_cast<int8_t>((x[j + kQk / 2] - min) * id + 0.5f)));
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Packs 32 five-bit values: nibbles into qs, bit 4 of value j into bit j of qh.
void PackQ5(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < kQk / 2; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + kQk / 2] & 0xF) << 4));
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q[j + kQk / 2] >> 4) & 1) << (j + kQk / 2);
  }
  StoreU32(qh_bytes, qh);
}

void QuantizeQ5_0(const float* x, BlockQ5_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQk) {
    const float d = SignedAbsMax(x, kQk) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = Fp32ToFp16(d);
    int q[kQk];
    for (int j = 0; j < kQk; ++j) {
      q[j] = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
    }
    PackQ5(q, b[i].qs, b[i].qh);
  }
}

void QuantizeQ5_1(const float* x, BlockQ5_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQk) {
    float min;
    float max;
    MinMax(x, kQk, &min, &max);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = Fp32ToFp16(d);
    b[i].m = Fp32ToFp16(min);
    int q[kQk];
    for (int j = 0; j < kQk; ++j) {
      q[j] = std::min(31, static_cast<int>(static_cast<uint8_t>((x[j] - min) * id + 0.5f)));
    }
    PackQ5(q, b[i].qs, b[i].qh);
  }
}

void QuantizeQ8_0(const float* x, BlockQ8_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQk) {
    float amax = 0.0f;
    for (int j = 0; j < kQk; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQk; ++j) b[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

// --- encoders: K-quants ---------------------------------------------------------------------

// The smallest f16 >= v (v >= 0, finite), so a scale derived from it never undershoots.
uint16_t Fp16RoundUp(float v) {
  uint16_t h = Fp32ToFp16(v);
  if (Fp16ToFp32(h) < v) ++h;
  return h;
}

// The smallest integer k in [0, max_k] with k * unit >= need (max_k when none is).
int CeilSteps(float need, float unit, int max_k) {
  if (unit <= 0.0f || need <= 0.0f) return 0;
  int k = static_cast<int>(std::ceil(need / unit));
  while (k > 0 && static_cast<float>(k - 1) * unit >= need) --k;
  while (k < max_k && static_cast<float>(k) * unit < need) ++k;
  return std::clamp(k, 0, max_k);
}

int NearestClamped(float v, int lo, int hi) {
  return std::clamp(static_cast<int>(std::lround(v)), lo, hi);
}

// Shared by Q4_K (qmax 15) and Q5_K (qmax 31): sub-block j covers [-m1_j, -m1_j + qmax * d1_j]
// with m1_j = dmin * m_j >= -min(0, min x) and d1_j = d * sc_j >= (max x + m1_j) / qmax, the
// 6-bit m_j and sc_j rounded up; then each q is round((x + m1) / d1). Writes d, dmin, scales
// and the 256 q values to `q`.
template <class Block>
void QuantizeKQuant45Block(const float* x, int qmax, Block* b, int* q) {
  float mins[8];
  float maxs[8];
  float max_neg_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    MinMax(x + 32 * j, 32, &mins[j], &maxs[j]);
    mins[j] = std::min(mins[j], 0.0f);
    max_neg_min = std::max(max_neg_min, -mins[j]);
  }
  b->dmin = Fp16RoundUp(max_neg_min / 63);
  const float dmin = Fp16ToFp32(b->dmin);
  int m[8];
  float m1[8];
  float need[8];
  float max_need = 0.0f;
  for (int j = 0; j < 8; ++j) {
    m[j] = CeilSteps(-mins[j], dmin, 63);
    m1[j] = dmin * static_cast<float>(m[j]);
    need[j] = std::max(0.0f, (maxs[j] + m1[j]) / static_cast<float>(qmax));
    max_need = std::max(max_need, need[j]);
  }
  b->d = Fp16RoundUp(max_need / 63);
  const float d = Fp16ToFp32(b->d);
  int sc[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = CeilSteps(need[j], d, 63);
    const float d1 = d * static_cast<float>(sc[j]);
    for (int l = 0; l < 32; ++l) {
      q[32 * j + l] = d1 > 0.0f ? NearestClamped((x[32 * j + l] + m1[j]) / d1, 0, qmax) : 0;
    }
  }
  // Inverse of GetScaleMinK4.
  for (int j = 0; j < 4; ++j) {
    b->scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b->scales[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    b->scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

void QuantizeQ4_K(const float* x, BlockQ4_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQkK) {
    int q[kQkK];
    QuantizeKQuant45Block(x, 15, &b[i], q);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        b[i].qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
      }
    }
  }
}

void QuantizeQ5_K(const float* x, BlockQ5_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQkK) {
    int q[kQkK];
    QuantizeKQuant45Block(x, 31, &b[i], q);
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * c + l];
        const int hi = q[64 * c + 32 + l];
        b[i].qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        b[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

// Q6_K: symmetric sub-blocks of 16 with positive 8-bit scales, d * sc_j >= amax_j / 31 (so no
// value clamps), q = round(x / (d * sc_j)) in [-31, 31].
void QuantizeQ6_K(const float* x, BlockQ6_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQkK) {
    float need[16];
    float max_need = 0.0f;
    for (int j = 0; j < 16; ++j) {
      float amax = 0.0f;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
      need[j] = amax / 31;
      max_need = std::max(max_need, need[j]);
    }
    b[i].d = Fp16RoundUp(max_need / 127);
    const float d = Fp16ToFp32(b[i].d);
    int q[kQkK];
    for (int j = 0; j < 16; ++j) {
      const int sc = CeilSteps(need[j], d, 127);
      b[i].scales[j] = static_cast<int8_t>(sc);
      const float d1 = d * static_cast<float>(sc);
      for (int l = 0; l < 16; ++l) {
        q[16 * j + l] = (d1 > 0.0f ? NearestClamped(x[16 * j + l] / d1, -32, 31) : 0) + 32;
      }
    }
    for (int half = 0; half < 2; ++half) {
      const int* qq = q + 128 * half;
      uint8_t* ql = b[i].ql + 64 * half;
      uint8_t* qh = b[i].qh + 32 * half;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((qq[l] & 0xF) | ((qq[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((qq[l + 32] & 0xF) | ((qq[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) |
                                     ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t magnitude = h & 0x7FFF;
  if (magnitude >= 0x7C00) {
    // inf; NaN comes out quiet with its payload, as F16C's vcvtph2ps does.
    const uint32_t mant = magnitude & 0x3FF;
    return std::bit_cast<float>(sign | 0x7F800000 | (mant << 13) | (mant != 0 ? 0x400000u : 0u));
  }
  // Placed in a float's bits, the half's exponent is 112 too small; multiplying by 2^112
  // rebiases it exactly, subnormal halves (then subnormal floats) included.
  const float unsigned_value = std::bit_cast<float>(magnitude << 13) * 0x1p112f;
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(unsigned_value));
}

uint16_t Fp32ToFp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs > 0x7F800000) {  // NaN: quiet, payload truncated (F16C does the same)
    return static_cast<uint16_t>(sign | 0x7E00 | ((abs >> 13) & 0x3FF));
  }
  if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // >= 65520 rounds to inf
  uint32_t mant;
  int shift;
  uint32_t base;
  if (abs >= 0x38800000) {  // normal half (>= 2^-14): rebias the exponent, drop 13 bits
    mant = abs & 0x7FFFFF;
    shift = 13;
    base = ((abs >> 23) - 112) << 10;
  } else if (abs >= 0x33000000) {  // subnormal half: value / 2^-24, rounded
    mant = (abs & 0x7FFFFF) | 0x800000;
    shift = 126 - static_cast<int>(abs >> 23);
    base = 0;
  } else {
    return sign;  // below half the smallest subnormal (a tie at exactly 2^-25 goes to 0 too)
  }
  uint32_t h = base + (mant >> shift);
  const uint32_t rest = mant & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (h & 1))) ++h;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | h);
}

uint16_t Fp32ToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 64);
  return static_cast<uint16_t>((x + (0x7FFF + ((x >> 16) & 1))) >> 16);
}

size_t RowBytes(WeightType type, int64_t n) {
  const BlockLayout layout = BlockLayoutOf(type);
  if (layout.block_size == 0) return 0;
  return static_cast<size_t>(n / layout.block_size * layout.block_bytes);
}

KernelStatus DequantizeRow(WeightType type, const void* blocks, float* out, int64_t n) {
  const BlockLayout layout = BlockLayoutOf(type);
  if (layout.block_size == 0) return KernelStatus::kUnsupportedType;
  if (n < 0 || n % layout.block_size != 0) return KernelStatus::kInvalidArgument;
  const int64_t nb = n / layout.block_size;
  switch (type) {
    case WeightType::kF32:
      if (n > 0) std::memcpy(out, blocks, static_cast<size_t>(n) * sizeof(float));
      break;
    case WeightType::kF16: {
      const auto* h = static_cast<const uint16_t*>(blocks);
      for (int64_t i = 0; i < n; ++i) out[i] = Fp16ToFp32(h[i]);
      break;
    }
    case WeightType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(blocks);
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFp32(h[i]);
      break;
    }
    case WeightType::kQ4_0:
      DequantizeQ4_0(static_cast<const BlockQ4_0*>(blocks), out, nb);
      break;
    case WeightType::kQ4_1:
      DequantizeQ4_1(static_cast<const BlockQ4_1*>(blocks), out, nb);
      break;
    case WeightType::kQ5_0:
      DequantizeQ5_0(static_cast<const BlockQ5_0*>(blocks), out, nb);
      break;
    case WeightType::kQ5_1:
      DequantizeQ5_1(static_cast<const BlockQ5_1*>(blocks), out, nb);
      break;
    case WeightType::kQ8_0:
      DequantizeQ8_0(static_cast<const BlockQ8_0*>(blocks), out, nb);
      break;
    case WeightType::kQ4_K:
      DequantizeKQuant45(static_cast<const BlockQ4_K*>(blocks), out, nb,
                         [](const BlockQ4_K&, int, int) { return 0; });
      break;
    case WeightType::kQ5_K:
      // Bit 2c of qh[l] becomes 16 for the low value, bit 2c + 1 becomes 32 (halved later).
      DequantizeKQuant45(
          static_cast<const BlockQ5_K*>(blocks), out, nb,
          [](const BlockQ5_K& b, int c, int l) { return ((b.qh[l] >> (2 * c)) & 3) << 4; });
      break;
    case WeightType::kQ6_K:
      DequantizeQ6_K(static_cast<const BlockQ6_K*>(blocks), out, nb);
      break;
  }
  return KernelStatus::kOk;
}

KernelStatus QuantizeRow(WeightType type, const float* in, void* blocks, int64_t n) {
  const BlockLayout layout = BlockLayoutOf(type);
  if (layout.block_size == 0) return KernelStatus::kUnsupportedType;
  if (n < 0 || n % layout.block_size != 0) return KernelStatus::kInvalidArgument;
  const int64_t nb = n / layout.block_size;
  switch (type) {
    case WeightType::kF32:
      if (n > 0) std::memcpy(blocks, in, static_cast<size_t>(n) * sizeof(float));
      break;
    case WeightType::kF16: {
      auto* h = static_cast<uint16_t*>(blocks);
      for (int64_t i = 0; i < n; ++i) h[i] = Fp32ToFp16(in[i]);
      break;
    }
    case WeightType::kBF16: {
      auto* h = static_cast<uint16_t*>(blocks);
      for (int64_t i = 0; i < n; ++i) h[i] = Fp32ToBf16(in[i]);
      break;
    }
    case WeightType::kQ4_0:
      QuantizeQ4_0(in, static_cast<BlockQ4_0*>(blocks), nb);
      break;
    case WeightType::kQ4_1:
      QuantizeQ4_1(in, static_cast<BlockQ4_1*>(blocks), nb);
      break;
    case WeightType::kQ5_0:
      QuantizeQ5_0(in, static_cast<BlockQ5_0*>(blocks), nb);
      break;
    case WeightType::kQ5_1:
      QuantizeQ5_1(in, static_cast<BlockQ5_1*>(blocks), nb);
      break;
    case WeightType::kQ8_0:
      QuantizeQ8_0(in, static_cast<BlockQ8_0*>(blocks), nb);
      break;
    case WeightType::kQ4_K:
      QuantizeQ4_K(in, static_cast<BlockQ4_K*>(blocks), nb);
      break;
    case WeightType::kQ5_K:
      QuantizeQ5_K(in, static_cast<BlockQ5_K*>(blocks), nb);
      break;
    case WeightType::kQ6_K:
      QuantizeQ6_K(in, static_cast<BlockQ6_K*>(blocks), nb);
      break;
  }
  return KernelStatus::kOk;
}

}  // namespace deltaserve::kernels
