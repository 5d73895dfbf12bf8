// The host-side pieces of CudaBackend's own kernels, checked on the CPU (no GPU needed):
// - elementwise_index.h: the element-wise grid and the row-reduction mapping cover every
//   element / run exactly once; the conv1d token segments partition the tokens, and a host
//   replay of the conv kernel's two phases (halo + new state read before the barrier, segments
//   convolved after, in reverse order, in place) equals CausalConv1dSiluCpu; a host replay of
//   the MoE routing warp (lane candidates + xor butterfly) picks the same experts with the same
//   weights as MoeRouteCpu, ties, all-NaN rows and clamped sums included.
// - elementwise_checks.h: each check refuses exactly the calls the CPU backend refuses.
// - cuda_backend.h: CudaDeviceCount/QueryCudaDevice/MakeCudaBackend never abort; on a machine
//   without a GPU they return 0 / false / null with a reason.
// Tolerances: the conv replay uses std::exp for SiLU where the CPU uses its FastExp (relative
// error < 1e-7), so outputs agree to 1e-6 relative; the MoE replay computes p exactly as
// MoeRouteCpu does (same f32 operations in the same order), so ids and weights agree exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/conv1d.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/elementwise_checks.h"
#include "kernels/cuda/elementwise_index.h"
#include "tests/kernels/op_test_support.h"
#if defined(DELTASERVE_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace deltaserve::kernels::cuda {
namespace {

using testing::HostMat;
using testing::Rng;

// --- element-wise grid ---------------------------------------------------------------------

TEST(CudaElementwiseGrid, CoversEveryElementOnce) {
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape s : {Shape{1, 1}, Shape{3, 31}, Shape{7, 33}, Shape{2, 1000}, Shape{5, 256},
                        Shape{70000, 3}, Shape{65535, 2}, Shape{131071, 1}}) {
    const Grid2 g = ElementwiseGrid(s.rows, s.cols);
    ASSERT_GT(g.x, 0);
    ASSERT_GT(g.y, 0);
    EXPECT_LE(g.y, kMaxGridY);
    EXPECT_EQ(g.threads % 32, 0);
    EXPECT_LE(g.threads, kElementwiseMaxThreads);
    std::vector<int> hits(static_cast<size_t>(s.rows * s.cols), 0);
    for (int64_t by = 0; by < g.y; ++by) {
      for (int64_t bx = 0; bx < g.x; ++bx) {
        for (int64_t tx = 0; tx < g.threads; ++tx) {
          const int64_t c = bx * g.threads + tx;  // ElementwiseKernel's indexing
          if (c >= s.cols) continue;
          for (int64_t r = by; r < s.rows; r += g.y) ++hits[static_cast<size_t>(r * s.cols + c)];
        }
      }
    }
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }))
        << s.rows << " x " << s.cols;
  }
}

TEST(CudaElementwiseGrid, EmptyMatrixLaunchesNothing) {
  EXPECT_EQ(ElementwiseGrid(0, 5).x, 0);
  EXPECT_EQ(ElementwiseGrid(5, 0).x, 0);
  EXPECT_EQ(ElementwiseThreads(1), 32);
  EXPECT_EQ(ElementwiseThreads(32), 32);
  EXPECT_EQ(ElementwiseThreads(33), 64);
  EXPECT_EQ(ElementwiseThreads(100000), kElementwiseMaxThreads);
}

// --- row reductions ------------------------------------------------------------------------

