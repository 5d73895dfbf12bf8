#include "worker/engine/qwen35_workspace.h"

#include <algorithm>

namespace deltaserve::worker {

std::vector<WorkspaceBuffer> Qwen35WorkspaceBuffers(const common::Qwen35HParams& hp, int64_t tokens,
                                                    int64_t out_rows) {
  const int64_t d = hp.n_embd, c = hp.ssm_conv_channels();
  const int64_t nv = hp.ssm_n_v_heads, dv = hp.ssm_head_dim;
  const int64_t hd = hp.head_dim, h = hp.n_head, hk = hp.n_head_kv;
  const int64_t ff = std::max({hp.n_ff, hp.n_ff_shared_expert, int64_t{1}});
  const int64_t e = std::max<int64_t>(hp.n_expert, 1);
  const int64_t k = std::max<int64_t>(hp.n_expert_used, 1);
  struct PerToken {
    std::string_view name;
    int64_t cols;
  };
  const PerToken per_token[] = {
      {"x", d},       {"xn", d},      {"mix", d},      {"qkv", c},         {"z", nv * dv},
      {"alpha", nv},  {"beta", nv},   {"o", nv * dv},  {"qg", 2 * h * hd}, {"k", hk * hd},
      {"v", hk * hd}, {"qc", h * hd}, {"ao", h * hd},  {"ff_gate", ff},    {"ff_up", ff},
      {"router", e},  {"route_w", k}, {"shared_g", 1}, {"shared_out", d},
  };
  std::vector<WorkspaceBuffer> buffers;
  buffers.reserve(std::size(per_token) + 5);
  for (const PerToken& p : per_token) {
    buffers.push_back({p.name, tokens, p.cols, WorkspaceElement::kF32});
  }
  buffers.push_back({"out_x", out_rows, d, WorkspaceElement::kF32});
  buffers.push_back({"logits", out_rows, hp.n_vocab, WorkspaceElement::kF32});
  buffers.push_back({"ids", tokens, 1, WorkspaceElement::kInt32});
  buffers.push_back({"pos", tokens, 1, WorkspaceElement::kInt32});
  // MoE: one [tokens][k] slice per layer, copied to the host once per pass (a copy per layer
  // would wait for the device at every layer).
  const int64_t route_layers = hp.is_moe ? std::max<int64_t>(hp.n_layer, 1) : 1;
  buffers.push_back({"route_ids", tokens * route_layers, k, WorkspaceElement::kInt32});
  return buffers;
}

uint64_t WorkspaceBytes(absl::Span<const WorkspaceBuffer> buffers) {
  uint64_t total = 0;
  for (const WorkspaceBuffer& b : buffers) total += b.bytes();
  return total;
}

uint64_t AttentionKernelScratchBytes(const common::Qwen35HParams& hp, int n_threads) {
  return static_cast<uint64_t>(std::max(n_threads, 0)) * static_cast<uint64_t>(hp.head_dim) * 64 *
         sizeof(float);
}

}  // namespace deltaserve::worker
