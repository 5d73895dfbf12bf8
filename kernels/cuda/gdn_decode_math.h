// Index math and per-element arithmetic of the fused Gated DeltaNet decode step (gdn_decode.cuh,
// Backend::DeltaNetDecodeStep) as DS_HOST_DEVICE functions, so that the CPU tests
// (tests/kernels/cuda_gdn_decode_test.cc) check them without a GPU.
//
// Layouts (backend.h DeltaNetStep; d = head_dim, C = (2 n_k + n_v) d, B sequences, row b =
// sequence b's one token):
//   qkv       [B][C] rows qkv_stride apart: channel c = s d + i is element i of segment s, where
//             segments 0 .. n_k-1 are the q heads, n_k .. 2n_k-1 the k heads, 2n_k .. the v heads
//   alpha, beta [B][n_v]; z, out [B][n_v d] (head h at h d)
//   conv_w    [C][kernel], tap kernel-1 meets the new input
//   conv state of sequence b: conv_states[b], [kernel-1][C] (oldest input first)
//   delta state of sequence b: delta_states[b], [n_v][d (v)][d (k)] (row r of head h contiguous
//             over k, as GatedDeltaRule keeps it)
// Ownership, which is what makes one launch per kernel safe for the whole batch: the conv kernel
// gives block (s, b) segment s of sequence b, one thread per channel; the d channels of a segment
// belong to no other segment, so every conv-state channel is read and written by exactly one
// thread, even where several v heads share a q/k head (the v heads read the normalised q/k only
// in the second kernel, after the first has finished). The rule kernel gives block (h, b) value
// head h of sequence b: its d state rows ([h][r][*]) and out[b][h d ..] are its own; it only
// reads qkv, alpha, beta, z.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/device_compat.h"

namespace deltaserve::kernels::cuda {

// The operands of one call (device pointers in the kernels, host pointers in the tests).
struct GdnDecodeProblem {
  float* qkv = nullptr;
  int64_t qkv_stride = 0;
  const float* z = nullptr;
  int64_t z_stride = 0;
  float* alpha = nullptr;  // raw in_proj_a output; the conv kernel replaces it by g
  int64_t alpha_stride = 0;
  float* beta = nullptr;  // raw in_proj_b output; the conv kernel replaces it by sigmoid(beta)
  int64_t beta_stride = 0;
  const float* conv_w = nullptr;
  int kernel = 0;
  float* const* conv_states = nullptr;
  float* const* delta_states = nullptr;
  const float* ssm_a = nullptr;
  const float* dt_bias = nullptr;
  const float* norm = nullptr;
  float l2_eps = 0.0f;
  float norm_eps = 0.0f;
  int n_k = 0;
  int n_v = 0;
  int d = 0;
  float scale = 0.0f;  // 1 / sqrt(d), the query scale of GatedDeltaRule
  float* out = nullptr;
  int64_t out_stride = 0;

