// The gated delta rule of the DeltaNet layers for the CPU backend (Backend::GatedDeltaRule):
// the per-token recurrence of MODEL_SPEC §2.4 step 6 (decode) and the chunked WY form of
// MODEL_SPEC §3 with chunks of 64 tokens (prefill). Both run one sequence, split over value
// heads on the pool, and keep the state in f32.
//
// Layouts (n_k = n_k_heads, n_v = n_v_heads, d = head_dim = dk = dv):
//   q, k    [T][n_k * d]   L2-normalised per head, q not yet scaled (1/sqrt(d) is applied here)
//   v, out  [T][n_v * d]   out may alias v
//   g, beta [T][n_v]       g = log decay (< 0), beta = write strength in (0, 1)
//   state   [n_v][d (v)][d (k)] f32: head h's S transposed, row i holds S[:, i] (contiguous over
//           k, as llama.cpp keeps it); read at entry and replaced by the state after token T-1.
// Value head h reads q/k head h % n_k (GGUF tiled order, GGUF_QWEN35.md).
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels {

// Tokens per chunk of the chunked form (MODEL_SPEC §3); chunks never cross a call boundary.
inline constexpr int64_t kDeltaRuleChunk = 64;

// Picks the form: the recurrence below 12 tokens (decode, short speculative runs), where the
// chunked form's fixed cost per head dominates; the chunked form from 12 tokens on.
KernelStatus GatedDeltaRuleCpu(ThreadPool& pool, const Mat& q, const Mat& k, const Mat& v,
                               const Mat& g, const Mat& beta, int64_t n_k_heads, int64_t n_v_heads,
                               int64_t head_dim, float* state, Mat& out);

// Token by token: S = exp(g) S; u = beta (v - S^T k); S += k u^T; o = S^T q / sqrt(d).
KernelStatus GatedDeltaRuleRecurrentCpu(ThreadPool& pool, const Mat& q, const Mat& k, const Mat& v,
                                        const Mat& g, const Mat& beta, int64_t n_k_heads,
                                        int64_t n_v_heads, int64_t head_dim, float* state,
                                        Mat& out);

// Chunks of kDeltaRuleChunk tokens in the WY form (MODEL_SPEC §3 steps 1-7); equal to the
// recurrence up to f32 rounding.
KernelStatus GatedDeltaRuleChunkedCpu(ThreadPool& pool, const Mat& q, const Mat& k, const Mat& v,
                                      const Mat& g, const Mat& beta, int64_t n_k_heads,
                                      int64_t n_v_heads, int64_t head_dim, float* state, Mat& out);

namespace internal {

// The three forms on the path of ClampIsa(isa) instead of ActiveIsa(): the explicit-ISA entry
// points with which gated_delta_rule_test compares every level this CPU supports in one run.
KernelStatus GatedDeltaRuleCpuIsa(ThreadPool& pool, const Mat& q, const Mat& k, const Mat& v,
                                  const Mat& g, const Mat& beta, int64_t n_k_heads,
                                  int64_t n_v_heads, int64_t head_dim, float* state, Mat& out,
                                  CpuIsa isa);
KernelStatus GatedDeltaRuleRecurrentCpuIsa(ThreadPool& pool, const Mat& q, const Mat& k,
                                           const Mat& v, const Mat& g, const Mat& beta,
                                           int64_t n_k_heads, int64_t n_v_heads, int64_t head_dim,
                                           float* state, Mat& out, CpuIsa isa);
KernelStatus GatedDeltaRuleChunkedCpuIsa(ThreadPool& pool, const Mat& q, const Mat& k,
                                         const Mat& v, const Mat& g, const Mat& beta,
                                         int64_t n_k_heads, int64_t n_v_heads, int64_t head_dim,
                                         float* state, Mat& out, CpuIsa isa);

}  // namespace internal
}  // namespace deltaserve::kernels
