// Decoding of GGUF weight blocks, shared by the CUDA kernels (GEMV, GEMM, row gathers) and the
// CPU unit test that checks it (tests/kernels/cuda_dequant_test.cc): every decoded float is
// bit-identical to the CPU backend's DequantizeRow (kernels/cpu/quants.cc), which itself
// follows llama.cpp's dequantize_row_*. Only the C++ library, backend.h and device_compat.h are
// included, so the same code runs on the build machine's CPU.
//
//   float v[8];
//   DecodeUnit<WeightType::kQ4_K>(row, u, v);  // values 8u .. 8u+7 of the row
//
// Granularity: a row is read in "units" of 8 consecutive values (k = 8u .. 8u+7). 8 divides
// every block size (1 for F32/F16/BF16, 32 for Q4_0..Q8_0, 256 for the K-quants), and the 8
// values of a unit always share one scale (and min), so a unit decodes from one scale lookup.
// Rows of the dense types whose length is not a multiple of 8 end with single values
// (DecodeValue). Block layouts are those of ggml-common.h, restated in kernels/cpu/quants.h.
//
// Numerics: each value is one f32 multiply (and one add or subtract), in the order the CPU
// decoder uses. On the device they are written with __fmul_rn/__fadd_rn, which nvcc never fuses
// into an FMA (a fused multiply-add would round once and differ from the CPU by an ulp); on the
// host the test is compiled with -ffp-contract=off, as kernels/cpu/quants.cc is.
//
// Alignment: block fields are read as 16-bit words (GGUF tensor data and every row of a
// WeightView are 2-byte aligned: block sizes are even), F32 values as 32-bit words; wider
// loads are used where the address allows (16 bytes for a unit of F32/F16/BF16, 8 bytes of
// K-quant nibbles). The launchers refuse weight views that break this (kInvalidArgument).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/cuda/device_compat.h"
#include "kernels/cuda/float_bits.h"

// "#pragma unroll" for loops in DS_HOST_DEVICE code: the host compiler does not know the pragma
// (and warns), nvcc's device pass does.
#if defined(__CUDA_ARCH__)
#define DS_UNROLL _Pragma("unroll")
#else
#define DS_UNROLL
#endif

namespace deltaserve::kernels::cuda {

// --- scalar helpers -----------------------------------------------------------------------

DS_HOST_DEVICE DS_INLINE float DqHalfToFloat(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t magnitude = h & 0x7FFF;
  if (magnitude >= 0x7C00) {
    const uint32_t mant = magnitude & 0x3FF;
    return BitsFloat(sign | 0x7F800000 | (mant << 13) | (mant != 0 ? 0x400000u : 0u));
  }
  const float unsigned_value = BitsFloat(magnitude << 13) * 0x1p112f;
  uint32_t bits;
  std::memcpy(&bits, &unsigned_value, sizeof(bits));
  return BitsFloat(sign | bits);
#endif
}

// Little-endian 16-bit word at a 2-byte aligned address.
DS_HOST_DEVICE DS_INLINE uint32_t DqLoadU16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint16_t*>(p);
#else
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
#endif
}

// Little-endian 32-bit word at a 2-byte aligned address.
DS_HOST_DEVICE DS_INLINE uint32_t DqLoadU32(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 3) == 0) return *reinterpret_cast<const uint32_t*>(p);
#endif
  return DqLoadU16(p) | (DqLoadU16(p + 2) << 16);
}

// Eight bytes at a 2-byte aligned address, byte i in bits 8i .. 8i+7.
DS_HOST_DEVICE DS_INLINE uint64_t DqLoadU64(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 7) == 0) return *reinterpret_cast<const uint64_t*>(p);
#endif
  return static_cast<uint64_t>(DqLoadU32(p)) | (static_cast<uint64_t>(DqLoadU32(p + 4)) << 32);
}

// Byte i (0..7) of a DqLoadU64 word.
DS_HOST_DEVICE DS_INLINE uint32_t DqByte(uint64_t w, int i) {
  return static_cast<uint32_t>(w >> (8 * i)) & 0xFF;
}

// --- block layouts --------------------------------------------------------------------------

