#include "kernels/cpu/conv1d.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace deltaserve::kernels {
namespace {

// Below this many multiply-adds the op stays on the calling thread (a decode step is C * kernel).
constexpr int64_t kParallelFlops = 1 << 16;
// Channels per parallel task: a multiple of the vector width, big enough to amortise the hand-out.
constexpr int64_t kChannelBlock = 256;

bool IsValid(const Mat& m) {
  return m.rows >= 0 && m.cols >= 0 && m.stride >= m.cols &&
         (m.data != nullptr || m.rows == 0 || m.cols == 0);
}

inline float Silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

KernelStatus CausalConv1dSiluCpu(ThreadPool& pool, const Mat& x, const float* w, int64_t kernel,
                                 float* state, Mat& y) {
  if (!IsValid(x) || !IsValid(y) || x.rows != y.rows || x.cols != y.cols || kernel < 1 ||
      w == nullptr || (kernel > 1 && state == nullptr)) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t n_tokens = x.rows;
  const int64_t channels = x.cols;
  const int64_t window = kernel - 1;
  if (n_tokens == 0 || channels == 0) return KernelStatus::kOk;

  // Taps transposed to [kernel][C] so every inner loop below runs over contiguous channels.
  std::vector<float> taps(kernel * channels);
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t j = 0; j < kernel; ++j) taps[j * channels + c] = w[c * kernel + j];
  }
  // The old window is needed after the new one has been written to `state`.
  std::vector<float> old_window(state, state + window * channels);

  auto run_channels = [&](int64_t c0, int64_t c1) {
    const int64_t nc = c1 - c0;
    // Input row i (i in [-window, T)), restricted to channels [c0, c1).
    auto input = [&](int64_t i) -> const float* {
      return i < 0 ? old_window.data() + (window + i) * channels + c0 : x.data + i * x.stride + c0;
    };
    // New window first: with y aliasing x the newest inputs are overwritten below.
    for (int64_t r = 0; r < window; ++r) {
      std::copy_n(input(n_tokens - window + r), nc, state + r * channels + c0);
    }
    std::vector<float> acc(nc);
    for (int64_t t = n_tokens - 1; t >= 0; --t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < kernel; ++j) {
        const float* __restrict in = input(t - window + j);
        const float* __restrict tap = taps.data() + j * channels + c0;
        float* __restrict a = acc.data();
        for (int64_t c = 0; c < nc; ++c) a[c] += tap[c] * in[c];
      }
      float* yr = y.data + t * y.stride + c0;
      for (int64_t c = 0; c < nc; ++c) yr[c] = Silu(acc[c]);
    }
  };

  const int64_t flops = n_tokens * channels * kernel;
  if (flops < kParallelFlops || pool.size() == 1 || channels <= kChannelBlock) {
    run_channels(0, channels);
  } else {
    const int64_t n_blocks = (channels + kChannelBlock - 1) / kChannelBlock;
    pool.ParallelFor(n_blocks, 1, [&](int64_t b0, int64_t b1) {
      run_channels(b0 * kChannelBlock, std::min(channels, b1 * kChannelBlock));
    });
  }
  return KernelStatus::kOk;
}

}  // namespace deltaserve::kernels
