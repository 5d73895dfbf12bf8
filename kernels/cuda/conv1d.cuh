// Causal depthwise conv1d + SiLU of the CUDA backend (Backend::CausalConv1dSilu), MODEL_SPEC
// §2.4 step 2: the DeltaNet short convolution of one sequence, continuing from its window.
//
// Layout: x, y [T][C] f32 (rows `stride` floats apart), w [C][kernel] (tap kernel-1 meets the
// newest input), state [window = kernel-1][C] contiguous: the inputs before x[0], oldest first.
//   y[t][c] = silu(sum_j w[c][j] * in[t - window + j][c]),  in[-i] = state[window - i][c],
// and on return state holds the last `window` inputs (elementwise_index.h ConvInputSource).
//
// CausalConv1dSiluKernel: a block owns kConvChannels = 32 channels (lane = channel, so each
// row access is one 128-byte transaction) and all T tokens; its warps take consecutive token
// segments (SegmentBegin). Phase 1: each warp copies the `window` inputs before its segment
// (x rows, or state for the first) into its shared halo, and the last warp copies the last
// `window` inputs of the call (the new state) into shared memory. __syncthreads. Phase 2: each
// warp convolves its segment token by token, shifting its halo, then the last warp writes the
// new state. Nothing reads state or another segment's x rows after the barrier, and nothing
// writes y or state before it, so y may alias x. Shared memory: static arrays for up to
// kMaxWindow inputs ((kConvMaxWarps + 1) * kMaxWindow * 32 floats): instantiated for windows
// <= 3 (kernel 4, every Qwen3.5 model: 3.4 KiB) and <= kConvMaxSharedWindow (45 KiB).
//
// CausalConv1dSiluSerialKernel: windows above that bound, the CPU algorithm verbatim (one
// thread per channel walks the tokens, shifting the window in `state` itself).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/elementwise_index.h"

namespace deltaserve::kernels::cuda {

// Largest window of the shared-memory kernel: 9 * 40 * 32 floats = 45 KiB, under the 48 KiB of
// static shared memory a block may have.
inline constexpr int kConvMaxSharedWindow = 40;
inline constexpr int kConvSmallWindow = 3;

template <int kMaxWindow>
__global__ void CausalConv1dSiluKernel(Mat x, const float* w, int64_t kernel, float* state, Mat y) {
  static_assert(kMaxWindow >= 1 && kMaxWindow <= kConvMaxSharedWindow);
  __shared__ float halos[kConvMaxWarps * kMaxWindow * kConvChannels];
  __shared__ float new_state[kMaxWindow * kConvChannels];
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int warps = static_cast<int>(blockDim.x >> 5);
  const int64_t channels = x.cols;
  const int64_t n_tokens = x.rows;
  const int64_t window = kernel - 1;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kConvChannels + lane;
  const bool active = c < channels;
  const int64_t t0 = SegmentBegin(n_tokens, warps, warp);
  const int64_t t1 = SegmentBegin(n_tokens, warps, warp + 1);
  float* halo = halos + warp * kMaxWindow * kConvChannels;

  auto input = [&](int64_t t) {
    const ConvSource src = ConvInputSource(t, window);
    return src.from_state ? state[src.row * channels + c] : x.data[src.row * x.stride + c];
  };
  if (active) {
    for (int64_t j = 0; j < window; ++j) halo[j * kConvChannels + lane] = input(t0 - window + j);
    if (warp == warps - 1) {
      for (int64_t j = 0; j < window; ++j) {
        new_state[j * kConvChannels + lane] = input(n_tokens - window + j);
      }
    }
  }
  __syncthreads();
  if (!active) return;
  const float* wc = w + c * kernel;
  // x row t + 1 is loaded before y row t is stored, so the load's latency overlaps this token's
  // work (a long prefill segment is otherwise one dependent global load per token). Legal in
  // place: y aliases x row for row, and row t + 1 belongs to this warp and is not written yet.
  float x_next = t0 < t1 ? x.data[t0 * x.stride + c] : 0.0f;
  for (int64_t t = t0; t < t1; ++t) {
    const float xt = x_next;
    if (t + 1 < t1) x_next = x.data[(t + 1) * x.stride + c];
    float acc = 0.0f;
    for (int64_t j = 0; j < window; ++j) acc += wc[j] * halo[j * kConvChannels + lane];
    acc += wc[window] * xt;
    for (int64_t j = 0; j + 1 < window; ++j) {
      halo[j * kConvChannels + lane] = halo[(j + 1) * kConvChannels + lane];
    }
    if (window > 0) halo[(window - 1) * kConvChannels + lane] = xt;
    y.data[t * y.stride + c] = SiluF(acc);
  }
  if (warp == warps - 1) {
    for (int64_t j = 0; j < window; ++j)
      state[j * channels + c] = new_state[j * kConvChannels + lane];
  }
}

// One thread per channel, the CPU's loop (kernels/cpu/conv1d.cc ConvTokens).
__global__ void CausalConv1dSiluSerialKernel(Mat x, const float* w, int64_t kernel, float* state,
                                             Mat y) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t channels = x.cols;
  if (c >= channels) return;
  const int64_t window = kernel - 1;
  const float* wc = w + c * kernel;
  for (int64_t t = 0; t < x.rows; ++t) {
    const float xc = x.data[t * x.stride + c];
    float acc = 0.0f;
    for (int64_t j = 0; j < window; ++j) acc += wc[j] * state[j * channels + c];
    acc += wc[window] * xc;
    for (int64_t j = 0; j + 1 < window; ++j)
      state[j * channels + c] = state[(j + 1) * channels + c];
    if (window > 0) state[(window - 1) * channels + c] = xc;
    y.data[t * y.stride + c] = SiluF(acc);
  }
}

}  // namespace deltaserve::kernels::cuda
