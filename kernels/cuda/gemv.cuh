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
// the only difference from a double product is f32 accumulation in lane order.
#pragma once

#if defined(__CUDACC__)

#include <cstdint>

#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/matmul_plan.cuh"

namespace deltaserve::kernels::cuda {

// x[0..7] from p (4-byte aligned), two 16-byte loads when p is 16-byte aligned.
__device__ __forceinline__ void LoadActivations8(const float* p, float* x) {
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
    x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = __ldg(p + i);
  }
}

// acc[r] = W[row] . x_r for r < nr (nr <= kGemvMaxRows), reduced over the warp (every lane
// returns the sums). Called by all 32 lanes of a warp.
template <WeightType T>
__device__ __forceinline__ void GemvWarpRow(const uint8_t* wrow, int64_t in,
                                            const float* const* xr, int nr, float* acc) {
  const int lane = static_cast<int>(threadIdx.x & 31);
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) acc[r] = 0.0f;
  const int64_t units = in / 8;
  for (int64_t u = lane; u < units; u += 32) {
    float w[8];
    DecodeUnit<T>(wrow, u, w);
#pragma unroll
    for (int r = 0; r < kGemvMaxRows; ++r) {
      if (r < nr) {
        float x[8];
        LoadActivations8(xr[r] + 8 * u, x);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[r] = fmaf(w[i], x[i], acc[r]);
      }
    }
  }
  if constexpr (kDqDense<T>) {
    // Rows of F32/F16/BF16 weights may end with fewer than 8 values.
    for (int64_t k = units * 8 + lane; k < in; k += 32) {
      const float w = DecodeValue<T>(wrow, k);
#pragma unroll
      for (int r = 0; r < kGemvMaxRows; ++r) {
        if (r < nr) acc[r] = fmaf(w, __ldg(xr[r] + k), acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xFFFFFFFFu, acc[r], off);
  }
}

}  // namespace deltaserve::kernels::cuda

#endif  // __CUDACC__
