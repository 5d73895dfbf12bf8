// Encoding and decoding of one KV cache head run (head_dim values of one kv head of one
// position) in every KV cache type, for the CUDA kernels and for the CPU unit tests that hold
// them to the CPU backend (tests/kernels/cuda_attention_math_test.cc).
//
// Layouts: GGML's (common/ggml_types.h, kernels/cpu/quants.h): a run of n values is n /
// block_size blocks back to back; F32 4 bytes, F16/BF16 2 bytes per value; Q8_0 {f16 d, int8
// qs[32]} (34 bytes), Q4_0 {f16 d, qs[16]} (18), Q4_1 {f16 d, f16 m, qs[16]} (20), Q5_0 {f16 d,
// u8 qh[4], qs[16]} (22). Nibbles: qs[j] holds value j (low) and j + 16 (high); Q5_0 bit 4 of
// value j is bit j of the little-endian u32 qh. Multi-byte fields are little-endian and only
// 2-byte aligned (a block is an even number of bytes, a pool 64-byte aligned), so u16 fields are
// read as u16 and everything wider byte by byte.
//
// Bit exactness: EncodeKvBlock writes exactly the bytes of quants.cc's QuantizeRow (llama.cpp's
// quantize_row_*_ref rules) and DecodeKvValue returns exactly DequantizeRow's floats, so the GPU
// cache holds the same bytes as the CPU cache and both read the same values from it. Three
// things make that hold under nvcc, which otherwise differs from the CPU build:
// - no FMA contraction: quants.cc is built with -ffp-contract=off; device code here multiplies
//   and adds with __fmul_rn / __fadd_rn / __fsub_rn, which nvcc never fuses (the host build is
//   ISO C++, -std=c++20 without GNU extensions, where g++ does not contract either);
// - float to int8: the CPU's static_cast<int8_t>(float) is x86's cvttss2si (truncate to int32,
//   INT32_MIN when out of range or NaN) keeping the low byte; TruncToInt8 computes that on both
//   sides instead of relying on the (undefined, and on the GPU saturating) C++ conversion;
// - f32 -> f16 / bf16 rounding is written out in integer arithmetic (quants.cc's Fp32ToFp16 /
//   Fp32ToBf16); f16 -> f32 is exact, done by the hardware (cvt.f32.f16) on the device.
// Division and square roots: nvcc's defaults (-prec-div=true, no fast math) give IEEE-rounded
// x / y, as the CPU does. Encoders assume finite inputs (the KV values of a forward pass).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/cuda/device_compat.h"
#include "kernels/cuda/float_bits.h"

namespace deltaserve::kernels::cuda {

// --- scalar helpers -----------------------------------------------------------------------

DS_HOST_DEVICE DS_INLINE float AbsF(float x) { return BitsFloat(FloatBits(x) & 0x7FFFFFFFu); }
// std::max / std::min on floats as quants.cc calls them: (a < b) ? b : a and (b < a) ? b : a.
DS_HOST_DEVICE DS_INLINE float MaxF(float a, float b) { return a < b ? b : a; }
DS_HOST_DEVICE DS_INLINE float MinF(float a, float b) { return b < a ? b : a; }

// x86's static_cast<int8_t>(float): cvttss2si truncates toward zero into an int32 (0x80000000
// when the value is NaN or does not fit), and the low byte is kept.
DS_HOST_DEVICE DS_INLINE int TruncToInt8(float v) {
  int32_t i = INT32_MIN;
  if (v > -2147483904.0f && v < 2147483648.0f) i = static_cast<int32_t>(v);
  const auto low = static_cast<uint32_t>(i) & 0xFFu;
  return low >= 128 ? static_cast<int>(low) - 256 : static_cast<int>(low);
}

// std::round: half away from zero.
DS_HOST_DEVICE DS_INLINE float RoundHalfAway(float x) {
#if defined(__CUDA_ARCH__)
  return roundf(x);
#else
  return __builtin_roundf(x);
#endif
}

// IEEE half -> float, exact (quants.cc's Fp16ToFp32 for every non-NaN input).
DS_HOST_DEVICE DS_INLINE float HalfToFloat(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7FFFu;
  if (magnitude >= 0x7C00u) {
    const uint32_t mant = magnitude & 0x3FFu;
    return BitsFloat(sign | 0x7F800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u));
  }
  const float unsigned_value = BitsFloat(magnitude << 13) * 0x1p112f;
  return BitsFloat(sign | FloatBits(unsigned_value));
#endif
}