TEST(CudaRowReduction, EveryRunHasExactlyOneOwner) {
  for (const int64_t n : {int64_t{1}, int64_t{128}, kWarpRowMax, kWarpRowMax + 1, int64_t{5120}}) {
    for (const int64_t runs : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{1000}}) {
      const int64_t blocks = RowReductionBlocks(runs, n);
      std::vector<int> owners(static_cast<size_t>(runs), 0);
      for (int64_t b = 0; b < blocks; ++b) {
        if (n <= kWarpRowMax) {
          for (int w = 0; w < kWarpsPerRowBlock; ++w) {
            const int64_t run = WarpRun(b, w);
            if (run < runs) ++owners[static_cast<size_t>(run)];
          }
        } else {
          ++owners[static_cast<size_t>(b)];  // block mode: run = blockIdx.x
        }
      }
      EXPECT_TRUE(std::all_of(owners.begin(), owners.end(), [](int o) { return o == 1; }))
          << "n " << n << " runs " << runs;
      EXPECT_EQ(RunsPerBlock(n), n <= kWarpRowMax ? kWarpsPerRowBlock : 1);
    }
  }
  EXPECT_EQ(RowReductionBlocks(0, 16), 0);
  EXPECT_EQ(RowReductionBlocks(16, 0), 0);
}

TEST(CudaRowReduction, GroupOffsetsWalkEveryHeadOfEveryRow) {
  const int64_t rows = 5, groups = 3, group = 128, stride = groups * group + 17;
  for (int64_t run = 0; run < rows * groups; ++run) {
    const int64_t row = run / groups, g = run % groups;
    EXPECT_EQ(GroupOffset(run, groups, group, stride), row * stride + g * group);
  }
}

// --- rope -----------------------------------------------------------------------------------

TEST(CudaRope, ExponentIsTheCpuExpression) {
  // RopeNeoxCpu: pow(base, -2.0 * double(i) / double(n_rot)); the kernel must see the same
  // double so its f32 cos/sin round to the same values.
  for (const int64_t n_rot : {int64_t{2}, int64_t{64}, int64_t{128}}) {
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      EXPECT_EQ(RopeExponent(i, n_rot), -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    }
  }
}

// --- conv1d ---------------------------------------------------------------------------------

TEST(CudaConv1d, SegmentsPartitionTheTokens) {
  for (int64_t t = 1; t <= 200; ++t) {
    const int warps = ConvWarps(t);
    ASSERT_GE(warps, 1);
    ASSERT_LE(warps, kConvMaxWarps);
    EXPECT_EQ(SegmentBegin(t, warps, 0), 0);
    EXPECT_EQ(SegmentBegin(t, warps, warps), t);
    for (int s = 0; s < warps; ++s) {
      const int64_t len = SegmentBegin(t, warps, s + 1) - SegmentBegin(t, warps, s);
      EXPECT_GE(len, t / warps);
      EXPECT_LE(len, t / warps + 1);
      EXPECT_GE(len, 1) << "an empty segment at T = " << t;
    }
  }
}

// The conv kernel replayed on the host with the kernel's own index helpers: phase 1 for all
// warps, then phase 2 warp by warp in reverse order (a warp that ran late on the GPU), with
// y == x when in_place.
void ReplayConvKernel(HostMat& x, HostMat& y_storage, bool in_place, const std::vector<float>& w,
                      int64_t kernel, std::vector<float>& state, int warps) {
  const int64_t channels = x.cols(), n_tokens = x.rows(), window = kernel - 1;
  HostMat& y = in_place ? x : y_storage;
  std::vector<float> halo(static_cast<size_t>(warps * window * channels));
  std::vector<float> new_state(static_cast<size_t>(window * channels));
  auto input = [&](int64_t t, int64_t c) {
    const ConvSource src = ConvInputSource(t, window);
    return src.from_state ? state[static_cast<size_t>(src.row * channels + c)] : x.at(src.row, c);
  };
  for (int warp = 0; warp < warps; ++warp) {
    const int64_t t0 = SegmentBegin(n_tokens, warps, warp);
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t j = 0; j < window; ++j) {
        halo[static_cast<size_t>((warp * window + j) * channels + c)] = input(t0 - window + j, c);
      }
      if (warp == warps - 1) {
        for (int64_t j = 0; j < window; ++j) {
          new_state[static_cast<size_t>(j * channels + c)] = input(n_tokens - window + j, c);
        }
      }
    }
  }
  for (int warp = warps - 1; warp >= 0; --warp) {
    const int64_t t0 = SegmentBegin(n_tokens, warps, warp);
    const int64_t t1 = SegmentBegin(n_tokens, warps, warp + 1);
    for (int64_t c = 0; c < channels; ++c) {
      // No halo at all for a kernel of 1 (window 0): no pointer into the empty vector.
      float* h = window > 0 ? halo.data() + warp * window * channels + c : nullptr;
      for (int64_t t = t0; t < t1; ++t) {
        const float xt = x.at(t, c);
        float acc = 0.0f;
        for (int64_t j = 0; j < window; ++j) acc += w[c * kernel + j] * h[j * channels];
        acc += w[c * kernel + window] * xt;
        for (int64_t j = 0; j + 1 < window; ++j) h[j * channels] = h[(j + 1) * channels];
        if (window > 0) h[(window - 1) * channels] = xt;
        y.at(t, c) = acc / (1.0f + std::exp(-acc));
      }
    }
  }
  state = new_state;
}