// Elements and bytes per block of each type (BlockLayoutOf, usable in device code).
template <WeightType T>
struct DqLayout;
template <>
struct DqLayout<WeightType::kF32> {
  static constexpr int kBlock = 1, kBytes = 4;
};
template <>
struct DqLayout<WeightType::kF16> {
  static constexpr int kBlock = 1, kBytes = 2;
};
template <>
struct DqLayout<WeightType::kBF16> {
  static constexpr int kBlock = 1, kBytes = 2;
};
template <>
struct DqLayout<WeightType::kQ4_0> {
  static constexpr int kBlock = 32, kBytes = 18;
};
template <>
struct DqLayout<WeightType::kQ4_1> {
  static constexpr int kBlock = 32, kBytes = 20;
};
template <>
struct DqLayout<WeightType::kQ5_0> {
  static constexpr int kBlock = 32, kBytes = 22;
};
template <>
struct DqLayout<WeightType::kQ5_1> {
  static constexpr int kBlock = 32, kBytes = 24;
};
template <>
struct DqLayout<WeightType::kQ8_0> {
  static constexpr int kBlock = 32, kBytes = 34;
};
template <>
struct DqLayout<WeightType::kQ4_K> {
  static constexpr int kBlock = 256, kBytes = 144;
};
template <>
struct DqLayout<WeightType::kQ5_K> {
  static constexpr int kBlock = 256, kBytes = 176;
};
template <>
struct DqLayout<WeightType::kQ6_K> {
  static constexpr int kBlock = 256, kBytes = 210;
};

// True for F32, F16, BF16: one value per "block", rows of any length.
template <WeightType T>
constexpr bool kDqDense = DqLayout<T>::kBlock == 1;

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block (quants.h GetScaleMinK4).
DS_HOST_DEVICE DS_INLINE void DqScaleMinK4(int j, const uint8_t* scales, uint32_t* sc,
                                           uint32_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63u;
    *m = scales[j + 4] & 63u;
  } else {
    *sc = (scales[j + 4] & 0xFu) | ((static_cast<uint32_t>(scales[j - 4]) >> 6) << 4);
    *m = (static_cast<uint32_t>(scales[j + 4]) >> 4) |
         ((static_cast<uint32_t>(scales[j]) >> 6) << 4);
  }
}

// --- unit decoders: values 8j .. 8j+7 of one block ---------------------------------------

// Dense: `p` is the first of the 8 values.
DS_HOST_DEVICE DS_INLINE void DqDenseF32(const uint8_t* p, float* v) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    const float4 b = *reinterpret_cast<const float4*>(p + 16);
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
    v[4] = b.x;
    v[5] = b.y;
    v[6] = b.z;
    v[7] = b.w;
    return;
  }
  for (int i = 0; i < 8; ++i) v[i] = reinterpret_cast<const float*>(p)[i];
#else
  std::memcpy(v, p, 8 * sizeof(float));
#endif
}

template <bool kBf16>
DS_HOST_DEVICE DS_INLINE void DqDense16(const uint8_t* p, float* v) {
  uint32_t w[4];
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    const uint4 a = *reinterpret_cast<const uint4*>(p);
    w[0] = a.x;
    w[1] = a.y;
    w[2] = a.z;
    w[3] = a.w;
  } else {
    for (int i = 0; i < 4; ++i) w[i] = DqLoadU32(p + 4 * i);
  }
#else
  for (int i = 0; i < 4; ++i) w[i] = DqLoadU32(p + 4 * i);
#endif
  for (int i = 0; i < 4; ++i) {
    const auto lo = static_cast<uint16_t>(w[i] & 0xFFFF);
    const auto hi = static_cast<uint16_t>(w[i] >> 16);
    v[2 * i] = kBf16 ? Bf16ToFloat(lo) : DqHalfToFloat(lo);
    v[2 * i + 1] = kBf16 ? Bf16ToFloat(hi) : DqHalfToFloat(hi);
  }
}

// The 8 nibbles of unit j (0..3) of a 32-value block whose 16 nibble bytes start at qs:
// j < 2 low nibbles of qs[8j ..], j >= 2 high nibbles of qs[8(j-2) ..].
DS_HOST_DEVICE DS_INLINE void DqNibbles32(const uint8_t* qs, int j, uint32_t* q) {
  const uint64_t w = DqLoadU64(qs + 8 * (j & 1));
  const int shift = j < 2 ? 0 : 4;
  for (int i = 0; i < 8; ++i) q[i] = (DqByte(w, i) >> shift) & 0xF;
}

// Q4_0 block: d (f16), qs[16]. x = (q - 8) * d.
DS_HOST_DEVICE DS_INLINE void DqQ4_0(const uint8_t* b, int j, float* v) {
  const float d = DqHalfToFloat(static_cast<uint16_t>(DqLoadU16(b)));
  uint32_t q[8];
  DqNibbles32(b + 2, j, q);
  for (int i = 0; i < 8; ++i) v[i] = MulRn(static_cast<float>(static_cast<int>(q[i]) - 8), d);
}

// Q4_1 block: d, m (f16), qs[16]. x = q * d + m.
DS_HOST_DEVICE DS_INLINE void DqQ4_1(const uint8_t* b, int j, float* v) {
  const float d = DqHalfToFloat(static_cast<uint16_t>(DqLoadU16(b)));
  const float m = DqHalfToFloat(static_cast<uint16_t>(DqLoadU16(b + 2)));
  uint32_t q[8];
  DqNibbles32(b + 4, j, q);
  for (int i = 0; i < 8; ++i) v[i] = AddRn(MulRn(static_cast<float>(q[i]), d), m);
}