// float -> IEEE half, round to nearest even, overflow to inf (quants.cc's Fp32ToFp16).
DS_HOST_DEVICE DS_INLINE uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  uint32_t mant;
  int shift;
  uint32_t base;
  if (abs >= 0x38800000u) {
    mant = abs & 0x7FFFFFu;
    shift = 13;
    base = ((abs >> 23) - 112) << 10;
  } else if (abs >= 0x33000000u) {
    mant = (abs & 0x7FFFFFu) | 0x800000u;
    shift = 126 - static_cast<int>(abs >> 23);
    base = 0;
  } else {
    return sign;
  }
  uint32_t h = base + (mant >> shift);
  const uint32_t rest = mant & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// float -> bfloat16, nearest even, NaN kept quiet (quants.cc's Fp32ToBf16).
DS_HOST_DEVICE DS_INLINE uint16_t FloatToBf16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 64);
  return static_cast<uint16_t>((x + (0x7FFFu + ((x >> 16) & 1))) >> 16);
}

// Loads of cache bytes. On the device they go through the read-only path (ld.global.nc): the
// pools are not written while an attention kernel reads them, and a global-space load lets the
// compiler issue the loads of several rows before the shared-memory stores of the ones before
// (a generic load might alias shared memory).
DS_HOST_DEVICE DS_INLINE uint8_t LoadU8(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

DS_HOST_DEVICE DS_INLINE uint16_t LoadU16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const unsigned short*>(p));  // 2-byte aligned (file comment)
#else
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
#endif
}

DS_HOST_DEVICE DS_INLINE void StoreU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// --- layouts -------------------------------------------------------------------------------

inline constexpr int kKvQk = 32;  // values per block of the quantized cache types

// Values per block and bytes per block of a KV cache type ({0, 0} for other types).
struct KvBlockLayout {
  int values;
  int bytes;
};
DS_HOST_DEVICE DS_INLINE constexpr KvBlockLayout KvLayoutOf(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return {1, 4};
    case WeightType::kF16:
      return {1, 2};
    case WeightType::kBF16:
      return {1, 2};
    case WeightType::kQ8_0:
      return {kKvQk, 34};
    case WeightType::kQ4_0:
      return {kKvQk, 18};
    case WeightType::kQ4_1:
      return {kKvQk, 20};
    case WeightType::kQ5_0:
      return {kKvQk, 22};
    default:
      return {0, 0};
  }
}

// --- decoding ------------------------------------------------------------------------------

// Value i of a run of `kType` values starting at `run` (DequantizeRow's arithmetic).
template <WeightType kType>
DS_HOST_DEVICE DS_INLINE float DecodeKvValueT(const uint8_t* run, int i) {
  if constexpr (kType == WeightType::kF32) {
#if defined(__CUDA_ARCH__)
    return __ldg(reinterpret_cast<const float*>(run) + i);
#else
    float f;
    std::memcpy(&f, run + 4 * i, sizeof(f));
    return f;
#endif
  } else if constexpr (kType == WeightType::kF16) {
    return HalfToFloat(LoadU16(run + 2 * i));
  } else if constexpr (kType == WeightType::kBF16) {
    return Bf16ToFloat(LoadU16(run + 2 * i));
  } else {
    constexpr int kBytes = KvLayoutOf(kType).bytes;
    const uint8_t* b = run + (i / kKvQk) * kBytes;
    const int j = i % kKvQk;
    const float d = HalfToFloat(LoadU16(b));
    if constexpr (kType == WeightType::kQ8_0) {
      return MulRn(static_cast<float>(static_cast<int8_t>(LoadU8(b + 2 + j))), d);
    } else if constexpr (kType == WeightType::kQ4_0) {
      const int q = j < 16 ? (LoadU8(b + 2 + j) & 0xF) : (LoadU8(b + 2 + j - 16) >> 4);
      return MulRn(static_cast<float>(q - 8), d);
    } else if constexpr (kType == WeightType::kQ4_1) {
      const float m = HalfToFloat(LoadU16(b + 2));
      const int q = j < 16 ? (LoadU8(b + 4 + j) & 0xF) : (LoadU8(b + 4 + j - 16) >> 4);
      return AddRn(MulRn(static_cast<float>(q), d), m);
    } else {
      static_assert(kType == WeightType::kQ5_0, "not a KV cache type");
      const int lo = j < 16 ? (LoadU8(b + 6 + j) & 0xF) : (LoadU8(b + 6 + j - 16) >> 4);
      const int hi = (LoadU8(b + 2 + j / 8) >> (j % 8)) & 1;  // bit j of the little-endian u32 qh
      return MulRn(static_cast<float>((lo | (hi << 4)) - 16), d);
    }
  }
}

// The same with the type known at run time; 0 for a type that is not a KV cache type.
DS_HOST_DEVICE DS_INLINE float DecodeKvValue(WeightType type, const uint8_t* run, int i) {
  switch (type) {
    case WeightType::kF32:
      return DecodeKvValueT<WeightType::kF32>(run, i);
    case WeightType::kF16:
      return DecodeKvValueT<WeightType::kF16>(run, i);
    case WeightType::kBF16:
      return DecodeKvValueT<WeightType::kBF16>(run, i);
    case WeightType::kQ8_0:
      return DecodeKvValueT<WeightType::kQ8_0>(run, i);
    case WeightType::kQ4_0:
      return DecodeKvValueT<WeightType::kQ4_0>(run, i);
    case WeightType::kQ4_1:
      return DecodeKvValueT<WeightType::kQ4_1>(run, i);
    case WeightType::kQ5_0:
      return DecodeKvValueT<WeightType::kQ5_0>(run, i);
    default:
      return 0.0f;
  }
}

