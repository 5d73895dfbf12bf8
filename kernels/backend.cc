#include "kernels/backend.h"

namespace deltaserve::kernels {

std::string_view KernelStatusName(KernelStatus status) {
  switch (status) {
    case KernelStatus::kOk: return "ok";
    case KernelStatus::kInvalidArgument: return "invalid argument";
    case KernelStatus::kUnsupportedType: return "unsupported weight type";
    case KernelStatus::kOutOfMemory: return "out of memory";
    case KernelStatus::kDeviceError: return "device error";
  }
  return "unknown";
}

BlockLayout BlockLayoutOf(WeightType type) {
  // Block structs of ggml-common.h: e.g. q4_K = 2 x f16 scales + 12 scale bytes + 128 nibble
  // bytes per 256 values.
  switch (type) {
    case WeightType::kF32: return {1, 4};
    case WeightType::kF16: return {1, 2};
    case WeightType::kBF16: return {1, 2};
    case WeightType::kQ4_0: return {32, 18};
    case WeightType::kQ4_1: return {32, 20};
    case WeightType::kQ5_0: return {32, 22};
    case WeightType::kQ5_1: return {32, 24};
    case WeightType::kQ8_0: return {32, 34};
    case WeightType::kQ4_K: return {256, 144};
    case WeightType::kQ5_K: return {256, 176};
    case WeightType::kQ6_K: return {256, 210};
  }
  return {0, 0};
}

KernelStatus Backend::MatMulGroup(const WeightView* w, int n, const Mat& x, Mat* y) {
  if (n < 0 || (n > 0 && (w == nullptr || y == nullptr))) return KernelStatus::kInvalidArgument;
  for (int i = 0; i < n; ++i) {
    if (KernelStatus s = MatMul(w[i], x, y[i]); s != KernelStatus::kOk) return s;
  }
  return KernelStatus::kOk;
}

bool IsWeightType(uint32_t type_id) {
  return BlockLayoutOf(static_cast<WeightType>(type_id)).block_size != 0;
}

bool IsKvCacheType(WeightType type) {
  switch (type) {
    case WeightType::kF32:
    case WeightType::kF16:
    case WeightType::kBF16:
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
      return true;
    default:
      return false;
  }
}

}  // namespace deltaserve::kernels