// Five-bit values of unit j of a Q5 block: nibble as Q4_0, bit 4 of value e is bit e of qh.
DS_HOST_DEVICE DS_INLINE void DqFiveBits(const uint8_t* qh, const uint8_t* qs, int j, uint32_t* q) {
  const uint32_t h = DqLoadU32(qh);
  DqNibbles32(qs, j, q);
  for (int i = 0; i < 8; ++i) q[i] |= ((h >> (8 * j + i)) & 1u) << 4;
}

// Q5_0 block: d, qh[4], qs[16]. x = (q - 16) * d.
DS_HOST_DEVICE DS_INLINE void DqQ5_0(const uint8_t* b, int j, float* v) {
  const float d = DqHalfToFloat(static_cast<uint16_t>(DqLoadU16(b)));
  uint32_t q[8];
  DqFiveBits(b + 2, b + 6, j, q);
  for (int i = 0; i < 8; ++i) v[i] = MulRn(static_cast<float>(static_cast<int>(q[i]) - 16), d);
}

// Q5_1 block: d, m, qh[4], qs[16]. x = q * d + m.
DS_HOST_DEVICE DS_INLINE void DqQ5_1(const uint8_t* b, int j, float* v) {
  const float d = DqHalfToFloat(static_cast<uint16_t>(DqLoadU16(b)));
  const float m = DqHalfToFloat(static_cast<uint16_t>(DqLoadU16(b + 2)));
  uint32_t q[8];
  DqFiveBits(b + 4, b + 8, j, q);
  for (int i = 0; i < 8; ++i) v[i] = AddRn(MulRn(static_cast<float>(q[i]), d), m);
}

// Q8_0 block: d, qs[32] int8. x = q * d.
DS_HOST_DEVICE DS_INLINE void DqQ8_0(const uint8_t* b, int j, float* v) {
  const float d = DqHalfToFloat(static_cast<uint16_t>(DqLoadU16(b)));
  const uint64_t w = DqLoadU64(b + 2 + 8 * j);
  for (int i = 0; i < 8; ++i) {
    v[i] = MulRn(static_cast<float>(static_cast<int8_t>(DqByte(w, i))), d);
  }
}

// Q4_K (kFive false) and Q5_K block: d, dmin (f16), scales[12], [Q5_K: qh[32]], qs[128].
// Value e = 64c + 32h + l (h = 0: low nibble of qs[32c + l], h = 1: high nibble) is in
// sub-block 2c + h: x = (d * sc) * q - dmin * m, Q5_K adding 16 to q when bit 2c + h of qh[l]
// is set.
template <bool kFive>
DS_HOST_DEVICE DS_INLINE void DqKQuant45(const uint8_t* b, int j, float* v) {
  const float d = DqHalfToFloat(static_cast<uint16_t>(DqLoadU16(b)));
  const float dmin = DqHalfToFloat(static_cast<uint16_t>(DqLoadU16(b + 2)));
  const int e0 = 8 * j;
  const int c = e0 / 64;
  const int h = (e0 / 32) & 1;
  const int l0 = e0 & 31;
  uint32_t sc;
  uint32_t m;
  DqScaleMinK4(2 * c + h, b + 4, &sc, &m);
  const float d1 = MulRn(d, static_cast<float>(sc));
  const float m1 = MulRn(dmin, static_cast<float>(m));
  const uint8_t* qs = b + (kFive ? 48 : 16) + 32 * c + l0;
  const uint64_t w = DqLoadU64(qs);
  uint64_t hb = 0;
  if (kFive) hb = DqLoadU64(b + 16 + l0);
  for (int i = 0; i < 8; ++i) {
    uint32_t q = (DqByte(w, i) >> (4 * h)) & 0xF;
    if (kFive) q += ((DqByte(hb, i) >> (2 * c + h)) & 1u) << 4;
    v[i] = SubRn(MulRn(d1, static_cast<float>(q)), m1);
  }
}

