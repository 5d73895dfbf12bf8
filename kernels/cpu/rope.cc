#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace deltaserve::kernels {
namespace {

// Below this many rotated values the op stays on the calling thread (one decode step).
constexpr int64_t kParallelElements = 1 << 14;

}  // namespace

KernelStatus RopeNeoxCpu(ThreadPool& pool, Mat& x, const int32_t* positions, int64_t n_heads,
                         int64_t n_rot, float freq_base) {
  if (x.rows < 0 || x.cols < 0 || x.stride < x.cols || n_heads <= 0 || n_rot <= 0 ||
      n_rot % 2 != 0 || n_rot > x.cols || x.rows % n_heads != 0 || !(freq_base > 0.0f)) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t n_tokens = x.rows / n_heads;
  if (n_tokens == 0) return KernelStatus::kOk;
  if (x.data == nullptr || positions == nullptr) return KernelStatus::kInvalidArgument;
  const int64_t half = n_rot / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(static_cast<double>(freq_base),
                           -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
  }
  auto rotate_tokens = [&](int64_t begin, int64_t end) {
    std::vector<float> cos_a(half), sin_a(half);
    for (int64_t t = begin; t < end; ++t) {
      const double pos = positions[t];
      for (int64_t i = 0; i < half; ++i) {
        const double a = pos * inv_freq[i];
        cos_a[i] = static_cast<float>(std::cos(a));
        sin_a[i] = static_cast<float>(std::sin(a));
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        float* lo = x.data + (t * n_heads + h) * x.stride;
        float* hi = lo + half;
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = lo[i];
          const float x1 = hi[i];
          lo[i] = x0 * cos_a[i] - x1 * sin_a[i];
          hi[i] = x1 * cos_a[i] + x0 * sin_a[i];
        }
      }
    }
  };
  const int64_t per_token = n_heads * n_rot;
  if (n_tokens * per_token < kParallelElements || pool.size() == 1) {
    rotate_tokens(0, n_tokens);
  } else {
    pool.ParallelFor(n_tokens, std::max<int64_t>(1, kParallelElements / 4 / per_token),
                     rotate_tokens);
  }
  return KernelStatus::kOk;
}

}  // namespace deltaserve::kernels