TEST(CudaConv1d, KernelReplayMatchesCpuInPlaceAndAcrossCalls) {
  Rng rng(7);
  ThreadPool pool(1);
  struct Case {
    int64_t t, c, kernel;
  };
  for (const Case cs : {Case{1, 40, 4}, Case{2, 7, 4}, Case{3, 5, 4}, Case{9, 33, 4},
                        Case{64, 70, 4}, Case{5, 12, 1}, Case{6, 12, 2}, Case{17, 9, 6}}) {
    for (const bool in_place : {false, true}) {
      HostMat x(cs.t, cs.c, 3);
      rng.FillNormal(x);
      const std::vector<float> w = rng.NormalVector(cs.c * cs.kernel, 0.5f);
      const int64_t window = cs.kernel - 1;
      std::vector<float> state_cpu = rng.NormalVector(window * cs.c);
      std::vector<float> state_gpu = state_cpu;

      HostMat x_cpu = x;
      HostMat y_cpu(cs.t, cs.c, 1);
      Mat xm = x_cpu.mat(), ym = y_cpu.mat();
      ASSERT_EQ(CausalConv1dSiluCpu(pool, xm, w.data(), cs.kernel,
                                    window > 0 ? state_cpu.data() : nullptr, ym),
                KernelStatus::kOk);
      // Two calls (a split prefill) through the replay: the state carries the window over.
      const int64_t split = cs.t / 2;
      HostMat y_gpu(cs.t, cs.c, 1);
      for (const auto& [first, n] :
           {std::pair{int64_t{0}, split}, std::pair{split, cs.t - split}}) {
        if (n == 0) continue;
        HostMat xs(n, cs.c), ys(n, cs.c);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t c = 0; c < cs.c; ++c) xs.at(t, c) = x.at(first + t, c);
        }
        ReplayConvKernel(xs, ys, in_place, w, cs.kernel, state_gpu, ConvWarps(n));
        const HostMat& out = in_place ? xs : ys;
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t c = 0; c < cs.c; ++c) y_gpu.at(first + t, c) = out.at(t, c);
        }
      }
      for (int64_t t = 0; t < cs.t; ++t) {
        for (int64_t c = 0; c < cs.c; ++c) {
          EXPECT_NEAR(y_gpu.at(t, c), y_cpu.at(t, c), 1e-6 * std::fabs(y_cpu.at(t, c)) + 1e-7)
              << "T " << cs.t << " C " << cs.c << " kernel " << cs.kernel << " [" << t << "][" << c
              << "]";
        }
      }
      // The new window is the last inputs, copied: exactly the CPU's.
      EXPECT_EQ(state_gpu, state_cpu) << "T " << cs.t << " kernel " << cs.kernel;
    }
  }
}

