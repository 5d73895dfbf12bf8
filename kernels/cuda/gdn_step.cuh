// The fused decode step of the gated delta rule: all T tokens of one call (decode, a few
// speculative tokens) through the per-token recurrence (MODEL_SPEC §2.4 step 6), with the state
// read once and written once per call and held in registers in between.
//
// Grid (ceil(d / kGdnStepRowsPerBlock), n_v), kGdnStepThreads threads. Block (x, h) owns rows
// [16x, 16x + 16) of head h's state ([n_v][d (v)][d (k)], backend.h), four per warp. Lane l
// holds elements j = 32c + l (c < kE) of each of its warp's rows, so kE = ceil(d / 32) (1, 2, 4
// or 8); the per-row dot products m·k and m·q are warp all-reductions. Per token and row:
//   u = β (v_r − decay (m·k));  m ← decay m + u k;  out_r = scale (m·q)   (gdn_math.h)
// Layouts: q, k rows of head h % n_k, v and out rows of head h, g and beta [T][n_v] (GdnProblem,
// views with any stride). out may alias v: a warp reads v_r of a token before it can write out_r
// of that token (out_r depends on it), and nothing else touches those columns.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/gdn_math.h"

namespace deltaserve::kernels::cuda {

inline constexpr int kGdnStepThreads = 128;
inline constexpr int kGdnStepRowsPerWarp = 4;
inline constexpr int kGdnStepRowsPerBlock = kGdnStepThreads / 32 * kGdnStepRowsPerWarp;

__device__ __forceinline__ float GdnWarpSum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One token's inputs as a lane holds them: its elements of k and q, v of the warp's rows, the
// decay and β.
template <int kE>
struct GdnStepToken {
  float k[kE], q[kE], v[kGdnStepRowsPerWarp];
  float decay, beta;
};

template <int kE>
__device__ __forceinline__ void GdnLoadToken(const GdnProblem& p, int64_t t, int h, int lane,
                                             int row0, GdnStepToken<kE>& tok) {
  const float* kt = p.KRow(t, h);
  const float* qt = p.QRow(t, h);
  const float* vt = p.VRow(t, h);
#pragma unroll
  for (int c = 0; c < kE; ++c) {
    const int j = 32 * c + lane;
    tok.k[c] = j < p.d ? kt[j] : 0.0f;
    tok.q[c] = j < p.d ? qt[j] : 0.0f;
  }
#pragma unroll
  for (int r = 0; r < kGdnStepRowsPerWarp; ++r) tok.v[r] = row0 + r < p.d ? vt[row0 + r] : 0.0f;
  tok.decay = expf(p.G(t, h));
  tok.beta = p.Beta(t, h);
}

template <int kE>
__global__ void __launch_bounds__(kGdnStepThreads) GdnStepKernel(GdnProblem p, int64_t n_tokens) {
  constexpr int kR = kGdnStepRowsPerWarp;
  const int h = static_cast<int>(blockIdx.y);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row0 =
      static_cast<int>(blockIdx.x) * kGdnStepRowsPerBlock + static_cast<int>(threadIdx.x) / 32 * kR;
  const int d = p.d;

  // Rows past d and elements past d are zero and stay zero (k and q are zero there too).
  float m[kR][kE];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const float* src = row0 + r < d ? p.StateRow(h, row0 + r) : nullptr;
#pragma unroll
    for (int c = 0; c < kE; ++c) {
      const int j = 32 * c + lane;
      m[r][c] = src != nullptr && j < d ? src[j] : 0.0f;
    }
  }

  // n_tokens >= 1. Token t + 1's loads are issued before token t's reductions, so their latency
  // overlaps the shuffles (with out aliasing v, token t + 1's v is another row than token t's
  // out).
  GdnStepToken<kE> next;
  GdnLoadToken(p, 0, h, lane, row0, next);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const GdnStepToken<kE> tok = next;
    if (t + 1 < n_tokens) GdnLoadToken(p, t + 1, h, lane, row0, next);
    const float* kk = tok.k;
    const float* qq = tok.q;
    const float decay = tok.decay;
    const float beta = tok.beta;
    float dot[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      float s = 0.0f;
#pragma unroll
      for (int c = 0; c < kE; ++c) s += m[r][c] * kk[c];
      dot[r] = s;
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) dot[r] = GdnWarpSum(dot[r]);
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float u = GdnDeltaCoef(tok.v[r], dot[r], decay, beta);
      float s = 0.0f;
#pragma unroll
      for (int c = 0; c < kE; ++c) {
        m[r][c] = GdnRowUpdate(m[r][c], kk[c], decay, u);
        s += m[r][c] * qq[c];
      }
      dot[r] = s;
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) dot[r] = GdnWarpSum(dot[r]);
    float* ot = p.OutRow(t, h);
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      if (lane == r && row0 + r < d) ot[row0 + r] = p.scale * dot[r];
    }
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
    if (row0 + r >= d) continue;
    float* dst = p.StateRow(h, row0 + r);
#pragma unroll
    for (int c = 0; c < kE; ++c) {
      const int j = 32 * c + lane;
      if (j < d) dst[j] = m[r][c];
    }
  }
}

}  // namespace deltaserve::kernels::cuda
