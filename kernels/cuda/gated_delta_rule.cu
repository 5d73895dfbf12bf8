// Launchers of the gated delta rule (cuda_ops.h, gated_delta_rule.h): the shape checks of the
// CPU backend, then the fused step kernel below kGdnChunkedMinTokens tokens and the chunked WY
// form (in passes of kGdnPassChunks chunks, so the scratch stays one pass) from there on.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gated_delta_rule.h"
#include "kernels/cuda/gdn_chunked.cuh"
#include "kernels/cuda/gdn_math.h"
#include "kernels/cuda/gdn_step.cuh"

namespace deltaserve::kernels::cuda {
namespace {

// The rules of kernels/cpu/gated_delta_rule.cc Validate, so both backends refuse the same calls;
// then what only these kernels cannot do (head_dim > 256). Fills `p` on success.
KernelStatus Check(const Mat& q, const Mat& k, const Mat& v, const Mat& g, const Mat& beta,
                   int64_t n_k_heads, int64_t n_v_heads, int64_t d, float* state, const Mat& out,
                   GdnProblem& p) {
  const int64_t t = q.rows;
  if (!q.Valid() || !k.Valid() || !v.Valid() || !g.Valid() || !beta.Valid() || !out.Valid() ||
      n_k_heads <= 0 || n_v_heads <= 0 || d <= 0 || n_v_heads % n_k_heads != 0 ||
      state == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  if (q.cols != n_k_heads * d || k.cols != q.cols || v.cols != n_v_heads * d ||
      out.cols != v.cols || g.cols != n_v_heads || beta.cols != n_v_heads || k.rows != t ||
      v.rows != t || g.rows != t || beta.rows != t || out.rows != t) {
    return KernelStatus::kInvalidArgument;
  }
  // Grid dimension y is the value head (at most 65535).
  if (d > kGdnMaxHeadDim || n_v_heads > 65535) return KernelStatus::kUnsupportedType;
  p.q = q.data;
  p.q_stride = q.stride;
  p.k = k.data;
  p.k_stride = k.stride;
  p.v = v.data;
  p.v_stride = v.stride;
  p.g = g.data;
  p.g_stride = g.stride;
  p.beta = beta.data;
  p.beta_stride = beta.stride;
  p.out = out.data;
  p.out_stride = out.stride;
  p.state = state;
  p.n_k = static_cast<int>(n_k_heads);
  p.n_v = static_cast<int>(n_v_heads);
  p.d = static_cast<int>(d);
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  return KernelStatus::kOk;
}

KernelStatus LastLaunch() {
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kDeviceError;
}

KernelStatus RunStep(const LaunchContext& ctx, const GdnProblem& p, int64_t n_tokens) {
  const dim3 grid((p.d + kGdnStepRowsPerBlock - 1) / kGdnStepRowsPerBlock, p.n_v);
  const int lanes = (p.d + 31) / 32;  // elements per lane: 1, 2, 4 or 8 registers per row
  if (lanes <= 1) {
    GdnStepKernel<1><<<grid, kGdnStepThreads, 0, ctx.stream>>>(p, n_tokens);
  } else if (lanes <= 2) {
    GdnStepKernel<2><<<grid, kGdnStepThreads, 0, ctx.stream>>>(p, n_tokens);
  } else if (lanes <= 4) {
    GdnStepKernel<4><<<grid, kGdnStepThreads, 0, ctx.stream>>>(p, n_tokens);
  } else {
    GdnStepKernel<8><<<grid, kGdnStepThreads, 0, ctx.stream>>>(p, n_tokens);
  }
  return LastLaunch();
}

KernelStatus RunChunked(const LaunchContext& ctx, const GdnProblem& p, int64_t n_tokens) {
  const size_t bytes =
      static_cast<size_t>(GdnChunkedScratchFloats(n_tokens, p.n_v, p.d)) * sizeof(float);
  if (ctx.scratch == nullptr || ctx.scratch_bytes < bytes) return KernelStatus::kOutOfMemory;
  float* scratch = static_cast<float*>(ctx.scratch);
  const int64_t pass_tokens = static_cast<int64_t>(kGdnPassChunks) * kGdnChunk;
  const dim3 scan_grid((p.d + kGdnScanRows - 1) / kGdnScanRows, p.n_v);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += pass_tokens) {
    const int64_t n = n_tokens - t0 < pass_tokens ? n_tokens - t0 : pass_tokens;
    const GdnProblem pass = p.FromToken(t0);
    const dim3 prep_grid(static_cast<unsigned>(GdnChunks(n)), p.n_v);
    GdnChunkPrepKernel<<<prep_grid, kGdnChunkThreads, 0, ctx.stream>>>(pass, n, scratch);
    GdnChunkScanKernel<<<scan_grid, kGdnChunkThreads, 0, ctx.stream>>>(pass, n, scratch);
    if (const KernelStatus st = LastLaunch(); st != KernelStatus::kOk) return st;
  }
  return KernelStatus::kOk;
}

// Which form runs: the dispatcher's choice by token count, or one forced (the gpu tests run
// both at every T).
enum class GdnForm { kByTokens, kStep, kChunked };

KernelStatus Launch(const LaunchContext& ctx, const Mat& q, const Mat& k, const Mat& v,
                    const Mat& g, const Mat& beta, int64_t n_k_heads, int64_t n_v_heads,
                    int64_t head_dim, float* state, Mat& out, GdnForm form) {
  GdnProblem p;
  if (const KernelStatus st =
          Check(q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out, p);
      st != KernelStatus::kOk) {
    return st;
  }
  if (q.rows == 0) return KernelStatus::kOk;
  const bool step =
      form == GdnForm::kStep || (form == GdnForm::kByTokens && q.rows < kGdnChunkedMinTokens);
  return step ? RunStep(ctx, p, q.rows) : RunChunked(ctx, p, q.rows);
}

}  // namespace

KernelStatus LaunchGatedDeltaRuleStep(const LaunchContext& ctx, const Mat& q, const Mat& k,
                                      const Mat& v, const Mat& g, const Mat& beta,
                                      int64_t n_k_heads, int64_t n_v_heads, int64_t head_dim,
                                      float* state, Mat& out) {
  return Launch(ctx, q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out, GdnForm::kStep);
}

KernelStatus LaunchGatedDeltaRuleChunked(const LaunchContext& ctx, const Mat& q, const Mat& k,
                                         const Mat& v, const Mat& g, const Mat& beta,
                                         int64_t n_k_heads, int64_t n_v_heads, int64_t head_dim,
                                         float* state, Mat& out) {
  return Launch(ctx, q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out,
                GdnForm::kChunked);
}

KernelStatus LaunchGatedDeltaRule(const LaunchContext& ctx, const Mat& q, const Mat& k,
                                  const Mat& v, const Mat& g, const Mat& beta, int64_t n_k_heads,
                                  int64_t n_v_heads, int64_t head_dim, float* state, Mat& out) {
  return Launch(ctx, q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out,
                GdnForm::kByTokens);
}

size_t GatedDeltaRuleChunkedScratchBytes(int64_t n_tokens, int64_t n_v_heads, int64_t head_dim) {
  return static_cast<size_t>(GdnChunkedScratchFloats(n_tokens, n_v_heads, head_dim)) *
         sizeof(float);
}

size_t GatedDeltaRuleScratchBytes(int64_t n_tokens, int64_t n_v_heads, int64_t head_dim) {
  return static_cast<size_t>(GdnScratchFloats(n_tokens, n_v_heads, head_dim)) * sizeof(float);
}

}  // namespace deltaserve::kernels::cuda