// --- MoE routing ------------------------------------------------------------------------------

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// MoeRouteKernel on the host: p as MoeRouteCpu computes it, 32 lanes, k rounds of lane
// candidates and an xor butterfly of RouteCombine (checked to leave every lane the same key).
Routed ReplayRouteKernel(const HostMat& logits, int64_t k) {
  Routed out;
  const int64_t n = logits.cols();
  std::vector<float> p(static_cast<size_t>(n));
  for (int64_t t = 0; t < logits.rows(); ++t) {
    float mx = logits.at(t, 0);
    for (int64_t e = 1; e < n; ++e) mx = std::max(mx, logits.at(t, e));
    float sum = 0.0f;
    for (int64_t e = 0; e < n; ++e) sum += (p[e] = std::exp(logits.at(t, e) - mx));
    const float inv_sum = 1.0f / sum;
    for (float& v : p) v *= inv_sum;
    const auto prob = [&](int64_t e) { return p[static_cast<size_t>(e)]; };
    RouteKey prev{0.0f, -1};
    float top_sum = 0.0f;
    std::vector<float> row_weights;
    for (int64_t j = 0; j < k; ++j) {
      RouteKey lanes[32];
      for (int lane = 0; lane < 32; ++lane)
        lanes[lane] = RouteLaneCandidate(prob, n, lane, 32, prev);
      for (int offset = 16; offset > 0; offset >>= 1) {
        RouteKey next[32];
        for (int lane = 0; lane < 32; ++lane) {
          next[lane] = RouteCombine(lanes[lane], lanes[lane ^ offset]);
        }
        std::copy(next, next + 32, lanes);
      }
      for (int lane = 1; lane < 32; ++lane) {
        EXPECT_EQ(lanes[lane].id, lanes[0].id) << "lanes disagree in round " << j;
      }
      out.ids.push_back(lanes[0].id);
      row_weights.push_back(lanes[0].p);
      top_sum += lanes[0].p;
      prev = lanes[0];
    }
    const float inv_top = RouteInvSum(top_sum, kRouteMinWeightSum);
    for (float wv : row_weights) out.weights.push_back(wv * inv_top);
  }
  return out;
}

void ExpectSameRoute(const HostMat& logits, int64_t k, const std::string& what) {
  Routed cpu{std::vector<int32_t>(static_cast<size_t>(logits.rows() * k)),
             std::vector<float>(static_cast<size_t>(logits.rows() * k))};
  HostMat copy = logits;
  ASSERT_EQ(MoeRouteCpu(copy.mat(), k, cpu.ids.data(), cpu.weights.data()), KernelStatus::kOk);
  const Routed gpu = ReplayRouteKernel(logits, k);
  EXPECT_EQ(gpu.ids, cpu.ids) << what;
  ASSERT_EQ(gpu.weights.size(), cpu.weights.size());
  for (size_t i = 0; i < cpu.weights.size(); ++i) {
    if (std::isnan(cpu.weights[i])) {
      EXPECT_TRUE(std::isnan(gpu.weights[i])) << what << " weight " << i;
    } else {
      EXPECT_EQ(gpu.weights[i], cpu.weights[i]) << what << " weight " << i;
    }
  }
}

TEST(CudaMoeRoute, LaneTreeMatchesCpuOnRandomRows) {
  Rng rng(11);
  struct Case {
    int64_t rows, n_expert, k;
  };
  for (const Case cs : {Case{3, 8, 2}, Case{5, 64, 8}, Case{4, 256, 8}, Case{2, 512, 10},
                        Case{3, 33, 33}, Case{2, 7, 1}, Case{1, 1, 1}, Case{2, 600, 40}}) {
    HostMat logits(cs.rows, cs.n_expert, 2);
    rng.FillNormal(logits, 2.0f);
    ExpectSameRoute(logits, cs.k, "n_expert " + std::to_string(cs.n_expert));
  }
}

