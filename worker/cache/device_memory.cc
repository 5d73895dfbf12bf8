#include "worker/cache/device_memory.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"

namespace deltaserve::worker {

std::string DeviceSpec::Name() const {
  switch (kind) {
    case Kind::kCpu:
      return "cpu";
    case Kind::kSim:
      return "sim";
    case Kind::kCuda:
      break;
  }
  return absl::StrCat("cuda:", index);
}

absl::StatusOr<DeviceSpec> ParseDevice(std::string_view text) {
  DeviceSpec d;
  if (text == "cpu") return d;
  if (text == "sim") {
    d.kind = DeviceSpec::Kind::kSim;
    return d;
  }
  d.kind = DeviceSpec::Kind::kCuda;
  if (text == "cuda") return d;
  int index = -1;
  if (text.starts_with("cuda:") && text.size() > 5 && text.size() <= 8 &&
      std::all_of(text.begin() + 5, text.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      absl::SimpleAtoi(common::Sv(text.substr(5)), &index)) {
    d.index = index;
    return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device ", common::Sv(text),
                   ": use cpu, cuda or cuda:N (N a device number), or sim (the test device)"));
}

std::vector<ScratchQuery> ForwardPassScratchQueries(const common::Qwen35HParams& hp,
                                                    int64_t max_batch_tokens, int64_t logits_rows,
                                                    int64_t ctx) {
  using Op = ScratchQuery::Op;
  const int64_t t = std::max<int64_t>(max_batch_tokens, 1);
  const int64_t rows = std::max<int64_t>(logits_rows, 1);
  const int64_t d = hp.n_embd, hd = hp.head_dim, h = hp.n_head, hk = hp.n_head_kv;
  const int64_t nv = hp.ssm_n_v_heads, dv = hp.ssm_head_dim, c = hp.ssm_conv_channels();
  std::vector<ScratchQuery> q;
  auto matmul = [&](std::string_view what, int64_t in, int64_t out, int64_t n = 0) {
    q.push_back({Op::kMatMul, what, {n > 0 ? n : t, in, out}});
  };
  bool has_dn = false, has_attn = false;
  for (common::LayerKind k : hp.layers) {
    (k == common::LayerKind::kDeltaNet ? has_dn : has_attn) = true;
  }
  if (has_dn) {
    matmul("attn_qkv", d, c);
    matmul("attn_gate", d, nv * dv);
    matmul("ssm_beta", d, nv);
    matmul("ssm_alpha", d, nv);
    matmul("ssm_out", nv * dv, d);
    // MatMulGroup may run a group as one product over the concatenated rows.
    matmul("deltanet group", d, c + nv * dv + 2 * nv);
  }
  if (has_attn) {
    matmul("attn_q", d, 2 * h * hd);
    matmul("attn_k", d, hk * hd);
    matmul("attn_v", d, hk * hd);
    matmul("attn_output", h * hd, d);
    matmul("attention group", d, 2 * h * hd + 2 * hk * hd);
  }
  if (hp.is_moe) {
    matmul("ffn_gate_inp", d, hp.n_expert);
    // The stacks a call sees: the layer's n_expert experts, or with expert tiers
    // (worker/engine/expert_tiers.h) the whole slot arena, which holds fewer than all
    // n_layer x n_expert experts: that bound is known before the plan sizes the arena. The
    // expert count only sizes the kernel's per-expert counters (a few bytes each).
    q.push_back({Op::kMoeFfn, "ffn_*_exps",
                 {t, hp.n_expert_used, std::max<int64_t>(1, hp.n_layer) * hp.n_expert, d,
                  hp.n_ff_expert}});
    if (hp.n_ff_shared_expert > 0) {
      matmul("ffn_gate_shexp", d, hp.n_ff_shared_expert);
      matmul("ffn_up_shexp", d, hp.n_ff_shared_expert);
      matmul("ffn_gate_inp_shexp", d, 1);
      matmul("ffn_down_shexp", hp.n_ff_shared_expert, d);
      matmul("shared expert group", d, 2 * hp.n_ff_shared_expert + 1);
    }
  } else {
    matmul("ffn_gate", d, hp.n_ff);
    matmul("ffn_up", d, hp.n_ff);
    matmul("ffn_down", hp.n_ff, d);
    matmul("ffn group", d, 2 * hp.n_ff);
  }
  matmul("output", d, hp.n_vocab, rows);
  // Per-sequence ops: one sequence holds at most min(t, ctx) of the pass's tokens.
  const int64_t per_seq = std::max<int64_t>(std::min(t, std::max<int64_t>(ctx, 1)), 1);
  std::vector<int64_t> counts;
  for (int64_t n = 1; n < per_seq; n *= 2) counts.push_back(n);
  counts.push_back(per_seq);
  for (int64_t n : counts) {
    if (has_attn) {
      q.push_back({Op::kPagedAttention, "attention", {n, h, hd, std::max<int64_t>(ctx, n)}});
    }
    if (has_dn) q.push_back({Op::kGatedDeltaRule, "delta rule", {n, nv, dv}});
  }
  return q;
}

uint64_t ForwardPassScratchBytes(const common::Qwen35HParams& hp, int64_t max_batch_tokens,
                                 int64_t logits_rows, int64_t ctx,
                                 const DeviceScratchFunctions& f) {
  uint64_t most = 0;
  for (const ScratchQuery& q : ForwardPassScratchQueries(hp, max_batch_tokens, logits_rows, ctx)) {
    const int64_t* a = q.args;
    size_t bytes = 0;
    switch (q.op) {
      case ScratchQuery::Op::kMatMul:
        if (f.matmul != nullptr) bytes = f.matmul(a[0], a[1], a[2]);
        break;
      case ScratchQuery::Op::kMoeFfn:
        if (f.moe_ffn != nullptr) bytes = f.moe_ffn(a[0], a[1], a[2], a[3], a[4]);
        break;
      case ScratchQuery::Op::kPagedAttention:
        if (f.paged_attention != nullptr) bytes = f.paged_attention(a[0], a[1], a[2], a[3]);
        break;
      case ScratchQuery::Op::kGatedDeltaRule:
        if (f.gated_delta_rule != nullptr) bytes = f.gated_delta_rule(a[0], a[1], a[2]);
        break;
    }
    most = std::max<uint64_t>(most, bytes);
  }
  return most;
}

}  // namespace deltaserve::worker
