// Scalar float helpers the CUDA kernels' host/device headers share (dequant.cuh, kv_codec.cuh):
// bit casts, f32 multiply / add / subtract rounded once each — never contracted into an FMA, so
// that a decoded or encoded value is the CPU's bit for bit (kernels/cpu/quants.cc is built with
// -ffp-contract=off, and so are the host tests of these headers) — and bfloat16 -> f32.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cuda/device_compat.h"

namespace deltaserve::kernels::cuda {

DS_HOST_DEVICE DS_INLINE uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

DS_HOST_DEVICE DS_INLINE float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// a * b, a + b, a - b, each rounded once (__fmul_rn etc. are never fused by nvcc).
DS_HOST_DEVICE DS_INLINE float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
DS_HOST_DEVICE DS_INLINE float AddRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
DS_HOST_DEVICE DS_INLINE float SubRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

DS_HOST_DEVICE DS_INLINE float Bf16ToFloat(uint16_t h) {
  return BitsFloat(static_cast<uint32_t>(h) << 16);
}

}  // namespace deltaserve::kernels::cuda
