// Host launchers of elementwise_ops.h: check like the CPU backend (elementwise_checks.h), size
// the grid (elementwise_index.h), enqueue on ctx.stream, report a failed launch.
#include <cuda_runtime.h>

#include "kernels/cuda/conv1d.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/elementwise_checks.h"
#include "kernels/cuda/elementwise_index.h"
#include "kernels/cuda/elementwise_ops.h"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/rope.cuh"

namespace deltaserve::kernels::cuda {
namespace {

// kOk when the kernels just enqueued launched; a configuration error (or an earlier
// asynchronous fault the runtime reports now) is kDeviceError.
KernelStatus LaunchResult() {
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kDeviceError;
}

template <typename Op>
KernelStatus LaunchElementwise(const LaunchContext& ctx, const Op& op, int64_t rows, int64_t cols) {
  const Grid2 grid = ElementwiseGrid(rows, cols);
  if (grid.x == 0) return KernelStatus::kOk;
  ElementwiseKernel<<<dim3(static_cast<unsigned>(grid.x), static_cast<unsigned>(grid.y)),
                      grid.threads, 0, ctx.stream>>>(op, rows, cols);
  return LaunchResult();
}

// Launches Kernel<true> (a warp per run) or Kernel<false> (a block per run) over `runs` runs of
// n values; the kernel templates are passed as their two instantiations.
template <typename... Args>
KernelStatus LaunchRowReduction(const LaunchContext& ctx, int64_t runs, int64_t n,
                                void (*warp_kernel)(Args...), void (*block_kernel)(Args...),
                                Args... args) {
  const int64_t blocks = RowReductionBlocks(runs, n);
  if (blocks == 0) return KernelStatus::kOk;
  auto* kernel = n <= kWarpRowMax ? warp_kernel : block_kernel;
  kernel<<<static_cast<unsigned>(blocks), kRowBlockThreads, 0, ctx.stream>>>(args...);
  return LaunchResult();
}

}  // namespace

KernelStatus LaunchRmsNorm(const LaunchContext& ctx, const Mat& x, Vec w, float eps, Mat& y) {
  if (KernelStatus s = CheckRmsNorm(x, w, y); s != KernelStatus::kOk) return s;
  return LaunchRowReduction<Mat, const float*, float, Mat>(ctx, x.rows, x.cols, RmsNormKernel<true>,
                                                           RmsNormKernel<false>, x, w.data, eps, y);
}

KernelStatus LaunchGatedRmsNorm(const LaunchContext& ctx, const Mat& x, Vec w, const Mat& z,
                                float eps, Mat& y) {
  if (KernelStatus s = CheckGatedRmsNorm(x, w, z, y); s != KernelStatus::kOk) return s;
  return LaunchRowReduction<Mat, const float*, Mat, float, Mat>(
      ctx, x.rows, x.cols, GatedRmsNormKernel<true>, GatedRmsNormKernel<false>, x, w.data, z, eps,
      y);
}

KernelStatus LaunchL2Norm(const LaunchContext& ctx, Mat& x, int64_t group, float eps) {
  if (KernelStatus s = CheckL2Norm(x, group); s != KernelStatus::kOk) return s;
  const int64_t runs = x.rows * (x.cols / group);
  return LaunchRowReduction<Mat, int64_t, float, int64_t>(ctx, runs, group, L2NormKernel<true>,
                                                          L2NormKernel<false>, x, group, eps, runs);
}

KernelStatus LaunchCopy(const LaunchContext& ctx, const Mat& src, Mat& dst) {
  if (KernelStatus s = CheckCopy(src, dst); s != KernelStatus::kOk) return s;
  if (src.data == dst.data && src.stride == dst.stride) return KernelStatus::kOk;
  return LaunchElementwise(ctx, CopyOp{src, dst}, src.rows, src.cols);
}

KernelStatus LaunchAdd(const LaunchContext& ctx, Mat& x, const Mat& y) {
  if (KernelStatus s = CheckAdd(x, y); s != KernelStatus::kOk) return s;
  return LaunchElementwise(ctx, AddOp{x, y}, x.rows, x.cols);
}

KernelStatus LaunchSwiGlu(const LaunchContext& ctx, const Mat& gate, const Mat& up, Mat& out) {
  if (KernelStatus s = CheckSwiGlu(gate, up, out); s != KernelStatus::kOk) return s;
  return LaunchElementwise(ctx, SwiGluOp{gate, up, out}, gate.rows, gate.cols);
}

KernelStatus LaunchMulSigmoid(const LaunchContext& ctx, Mat& x, const Mat& gate) {
  if (KernelStatus s = CheckMulSigmoid(x, gate); s != KernelStatus::kOk) return s;
  const bool per_row = gate.cols == 1 && x.cols != 1;
  return LaunchElementwise(ctx, MulSigmoidOp{x, gate, per_row}, x.rows, x.cols);
}

KernelStatus LaunchDeltaNetGates(const LaunchContext& ctx, Mat& alpha_to_g, Mat& beta, Vec ssm_a,
                                 Vec dt_bias) {
  if (KernelStatus s = CheckDeltaNetGates(alpha_to_g, beta, ssm_a, dt_bias);
      s != KernelStatus::kOk) {
    return s;
  }
  return LaunchElementwise(ctx, DeltaNetGatesOp{alpha_to_g, beta, ssm_a.data, dt_bias.data},
                           alpha_to_g.rows, alpha_to_g.cols);
}

KernelStatus LaunchRopeNeox(const LaunchContext& ctx, Mat& x, const int32_t* positions,
                            int64_t n_heads, int64_t n_rot, float freq_base) {
  if (KernelStatus s = CheckRopeNeox(x, positions, n_heads, n_rot, freq_base);
      s != KernelStatus::kOk) {
    return s;
  }
  const int64_t n_tokens = x.rows / n_heads;
  if (n_tokens == 0) return KernelStatus::kOk;
  RopeNeoxKernel<<<static_cast<unsigned>(n_tokens), kRopeThreads, 0, ctx.stream>>>(
      x, positions, n_heads, n_rot, freq_base);
  return LaunchResult();
}

KernelStatus LaunchCausalConv1dSilu(const LaunchContext& ctx, const Mat& x, const float* w,
                                    int64_t kernel, float* state, Mat& y) {
  if (KernelStatus s = CheckCausalConv1dSilu(x, w, kernel, state, y); s != KernelStatus::kOk) {
    return s;
  }
  const int64_t channels = x.cols;
  if (x.rows == 0 || channels == 0) return KernelStatus::kOk;
  const int64_t window = kernel - 1;
  if (window > kConvMaxSharedWindow) {
    constexpr int kThreads = 128;
    const auto blocks = static_cast<unsigned>((channels + kThreads - 1) / kThreads);
    CausalConv1dSiluSerialKernel<<<blocks, kThreads, 0, ctx.stream>>>(x, w, kernel, state, y);
    return LaunchResult();
  }
  const int warps = ConvWarps(x.rows);
  const auto blocks = static_cast<unsigned>((channels + kConvChannels - 1) / kConvChannels);
  auto* conv = window <= kConvSmallWindow ? &CausalConv1dSiluKernel<kConvSmallWindow>
                                          : &CausalConv1dSiluKernel<kConvMaxSharedWindow>;
  conv<<<blocks, warps * 32, 0, ctx.stream>>>(x, w, kernel, state, y);
  return LaunchResult();
}

KernelStatus LaunchMoeRoute(const LaunchContext& ctx, const Mat& logits, int64_t k, int32_t* ids,
                            float* weights) {
  if (KernelStatus s = CheckMoeRoute(logits, k, ids, weights); s != KernelStatus::kOk) return s;
  if (logits.rows == 0) return KernelStatus::kOk;
  const auto blocks = static_cast<unsigned>((logits.rows + kRouteWarps - 1) / kRouteWarps);
  MoeRouteKernel<<<blocks, kRouteWarps * 32, 0, ctx.stream>>>(logits, k, ids, weights,
                                                              kRouteMinWeightSum);
  return LaunchResult();
}

}  // namespace deltaserve::kernels::cuda