// Q6_K block: ql[128], qh[64], scales[16] int8, d (f16). Value e = 128g + 32r + l (half g,
// quarter r): low 4 bits from ql[64g + 32(r & 1) + l] (low nibble for r < 2, high otherwise),
// bits 4-5 from bits 2r, 2r+1 of qh[32g + l]; x = (d * scales[8g + 2r + l / 16]) * (q - 32).
DS_HOST_DEVICE DS_INLINE void DqQ6_K(const uint8_t* b, int j, float* v) {
  const int e0 = 8 * j;
  const int g = e0 / 128;
  const int r = (e0 / 32) & 3;
  const int l0 = e0 & 31;
  const float d = DqHalfToFloat(static_cast<uint16_t>(DqLoadU16(b + 208)));
  const auto sc = static_cast<int8_t>(b[192 + 8 * g + 2 * r + l0 / 16]);
  const float d1 = MulRn(d, static_cast<float>(sc));
  const uint64_t lw = DqLoadU64(b + 64 * g + 32 * (r & 1) + l0);
  const uint64_t hw = DqLoadU64(b + 128 + 32 * g + l0);
  for (int i = 0; i < 8; ++i) {
    const uint32_t lo = (DqByte(lw, i) >> (r < 2 ? 0 : 4)) & 0xF;
    const uint32_t hi = (DqByte(hw, i) >> (2 * r)) & 3;
    const int q = static_cast<int>(lo | (hi << 4)) - 32;
    v[i] = MulRn(d1, static_cast<float>(q));
  }
}

// --- row-level entry points ---------------------------------------------------------------

// Values 8u .. 8u+7 of a row of type T starting at `row` (8u + 8 <= the row's length).
template <WeightType T>
DS_HOST_DEVICE DS_INLINE void DecodeUnit(const uint8_t* row, int64_t u, float* v) {
  using L = DqLayout<T>;
  if constexpr (T == WeightType::kF32) {
    DqDenseF32(row + u * 32, v);
  } else if constexpr (T == WeightType::kF16) {
    DqDense16<false>(row + u * 16, v);
  } else if constexpr (T == WeightType::kBF16) {
    DqDense16<true>(row + u * 16, v);
  } else {
    constexpr int kUnits = L::kBlock / 8;
    const uint8_t* b = row + (u / kUnits) * L::kBytes;
    const int j = static_cast<int>(u % kUnits);
    if constexpr (T == WeightType::kQ4_0) DqQ4_0(b, j, v);
    if constexpr (T == WeightType::kQ4_1) DqQ4_1(b, j, v);
    if constexpr (T == WeightType::kQ5_0) DqQ5_0(b, j, v);
    if constexpr (T == WeightType::kQ5_1) DqQ5_1(b, j, v);
    if constexpr (T == WeightType::kQ8_0) DqQ8_0(b, j, v);
    if constexpr (T == WeightType::kQ4_K) DqKQuant45<false>(b, j, v);
    if constexpr (T == WeightType::kQ5_K) DqKQuant45<true>(b, j, v);
    if constexpr (T == WeightType::kQ6_K) DqQ6_K(b, j, v);
  }
}

// Value k of a row of type T: for the tails of dense rows whose length is not a multiple of 8
// (quantized rows never have one); works for every type.
template <WeightType T>
DS_HOST_DEVICE DS_INLINE float DecodeValue(const uint8_t* row, int64_t k) {
  if constexpr (T == WeightType::kF32) {
    return BitsFloat(DqLoadU32(row + 4 * k));
  } else if constexpr (T == WeightType::kF16) {
    return DqHalfToFloat(static_cast<uint16_t>(DqLoadU16(row + 2 * k)));
  } else if constexpr (T == WeightType::kBF16) {
    return Bf16ToFloat(static_cast<uint16_t>(DqLoadU16(row + 2 * k)));
  } else {
    float v[8];
    DecodeUnit<T>(row, k / 8, v);
    return v[k % 8];
  }
}

// Calls f(std::integral_constant<WeightType, T>{}) for the T equal to `type` and returns its
// result; returns `unsupported` for a type with no decoder. Used by the host launchers to pick
// a kernel instance.
template <WeightType T>
struct DqTypeTag {
  static constexpr WeightType value = T;
};
template <class R, class F>
R DispatchWeightType(WeightType type, R unsupported, F&& f) {
  switch (type) {
    case WeightType::kF32:
      return f(DqTypeTag<WeightType::kF32>{});
    case WeightType::kF16:
      return f(DqTypeTag<WeightType::kF16>{});
    case WeightType::kBF16:
      return f(DqTypeTag<WeightType::kBF16>{});
    case WeightType::kQ4_0:
      return f(DqTypeTag<WeightType::kQ4_0>{});
    case WeightType::kQ4_1:
      return f(DqTypeTag<WeightType::kQ4_1>{});
    case WeightType::kQ5_0:
      return f(DqTypeTag<WeightType::kQ5_0>{});
    case WeightType::kQ5_1:
      return f(DqTypeTag<WeightType::kQ5_1>{});
    case WeightType::kQ8_0:
      return f(DqTypeTag<WeightType::kQ8_0>{});
    case WeightType::kQ4_K:
      return f(DqTypeTag<WeightType::kQ4_K>{});
    case WeightType::kQ5_K:
      return f(DqTypeTag<WeightType::kQ5_K>{});
    case WeightType::kQ6_K:
      return f(DqTypeTag<WeightType::kQ6_K>{});
  }
  return unsupported;
}

}  // namespace deltaserve::kernels::cuda
