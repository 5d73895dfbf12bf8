// LaunchStoreKv (cuda_ops.h): checks the call as the CPU backend does (attention_checks.h), then
// launches StoreKvKernel (kv_store.cuh, which describes it) on ctx.stream.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_checks.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/kv_store.cuh"

namespace deltaserve::kernels::cuda {

KernelStatus LaunchStoreKv(const LaunchContext& ctx, const Mat& k, const Mat& v,
                           const PagedKvView& kv, int64_t first_pos) {
  if (KernelStatus s = CheckStoreKv(k, v, kv, first_pos); s != KernelStatus::kOk) return s;
  if (k.rows == 0) return KernelStatus::kOk;
  const StoreParams p = MakeStoreParams(k, v, kv, first_pos);
  const int64_t blocks = StoreBlocks(p);
  if (blocks > 0x7FFFFFFF) return KernelStatus::kUnsupportedType;
  StoreKvKernel<<<static_cast<unsigned>(blocks), kStoreThreads, 0, ctx.stream>>>(p);
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kDeviceError;
}

}  // namespace deltaserve::kernels::cuda
