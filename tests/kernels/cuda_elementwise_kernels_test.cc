// CudaBackend's own kernels themselves (kernels/cuda/elementwise.cuh, norm.cuh, rope.cuh,
// conv1d.cuh, moe_route.cuh), compiled by the host compiler against the CUDA emulator
// (tests/kernels/cuda_emulator: every CUDA thread a fiber, barriers and warp shuffles as rounds
// in shuffled orders) and launched with the grids of kernels/cuda/elementwise_ops.cu, against the
// CPU backend. Where cuda_index_math_test replays the kernels' index helpers, this runs the
// kernels' own code: thread/warp/block indexing, the block reduction's shared sums and
// barriers, the conv kernel's halos, in-place writes and state update, the routing warp's
// shuffles. Sizes are small (fibers are slow); shapes still cross each mode switch.
//
// Tolerances, as in tests/gpu/cuda_elementwise_test.cc, except that the emulated math is the
// host's libm: Copy/Add, RoPE (same double cos/sin, no FMA either side) and the conv state are
// exact; exp-based ops 1e-5 relative (libm vs the CPU's FastExp: < 2e-7); reductions
// (3 + log2 n) * 1e-6 relative (summation order); MoE routing weights 1e-6 relative, ids equal.
#include <cuda_runtime.h>  // the emulator: this target's include path puts it first

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

