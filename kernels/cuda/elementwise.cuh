// Element-wise kernels of the CUDA backend (Backend::Copy, Add, SwiGlu, MulSigmoid,
// DeltaNetGates) and the scalar functions every kernel of CudaBackend shares (sigmoid, SiLU,
// softplus, warp reductions).
//
// Layout: every Mat is row-major [rows][cols] f32 with rows `stride` floats apart (a column
// view of a wider matrix is accepted as is). One kernel, ElementwiseKernel, walks the matrix
// as elementwise_index.h's ElementwiseGrid says (blockIdx.x: column chunk, blockIdx.y: rows
// with stride gridDim.y) and calls an op functor once per (row, col); each functor reads its
// inputs at (row, col) before writing there, so outputs may alias inputs element for element.
//
// Numerics follow kernels/cpu/norm_ops.cc: f32 throughout, sigmoid(x) = 1 / (1 + e^-x),
// silu(x) = x / (1 + e^-x), softplus(x) = x above 20 else log1p(e^x). expf/log1pf here are
// CUDA's full-precision functions (at most 2 ulp), the CPU uses libm or its 1e-7 FastExp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.h"

namespace deltaserve::kernels::cuda {

__device__ __forceinline__ float SigmoidF(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float SiluF(float x) { return x / (1.0f + expf(-x)); }
// log(1 + e^x); above 20 it equals x in f32 (the CPU backend's and llama.cpp's cut-off).
__device__ __forceinline__ float SoftplusF(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Sum (max) over the 32 lanes of a warp; every lane gets the result. The butterfly adds in the
// same order in every lane, so all lanes hold the same bits.
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ __forceinline__ float& At(const Mat& m, int64_t r, int64_t c) {
  return m.data[r * m.stride + c];
}

// op(r, c) for every element of a [rows][cols] matrix; launched with ElementwiseGrid.
template <typename Op>
__global__ void ElementwiseKernel(Op op, int64_t rows, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) op(r, c);
}

// dst = src.
struct CopyOp {
  Mat src, dst;
  __device__ void operator()(int64_t r, int64_t c) const { At(dst, r, c) = At(src, r, c); }
};

// x += y.
struct AddOp {
  Mat x, y;
  __device__ void operator()(int64_t r, int64_t c) const { At(x, r, c) += At(y, r, c); }
};

// out = silu(gate) * up.
struct SwiGluOp {
  Mat gate, up, out;
  __device__ void operator()(int64_t r, int64_t c) const {
    const float g = At(gate, r, c);
    const float u = At(up, r, c);
    At(out, r, c) = SiluF(g) * u;
  }
};

// x *= sigmoid(gate), with gate column 0 for every column when per_row (gate.cols == 1).
struct MulSigmoidOp {
  Mat x, gate;
  bool per_row;
  __device__ void operator()(int64_t r, int64_t c) const {
    At(x, r, c) *= SigmoidF(At(gate, r, per_row ? 0 : c));
  }
};

// g = ssm_a[h] * softplus(alpha + dt_bias[h]); beta = sigmoid(beta), on [T][n_v_heads].
struct DeltaNetGatesOp {
  Mat alpha_to_g, beta;
  const float* ssm_a;
  const float* dt_bias;
  __device__ void operator()(int64_t r, int64_t h) const {
    float& a = At(alpha_to_g, r, h);
    a = ssm_a[h] * SoftplusF(a + dt_bias[h]);
    float& b = At(beta, r, h);
    b = SigmoidF(b);
  }
};

}  // namespace deltaserve::kernels::cuda
