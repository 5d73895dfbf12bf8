// The Gated DeltaNet layers of the Qwen3.5 forward pass (MODEL_SPEC §2.4; Qwen35Model::
// RunDeltaNet): the input projections, then per sequence the causal conv1d and the gated delta
// rule over its tokens, the gated norm and the output projection; a decode step of many
// sequences as one op (Backend::DeltaNetDecodeStep); and the state taps of BatchEntry (copies
// of the recurrent state at positions inside a prefill chunk, for session snapshots).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/engine/qwen35.h"
#include "worker/engine/qwen35_ops.h"

namespace deltaserve::worker {

using engine_internal::CheckKernel;
using kernels::Mat;

absl::Status Qwen35Model::PrepareDeltaNetStep(absl::Span<const BatchEntry> batch) {
  state_ptrs_host_.clear();
  const int64_t n_dn = static_cast<int64_t>(state_layout().n_layers);
  const int64_t b_n = static_cast<int64_t>(batch.size());
  for (const BatchEntry& e : batch) {
    if (e.tokens.size() != 1) return absl::OkStatus();  // not a decode step
  }
  if (n_dn == 0 || b_n == 0) return absl::OkStatus();
  state_ptrs_host_.resize(static_cast<size_t>(2 * n_dn * b_n));
  for (int64_t layer = 0; layer < n_dn; ++layer) {
    for (int64_t b = 0; b < b_n; ++b) {
      const RecurrentState& slot = *batch[b].sequence->state;
      state_ptrs_host_[(2 * layer) * b_n + b] = slot.conv(static_cast<int>(layer));
      state_ptrs_host_[(2 * layer + 1) * b_n + b] = slot.delta(static_cast<int>(layer));
    }
  }
  const auto needed = static_cast<int64_t>(state_ptrs_host_.size());
  if (needed > state_ptr_capacity_) {
    state_ptr_capacity_ = std::max(needed, 2 * state_ptr_capacity_);
    state_ptr_buf_ = backend_->Allocate(static_cast<size_t>(state_ptr_capacity_) * sizeof(float*));
    if (state_ptr_buf_.data() == nullptr) {
      state_ptr_capacity_ = 0;
      state_ptrs_host_.clear();
      return absl::ResourceExhaustedError("no memory for the DeltaNet state pointers");
    }
  }
  DS_RUN(CopyToDevice, state_ptr_buf_.data(), state_ptrs_host_.data(),
         state_ptrs_host_.size() * sizeof(float*));
  return absl::OkStatus();
}

absl::Status Qwen35Model::RunDeltaNet(const LayerWeights& l, int dn_index,
                                      absl::Span<const BatchEntry> batch) {
  const DeltaNetWeights& w = l.deltanet;
  const int64_t nk = hp_.ssm_n_k_heads, nv = hp_.ssm_n_v_heads, dk = hp_.ssm_head_dim;
  const float eps = static_cast<float>(hp_.rms_eps);
  // The four input projections share xn: one grouped product (Backend::MatMulGroup).
  {
    const kernels::WeightView group_w[] = {w.qkv, w.z, w.beta, w.alpha};
    Mat group_y[] = {ws_.qkv, ws_.z, ws_.beta, ws_.alpha};
    DS_RUN(MatMulGroup, group_w, 4, ws_.xn, group_y);
  }
  if (!state_ptrs_host_.empty()) {
    // A decode step: the rest of the layer up to out_proj is one op for the whole batch.
    const int64_t b_n = static_cast<int64_t>(batch.size());
    const size_t conv_at = static_cast<size_t>(2 * dn_index * b_n);
    const size_t delta_at = conv_at + static_cast<size_t>(b_n);
    auto* const* device_ptrs = static_cast<float* const*>(state_ptr_buf_.data());
    kernels::DeltaNetStep step;
    step.qkv = ws_.qkv;
    step.z = ws_.z;
    step.alpha = ws_.alpha;
    step.beta = ws_.beta;
    step.conv_w = w.conv;
    step.conv_kernel = hp_.ssm_conv_kernel;
    step.conv_states = device_ptrs + conv_at;
    step.delta_states = device_ptrs + delta_at;
    step.conv_states_host = state_ptrs_host_.data() + conv_at;
    step.delta_states_host = state_ptrs_host_.data() + delta_at;
    step.ssm_a = w.ssm_a;
    step.dt_bias = w.dt_bias;
    step.norm = w.norm;
    step.l2_eps = eps;
    step.norm_eps = eps;
    step.n_k_heads = nk;
    step.n_v_heads = nv;
    step.head_dim = dk;
    step.out = ws_.o;
    DS_RUN(DeltaNetDecodeStep, step);
    DS_RUN(MatMul, w.out, ws_.o, ws_.mix);
    return absl::OkStatus();
  }
  DS_RUN(DeltaNetGates, ws_.alpha, ws_.beta, w.ssm_a, w.dt_bias);
  Mat q = ws_.qkv.Cols(0, nk * dk);
  Mat k = ws_.qkv.Cols(nk * dk, nk * dk);
  int64_t row = 0;
  for (const BatchEntry& e : batch) {
    if (absl::Status s = RunDeltaNetConv(l, dn_index, e, row); !s.ok()) return s;
    row += static_cast<int64_t>(e.tokens.size());
  }
  DS_RUN(L2Norm, q, dk, eps);
  DS_RUN(L2Norm, k, dk, eps);
  row = 0;
  for (const BatchEntry& e : batch) {
    if (absl::Status s = RunDeltaRule(dn_index, e, row); !s.ok()) return s;
    row += static_cast<int64_t>(e.tokens.size());
  }
  Mat o_heads = ws_.o.Reshaped(dk);
  DS_RUN(GatedRmsNorm, o_heads, w.norm, ws_.z.Reshaped(dk), eps, o_heads);
  DS_RUN(MatMul, w.out, ws_.o, ws_.mix);
  return absl::OkStatus();
}

// Why pieces: the conv window and the delta-rule state are only ever whole between calls of
// these ops, so a tap at position p runs the ops over [.., p) and [p, ..) as two chunks would;
// the state copy between them goes to the host (a synchronising copy on a device backend,
// taken only in prefill passes, and only where a snapshot is due).
absl::Status Qwen35Model::RunDeltaNetConv(const LayerWeights& l, int dn_index,
                                          const BatchEntry& e, int64_t row) {
  const int64_t n = static_cast<int64_t>(e.tokens.size());
  float* state = e.sequence->state->conv(dn_index);
  const RecurrentStateLayout layout = state_layout();
  const uint64_t offset = layout.conv_offset(dn_index) * sizeof(float);
  int64_t done = 0;
  for (size_t i = 0; i <= e.taps.size(); ++i) {
    const int64_t end = i < e.taps.size() ? e.taps[i].after : n;
    Mat piece = ws_.qkv.Rows(row + done, end - done);
    DS_RUN(CausalConv1dSilu, piece, l.deltanet.conv, hp_.ssm_conv_kernel, state, piece);
    if (i < e.taps.size() && layout.conv_floats > 0) {
      DS_RUN(CopyToHost, e.taps[i].host + offset, state, layout.conv_floats * sizeof(float));
    }
    done = end;
  }
  return absl::OkStatus();
}

absl::Status Qwen35Model::RunDeltaRule(int dn_index, const BatchEntry& e, int64_t row) {
  const int64_t nk = hp_.ssm_n_k_heads, nv = hp_.ssm_n_v_heads, dk = hp_.ssm_head_dim;
  const Mat q = ws_.qkv.Cols(0, nk * dk);
  const Mat k = ws_.qkv.Cols(nk * dk, nk * dk);
  const Mat v = ws_.qkv.Cols(2 * nk * dk, nv * dk);
  const int64_t n = static_cast<int64_t>(e.tokens.size());
  float* state = e.sequence->state->delta(dn_index);
  const RecurrentStateLayout layout = state_layout();
  const uint64_t offset = layout.delta_offset(dn_index) * sizeof(float);
  int64_t done = 0;
  for (size_t i = 0; i <= e.taps.size(); ++i) {
    const int64_t end = i < e.taps.size() ? e.taps[i].after : n;
    const int64_t r = row + done, m = end - done;
    Mat o = ws_.o.Rows(r, m);
    DS_RUN(GatedDeltaRule, q.Rows(r, m), k.Rows(r, m), v.Rows(r, m), ws_.alpha.Rows(r, m),
           ws_.beta.Rows(r, m), nk, nv, dk, state, o);
    if (i < e.taps.size()) {
      DS_RUN(CopyToHost, e.taps[i].host + offset, state, layout.delta_floats * sizeof(float));
    }
    done = end;
  }
  return absl::OkStatus();
}

}  // namespace deltaserve::worker
