// Causal GQA attention against a double-precision reference written from MODEL_SPEC §2.3 steps
// 5-6 (query head h reads kv head h / (n_head / n_head_kv); token t sees positions 0..n_past+t).
// Tolerance: f32 dot products of head_dim <= 128 terms and an f32 softmax over <= 300 keys,
// relative error a few 1e-6 of the output scale; 2e-5 absolute + 1e-4 relative.
#include "kernels/cpu/attention.h"

#include <algorithm>
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

constexpr double kAbsTol = 2e-5;
constexpr double kRelTol = 1e-4;

struct Case {
  int64_t n_tokens, n_past, n_head, n_head_kv, head_dim;
};

std::vector<double> AttentionRef(const HostMat& q, const HostMat& k, const HostMat& v,
                                 const Case& c, double scale) {
  std::vector<double> out(q.rows() * q.cols());
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    for (int64_t h = 0; h < c.n_head; ++h) {
      const int64_t kvh = h / (c.n_head / c.n_head_kv);
      const int64_t visible = c.n_past + t + 1;
      std::vector<double> s(visible);
      for (int64_t j = 0; j < visible; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < c.head_dim; ++d) {
          dot += double{q.at(t, h * c.head_dim + d)} * k.at(j, kvh * c.head_dim + d);
        }
        s[j] = scale * dot;
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0.0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < c.head_dim; ++d) {
        double acc = 0.0;
        for (int64_t j = 0; j < visible; ++j) acc += s[j] * v.at(j, kvh * c.head_dim + d);
        out[t * q.cols() + h * c.head_dim + d] = acc / sum;
      }
    }
  }
  return out;
}

class AttentionTest : public ::testing::TestWithParam<int> {
 protected:
  AttentionTest() : pool_(GetParam()) {}
  ThreadPool pool_;
};

TEST_P(AttentionTest, MatchesReference) {
  const Case cases[] = {
      {5, 0, 4, 2, 32},      // prefill from empty, GQA 2:1
      {3, 7, 4, 1, 16},      // continuing after a cached prefix, all heads on one kv head
      {1, 40, 8, 2, 64},     // decode
      {64, 200, 4, 2, 128},  // big enough for the pool
      {6, 2, 3, 3, 8},       // plain multi-head
      {1, 300, 8, 2, 64},    // decode on two threads: each group split into two slices of heads
      {2, 300, 6, 2, 32},    // ... into uneven slices (3 heads per group: 2 + 1)
  };
  Rng rng(21);
  for (const Case& c : cases) {
    const int64_t n_kv = c.n_past + c.n_tokens;
    HostMat q(c.n_tokens, c.n_head * c.head_dim, 2);
    HostMat k(n_kv, c.n_head_kv * c.head_dim, 1), v(n_kv, c.n_head_kv * c.head_dim, 3);
    rng.FillNormal(q);
    rng.FillNormal(k);
    rng.FillNormal(v);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    HostMat out(c.n_tokens, c.n_head * c.head_dim, 4);
    Mat om = out.mat();
    ASSERT_EQ(
        AttentionCpu(pool_, q.mat(), k.mat(), v.mat(), c.n_past, c.n_head, c.n_head_kv, scale, om),
        KernelStatus::kOk);
    ExpectClose(out, AttentionRef(q, k, v, c, scale), kAbsTol, kRelTol, "attention");
    EXPECT_TRUE(out.PaddingIntact());
  }
}

TEST_P(AttentionTest, FuturePositionsAreNeverRead) {
  // k/v rows are [n_past + T]; token t must ignore rows past n_past + t. Poisoning those rows
  // with NaN in a copy shows any leak as NaN, row by row.
  const Case c{6, 3, 4, 2, 16};
  Rng rng(22);
  const int64_t n_kv = c.n_past + c.n_tokens;
  HostMat q(c.n_tokens, c.n_head * c.head_dim), k(n_kv, c.n_head_kv * c.head_dim),
      v(n_kv, c.n_head_kv * c.head_dim);
  rng.FillNormal(q);
  rng.FillNormal(k);
  rng.FillNormal(v);
  const std::vector<double> expected = AttentionRef(q, k, v, c, 0.25);
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    HostMat kp = k, vp = v;
    for (int64_t j = c.n_past + t + 1; j < n_kv; ++j) {
      for (int64_t d = 0; d < kp.cols(); ++d) kp.at(j, d) = vp.at(j, d) = NAN;
    }
    HostMat out(c.n_tokens, q.cols());
    Mat om = out.mat();
    ASSERT_EQ(AttentionCpu(pool_, q.mat(), kp.mat(), vp.mat(), c.n_past, c.n_head, c.n_head_kv,
                           0.25f, om),
              KernelStatus::kOk);
    for (int64_t d = 0; d < q.cols(); ++d) {
      ASSERT_NEAR(out.at(t, d), expected[t * q.cols() + d], kAbsTol + kRelTol) << t << " " << d;
    }
  }
}

