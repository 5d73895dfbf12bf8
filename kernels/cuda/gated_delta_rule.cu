// Placeholder until the Gated DeltaNet kernels land (issue 16): refuses with kUnsupportedType.
#include "kernels/cuda/cuda_ops.h"

namespace deltaserve::kernels::cuda {

KernelStatus LaunchGatedDeltaRule(const LaunchContext&, const Mat&, const Mat&, const Mat&,
                                  const Mat&, const Mat&, int64_t, int64_t, int64_t, float*,
                                  Mat&) {
  return KernelStatus::kUnsupportedType;
}
size_t GatedDeltaRuleScratchBytes(int64_t, int64_t, int64_t) { return 0; }

}  // namespace deltaserve::kernels::cuda
