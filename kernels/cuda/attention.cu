// LaunchPagedAttention (cuda_ops.h): checks the call as the CPU backend does
// (attention_checks.h), then launches PagedAttentionKernel<kD> and, when the call splits its keys
// (decode: T <= kMaxSplitTokens), MergePartialsKernel (attention_kernels.cuh, where the kernels
// and layouts are described). Partials live in ctx.scratch (PagedAttentionScratchBytes).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_checks.h"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/paged_attention.cuh"

namespace deltaserve::kernels::cuda {
namespace {

template <int kD>
void LaunchAttentionKernel(const AttnParams& p, cudaStream_t stream) {
  const AttnGrid g = AttentionGrid(p, kD);
  const dim3 grid(static_cast<unsigned>(g.x), static_cast<unsigned>(g.y),
                  static_cast<unsigned>(g.z));
  PagedAttentionKernel<kD><<<grid, kAttnThreads, 0, stream>>>(p);
}

}  // namespace

size_t PagedAttentionScratchBytes(int64_t n_tokens, int64_t n_head, int64_t head_dim,
                                  int64_t n_ctx) {
  return AttentionScratchBound(n_tokens, n_head, head_dim, n_ctx);
}

KernelStatus LaunchPagedAttention(const LaunchContext& ctx, const Mat& q, const PagedKvView& kv,
                                  int64_t n_past, int64_t n_head, int64_t n_head_kv, float scale,
                                  Mat& out) {
  if (KernelStatus s = CheckPagedAttention(q, kv, n_past, n_head, n_head_kv, out);
      s != KernelStatus::kOk) {
    return s;
  }
  if (q.rows == 0) return KernelStatus::kOk;
  const int64_t head_dim = q.cols / n_head;
  const AttnParams p = MakeAttnParams(q, kv, n_past, n_head, n_head_kv, scale, out, ctx.scratch);
  const int64_t n_out_rows = p.n_tokens * n_head;
  if (p.plan.n_splits > 1) {
    const size_t need = AttentionScratchBytesFor(p.n_tokens, n_head, head_dim, p.n_keys);
    if (ctx.scratch == nullptr || need > ctx.scratch_bytes) return KernelStatus::kOutOfMemory;
  }
  const int bucket = HeadDimBucket(head_dim);
  if (RowBlocks(p.n_tokens, p.group, RowsPerBlock(bucket)) > 0x7FFFFFFF) {
    return KernelStatus::kUnsupportedType;
  }
  switch (bucket) {
    case 64:
      LaunchAttentionKernel<64>(p, ctx.stream);
      break;
    case 128:
      LaunchAttentionKernel<128>(p, ctx.stream);
      break;
    default:
      LaunchAttentionKernel<256>(p, ctx.stream);
      break;
  }
  if (p.plan.n_splits > 1) {
    MergePartialsKernel<<<static_cast<unsigned>(n_out_rows), kMergeThreads, 0, ctx.stream>>>(
        p.part_stats, p.part_acc, p.plan.n_splits, n_out_rows, n_head, p.head_dim, out.data,
        out.stride);
  }
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kDeviceError;
}

}  // namespace deltaserve::kernels::cuda
