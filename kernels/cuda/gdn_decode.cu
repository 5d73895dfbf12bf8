// Launcher of the fused Gated DeltaNet decode step (cuda_ops.h, Backend::DeltaNetDecodeStep):
// the shared shape rules (ValidateDeltaNetStep), then two launches for the whole batch
// (gdn_decode.cuh). No scratch: the conv kernel's results go over qkv, alpha and beta in place,
// which DeltaNetStep declares clobbered.
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gdn_decode.cuh"
#include "kernels/cuda/gdn_decode_math.h"
#include "kernels/cuda/gdn_math.h"

namespace deltaserve::kernels::cuda {

KernelStatus LaunchDeltaNetDecodeStep(const LaunchContext& ctx, const DeltaNetStep& step) {
  if (const KernelStatus st = ValidateDeltaNetStep(step); st != KernelStatus::kOk) return st;
  const int64_t batch = step.qkv.rows;
  // The rule kernel holds one head's outputs in shared memory (kGdnMaxHeadDim floats) and at
  // most 8 row elements per lane; grid y is the sequence (at most 65535).
  if (step.head_dim > kGdnMaxHeadDim || batch > 65535 ||
      2 * step.n_k_heads + step.n_v_heads > (int64_t{1} << 30)) {
    return KernelStatus::kUnsupportedType;
  }
  if (batch == 0) return KernelStatus::kOk;
  const GdnDecodeProblem p = MakeGdnDecodeProblem(step);
  const auto rows = static_cast<unsigned>(batch);
  GdnDecodeConvKernel<<<dim3(static_cast<unsigned>(p.Segments()), rows), kGdnDecodeConvThreads, 0,
                        ctx.stream>>>(p);
  const dim3 rule_grid(static_cast<unsigned>(p.n_v), rows);
  switch (GdnDecodeLaneElements(p.d)) {
    case 1:
      GdnDecodeRuleKernel<1><<<rule_grid, kGdnDecodeRuleThreads, 0, ctx.stream>>>(p);
      break;
    case 2:
      GdnDecodeRuleKernel<2><<<rule_grid, kGdnDecodeRuleThreads, 0, ctx.stream>>>(p);
      break;
    case 4:
      GdnDecodeRuleKernel<4><<<rule_grid, kGdnDecodeRuleThreads, 0, ctx.stream>>>(p);
      break;
    default:
      GdnDecodeRuleKernel<8><<<rule_grid, kGdnDecodeRuleThreads, 0, ctx.stream>>>(p);
      break;
  }
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kDeviceError;
}

}  // namespace deltaserve::kernels::cuda