TEST(CudaMoeRoute, TiesGoToTheLowerIdLikeTheCpu) {
  // Few distinct values over many experts: every round has ties, across lanes and within one.
  Rng rng(12);
  HostMat logits(4, 200, 0);
  for (int64_t t = 0; t < 4; ++t) {
    for (int64_t e = 0; e < 200; ++e) logits.at(t, e) = std::floor(rng.Uniform(0.0f, 4.0f));
  }
  ExpectSameRoute(logits, 12, "ties");
  HostMat flat(1, 96, 0);  // all equal: ids 0..k-1
  ExpectSameRoute(flat, 5, "all equal");
}

TEST(CudaMoeRoute, NanAndInfRowsAndTheClampedSum) {
  HostMat logits(4, 40, 0);
  for (int64_t e = 0; e < 40; ++e) {
    logits.at(0, e) = static_cast<float>(e % 7);
    logits.at(1, e) = static_cast<float>(e);
    logits.at(2, e) = -static_cast<float>(e);
    logits.at(3, e) = 0.5f * static_cast<float>(e % 5);
  }
  logits.at(0, 17) = std::numeric_limits<float>::quiet_NaN();  // every p NaN: ids 0..k-1
  logits.at(1, 3) = std::numeric_limits<float>::infinity();    // inf - inf: every p NaN
  logits.at(2, 0) = 200.0f;  // one expert takes p = 1, the others underflow to 0
  ExpectSameRoute(logits, 4, "nan/inf rows");
  EXPECT_EQ(kRouteMinWeightSum, kMoeMinWeightSum);
  EXPECT_TRUE(std::isnan(RouteInvSum(std::numeric_limits<float>::quiet_NaN(), 6.1e-5f)));
  EXPECT_EQ(RouteInvSum(1e-9f, 0.5f), 2.0f);
  EXPECT_EQ(RouteInvSum(0.25f, 6.1e-5f), 4.0f);
}

// --- argument checks: the CPU backend's answers --------------------------------------------

class CudaChecksTest : public ::testing::Test {
 protected:
  CudaChecksTest() : cpu_(MakeCpuBackend(1)), buf_(1 << 16, 0.5f), pos_(64, 3), ids_(256) {}

  // [rows][cols] views into a large host buffer; `offset` picks disjoint regions.
  Mat M(int64_t rows, int64_t cols, int64_t stride, int64_t offset = 0) {
    return {buf_.data() + offset, rows, cols, stride};
  }
  Vec V(int64_t n, int64_t offset = 60000) { return {buf_.data() + offset, n}; }

  std::unique_ptr<Backend> cpu_;
  std::vector<float> buf_;
  std::vector<int32_t> pos_;
  std::vector<int32_t> ids_;
};

TEST_F(CudaChecksTest, NormsRefuseWhatTheCpuRefuses) {
  struct Case {
    Mat x, y;
    Vec w;
  };
  const Mat good = M(4, 16, 20), out = M(4, 16, 16, 20000);
  for (const Case& c :
       {Case{good, out, V(16)}, Case{good, out, V(15)}, Case{good, out, {}},
        Case{good, M(3, 16, 16, 20000), V(16)}, Case{good, M(4, 8, 16, 20000), V(16)},
        Case{M(4, 16, 8), out, V(16)}, Case{M(-1, 16, 16), out, V(16)},
        Case{{nullptr, 4, 16, 16}, out, V(16)}, Case{M(0, 16, 16), M(0, 16, 16, 20000), V(16)},
        Case{M(4, 0, 0), M(4, 0, 0, 20000), V(0)}}) {
    Mat y = c.y;
    EXPECT_EQ(CheckRmsNorm(c.x, c.w, c.y), cpu_->RmsNorm(c.x, c.w, 1e-6f, y));
    Mat z = c.x;
    y = c.y;
    EXPECT_EQ(CheckGatedRmsNorm(c.x, c.w, z, c.y), cpu_->GatedRmsNorm(c.x, c.w, z, 1e-6f, y));
    y = c.y;
    EXPECT_EQ(CheckGatedRmsNorm(c.x, c.w, M(4, 15, 16, 30000), c.y),
              cpu_->GatedRmsNorm(c.x, c.w, M(4, 15, 16, 30000), 1e-6f, y));
  }
  for (const int64_t group :
       {int64_t{-1}, int64_t{0}, int64_t{3}, int64_t{4}, int64_t{16}, int64_t{32}}) {
    Mat x = good;
    EXPECT_EQ(CheckL2Norm(x, group), cpu_->L2Norm(x, group, 1e-6f)) << group;
  }
  Mat bad_stride = M(4, 16, 8);
  EXPECT_EQ(CheckL2Norm(bad_stride, 4), cpu_->L2Norm(bad_stride, 4, 1e-6f));
}