  DS_HOST_DEVICE int64_t Channels() const { return static_cast<int64_t>(2 * n_k + n_v) * d; }
  // Segments of d channels per sequence (the conv kernel's grid x).
  DS_HOST_DEVICE int Segments() const { return 2 * n_k + n_v; }
  // Segment s of sequence b: d floats of qkv row b.
  DS_HOST_DEVICE float* Segment(int64_t b, int s) const {
    return qkv + b * qkv_stride + static_cast<int64_t>(s) * d;
  }
  // After the conv kernel: value head h's q and k (its q/k head h % n_k, GGUF tiled order) and v.
  DS_HOST_DEVICE const float* Q(int64_t b, int h) const { return Segment(b, h % n_k); }
  DS_HOST_DEVICE const float* K(int64_t b, int h) const { return Segment(b, n_k + h % n_k); }
  DS_HOST_DEVICE const float* V(int64_t b, int h) const { return Segment(b, 2 * n_k + h); }
  DS_HOST_DEVICE float* Alpha(int64_t b, int h) const { return alpha + b * alpha_stride + h; }
  DS_HOST_DEVICE float* Beta(int64_t b, int h) const { return beta + b * beta_stride + h; }
  DS_HOST_DEVICE const float* Z(int64_t b, int h) const {
    return z + b * z_stride + static_cast<int64_t>(h) * d;
  }
  DS_HOST_DEVICE float* Out(int64_t b, int h) const {
    return out + b * out_stride + static_cast<int64_t>(h) * d;
  }
  // Row r of head h of sequence b's delta state.
  DS_HOST_DEVICE float* StateRow(int64_t b, int h, int r) const {
    return delta_states[b] + (static_cast<int64_t>(h) * d + r) * d;
  }
};

// What segment s is: its L2 norm (q and k heads) or its gates (v head s - 2 n_k, whose block
// also turns alpha/beta of that head into g/sigmoid(beta): one writer per gate).
DS_HOST_DEVICE DS_INLINE bool GdnSegmentIsQk(int s, int n_k) { return s < 2 * n_k; }
DS_HOST_DEVICE DS_INLINE int GdnSegmentVHead(int s, int n_k) { return s - 2 * n_k; }

// One token of the causal conv for channel c (of `channels`), before the SiLU: the CPU's sum
// (kernels/cpu/conv1d.cc ConvTokens, same order), then the window shifted in `state` ([window]
// [channels], oldest first) and x appended. Reads every state value it needs before writing.
DS_HOST_DEVICE DS_INLINE float GdnConvChannelStep(const float* w, int kernel, float* state,
                                                  int64_t channels, int64_t c, float x) {
  const int window = kernel - 1;
  const float* wc = w + c * kernel;
  float acc = 0.0f;
  for (int j = 0; j < window; ++j) acc += wc[j] * state[j * channels + c];
  acc += wc[window] * x;
  for (int j = 0; j + 1 < window; ++j) state[j * channels + c] = state[(j + 1) * channels + c];
  if (window > 0) state[(window - 1) * channels + c] = x;
  return acc;
}

// The L2 scale of the CPU's L2Norm: 1 / max(sqrt(sum of squares), eps); a NaN norm stays NaN
// (fmaxf would pick eps).
DS_HOST_DEVICE DS_INLINE float GdnL2Scale(float norm, float eps) {
  return 1.0f / (norm < eps ? eps : norm);
}

// The first state row of the rule kernel's warp `warp` in row-group round `round`: warps take
// groups of rows_per_warp consecutive rows, round-robin (rows past d are masked).
DS_HOST_DEVICE DS_INLINE int GdnDecodeRow0(int round, int warp, int warps, int rows_per_warp) {
  return (round * warps + warp) * rows_per_warp;
}

// The problem of a call that ValidateDeltaNetStep accepted, reading the states through
// step.conv_states / step.delta_states (device arrays for the kernels; the tests pass host ones).
inline GdnDecodeProblem MakeGdnDecodeProblem(const DeltaNetStep& step) {
  GdnDecodeProblem p;
  p.qkv = step.qkv.data;
  p.qkv_stride = step.qkv.stride;
  p.z = step.z.data;
  p.z_stride = step.z.stride;
  p.alpha = step.alpha.data;
  p.alpha_stride = step.alpha.stride;
  p.beta = step.beta.data;
  p.beta_stride = step.beta.stride;
  p.conv_w = step.conv_w;
  p.kernel = static_cast<int>(step.conv_kernel);
  p.conv_states = step.conv_states;
  p.delta_states = step.delta_states;
  p.ssm_a = step.ssm_a.data;
  p.dt_bias = step.dt_bias.data;
  p.norm = step.norm.data;
  p.l2_eps = step.l2_eps;
  p.norm_eps = step.norm_eps;
  p.n_k = static_cast<int>(step.n_k_heads);
  p.n_v = static_cast<int>(step.n_v_heads);
  p.d = static_cast<int>(step.head_dim);
  p.scale = 1.0f / std::sqrt(static_cast<float>(step.head_dim));
  p.out = step.out.data;
  p.out_stride = step.out.stride;
  return p;
}

// Elements of a state row per lane in the rule kernel: ceil(d / 32) rounded up to 1, 2, 4 or 8
// (the instantiated widths; d <= kGdnMaxHeadDim = 256).
inline int GdnDecodeLaneElements(int d) {
  const int lanes = (d + 31) / 32;
  return lanes <= 1 ? 1 : lanes <= 2 ? 2 : lanes <= 4 ? 4 : 8;
}

}  // namespace deltaserve::kernels::cuda