// What these kernels use beyond the emulator's subset: blockDim/gridDim, shuffles of ints, the
// round-to-nearest intrinsics (plain operations on the host, which has no FMA contraction at
// the baseline x86-64 this library builds for).
namespace deltaserve::cuda_emu {
inline Dim3& EmulatedGridDim() {
  static Dim3 grid;
  return grid;
}
inline Dim3 EmulatedBlockDim() {
  return Dim3{static_cast<unsigned>(CurrentBlock()->fibers.size()), 1, 1};
}
}  // namespace deltaserve::cuda_emu
#ifndef gridDim
#define gridDim (::deltaserve::cuda_emu::EmulatedGridDim())
#endif
#ifndef blockDim
#define blockDim (::deltaserve::cuda_emu::EmulatedBlockDim())
#endif
inline int __shfl_xor_sync(unsigned mask, int value, int lane_mask) {
  return std::bit_cast<int>(__shfl_xor_sync(mask, std::bit_cast<float>(value), lane_mask));
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/conv1d.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/elementwise_index.h"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/rope.cuh"
#include "tests/kernels/op_test_support.h"

namespace deltaserve::kernels::cuda {
namespace {

using cuda_emu::Dim3;
using testing::HostMat;
using testing::Rng;

// cuda_emu::Launch with gridDim set for the kernel.
template <typename Kernel, typename... Args>
bool RunKernel(Dim3 grid, unsigned threads, Kernel kernel, Args... args) {
  cuda_emu::EmulatedGridDim() = grid;
  return cuda_emu::Launch(grid, threads, kernel, args...);
}

// elementwise_ops.cu LaunchElementwise, with an optional cap on gridDim.y so that small
// matrices exercise the strided row loop meant for more than 65535 rows.
template <typename Op>
void RunElementwise(const Op& op, int64_t rows, int64_t cols, int64_t max_grid_y = kMaxGridY) {
  Grid2 g = ElementwiseGrid(rows, cols);
  if (g.x == 0) return;
  g.y = std::min(g.y, max_grid_y);
  ASSERT_TRUE(RunKernel(Dim3{static_cast<unsigned>(g.x), static_cast<unsigned>(g.y), 1},
                        static_cast<unsigned>(g.threads), &ElementwiseKernel<Op>, op, rows, cols));
}

// elementwise_ops.cu LaunchRowReduction.
template <typename... Args>
void RunRowReduction(int64_t runs, int64_t n, void (*warp_kernel)(Args...),
                     void (*block_kernel)(Args...), Args... args) {
  const int64_t blocks = RowReductionBlocks(runs, n);
  if (blocks == 0) return;
  ASSERT_TRUE(RunKernel(Dim3{static_cast<unsigned>(blocks), 1, 1}, kRowBlockThreads,
                        n <= kWarpRowMax ? warp_kernel : block_kernel, args...));
}

// Expects |a - e| <= abs_tol + rel_tol |e| over the whole padded block (padding must be equal).
void ExpectNear(const HostMat& actual, const HostMat& expected, double abs_tol, double rel_tol,
                const std::string& what) {
  ASSERT_EQ(actual.rows(), expected.rows());
  int failures = 0;
  for (int64_t r = 0; r < actual.rows(); ++r) {
    for (int64_t c = 0; c < actual.cols(); ++c) {
      const double a = actual.at(r, c), e = expected.at(r, c);
      if (std::isnan(a) && std::isnan(e)) continue;
      if (!(std::fabs(a - e) <= abs_tol + rel_tol * std::fabs(e)) && ++failures <= 5) {
        ADD_FAILURE() << what << ": [" << r << "][" << c << "] " << a << " vs " << e;
      }
    }
  }
  EXPECT_EQ(failures, 0) << what;
  EXPECT_TRUE(actual.PaddingIntact()) << what << ": a write past the columns";
}

double ReductionTol(int64_t n) {
  return 1e-6 * (3.0 + std::ceil(std::log2(static_cast<double>(std::max<int64_t>(n, 2)))));
}

HostMat RandomMat(Rng& rng, int64_t rows, int64_t cols, int64_t pad, float sigma = 1.0f) {
  HostMat m(rows, cols, pad);
  rng.FillNormal(m, sigma);
  return m;
}

class CudaElementwiseKernels : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> cpu_ = MakeCpuBackend(1);
};

TEST_F(CudaElementwiseKernels, CopyAddSwiGluMulSigmoidGates) {
  Rng rng(1);
  for (const int64_t max_y : {kMaxGridY, int64_t{3}}) {
    const std::string tag = " (grid y " + std::to_string(max_y) + ")";
    HostMat src = RandomMat(rng, 7, 300, 3), dst_gpu(7, 300, 5), dst_cpu(7, 300, 5);
    RunElementwise(CopyOp{src.mat(), dst_gpu.mat()}, 7, 300, max_y);
    Mat d = dst_cpu.mat();
    ASSERT_EQ(cpu_->Copy(src.mat(), d), KernelStatus::kOk);
    ExpectNear(dst_gpu, dst_cpu, 0, 0, "copy" + tag);

    HostMat x_gpu = RandomMat(rng, 7, 300, 2), y = RandomMat(rng, 7, 300, 0);
    HostMat x_cpu = x_gpu;
    RunElementwise(AddOp{x_gpu.mat(), y.mat()}, 7, 300, max_y);
    Mat xc = x_cpu.mat();
    ASSERT_EQ(cpu_->Add(xc, y.mat()), KernelStatus::kOk);
    ExpectNear(x_gpu, x_cpu, 0, 0, "add" + tag);

    // SwiGlu into the gate (aliasing) on column views of a fused gate|up.
    HostMat fused_gpu = RandomMat(rng, 5, 2 * 100, 3, 3.0f);
    HostMat fused_cpu = fused_gpu;
    const Mat g = fused_gpu.mat().Cols(0, 100), u = fused_gpu.mat().Cols(100, 100);
    RunElementwise(SwiGluOp{g, u, g}, 5, 100, max_y);
    Mat gc = fused_cpu.mat().Cols(0, 100);
    ASSERT_EQ(cpu_->SwiGlu(gc, fused_cpu.mat().Cols(100, 100), gc), KernelStatus::kOk);
    ExpectNear(fused_gpu, fused_cpu, 0, 1e-5, "swiglu" + tag);

    HostMat m_gpu = RandomMat(rng, 6, 77, 1), gate = RandomMat(rng, 6, 77, 0, 4.0f);
    HostMat m_cpu = m_gpu;
    RunElementwise(MulSigmoidOp{m_gpu.mat(), gate.mat(), false}, 6, 77, max_y);
    RunElementwise(MulSigmoidOp{m_gpu.mat(), gate.mat().Cols(3, 1), true}, 6, 77, max_y);
    Mat mc = m_cpu.mat();
    ASSERT_EQ(cpu_->MulSigmoid(mc, gate.mat()), KernelStatus::kOk);
    ASSERT_EQ(cpu_->MulSigmoid(mc, gate.mat().Cols(3, 1)), KernelStatus::kOk);
    ExpectNear(m_gpu, m_cpu, 0, 1e-5, "mul sigmoid" + tag);

    HostMat ab_gpu = RandomMat(rng, 9, 2 * 32, 2, 12.0f);
    HostMat ab_cpu = ab_gpu;
    std::vector<float> a(32), dt(32);
    for (int h = 0; h < 32; ++h) {
      a[h] = -std::exp(rng.Normal());
      dt[h] = rng.Normal();
    }
    RunElementwise(
        DeltaNetGatesOp{ab_gpu.mat().Cols(0, 32), ab_gpu.mat().Cols(32, 32), a.data(), dt.data()},
        9, 32, max_y);
    Mat al = ab_cpu.mat().Cols(0, 32), be = ab_cpu.mat().Cols(32, 32);
    ASSERT_EQ(cpu_->DeltaNetGates(al, be, {a.data(), 32}, {dt.data(), 32}), KernelStatus::kOk);
    ExpectNear(ab_gpu, ab_cpu, 1e-30, 1e-5, "deltanet gates" + tag);
  }
}

TEST_F(CudaElementwiseKernels, NormsInWarpAndBlockMode) {
  Rng rng(2);
  for (const int64_t cols : {int64_t{1}, int64_t{100}, int64_t{1024}, int64_t{1500}}) {
    const int64_t rows = cols > 1024 ? 3 : 11;
    const std::string tag = " cols " + std::to_string(cols);
    std::vector<float> w = rng.NormalVector(cols);
    // RmsNorm in place, weighted.
    HostMat x_gpu = RandomMat(rng, rows, cols, 2, 2.0f);
    HostMat x_cpu = x_gpu;
    RunRowReduction<Mat, const float*, float, Mat>(rows, cols, RmsNormKernel<true>,
                                                   RmsNormKernel<false>, x_gpu.mat(), w.data(),
                                                   1e-6f, x_gpu.mat());
    Mat xc = x_cpu.mat();
    ASSERT_EQ(cpu_->RmsNorm(xc, {w.data(), cols}, 1e-6f, xc), KernelStatus::kOk);
    ExpectNear(x_gpu, x_cpu, 0, ReductionTol(cols), "rmsnorm" + tag);
    // RmsNorm without weight into another matrix.
    HostMat src = RandomMat(rng, rows, cols, 1), y_gpu(rows, cols, 3), y_cpu(rows, cols, 3);
    RunRowReduction<Mat, const float*, float, Mat>(rows, cols, RmsNormKernel<true>,
                                                   RmsNormKernel<false>, src.mat(), nullptr, 1e-6f,
                                                   y_gpu.mat());
    Mat yc = y_cpu.mat();
    ASSERT_EQ(cpu_->RmsNorm(src.mat(), {}, 1e-6f, yc), KernelStatus::kOk);
    ExpectNear(y_gpu, y_cpu, 0, ReductionTol(cols), "rmsnorm unweighted" + tag);
    // GatedRmsNorm into z.
    HostMat gx = RandomMat(rng, rows, cols, 0), z_gpu = RandomMat(rng, rows, cols, 2, 3.0f);
    HostMat z_cpu = z_gpu;
    RunRowReduction<Mat, const float*, Mat, float, Mat>(rows, cols, GatedRmsNormKernel<true>,
                                                        GatedRmsNormKernel<false>, gx.mat(),
                                                        w.data(), z_gpu.mat(), 1e-6f, z_gpu.mat());
    Mat zc = z_cpu.mat();
    ASSERT_EQ(cpu_->GatedRmsNorm(gx.mat(), {w.data(), cols}, zc, 1e-6f, zc), KernelStatus::kOk);
    ExpectNear(z_gpu, z_cpu, 0, ReductionTol(cols) + 1e-6, "gated rmsnorm" + tag);
  }
  // L2Norm: heads of 64 on a column view (warp mode), groups of 1100 (block mode), a zero head.
  for (const int64_t group : {int64_t{64}, int64_t{1100}}) {
    const int64_t groups = 3, rows = 4;
    HostMat qkv_gpu = RandomMat(rng, rows, groups * group + 50, 2);
    for (int64_t i = 0; i < group; ++i) qkv_gpu.at(1, 10 + group + i) = 0.0f;
    HostMat qkv_cpu = qkv_gpu;
    const Mat q = qkv_gpu.mat().Cols(10, groups * group);
    const int64_t runs = rows * groups;
    RunRowReduction<Mat, int64_t, float, int64_t>(runs, group, L2NormKernel<true>,
                                                  L2NormKernel<false>, q, group, 1e-6f, runs);
    Mat qc = qkv_cpu.mat().Cols(10, groups * group);
    ASSERT_EQ(cpu_->L2Norm(qc, group, 1e-6f), KernelStatus::kOk);
    ExpectNear(qkv_gpu, qkv_cpu, 0, ReductionTol(group), "l2norm group " + std::to_string(group));
  }
}

TEST_F(CudaElementwiseKernels, RopePartialAndChunkedIsBitExact) {
  Rng rng(3);
  struct Case {
    int64_t n_tokens, n_heads, head_dim, n_rot;
  };
  for (const Case cs : {Case{3, 2, 64, 32}, Case{2, 3, 40, 40}, Case{1, 1, 1030, 1026}}) {
    std::vector<int32_t> pos(static_cast<size_t>(cs.n_tokens));
    for (int64_t t = 0; t < cs.n_tokens; ++t) pos[t] = static_cast<int32_t>(7 + 300000 * t);
    HostMat x_gpu = RandomMat(rng, cs.n_tokens * cs.n_heads, cs.head_dim, 3);
    HostMat x_cpu = x_gpu;
    ASSERT_TRUE(RunKernel(Dim3{static_cast<unsigned>(cs.n_tokens), 1, 1}, kRopeThreads,
                          &RopeNeoxKernel, x_gpu.mat(), static_cast<const int32_t*>(pos.data()),
                          cs.n_heads, cs.n_rot, 1e6f));
    Mat xc = x_cpu.mat();
    ASSERT_EQ(cpu_->RopeNeox(xc, pos.data(), cs.n_heads, cs.n_rot, 1e6f), KernelStatus::kOk);
    ExpectNear(x_gpu, x_cpu, 0, 0, "rope n_rot " + std::to_string(cs.n_rot));
  }
}

// elementwise_ops.cu LaunchCausalConv1dSilu.
void RunConv(const Mat& x, const float* w, int64_t kernel, float* state, const Mat& y) {
  const int64_t channels = x.cols, window = kernel - 1;
  if (x.rows == 0 || channels == 0) return;
  if (window > kConvMaxSharedWindow) {
    ASSERT_TRUE(RunKernel(Dim3{static_cast<unsigned>((channels + 127) / 128), 1, 1}, 128,
                          &CausalConv1dSiluSerialKernel, x, w, kernel, state, y));
    return;
  }
  const int warps = ConvWarps(x.rows);
  const Dim3 grid{static_cast<unsigned>((channels + kConvChannels - 1) / kConvChannels), 1, 1};
  auto* conv = window <= kConvSmallWindow ? &CausalConv1dSiluKernel<kConvSmallWindow>
                                          : &CausalConv1dSiluKernel<kConvMaxSharedWindow>;
  ASSERT_TRUE(RunKernel(grid, static_cast<unsigned>(warps * 32), conv, x, w, kernel, state, y));
}

TEST_F(CudaElementwiseKernels, Conv1dSegmentsHalosInPlaceAndState) {
  Rng rng(4);
  struct Case {
    int64_t n_tokens, channels, kernel;
  };
  for (const Case cs : {Case{1, 40, 4}, Case{5, 70, 4}, Case{20, 33, 4}, Case{9, 40, 1},
                        Case{6, 36, 2}, Case{12, 40, 41}, Case{5, 20, 50}, Case{2, 8, 4}}) {
    for (const bool in_place : {false, true}) {
      const std::string what = "T " + std::to_string(cs.n_tokens) + " C " +
                               std::to_string(cs.channels) + " kernel " +
                               std::to_string(cs.kernel) + (in_place ? " in place" : "");
      const int64_t window = cs.kernel - 1;
      const std::vector<float> w = rng.NormalVector(cs.channels * cs.kernel, 0.5f);
      std::vector<float> state_gpu = rng.NormalVector(std::max<int64_t>(window, 1) * cs.channels);
      std::vector<float> state_cpu = state_gpu;
      HostMat proj_gpu = RandomMat(rng, cs.n_tokens, cs.channels + 6, 2);
      HostMat proj_cpu = proj_gpu;
      HostMat y_gpu(cs.n_tokens, cs.channels, 1), y_cpu(cs.n_tokens, cs.channels, 1);
      const Mat xg = proj_gpu.mat().Cols(3, cs.channels);
      RunConv(xg, w.data(), cs.kernel, window > 0 ? state_gpu.data() : nullptr,
              in_place ? xg : y_gpu.mat());
      Mat xc = proj_cpu.mat().Cols(3, cs.channels);
      Mat yc = in_place ? xc : y_cpu.mat();
      ASSERT_EQ(cpu_->CausalConv1dSilu(xc, w.data(), cs.kernel,
                                       window > 0 ? state_cpu.data() : nullptr, yc),
                KernelStatus::kOk);
      ExpectNear(proj_gpu, proj_cpu, 1e-6, 1e-5, what + " x");
      ExpectNear(y_gpu, y_cpu, 1e-6, 1e-5, what + " y");
      EXPECT_EQ(state_gpu, state_cpu) << what << " state";
    }
  }
}

// A row alone gives the bits it gives among others (RmsNorm in warp and block mode), and a
// conv split into calls the bits of one call (the state carries the window exactly).
TEST_F(CudaElementwiseKernels, BatchInvariantRowsAndExactConvSplits) {
  Rng rng(6);
  for (const int64_t cols : {int64_t{200}, int64_t{1500}}) {
    const int64_t rows = 10;
    HostMat x = RandomMat(rng, rows, cols, 0), all(rows, cols), one(rows, cols);
    std::vector<float> w = rng.NormalVector(cols);
    RunRowReduction<Mat, const float*, float, Mat>(
        rows, cols, RmsNormKernel<true>, RmsNormKernel<false>, x.mat(), w.data(), 1e-6f, all.mat());
    for (int64_t r = 0; r < rows; ++r) {
      RunRowReduction<Mat, const float*, float, Mat>(1, cols, RmsNormKernel<true>,
                                                     RmsNormKernel<false>, x.mat().Rows(r, 1),
                                                     w.data(), 1e-6f, one.mat().Rows(r, 1));
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(all.at(r, c), one.at(r, c)) << "cols " << cols << " [" << r << "][" << c << "]";
      }
    }
  }
  const int64_t channels = 40, kernel = 4, n_tokens = 30;
  HostMat x = RandomMat(rng, n_tokens, channels, 0), y_all(n_tokens, channels),
          y_split(n_tokens, channels);
  const std::vector<float> w = rng.NormalVector(channels * kernel, 0.5f);
  std::vector<float> s_all = rng.NormalVector((kernel - 1) * channels), s_split = s_all;
  RunConv(x.mat(), w.data(), kernel, s_all.data(), y_all.mat());
  for (const auto& [first, n] : {std::pair{0, 1}, std::pair{1, 12}, std::pair{13, 17}}) {
    RunConv(x.mat().Rows(first, n), w.data(), kernel, s_split.data(), y_split.mat().Rows(first, n));
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      ASSERT_EQ(y_all.at(t, c), y_split.at(t, c)) << "[" << t << "][" << c << "]";
    }
  }
  EXPECT_EQ(s_all, s_split);
}

