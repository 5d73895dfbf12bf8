// The fused Gated DeltaNet decode step (Backend::DeltaNetDecodeStep): one token of each of B
// sequences through MODEL_SPEC §2.4 steps 2-7 in two launches for the whole batch, instead of
// gates + B convs + 2 L2 norms + B delta rules + the gated norm. Layouts, ownership and the
// per-element arithmetic: gdn_decode_math.h.
//
// GdnDecodeConvKernel, grid (2 n_k + n_v segments, B), kGdnDecodeConvThreads threads: block (s, b)
// runs the conv + SiLU of segment s of sequence b, thread i taking channels i, i + 128, ...
// (updating that channel's window in conv_states[b]), and writes the result over qkv in place; a
// q/k segment is then L2-normalised (block sum of squares: warp butterflies, then the warp sums
// in order), a v segment's thread 0 computes the gates of its head (alpha -> g, beta ->
// sigmoid(beta), as DeltaNetGates). Every thread reads its inputs before writing the same
// addresses, and no other block touches them.
//
// GdnDecodeRuleKernel<kE>, grid (n_v, B), kGdnDecodeRuleThreads threads (4 warps): block (h, b)
// takes value head h of sequence b whole. Lane l holds elements 32c + l (c < kE = ceil(d/32)) of
// k and q; the warps walk the head's state rows in groups of kGdnDecodeRowsPerWarp
// (GdnDecodeRow0), each row read once and written once: m·k and m·q by warp all-reductions,
// u = β (v_r − e^g m·k), m ← e^g m + u k, o_r = (m·q)/√d (gdn_math.h, as gdn_step.cuh does per
// token) into shared memory. After a barrier the block takes the sum of squares of the d outputs
// and writes out = o / sqrt(mean(o²) + eps) · norm · silu(z) (GatedRmsNorm's order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gdn_decode_math.h"
#include "kernels/cuda/gdn_math.h"

namespace deltaserve::kernels::cuda {

inline constexpr int kGdnDecodeConvThreads = 128;
inline constexpr int kGdnDecodeRuleThreads = 128;
inline constexpr int kGdnDecodeRowsPerWarp = 4;

// Sum of `v` over the block (blockDim.x a multiple of 32, at most 32 warps); every thread gets
// the same value. Uses `warp_sums` (one float per warp) and two barriers, so every thread of the
// block must call it, and a second call may reuse the same array.
__device__ __forceinline__ float GdnBlockSum(float v, float* warp_sums) {
  v = WarpSum(v);
  const int warps = static_cast<int>(blockDim.x >> 5);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += warp_sums[w];
  __syncthreads();  // every thread has read warp_sums before anyone may write it again
  return total;
}

__global__ void __launch_bounds__(kGdnDecodeConvThreads) GdnDecodeConvKernel(GdnDecodeProblem p) {
  __shared__ float warp_sums[kGdnDecodeConvThreads / 32];
  const int s = static_cast<int>(blockIdx.x);
  const int64_t b = blockIdx.y;
  const int64_t channels = p.Channels();
  float* x = p.Segment(b, s);
  float* state = p.conv_states[b];
  float ss = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < p.d; i += static_cast<int>(blockDim.x)) {
    const int64_t c = static_cast<int64_t>(s) * p.d + i;
    const float y = SiluF(GdnConvChannelStep(p.conv_w, p.kernel, state, channels, c, x[i]));
    x[i] = y;
    ss += y * y;
  }
  if (GdnSegmentIsQk(s, p.n_k)) {  // uniform over the block: every thread reaches the barriers
    const float scale = GdnL2Scale(sqrtf(GdnBlockSum(ss, warp_sums)), p.l2_eps);
    // Each thread rescales the values it wrote itself.
    for (int i = static_cast<int>(threadIdx.x); i < p.d; i += static_cast<int>(blockDim.x)) {
      x[i] *= scale;
    }
  } else if (threadIdx.x == 0) {
    const int h = GdnSegmentVHead(s, p.n_k);
    float* a = p.Alpha(b, h);
    float* bt = p.Beta(b, h);
    *a = p.ssm_a[h] * SoftplusF(*a + p.dt_bias[h]);
    *bt = SigmoidF(*bt);
  }
}

template <int kE>
__global__ void __launch_bounds__(kGdnDecodeRuleThreads) GdnDecodeRuleKernel(GdnDecodeProblem p) {
  constexpr int kR = kGdnDecodeRowsPerWarp;
  __shared__ float o[kGdnMaxHeadDim];
  __shared__ float warp_sums[kGdnDecodeRuleThreads / 32];
  const int h = static_cast<int>(blockIdx.x);
  const int64_t b = blockIdx.y;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int warps = static_cast<int>(blockDim.x >> 5);
  const int d = p.d;
  const float* kt = p.K(b, h);
  const float* qt = p.Q(b, h);
  const float* vt = p.V(b, h);
  const float decay = expf(*p.Alpha(b, h));  // alpha holds g after the conv kernel
  const float beta = *p.Beta(b, h);
  float kk[kE], qq[kE];
#pragma unroll
  for (int c = 0; c < kE; ++c) {
    const int j = 32 * c + lane;
    kk[c] = j < d ? kt[j] : 0.0f;
    qq[c] = j < d ? qt[j] : 0.0f;
  }
  // Rows past d and elements past d are zero (k and q are zero there too), never stored.
  for (int round = 0;; ++round) {
    const int row0 = GdnDecodeRow0(round, warp, warps, kR);
    if (row0 >= d) break;  // per warp: the shuffles below involve this warp's lanes only
    float m[kR][kE];
    float dot[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float* src = row0 + r < d ? p.StateRow(b, h, row0 + r) : nullptr;
      float s = 0.0f;
#pragma unroll
      for (int c = 0; c < kE; ++c) {
        const int j = 32 * c + lane;
        m[r][c] = src != nullptr && j < d ? src[j] : 0.0f;
        s += m[r][c] * kk[c];
      }
      dot[r] = s;
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) dot[r] = WarpSum(dot[r]);
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float v_r = row0 + r < d ? vt[row0 + r] : 0.0f;
      const float u = GdnDeltaCoef(v_r, dot[r], decay, beta);
      float s = 0.0f;
#pragma unroll
      for (int c = 0; c < kE; ++c) {
        m[r][c] = GdnRowUpdate(m[r][c], kk[c], decay, u);
        s += m[r][c] * qq[c];
      }
      dot[r] = s;
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) dot[r] = WarpSum(dot[r]);
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      if (row0 + r >= d) continue;
      float* dst = p.StateRow(b, h, row0 + r);
#pragma unroll
      for (int c = 0; c < kE; ++c) {
        const int j = 32 * c + lane;
        if (j < d) dst[j] = m[r][c];
      }
      if (lane == r) o[row0 + r] = p.scale * dot[r];
    }
  }
  __syncthreads();  // every o[r] written before any thread reads them
  float ss = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < d; i += static_cast<int>(blockDim.x)) {
    ss += o[i] * o[i];
  }
  const float rms = 1.0f / sqrtf(GdnBlockSum(ss, warp_sums) / static_cast<float>(d) + p.norm_eps);
  const float* zt = p.Z(b, h);
  float* ot = p.Out(b, h);
  for (int i = static_cast<int>(threadIdx.x); i < d; i += static_cast<int>(blockDim.x)) {
    ot[i] = o[i] * rms * p.norm[i] * SiluF(zt[i]);
  }
}

}  // namespace deltaserve::kernels::cuda
