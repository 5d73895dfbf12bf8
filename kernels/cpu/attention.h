// Causal softmax attention of one sequence for the CPU backend (Backend::Attention), MODEL_SPEC
// §2.3 steps 5-6: grouped-query heads, f32 scores, numerically stable softmax (the row maximum is
// subtracted before exp). A work item is a block of up to 4 tokens times the query heads of one
// kv head, so each K/V row is read once for all of them (decode on a Xeon: 2.5x faster than one
// item per (token, head)); decode splits the group into slices when there are more threads than
// kv heads.
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels {

// q [T][n_head * head_dim]: the sequence's T newest tokens, at positions n_past .. n_past+T-1.
// k, v [n_past + T][n_head_kv * head_dim]: every position of the sequence, the new ones included.
// out [T][n_head * head_dim]; out may alias q. Query head h reads kv head h / (n_head / n_head_kv)
// (grouped, not tiled: GGUF_QWEN35.md); token t attends to positions 0 .. n_past + t with
// softmax(scale * q·k). n_head is a multiple of n_head_kv and head_dim = q.cols / n_head.
KernelStatus AttentionCpu(ThreadPool& pool, const Mat& q, const Mat& k, const Mat& v,
                          int64_t n_past, int64_t n_head, int64_t n_head_kv, float scale, Mat& out);

}  // namespace deltaserve::kernels
