// The activation buffers the Qwen3.5 forward pass allocates for a batch of up to `tokens`
// tokens and `out_rows` logits rows, written down once so that the engine's allocation
// (Qwen35Model::ReserveWorkspace) and the memory planner (worker/cache/memory_plan.h) count the
// same bytes. Pure arithmetic on the hyperparameters: nothing is allocated here.
//
//   for (const WorkspaceBuffer& b : Qwen35WorkspaceBuffers(hp, 512, 512)) Allocate(b.bytes());
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "common/qwen35_hparams.h"

namespace deltaserve::worker {

// Element type of a workspace buffer.
enum class WorkspaceElement {
  kF32,    // activations
  kInt32,  // token ids, positions, expert route ids
};

// One buffer of the workspace: `rows` x `cols` elements, row-major.
struct WorkspaceBuffer {
  std::string_view name;  // the member of Qwen35Model's views ("x", "qkv", "logits", "ids", ...)
  int64_t rows = 0;       // tokens, or logits rows for "out_x" / "logits"
  int64_t cols = 0;
  WorkspaceElement element = WorkspaceElement::kF32;

  int64_t element_bytes() const { return 4; }  // f32 and int32 alike
  uint64_t bytes() const {
    return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) * element_bytes();
  }
};

// The buffers of a forward pass over `tokens` tokens with `out_rows` logits rows, in the order
// ReserveWorkspace allocates them:
//   [tokens][cols] f32 for x, xn, mix (cols n_embd), qkv (conv channels C), z (Hv*dv),
//   alpha, beta (Hv), o (Hv*dv), qg (2*nh*hd: query and gate), k, v (nkv*hd), qc, ao (nh*hd),
//   ff_gate, ff_up (max(n_ff, n_ff_shared_expert, 1)), router (max(n_expert, 1)),
//   route_w (max(n_expert_used, 1)), shared_g (1), shared_out (n_embd);
//   [out_rows][n_embd] f32 out_x, [out_rows][n_vocab] f32 logits;
//   [tokens] int32 ids, [tokens] int32 pos, [n_layer (MoE) or 1][tokens][max(n_expert_used, 1)]
//   int32 route_ids (rows = tokens x layers).
std::vector<WorkspaceBuffer> Qwen35WorkspaceBuffers(const common::Qwen35HParams& hp, int64_t tokens,
                                                    int64_t out_rows);

// Sum of bytes() over `buffers`.
uint64_t WorkspaceBytes(absl::Span<const WorkspaceBuffer> buffers);

// Per-thread scratch of the attention kernel, bytes: n_threads * head_dim * 64 f32. Provisional:
// the paged attention kernel being written will state its own figure here.
uint64_t AttentionKernelScratchBytes(const common::Qwen35HParams& hp, int n_threads);

}  // namespace deltaserve::worker
