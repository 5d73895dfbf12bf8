// NeoX RoPE against a double-precision reference written from MODEL_SPEC §2.3 step 3: pairs
// (i, i + n_rot/2), angle pos * base^(-2i/n_rot), dims from n_rot on untouched. Tolerance: inputs
// are N(0,1) and the kernel rounds cos/sin once to f32, so results are within a few ulp (1e-6
// absolute covers them with margin), even at position 200000 where an f32 angle would not be.
#include "kernels/cpu/rope.h"

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

std::vector<double> RopeRef(const HostMat& x, const std::vector<int32_t>& pos, int64_t n_heads,
                            int64_t n_rot, double base) {
  std::vector<double> y;
  const int64_t half = n_rot / 2;
  for (int64_t r = 0; r < x.rows(); ++r) {
    const double p = pos[r / n_heads];
    for (int64_t c = 0; c < x.cols(); ++c) {
      if (c >= n_rot) {
        y.push_back(x.at(r, c));
        continue;
      }
      const int64_t i = c % half;
      const double a = p * std::pow(base, -2.0 * i / n_rot);
      const double x0 = x.at(r, i), x1 = x.at(r, i + half);
      y.push_back(c < half ? x0 * std::cos(a) - x1 * std::sin(a)
                           : x1 * std::cos(a) + x0 * std::sin(a));
    }
  }
  return y;
}

struct Case {
  int64_t n_tokens, n_heads, head_dim, n_rot;
  float base;
};

class RopeTest : public ::testing::TestWithParam<int> {};

TEST_P(RopeTest, PartialRotationMatchesReference) {
  ThreadPool pool(GetParam());
  Rng rng(11);
  const Case cases[] = {
      {5, 3, 32, 16, 1e7f},      // partial: dims 16..31 pass through
      {4, 2, 16, 16, 10000.0f},  // full rotation
      {64, 8, 256, 64, 1e7f},    // Qwen3.5 head shape, big enough for the pool
  };
  for (const Case& c : cases) {
    HostMat x(c.n_tokens * c.n_heads, c.head_dim, 3);
    rng.FillNormal(x);
    std::vector<int32_t> pos(c.n_tokens);
    for (int64_t t = 0; t < c.n_tokens; ++t) pos[t] = static_cast<int32_t>(t * 3137 % 200000);
    pos[0] = 0;
    pos[c.n_tokens - 1] = 200000;
    const HostMat before = x;
    const std::vector<double> expected = RopeRef(x, pos, c.n_heads, c.n_rot, c.base);
    Mat xm = x.mat();
    ASSERT_EQ(RopeNeoxCpu(pool, xm, pos.data(), c.n_heads, c.n_rot, c.base), KernelStatus::kOk);
    ExpectClose(x, expected, 1e-6, 1e-6, "rope");
    EXPECT_TRUE(x.PaddingIntact());
    for (int64_t r = 0; r < x.rows(); ++r) {
      for (int64_t d = c.n_rot; d < c.head_dim; ++d) ASSERT_EQ(x.at(r, d), before.at(r, d));
      if (pos[r / c.n_heads] == 0) {
        for (int64_t d = 0; d < c.n_rot; ++d) ASSERT_EQ(x.at(r, d), before.at(r, d));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, RopeTest, ::testing::Values(1, 2));

TEST(RopeShapeTest, BadParametersAreInvalidArgument) {
  ThreadPool pool(1);
  HostMat x(6, 32);
  Mat xm = x.mat();
  std::vector<int32_t> pos(6, 1);
  const KernelStatus bad = KernelStatus::kInvalidArgument;
  EXPECT_EQ(RopeNeoxCpu(pool, xm, pos.data(), 2, 15, 1e4f), bad);  // odd n_rot
  EXPECT_EQ(RopeNeoxCpu(pool, xm, pos.data(), 2, 34, 1e4f), bad);  // n_rot > head_dim
  EXPECT_EQ(RopeNeoxCpu(pool, xm, pos.data(), 4, 16, 1e4f), bad);  // rows not n_tokens*n_heads
  EXPECT_EQ(RopeNeoxCpu(pool, xm, nullptr, 2, 16, 1e4f), bad);
  EXPECT_EQ(RopeNeoxCpu(pool, xm, pos.data(), 2, 16, 0.0f), bad);
  EXPECT_EQ(RopeNeoxCpu(pool, xm, pos.data(), 3, 16, 1e4f), KernelStatus::kOk);
}

}  // namespace
}  // namespace deltaserve::kernels