// --- encoding ------------------------------------------------------------------------------

// The signed value of largest magnitude, the first one on ties (quants.cc's SignedAbsMax).
DS_HOST_DEVICE DS_INLINE float SignedAbsMax32(const float* x) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < kKvQk; ++j) {
    if (amax < AbsF(x[j])) {
      amax = AbsF(x[j]);
      max = x[j];
    }
  }
  return max;
}

// Encodes one block of `type` (KvLayoutOf(type).values values from x) into dst
// (KvLayoutOf(type).bytes bytes), as QuantizeRow does. Nothing for a non-cache type.
DS_HOST_DEVICE DS_INLINE void EncodeKvBlock(WeightType type, const float* x, uint8_t* dst) {
  switch (type) {
    case WeightType::kF32: {
      const uint32_t u = FloatBits(x[0]);
      StoreU16(dst, static_cast<uint16_t>(u & 0xFFFF));
      StoreU16(dst + 2, static_cast<uint16_t>(u >> 16));
      return;
    }
    case WeightType::kF16:
      StoreU16(dst, FloatToHalf(x[0]));
      return;
    case WeightType::kBF16:
      StoreU16(dst, FloatToBf16(x[0]));
      return;
    case WeightType::kQ8_0: {
      float amax = 0.0f;
      for (int j = 0; j < kKvQk; ++j) amax = MaxF(amax, AbsF(x[j]));
      const float d = amax / 127;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      StoreU16(dst, FloatToHalf(d));
      for (int j = 0; j < kKvQk; ++j) {
        dst[2 + j] = static_cast<uint8_t>(TruncToInt8(RoundHalfAway(MulRn(x[j], id))));
      }
      return;
    }
    case WeightType::kQ4_0:
    case WeightType::kQ5_0: {
      const bool q5 = type == WeightType::kQ5_0;
      const float d = SignedAbsMax32(x) / (q5 ? -16.0f : -8.0f);
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const float bias = q5 ? 16.5f : 8.5f;
      const int qmax = q5 ? 31 : 15;
      StoreU16(dst, FloatToHalf(d));
      uint8_t* qs = dst + (q5 ? 6 : 2);
      uint32_t qh = 0;
      for (int j = 0; j < kKvQk / 2; ++j) {
        int q0 = TruncToInt8(AddRn(MulRn(x[j], id), bias));
        int q1 = TruncToInt8(AddRn(MulRn(x[j + 16], id), bias));
        q0 = q0 < qmax ? q0 : qmax;
        q1 = q1 < qmax ? q1 : qmax;
        // Q4_0 packs q0 | q1 << 4 unmasked, Q5_0 masks the nibbles (quants.cc); q is in [0, qmax]
        // for every finite input, where both agree.
        qs[j] = q5 ? static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4))
                   : static_cast<uint8_t>(q0 | (q1 << 4));
        qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
        qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
      }
      if (q5) {
        for (int k = 0; k < 4; ++k) dst[2 + k] = static_cast<uint8_t>(qh >> (8 * k));
      }
      return;
    }
    case WeightType::kQ4_1: {
      float min = x[0];
      float max = x[0];
      for (int j = 1; j < kKvQk; ++j) {
        min = MinF(min, x[j]);
        max = MaxF(max, x[j]);
      }
      const float d = SubRn(max, min) / 15;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      StoreU16(dst, FloatToHalf(d));
      StoreU16(dst + 2, FloatToHalf(min));
      for (int j = 0; j < kKvQk / 2; ++j) {
        int q0 = TruncToInt8(AddRn(MulRn(SubRn(x[j], min), id), 0.5f));
        int q1 = TruncToInt8(AddRn(MulRn(SubRn(x[j + 16], min), id), 0.5f));
        q0 = q0 < 15 ? q0 : 15;
        q1 = q1 < 15 ? q1 : 15;
        dst[4 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
      }
      return;
    }
    default:
      return;
  }
}

// Encodes a run of n values (n a multiple of the block size) into dst.
DS_HOST_DEVICE DS_INLINE void EncodeKvRun(WeightType type, const float* x, int n, uint8_t* dst) {
  const KvBlockLayout layout = KvLayoutOf(type);
  if (layout.values == 0) return;
  for (int b = 0; b < n / layout.values; ++b) {
    EncodeKvBlock(type, x + b * layout.values, dst + b * layout.bytes);
  }
}

}  // namespace deltaserve::kernels::cuda
