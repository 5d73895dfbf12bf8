// Decode GEMV on GGUF block types: one warp computes one output feature o for up to
// kGemvMaxRows activation rows at once, so each weight byte is read once per call however many
// rows the batch has (the rows' accumulators live in registers).
//
//   W row o: in values in GGUF blocks (dequant.cuh), read as units of 8 consecutive values;
//            lane l decodes units l, l + 32, ... (neighbouring lanes read neighbouring bytes:
//            coalesced), in registers, with 16-byte loads where the type allows (dequant.cuh).
//   x rows:  xr[r] -> in f32 values (any 4-byte alignment; 16-byte loads when aligned), read
//            through the read-only cache: every warp of the grid reads the same x.
//   result:  sum over the row in f32 FMAs, then a butterfly warp reduction; lane 0 of the
//            warp holds the sums (all lanes do, in fact).
// Numerics: the weights are decoded exactly (bit-identical to the CPU decoder), x stays f32;
// the only difference from a double product is f32 accumulation in lane order. The lane loop is
// DS_HOST_DEVICE (GemvLanePartial), so tests/kernels/cuda_dequant_test.cc replays a warp on the
// host and tests/gpu/cuda_matmul_test.cc expects the GPU's GEMV results bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/gemv_fast.cuh"
#include "kernels/cuda/matmul_plan.cuh"

namespace deltaserve::kernels::cuda {

// x[0..7] from p (4-byte aligned); on the device two 16-byte loads through the read-only cache
// when p is 16-byte aligned.
DS_HOST_DEVICE DS_INLINE void LoadActivations8(const float* p, float* x) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    x[0] = a.x;
    x[1] = a.y;
    x[2] = a.z;
    x[3] = a.w;
    x[4] = b.x;
    x[5] = b.y;
    x[6] = b.z;
    x[7] = b.w;
  } else {
    DS_UNROLL
    for (int i = 0; i < 8; ++i) x[i] = __ldg(p + i);
  }
#else
  std::memcpy(x, p, 8 * sizeof(float));
#endif
}

DS_HOST_DEVICE DS_INLINE float LoadActivation(const float* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

// Lane `lane`'s share of W[row] . x_r for r < nr (nr <= kGemvMaxRows): units lane, lane + 32,
// ... of the row, then (dense types) values 8 * units + lane, ... of a tail. acc[r] is
// overwritten. The same code runs on the host in tests (fmaf is a fused multiply-add on both),
// so a host replay of the 32 lanes and the butterfly gives the GPU's bits.
template <WeightType T>
DS_HOST_DEVICE DS_INLINE void GemvLanePartial(const uint8_t* wrow, int64_t in,
                                              const float* const* xr, int nr, int lane,
                                              float* acc) {
  DS_UNROLL
  for (int r = 0; r < kGemvMaxRows; ++r) acc[r] = 0.0f;
  const int64_t units = in / 8;
  for (int64_t u = lane; u < units; u += 32) {
    float w[8];
    DecodeUnit<T>(wrow, u, w);
    DS_UNROLL
    for (int r = 0; r < kGemvMaxRows; ++r) {
      if (r < nr) {
        float x[8];
        LoadActivations8(xr[r] + 8 * u, x);
        DS_UNROLL
        for (int i = 0; i < 8; ++i) acc[r] = fmaf(w[i], x[i], acc[r]);
      }
    }
  }
  if constexpr (kDqDense<T>) {
    // Rows of F32/F16/BF16 weights may end with fewer than 8 values.
    for (int64_t k = units * 8 + lane; k < in; k += 32) {
      const float w = DecodeValue<T>(wrow, k);
      DS_UNROLL
      for (int r = 0; r < kGemvMaxRows; ++r) {
        if (r < nr) acc[r] = fmaf(w, LoadActivation(xr[r] + k), acc[r]);
      }
    }
  }
}

// The warp's butterfly (xor 16, 8, 4, 2, 1) over 32 lanes' values, replayed on the host: what
// lane 0 holds after GemvWarpRow's shuffles.
inline float ButterflySum(const float* lanes) {
  float v[32];
  for (int l = 0; l < 32; ++l) v[l] = lanes[l];
  for (int off = 16; off > 0; off >>= 1) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ off];
    for (int l = 0; l < 32; ++l) v[l] = next[l];
  }
  return v[0];
}

#if defined(__CUDACC__)

// acc[r] = W[row] . x_r for r < nr, reduced over the warp (lane 0 holds the sums the kernels
// write). Called by all 32 lanes of a warp. kFast: gemv_fast.cuh's lane (Q4_K only, rows
// GemvFastEligible).
template <WeightType T, bool kFast>
__device__ __forceinline__ void GemvWarpRow(const uint8_t* wrow, int64_t in, const float* const* xr,
                                            int nr, float* acc) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  if constexpr (kFast) {
    static_assert(T == WeightType::kQ4_K, "the fast lane exists for Q4_K only");
    GemvLaneQ4KFast(wrow, in, xr, nr, lane, acc);
  } else {
    GemvLanePartial<T>(wrow, in, xr, nr, lane, acc);
  }
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xFFFFFFFFu, acc[r], off);
  }
}

#endif  // __CUDACC__

}  // namespace deltaserve::kernels::cuda