TEST_F(CudaChecksTest, ElementwiseOpsRefuseWhatTheCpuRefuses) {
  const Mat a = M(4, 16, 16), b = M(4, 16, 20, 10000), c = M(4, 16, 16, 20000);
  const Mat short_rows = M(3, 16, 16, 30000), narrow = M(4, 15, 16, 30000);
  const Mat one_col = M(4, 1, 1, 40000), bad = M(4, 16, 8, 30000);
  for (const Mat& other : {b, short_rows, narrow, one_col, bad}) {
    Mat dst = other;
    EXPECT_EQ(CheckCopy(a, other), cpu_->Copy(a, dst));
    Mat x = c;
    EXPECT_EQ(CheckAdd(x, other), cpu_->Add(x, other));
    Mat out = c;
    EXPECT_EQ(CheckSwiGlu(a, other, out), cpu_->SwiGlu(a, other, out));
    EXPECT_EQ(CheckSwiGlu(a, b, other), cpu_->SwiGlu(a, b, dst));
    x = c;
    EXPECT_EQ(CheckMulSigmoid(x, other), cpu_->MulSigmoid(x, other));
    Mat g = M(4, 16, 16, 50000);
    Mat beta = other;
    EXPECT_EQ(CheckDeltaNetGates(g, beta, V(16), V(16, 61000)),
              cpu_->DeltaNetGates(g, beta, V(16), V(16, 61000)));
  }
  Mat g = M(4, 16, 16, 50000), beta = M(4, 16, 16, 52000);
  for (const auto& [sa, dt] :
       {std::pair{V(15), V(16, 61000)}, std::pair{V(16), V(17, 61000)},
        std::pair{Vec{nullptr, 16}, V(16, 61000)}, std::pair{V(16), Vec{nullptr, 16}}}) {
    EXPECT_EQ(CheckDeltaNetGates(g, beta, sa, dt), cpu_->DeltaNetGates(g, beta, sa, dt));
  }
}