TEST_P(AttentionTest, CachedPrefixEqualsOneCall) {
  // Attending the last 4 tokens with n_past = 9 gives the same rows as all 13 tokens at once.
  Rng rng(23);
  HostMat q(13, 128), k(13, 64), v(13, 64);
  rng.FillNormal(q);
  rng.FillNormal(k);
  rng.FillNormal(v);
  HostMat full(13, 128), tail(4, 128);
  Mat fm = full.mat(), tm = tail.mat();
  ASSERT_EQ(AttentionCpu(pool_, q.mat(), k.mat(), v.mat(), 0, 4, 2, 0.2f, fm), KernelStatus::kOk);
  ASSERT_EQ(AttentionCpu(pool_, q.mat().Rows(9, 4), k.mat(), v.mat(), 9, 4, 2, 0.2f, tm),
            KernelStatus::kOk);
  for (int64_t t = 0; t < 4; ++t) {
    for (int64_t d = 0; d < 128; ++d) EXPECT_EQ(tail.at(t, d), full.at(9 + t, d));
  }
}

TEST_P(AttentionTest, LargeScoresStayFinite) {
  // Scores around +-1e4 overflow exp() unless the row maximum is subtracted first.
  const Case c{4, 2, 2, 1, 16};
  Rng rng(24);
  HostMat q(4, 32), k(6, 16), v(6, 16);
  rng.FillNormal(q, 30.0f);
  rng.FillNormal(k, 30.0f);
  rng.FillNormal(v);
  HostMat out(4, 32);
  Mat om = out.mat();
  ASSERT_EQ(AttentionCpu(pool_, q.mat(), k.mat(), v.mat(), 2, 2, 1, 1.0f, om), KernelStatus::kOk);
  ExpectClose(out, AttentionRef(q, k, v, c, 1.0), 1e-4, 1e-3, "large scores");
}

INSTANTIATE_TEST_SUITE_P(Threads, AttentionTest, ::testing::Values(1, 2));

TEST(AttentionShapeTest, MismatchesAreInvalidArgument) {
  ThreadPool pool(1);
  HostMat q(3, 64), k(5, 32), v(5, 32), out(3, 64), k_short(4, 32), out_bad(3, 32);
  Mat om = out.mat(), obad = out_bad.mat();
  const KernelStatus bad = KernelStatus::kInvalidArgument;
  EXPECT_EQ(AttentionCpu(pool, q.mat(), k.mat(), v.mat(), 2, 4, 2, 1.0f, om), KernelStatus::kOk);
  EXPECT_EQ(AttentionCpu(pool, q.mat(), k.mat(), v.mat(), 1, 4, 2, 1.0f, om), bad);  // kv rows
  EXPECT_EQ(AttentionCpu(pool, q.mat(), k_short.mat(), v.mat(), 2, 4, 2, 1.0f, om), bad);
  EXPECT_EQ(AttentionCpu(pool, q.mat(), k.mat(), v.mat(), 2, 4, 3, 1.0f, om), bad);  // 4 % 3
  EXPECT_EQ(AttentionCpu(pool, q.mat(), k.mat(), v.mat(), 2, 4, 1, 1.0f, om), bad);  // kv cols
  EXPECT_EQ(AttentionCpu(pool, q.mat(), k.mat(), v.mat(), 2, 4, 2, 1.0f, obad), bad);
  EXPECT_EQ(AttentionCpu(pool, q.mat(), k.mat(), v.mat(), -1, 4, 2, 1.0f, om), bad);
}

}  // namespace
}  // namespace deltaserve::kernels
