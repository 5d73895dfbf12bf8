// Placeholder until the decode GEMV / prefill GEMM kernels land (issue 16): every launcher
// refuses with kUnsupportedType so the backend links and says plainly that the op is missing.
#include "kernels/cuda/cuda_ops.h"

namespace deltaserve::kernels::cuda {

KernelStatus LaunchMatMul(const LaunchContext&, const WeightView&, const Mat&, Mat&) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchMatMulGroup(const LaunchContext&, const WeightView*, int, const Mat&, Mat*) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchGetRows(const LaunchContext&, const WeightView&, const int32_t*, int64_t,
                           Mat&) {
  return KernelStatus::kUnsupportedType;
}
size_t MatMulScratchBytes(int64_t, int64_t, int64_t) { return 0; }

}  // namespace deltaserve::kernels::cuda
