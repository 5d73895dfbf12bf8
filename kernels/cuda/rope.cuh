// NeoX rotary embedding kernel of the CUDA backend (Backend::RopeNeox), MODEL_SPEC §2.3 step 3.
//
// Layout: x is [n_tokens * n_heads][head_dim] f32, rows `stride` floats apart; row
// t * n_heads + h is head h of token t; positions [n_tokens] int32 in device memory. Pair
// i < n_rot/2 rotates columns i and i + n_rot/2 by a = positions[t] * freq_base^(-2i/n_rot);
// columns n_rot .. head_dim-1 are untouched.
//
// One block per token. Its threads first compute cos/sin of up to kRopeChunk pairs into shared
// memory, in double like RopeNeoxCpu (f32 angles near position 2^18 are 0.03 rad apart) and
// rounded once to f32; after a barrier they rotate those pairs of every head, consecutive
// threads on consecutive columns. The rotation uses __fmul_rn/__fadd_rn/__fsub_rn so nvcc does
// not contract it into FMAs: with the same f32 cos/sin the result is bit-identical to the
// CPU's x0 cos - x1 sin (the CPU library is built for baseline x86-64, no FMA).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/elementwise_index.h"

namespace deltaserve::kernels::cuda {

__global__ void RopeNeoxKernel(Mat x, const int32_t* positions, int64_t n_heads, int64_t n_rot,
                               float freq_base) {
  __shared__ float cos_a[kRopeChunk];
  __shared__ float sin_a[kRopeChunk];
  const int64_t t = blockIdx.x;
  const double pos = positions[t];
  const int64_t half = n_rot / 2;
  for (int64_t i0 = 0; i0 < half; i0 += kRopeChunk) {
    const int64_t len = half - i0 < kRopeChunk ? half - i0 : kRopeChunk;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const double a = pos * pow(static_cast<double>(freq_base), RopeExponent(i0 + i, n_rot));
      double s, c;
      sincos(a, &s, &c);
      cos_a[i] = static_cast<float>(c);
      sin_a[i] = static_cast<float>(s);
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < n_heads * len; j += blockDim.x) {
      const int64_t h = j / len;
      const int64_t i = j % len;
      float* lo = x.data + (t * n_heads + h) * x.stride + i0 + i;
      float* hi = lo + half;
      const float x0 = *lo;
      const float x1 = *hi;
      *lo = __fsub_rn(__fmul_rn(x0, cos_a[i]), __fmul_rn(x1, sin_a[i]));
      *hi = __fadd_rn(__fmul_rn(x1, cos_a[i]), __fmul_rn(x0, sin_a[i]));
    }
    __syncthreads();  // the next chunk overwrites cos_a/sin_a
  }
}

}  // namespace deltaserve::kernels::cuda