TEST_F(CudaChecksTest, RopeConvAndRouteRefuseWhatTheCpuRefuses) {
  struct Rope {
    Mat x;
    const int32_t* pos;
    int64_t n_heads, n_rot;
    float base;
  };
  const Mat x = M(8, 32, 40);
  for (const Rope& r :
       {Rope{x, pos_.data(), 2, 16, 1e4f}, Rope{x, pos_.data(), 3, 16, 1e4f},
        Rope{x, pos_.data(), 2, 15, 1e4f}, Rope{x, pos_.data(), 2, 34, 1e4f},
        Rope{x, pos_.data(), 2, 0, 1e4f}, Rope{x, pos_.data(), 0, 16, 1e4f},
        Rope{x, pos_.data(), 2, 16, 0.0f}, Rope{x, pos_.data(), 2, 16, std::nanf("")},
        Rope{x, nullptr, 2, 16, 1e4f}, Rope{M(0, 32, 32), nullptr, 2, 16, 1e4f},
        Rope{{nullptr, 8, 32, 32}, pos_.data(), 2, 16, 1e4f},
        Rope{M(8, 32, 16), pos_.data(), 2, 16, 1e4f}}) {
    Mat xr = r.x;
    EXPECT_EQ(CheckRopeNeox(r.x, r.pos, r.n_heads, r.n_rot, r.base),
              cpu_->RopeNeox(xr, r.pos, r.n_heads, r.n_rot, r.base))
        << r.n_heads << " " << r.n_rot << " " << r.base;
  }

  float* w = buf_.data() + 40000;
  float* state = buf_.data() + 50000;
  struct Conv {
    Mat x, y;
    const float* w;
    int64_t kernel;
    float* state;
  };
  const Mat cx = M(5, 12, 12), cy = M(5, 12, 16, 10000);
  for (const Conv& c :
       {Conv{cx, cy, w, 4, state}, Conv{cx, cx, w, 4, state}, Conv{cx, cy, w, 0, state},
        Conv{cx, cy, nullptr, 4, state}, Conv{cx, cy, w, 4, nullptr}, Conv{cx, cy, w, 1, nullptr},
        Conv{cx, M(4, 12, 12, 10000), w, 4, state}, Conv{cx, M(5, 11, 12, 10000), w, 4, state},
        Conv{M(5, 12, 6), cy, w, 4, state}}) {
    Mat y = c.y;
    EXPECT_EQ(CheckCausalConv1dSilu(c.x, c.w, c.kernel, c.state, c.y),
              cpu_->CausalConv1dSilu(c.x, c.w, c.kernel, c.state, y))
        << c.kernel;
  }

  float* weights = buf_.data() + 30000;
  const Mat logits = M(4, 16, 16);
  for (const int64_t k : {int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{16}, int64_t{17}}) {
    EXPECT_EQ(CheckMoeRoute(logits, k, ids_.data(), weights),
              cpu_->MoeRoute(logits, k, ids_.data(), weights))
        << k;
  }
  EXPECT_EQ(CheckMoeRoute(logits, 2, nullptr, weights),
            cpu_->MoeRoute(logits, 2, nullptr, weights));
  EXPECT_EQ(CheckMoeRoute(logits, 2, ids_.data(), nullptr),
            cpu_->MoeRoute(logits, 2, ids_.data(), nullptr));
  EXPECT_EQ(CheckMoeRoute(M(0, 16, 16), 2, nullptr, nullptr),
            cpu_->MoeRoute(M(0, 16, 16), 2, nullptr, nullptr));
  EXPECT_EQ(CheckMoeRoute(M(4, 16, 8), 2, ids_.data(), weights),
            cpu_->MoeRoute(M(4, 16, 8), 2, ids_.data(), weights));
}

// --- the device probe --------------------------------------------------------------------------

#if defined(DELTASERVE_HAVE_CUDA)
TEST(CudaProbe, NeverAbortsAndExplainsAMissingDevice) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  EXPECT_GE(count, 0);
  // A reason is given exactly when there is no device.
  if (!why.empty()) {
    EXPECT_EQ(count, 0) << why;
  }
  if (count == 0) {
    EXPECT_FALSE(why.empty());
  }
  EXPECT_EQ(CudaDeviceCount(nullptr), count);

  CudaDeviceInfo info;
  std::string error;
  EXPECT_FALSE(QueryCudaDevice(-1, &info, &error));
  EXPECT_FALSE(error.empty());
  error.clear();
  EXPECT_FALSE(QueryCudaDevice(count, &info, &error));  // one past the last device
  EXPECT_FALSE(error.empty());

  CudaBackendOptions options;
  options.device = count;
  error.clear();
  EXPECT_EQ(MakeCudaBackend(options, &error), nullptr);
  EXPECT_FALSE(error.empty());
  if (count == 0) {
    options.device = 0;
    error.clear();
    EXPECT_EQ(MakeCudaBackend(options, &error), nullptr);
    EXPECT_FALSE(error.empty());
  }
}
#endif

}  // namespace
}  // namespace deltaserve::kernels::cuda
