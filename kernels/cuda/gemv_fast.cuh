// The fast GEMV lane for Q4_K (the bulk of a Q4_K_M model), beside the general lane of
// gemv.cuh, which stays the reference. It is picked for rows whose bytes are 16-byte aligned
// (data and row_bytes: GGUF data, cudaMalloc and every Rows/Matrix view of them are), and has
// not been measured yet (no GPU in the session that wrote it): the GPU benchmark decides whether
// it stays.
//
// What differs from the general lane (8 values per step, exact dequantisation, see the
// README's instruction count):
// - a lane takes a 64-value chunk c of a super-block (sub-blocks 2c and 2c + 1): the 32 nibble
//   bytes qs[32c ..] in two 16-byte loads, each byte used for both of its nibbles, the scales
//   unpacked once per 64 values;
// - a nibble becomes a float by placing it in the mantissa of 2^23 (one byte permute) and
//   subtracting 2^23 (exact), instead of an int->float conversion (a quarter-rate instruction);
// - a weight is fmaf(d * sc, q, -dmin * m): one rounding instead of the CPU decoder's two, so
//   weights may differ from DequantizeRow by one ulp (relative 2^-24, inside the f32 tolerance).
// It is DS_HOST_DEVICE like the general lane: the CPU tests replay it and the GPU test expects
// its bits.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/matmul_plan.cuh"

namespace deltaserve::kernels::cuda {

// True when the fast lane may read rows of `type` at `data`, row_bytes apart.
DS_HOST_DEVICE DS_INLINE bool GemvFastEligible(WeightType type, const void* data,
                                               size_t row_bytes) {
  return type == WeightType::kQ4_K &&
         ((reinterpret_cast<uintptr_t>(data) | static_cast<uintptr_t>(row_bytes)) & 15) == 0;
}

// Byte j (0..3) of w, a value in 0..255, as a float: 2^23 + byte has the byte as its mantissa.
DS_HOST_DEVICE DS_INLINE float GemvByteToFloat(uint32_t w, int j) {
#if defined(__CUDA_ARCH__)
  const uint32_t bits = __byte_perm(w, 0x4B000000u, 0x7540u | static_cast<uint32_t>(j));
#else
  const uint32_t bits = ((w >> (8 * j)) & 0xFFu) | 0x4B000000u;
#endif
  return BitsFloat(bits) - 8388608.0f;
}

// Four 16-byte aligned words of `p` (on the host: any alignment).
DS_HOST_DEVICE DS_INLINE void GemvLoad16(const uint8_t* p, uint32_t* w) {
#if defined(__CUDA_ARCH__)
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
#else
  std::memcpy(w, p, 16);
#endif
}

// x[0..3] from p (4-byte aligned; one 16-byte load on the device when p is 16-byte aligned).
DS_HOST_DEVICE DS_INLINE void GemvLoadX4(const float* p, float* x) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    x[0] = a.x;
    x[1] = a.y;
    x[2] = a.z;
    x[3] = a.w;
    return;
  }
  for (int i = 0; i < 4; ++i) x[i] = __ldg(p + i);
#else
  std::memcpy(x, p, 4 * sizeof(float));
#endif
}

// Byte i (0..11) of the 12 scale bytes held in words s0, s1, s2 (selects, no indexed array:
// the kernel keeps them in registers).
DS_HOST_DEVICE DS_INLINE uint32_t GemvScaleByte(uint32_t s0, uint32_t s1, uint32_t s2, int i) {
  const uint32_t w = i < 4 ? s0 : (i < 8 ? s1 : s2);
  return (w >> (8 * (i & 3))) & 0xFFu;
}

// dequant.cuh DqScaleMinK4 on the scale words.
DS_HOST_DEVICE DS_INLINE void GemvScaleMinK4(uint32_t s0, uint32_t s1, uint32_t s2, int j,
                                             uint32_t* sc, uint32_t* m) {
  if (j < 4) {
    *sc = GemvScaleByte(s0, s1, s2, j) & 63u;
    *m = GemvScaleByte(s0, s1, s2, j + 4) & 63u;
  } else {
    *sc =
        (GemvScaleByte(s0, s1, s2, j + 4) & 0xFu) | ((GemvScaleByte(s0, s1, s2, j - 4) >> 6) << 4);
    *m = (GemvScaleByte(s0, s1, s2, j + 4) >> 4) | ((GemvScaleByte(s0, s1, s2, j) >> 6) << 4);
  }
}

// Lane `lane`'s share of W[row] . x_r (r < nr) for a Q4_K row (GemvFastEligible): chunks
// lane, lane + 32, ... of the row's in / 64 chunks. acc[r] is overwritten.
DS_HOST_DEVICE DS_INLINE void GemvLaneQ4KFast(const uint8_t* wrow, int64_t in,
                                              const float* const* xr, int nr, int lane,
                                              float* acc) {
  DS_UNROLL
  for (int r = 0; r < kGemvMaxRows; ++r) acc[r] = 0.0f;
  const int64_t chunks = in / 64;
  for (int64_t task = lane; task < chunks; task += 32) {
    const uint8_t* b = wrow + (task / 4) * 144;
    const int c = static_cast<int>(task % 4);
    uint32_t head[4];  // d | dmin << 16, then the 12 scale bytes
    GemvLoad16(b, head);
    const float d = DqHalfToFloat(static_cast<uint16_t>(head[0] & 0xFFFF));
    const float dmin = DqHalfToFloat(static_cast<uint16_t>(head[0] >> 16));
    uint32_t sc;
    uint32_t m;
    GemvScaleMinK4(head[1], head[2], head[3], 2 * c, &sc, &m);
    const float d_lo = MulRn(d, static_cast<float>(sc));
    const float neg_m_lo = -MulRn(dmin, static_cast<float>(m));
    GemvScaleMinK4(head[1], head[2], head[3], 2 * c + 1, &sc, &m);
    const float d_hi = MulRn(d, static_cast<float>(sc));
    const float neg_m_hi = -MulRn(dmin, static_cast<float>(m));
    uint32_t q[8];
    GemvLoad16(b + 16 + 32 * c, q);
    GemvLoad16(b + 32 + 32 * c, q + 4);
    const int64_t k0 = task * 64;  // values k0 + l: low nibbles, k0 + 32 + l: high nibbles
    DS_UNROLL
    for (int i = 0; i < 8; ++i) {
      const uint32_t lo = q[i] & 0x0F0F0F0Fu;
      const uint32_t hi = (q[i] >> 4) & 0x0F0F0F0Fu;
      float w_lo[4];
      float w_hi[4];
      DS_UNROLL
      for (int j = 0; j < 4; ++j) {
        w_lo[j] = fmaf(d_lo, GemvByteToFloat(lo, j), neg_m_lo);
        w_hi[j] = fmaf(d_hi, GemvByteToFloat(hi, j), neg_m_hi);
      }
      DS_UNROLL
      for (int r = 0; r < kGemvMaxRows; ++r) {
        if (r < nr) {
          float x_lo[4];
          float x_hi[4];
          GemvLoadX4(xr[r] + k0 + 4 * i, x_lo);
          GemvLoadX4(xr[r] + k0 + 32 + 4 * i, x_hi);
          DS_UNROLL
          for (int j = 0; j < 4; ++j) {
            acc[r] = fmaf(w_lo[j], x_lo[j], acc[r]);
            acc[r] = fmaf(w_hi[j], x_hi[j], acc[r]);
          }
        }
      }
    }
  }
}

}  // namespace deltaserve::kernels::cuda