TEST_F(CudaElementwiseKernels, MoeRouteWarpPerRow) {
  Rng rng(5);
  struct Case {
    int64_t rows, n_expert, k;
    int kind;  // 0 random, 1 ties, 2 a NaN row and an inf row
  };
  for (const Case cs : {Case{5, 256, 8, 0}, Case{6, 33, 33, 0}, Case{3, 100, 6, 1},
                        Case{2, 40, 4, 2}, Case{1, 7, 2, 0}}) {
    HostMat logits = RandomMat(rng, cs.rows, cs.n_expert, 2, 2.0f);
    if (cs.kind == 1) {
      for (int64_t t = 0; t < cs.rows; ++t) {
        for (int64_t e = 0; e < cs.n_expert; ++e) logits.at(t, e) = std::floor(logits.at(t, e));
      }
    } else if (cs.kind == 2) {
      logits.at(0, 5) = std::numeric_limits<float>::quiet_NaN();
      logits.at(1, 9) = std::numeric_limits<float>::infinity();
    }
    const size_t n = static_cast<size_t>(cs.rows * cs.k);
    std::vector<int32_t> ids_gpu(n, -7), ids_cpu(n, -7);
    std::vector<float> w_gpu(n), w_cpu(n);
    const Dim3 grid{static_cast<unsigned>((cs.rows + kRouteWarps - 1) / kRouteWarps), 1, 1};
    ASSERT_TRUE(RunKernel(grid, kRouteWarps * 32, &MoeRouteKernel, logits.mat(), cs.k,
                          ids_gpu.data(), w_gpu.data(), kRouteMinWeightSum));
    ASSERT_EQ(cpu_->MoeRoute(logits.mat(), cs.k, ids_cpu.data(), w_cpu.data()), KernelStatus::kOk);
    const std::string what = "experts " + std::to_string(cs.n_expert) + " k " +
                             std::to_string(cs.k) + " kind " + std::to_string(cs.kind);
    EXPECT_EQ(ids_gpu, ids_cpu) << what;
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(w_cpu[i])) {
        EXPECT_TRUE(std::isnan(w_gpu[i])) << what << " [" << i << "]";
      } else {
        EXPECT_NEAR(w_gpu[i], w_cpu[i], 1e-6 * w_cpu[i] + 1e-30) << what << " [" << i << "]";
      }
    }
  }
}

}  // namespace
}  // namespace deltaserve::kernels::cuda
