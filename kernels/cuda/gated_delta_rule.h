// The two forms behind LaunchGatedDeltaRule (cuda_ops.h), each callable on its own so that the
// gpu tests run both at every T (decode == prefill, the step kernel on long runs, the chunked
// one on a single token). Same contract as the launcher: device pointers, shape checks first
// (the CPU backend's rules, kernels/cpu/gated_delta_rule.cc), only enqueues on ctx.stream.
// head_dim above kGdnMaxHeadDim (256) is kUnsupportedType: the kernels hold a state row in
// registers / a 16-row slice in shared memory sized for it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_ops.h"

namespace deltaserve::kernels::cuda {

// The per-token recurrence (gdn_step.cuh), any T; no scratch.
KernelStatus LaunchGatedDeltaRuleStep(const LaunchContext& ctx, const Mat& q, const Mat& k,
                                      const Mat& v, const Mat& g, const Mat& beta,
                                      int64_t n_k_heads, int64_t n_v_heads, int64_t head_dim,
                                      float* state, Mat& out);

// The chunked WY form (gdn_chunked.cuh), any T >= 1; scratch GatedDeltaRuleChunkedScratchBytes.
KernelStatus LaunchGatedDeltaRuleChunked(const LaunchContext& ctx, const Mat& q, const Mat& k,
                                         const Mat& v, const Mat& g, const Mat& beta,
                                         int64_t n_k_heads, int64_t n_v_heads, int64_t head_dim,
                                         float* state, Mat& out);
size_t GatedDeltaRuleChunkedScratchBytes(int64_t n_tokens, int64_t n_v_heads, int64_t head_dim);

}  // namespace deltaserve::kernels::cuda
