// Placeholder until the paged attention kernels land (issue 16): refuses with kUnsupportedType.
#include "kernels/cuda/cuda_ops.h"

namespace deltaserve::kernels::cuda {

KernelStatus LaunchStoreKv(const LaunchContext&, const Mat&, const Mat&, const PagedKvView&,
                           int64_t) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchPagedAttention(const LaunchContext&, const Mat&, const PagedKvView&, int64_t,
                                  int64_t, int64_t, float, Mat&) {
  return KernelStatus::kUnsupportedType;
}
size_t PagedAttentionScratchBytes(int64_t, int64_t, int64_t, int64_t) { return 0; }

}  // namespace deltaserve::kernels::cuda
