// Placeholder until the grouped expert FFN lands (issue 16): refuses with kUnsupportedType.
#include "kernels/cuda/cuda_ops.h"

namespace deltaserve::kernels::cuda {

KernelStatus LaunchMoeFfn(const LaunchContext&, const Mat&, const int32_t*, const float*, int64_t,
                          const WeightView&, const WeightView&, const WeightView&, Mat&) {
  return KernelStatus::kUnsupportedType;
}
size_t MoeFfnScratchBytes(int64_t, int64_t, int64_t, int64_t, int64_t) { return 0; }

}  // namespace deltaserve::kernels::cuda
