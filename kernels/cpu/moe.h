// Mixture-of-experts routing and expert FFN for the CPU backend (Backend::MoeRoute, MoeFfn),
// MODEL_SPEC §2.6 steps 1-2. The shared expert is an ordinary dense FFN done by the engine.
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels {

// The renormalisation denominator is clamped at this (GGUF_QWEN35.md "Numerics", llama.cpp).
inline constexpr float kMoeMinWeightSum = 6.1e-5f;

// Per row of logits [T][n_expert]: p = softmax(row) in f32 (max subtracted), the k largest p
// (equal p: the lower expert id wins), in descending order of p, written to ids [T][k]
// (host memory), and weights [T][k] = p_i / max(sum of the k p, kMoeMinWeightSum).
// 0 < k <= n_expert.
KernelStatus MoeRouteCpu(const Mat& logits, int64_t k, int32_t* ids, float* weights);

// y[t] = sum_j weights[t][j] * down_e(silu(gate_e(x[t])) * up_e(x[t])), e = ids[t][j].
// x, y [T][n_embd]; ids, weights [T][k]; gate_exps/up_exps: stacks of n_expert matrices
// [ff][n_embd], down_exps: [n_embd][ff] (GGUF {in, out, n_expert}). Assignments are grouped by
// expert: each expert's token rows are gathered into a contiguous batch and run through
// MatMulCpu, so each expert's weights are read once per call; results are scatter-added in
// expert order. y is overwritten and must not alias x. Matrix e of a stack starts
// e * MatrixStride() bytes after its data (an expert arena's slots lie matrix_stride apart). An
// id < 0 is skipped (that expert is computed by the other tier, worker/engine/expert_tiers.h): a
// row whose ids are all < 0 gets zeros. An id >= n_expert is kInvalidArgument (nothing is
// written), as is a matrix_stride shorter than one matrix.
KernelStatus MoeFfnCpu(ThreadPool& pool, const Mat& x, const int32_t* ids, const float* weights,
                       int64_t k, const WeightView& gate_exps, const WeightView& up_exps,
                       const WeightView& down_exps, Mat& y);

}  // namespace deltaserve::kernels
