// Row-reduction kernels of the CUDA backend: RmsNorm, GatedRmsNorm, L2Norm.
//
// Layout: x, z, y are row-major [rows][cols] f32, rows `stride` floats apart; w is [cols].
// A "run" is the n values reduced together: a row (RmsNorm, GatedRmsNorm) or one head's group
// of a row (L2Norm: run j is group j % groups of row j / groups, elementwise_index.h
// GroupOffset). Runs of up to kWarpRowMax values are owned by one warp each (8 per block of
// 256 threads), longer runs by a whole block (kWarp = false). The owner sums squares in f32
// (each thread a strided partial sum, then WarpSum, then the block's warp sums in a fixed
// order), and then scales the values it read itself. Every output is written by the thread
// that read the inputs at that position and only after the reduction is complete (a warp
// shuffle or __syncthreads separates them), so y may alias x (or z).
//
// Numerics, as kernels/cpu/norm_ops.cc: scale = 1 / sqrt(sum/n + eps) (RMS),
// 1 / max(sqrt(sum), eps) (L2), IEEE sqrtf and division; y = x * scale * w [* silu(z)].
// Only the order of the partial sums differs from the CPU (a few ulp * log2(n)).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/elementwise_index.h"

namespace deltaserve::kernels::cuda {

// Run index of the calling warp (kWarp) or block, and the calling thread's position and step
// within the run.
template <bool kWarp>
__device__ __forceinline__ int64_t RunIndex() {
  return kWarp ? WarpRun(blockIdx.x, static_cast<int>(threadIdx.x >> 5))
               : static_cast<int64_t>(blockIdx.x);
}
template <bool kWarp>
__device__ __forceinline__ int RunThread() {
  return kWarp ? static_cast<int>(threadIdx.x & 31) : static_cast<int>(threadIdx.x);
}
template <bool kWarp>
__device__ __forceinline__ int RunThreads() {
  return kWarp ? 32 : static_cast<int>(blockDim.x);
}

// Sum of x[i]^2 over i < n by the run's owner (warp or block); every thread of the owner gets
// the same value. Block mode uses 32 floats of shared memory and synchronises the block, so
// every thread of the block must call it.
template <bool kWarp>
__device__ float RunSumSquares(const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = RunThread<kWarp>(); i < n; i += RunThreads<kWarp>()) s += x[i] * x[i];
  s = WarpSum(s);
  if (kWarp) return s;
  __shared__ float warp_sums[32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = s;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) total += warp_sums[w];
  return total;
}

// y = x / sqrt(mean(x^2) + eps) * w per row (w null: no weight).
template <bool kWarp>
__global__ void RmsNormKernel(Mat x, const float* w, float eps, Mat y) {
  const int64_t row = RunIndex<kWarp>();
  if (row >= x.rows) return;  // a whole warp (warp mode) or block (block mode) leaves together
  const int64_t n = x.cols;
  const float* xr = x.data + row * x.stride;
  float* yr = y.data + row * y.stride;
  const float scale = 1.0f / sqrtf(RunSumSquares<kWarp>(xr, n) / static_cast<float>(n) + eps);
  for (int64_t i = RunThread<kWarp>(); i < n; i += RunThreads<kWarp>()) {
    yr[i] = w != nullptr ? xr[i] * scale * w[i] : xr[i] * scale;
  }
}

// y = x / sqrt(mean(x^2) + eps) * w * silu(z) per row.
template <bool kWarp>
__global__ void GatedRmsNormKernel(Mat x, const float* w, Mat z, float eps, Mat y) {
  const int64_t row = RunIndex<kWarp>();
  if (row >= x.rows) return;
  const int64_t n = x.cols;
  const float* xr = x.data + row * x.stride;
  const float* zr = z.data + row * z.stride;
  float* yr = y.data + row * y.stride;
  const float scale = 1.0f / sqrtf(RunSumSquares<kWarp>(xr, n) / static_cast<float>(n) + eps);
  for (int64_t i = RunThread<kWarp>(); i < n; i += RunThreads<kWarp>()) {
    yr[i] = xr[i] * scale * w[i] * SiluF(zr[i]);
  }
}

// x = x / max(||x||_2, eps) over each group of `group` columns, in place; runs = rows * groups.
template <bool kWarp>
__global__ void L2NormKernel(Mat x, int64_t group, float eps, int64_t runs) {
  const int64_t run = RunIndex<kWarp>();
  if (run >= runs) return;
  float* xr = x.data + GroupOffset(run, x.cols / group, group, x.stride);
  const float norm = sqrtf(RunSumSquares<kWarp>(xr, group));
  // std::max(norm, eps) of the CPU: a NaN norm stays NaN (fmaxf would return eps).
  const float scale = 1.0f / (norm < eps ? eps : norm);
  for (int64_t i = RunThread<kWarp>(); i < group; i += RunThreads<kWarp>()) xr[i] *= scale;
}

}  // namespace deltaserve::kernels::cuda
