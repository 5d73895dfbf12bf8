// Causal depthwise conv1d + SiLU against a double-precision reference written from MODEL_SPEC
// §2.4 step 2 (zeros before the sequence start, or the cached window when continuing), and its
// rolling state: one call over T tokens equals any split of them into several calls, bit for
// bit (each output sums the same f32 products in the same order). Tolerance vs the reference: 4
// f32 products and a SiLU per output, 1e-6 absolute + 1e-5 relative.
#include "kernels/cpu/conv1d.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/op_test_support.h"

namespace deltaserve::kernels {
namespace {

using testing::ExpectClose;
using testing::HostMat;
using testing::Rng;

// y over the inputs `history` (the window before x, oldest first) then x.
std::vector<double> ConvRef(const HostMat& x, const std::vector<float>& w, int64_t kernel,
                            const std::vector<float>& history) {
  const int64_t c_n = x.cols(), win = kernel - 1;
  std::vector<double> y;
  for (int64_t t = 0; t < x.rows(); ++t) {
    for (int64_t c = 0; c < c_n; ++c) {
      double acc = 0.0;
      for (int64_t j = 0; j < kernel; ++j) {
        const int64_t i = t - win + j;
        const double in = i >= 0 ? x.at(i, c) : history[(win + i) * c_n + c];
        acc += w[c * kernel + j] * in;
      }
      y.push_back(acc / (1.0 + std::exp(-acc)));
    }
  }
  return y;
}

class Conv1dTest : public ::testing::TestWithParam<int> {
 protected:
  Conv1dTest() : pool_(GetParam()) {}
  ThreadPool pool_;
};

TEST_P(Conv1dTest, FromZeroAndFromCachedWindowMatchReference) {
  Rng rng(31);
  struct Case {
    int64_t t, c, kernel;
  };
  // The Qwen3.5 kernel (4, compiled in) and others; channel counts below, at and above a
  // multiple of the vector width, and enough work for the pool (64 x 1030).
  for (const Case cs : {Case{9, 40, 4}, Case{1, 40, 4}, Case{2, 7, 4}, Case{64, 1030, 4},
                        Case{5, 12, 1}, Case{6, 12, 2}, Case{12, 12, 2}, Case{10, 5, 1}}) {
    HostMat x(cs.t, cs.c, 3);
    rng.FillNormal(x);
    const std::vector<float> w = rng.NormalVector(cs.c * cs.kernel, 0.5f);
    const int64_t win = cs.kernel - 1;
    for (const bool from_zero : {true, false}) {
      std::vector<float> state(win * cs.c, 0.0f);
      if (!from_zero) state = rng.NormalVector(win * cs.c);
      const std::vector<float> history = state;
      HostMat y(cs.t, cs.c, 2);
      Mat ym = y.mat();
      ASSERT_EQ(CausalConv1dSiluCpu(pool_, x.mat(), w.data(), cs.kernel,
                                    win > 0 ? state.data() : nullptr, ym),
                KernelStatus::kOk);
      ExpectClose(y, ConvRef(x, w, cs.kernel, history), 1e-6, 1e-5, "conv");
      EXPECT_TRUE(y.PaddingIntact());
      // New state: the last kernel-1 inputs of history ++ x.
      for (int64_t r = 0; r < win; ++r) {
        const int64_t i = cs.t - win + r;
        for (int64_t c = 0; c < cs.c; ++c) {
          const float want = i >= 0 ? x.at(i, c) : history[(win + i) * cs.c + c];
          ASSERT_EQ(state[r * cs.c + c], want) << r << " " << c;
        }
      }
    }
  }
}

TEST_P(Conv1dTest, SplitCallsEqualOneCall) {
  Rng rng(32);
  const int64_t t_n = 11, c_n = 600, kernel = 4;
  HostMat x(t_n, c_n);
  rng.FillNormal(x);
  const std::vector<float> w = rng.NormalVector(c_n * kernel);
  const std::vector<float> start = rng.NormalVector(3 * c_n);
  std::vector<float> state_once = start;
  HostMat once(t_n, c_n);
  Mat om = once.mat();
  ASSERT_EQ(CausalConv1dSiluCpu(pool_, x.mat(), w.data(), kernel, state_once.data(), om),
            KernelStatus::kOk);
  // Splits: prefill 5 + decode 1 + 1 + prefill 2 + 2.
  std::vector<float> state = start;
  HostMat split(t_n, c_n);
  int64_t t0 = 0;
  for (const int64_t n : {5, 1, 1, 2, 2}) {
    Mat ys = split.mat().Rows(t0, n);
    ASSERT_EQ(CausalConv1dSiluCpu(pool_, x.mat().Rows(t0, n), w.data(), kernel, state.data(), ys),
              KernelStatus::kOk);
    t0 += n;
  }
  for (int64_t t = 0; t < t_n; ++t) {
    for (int64_t c = 0; c < c_n; ++c) ASSERT_EQ(split.at(t, c), once.at(t, c)) << t << " " << c;
  }
  EXPECT_EQ(state, state_once);
}

TEST_P(Conv1dTest, InPlaceEqualsOutOfPlace) {
  Rng rng(33);
  const int64_t c_n = 1100, kernel = 4;
  for (const int64_t t_n : {3, 70}) {
    HostMat x(t_n, c_n, 1);
    rng.FillNormal(x);
    const std::vector<float> w = rng.NormalVector(c_n * kernel);
    std::vector<float> s1 = rng.NormalVector(3 * c_n), s2 = s1;
    HostMat y(t_n, c_n, 1);
    Mat ym = y.mat();
    ASSERT_EQ(CausalConv1dSiluCpu(pool_, x.mat(), w.data(), kernel, s1.data(), ym),
              KernelStatus::kOk);
    Mat xm = x.mat();
    ASSERT_EQ(CausalConv1dSiluCpu(pool_, xm, w.data(), kernel, s2.data(), xm), KernelStatus::kOk);
    for (int64_t t = 0; t < t_n; ++t) {
      for (int64_t c = 0; c < c_n; ++c) ASSERT_EQ(x.at(t, c), y.at(t, c)) << t << " " << c;
    }
    EXPECT_EQ(s1, s2);
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, Conv1dTest, ::testing::Values(1, 2));

TEST(Conv1dShapeTest, MismatchesAreInvalidArgument) {
  ThreadPool pool(1);
  HostMat x(3, 8), y(3, 9), y2(2, 8);
  std::vector<float> w(32), state(24);
  Mat ym = y.mat(), y2m = y2.mat(), xm = x.mat();
  const KernelStatus bad = KernelStatus::kInvalidArgument;
  EXPECT_EQ(CausalConv1dSiluCpu(pool, x.mat(), w.data(), 4, state.data(), ym), bad);
  EXPECT_EQ(CausalConv1dSiluCpu(pool, x.mat(), w.data(), 4, state.data(), y2m), bad);
  EXPECT_EQ(CausalConv1dSiluCpu(pool, x.mat(), w.data(), 0, state.data(), xm), bad);
  EXPECT_EQ(CausalConv1dSiluCpu(pool, x.mat(), w.data(), 4, nullptr, xm), bad);
  EXPECT_EQ(CausalConv1dSiluCpu(pool, x.mat(), nullptr, 4, state.data(), xm), bad);
}

}  // namespace
}  // namespace deltaserve::kernels
