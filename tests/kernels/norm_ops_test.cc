// Norms and element-wise ops of the CPU backend against double-precision references written from
// MODEL_SPEC §2.2, §2.4 steps 4 and 7, §2.5-2.6 and GGUF_QWEN35.md (plain norm weights, ssm_a =
// -exp(A_log)). Inputs are strided views with sentinel padding; big shapes run on two threads.
// Tolerances: one f32 pass over a row of at most 4096 values with f32 accumulation is good to a
// few ulp of the result, so 2e-6 absolute plus 1e-5 relative leaves ample margin.
#include "kernels/cpu/norm_ops.h"

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

constexpr double kAbsTol = 2e-6;
constexpr double kRelTol = 1e-5;

double SiluRef(double x) { return x / (1.0 + std::exp(-x)); }
double SigmoidRef(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::vector<double> RmsNormRef(const HostMat& x, const std::vector<float>* w, double eps) {
  std::vector<double> y;
  for (int64_t r = 0; r < x.rows(); ++r) {
    double ss = 0.0;
    for (int64_t c = 0; c < x.cols(); ++c) ss += double{x.at(r, c)} * x.at(r, c);
    const double inv = 1.0 / std::sqrt(ss / x.cols() + eps);
    for (int64_t c = 0; c < x.cols(); ++c) {
      y.push_back(x.at(r, c) * inv * (w != nullptr ? (*w)[c] : 1.0));
    }
  }
  return y;
}

class NormOpsTest : public ::testing::TestWithParam<int> {
 protected:
  NormOpsTest() : pool_(GetParam()) {}
  ThreadPool pool_;
};

// Small (one thread) and big (split over the pool) shapes.
struct Shape {
  int64_t rows, cols;
};
const Shape kShapes[] = {{3, 40}, {1, 1}, {96, 1024}};

TEST_P(NormOpsTest, RmsNormMatchesReferenceWithAndWithoutWeight) {
  Rng rng(1);
  for (const Shape s : kShapes) {
    HostMat x(s.rows, s.cols, 3);
    rng.FillNormal(x, 2.0f);
    const std::vector<float> w = rng.NormalVector(s.cols);
    HostMat y(s.rows, s.cols, 5);
    Mat ym = y.mat();
    ASSERT_EQ(RmsNormCpu(pool_, x.mat(), Vec{w.data(), s.cols}, 1e-6f, ym), KernelStatus::kOk);
    ExpectClose(y, RmsNormRef(x, &w, 1e-6), kAbsTol, kRelTol, "weighted");
    EXPECT_TRUE(y.PaddingIntact());
    ASSERT_EQ(RmsNormCpu(pool_, x.mat(), Vec{nullptr, 0}, 1e-6f, ym), KernelStatus::kOk);
    ExpectClose(y, RmsNormRef(x, nullptr, 1e-6), kAbsTol, kRelTol, "no weight");
  }
}

TEST_P(NormOpsTest, RmsNormInPlace) {
  Rng rng(2);
  HostMat x(5, 64, 1);
  rng.FillNormal(x);
  const std::vector<float> w = rng.NormalVector(64);
  const std::vector<double> expected = RmsNormRef(x, &w, 1e-6);
  Mat xm = x.mat();
  ASSERT_EQ(RmsNormCpu(pool_, xm, Vec{w.data(), 64}, 1e-6f, xm), KernelStatus::kOk);
  ExpectClose(x, expected, kAbsTol, kRelTol, "in place");
}

TEST_P(NormOpsTest, L2NormPerHeadOnColumnView) {
  Rng rng(3);
  for (const Shape s : kShapes) {
    const int64_t group = s.cols % 8 == 0 ? 8 : s.cols;
    // The q part of a fused projection: columns [7, 7 + cols) of a wider matrix.
    HostMat wide(s.rows, s.cols + 11);
    rng.FillNormal(wide, 3.0f);
    if (s.rows > 1) {
      for (int64_t c = 0; c < group; ++c) wide.at(1, 7 + c) = 0.0f;  // an all-zero head
    }
    const HostMat before = wide;
    Mat view = wide.mat().Cols(7, s.cols);
    ASSERT_EQ(L2NormCpu(pool_, view, group, 1e-6f), KernelStatus::kOk);
    std::vector<double> expected;
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c0 = 0; c0 < s.cols; c0 += group) {
        double ss = 0.0;
        for (int64_t c = c0; c < c0 + group; ++c)
          ss += double{before.at(r, 7 + c)} * before.at(r, 7 + c);
        const double inv = 1.0 / std::max(std::sqrt(ss), 1e-6);
        for (int64_t c = c0; c < c0 + group; ++c) expected.push_back(before.at(r, 7 + c) * inv);
      }
    }
    HostMat got(s.rows, s.cols);
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c = 0; c < s.cols; ++c) got.at(r, c) = wide.at(r, 7 + c);
      for (int64_t c = 0; c < 7; ++c) EXPECT_EQ(wide.at(r, c), before.at(r, c));
      for (int64_t c = 7 + s.cols; c < wide.cols(); ++c) EXPECT_EQ(wide.at(r, c), before.at(r, c));
    }
    ExpectClose(got, expected, kAbsTol, kRelTol, "l2");
  }
}

TEST_P(NormOpsTest, GatedRmsNormUsesPlainWeightAndSiluGate) {
  Rng rng(4);
  for (const Shape s : kShapes) {
    HostMat x(s.rows, s.cols, 2), z(s.rows, s.cols, 1), y(s.rows, s.cols, 4);
    rng.FillNormal(x);
    rng.FillNormal(z, 3.0f);
    const std::vector<float> w = rng.NormalVector(s.cols);
    Mat ym = y.mat();
    ASSERT_EQ(GatedRmsNormCpu(pool_, x.mat(), Vec{w.data(), s.cols}, z.mat(), 1e-6f, ym),
              KernelStatus::kOk);
    std::vector<double> expected = RmsNormRef(x, &w, 1e-6);
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c = 0; c < s.cols; ++c) expected[r * s.cols + c] *= SiluRef(z.at(r, c));
    }
    ExpectClose(y, expected, kAbsTol, kRelTol, "gated");
    EXPECT_TRUE(y.PaddingIntact());
  }
}

TEST_P(NormOpsTest, ElementwiseOpsMatchReference) {
  Rng rng(5);
  for (const Shape s : kShapes) {
    HostMat a(s.rows, s.cols, 1), b(s.rows, s.cols, 2), out(s.rows, s.cols, 3);
    rng.FillNormal(a, 4.0f);
    rng.FillNormal(b, 4.0f);
    std::vector<double> add, swiglu, mulsig, copy;
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c = 0; c < s.cols; ++c) {
        add.push_back(double{a.at(r, c)} + b.at(r, c));
        swiglu.push_back(SiluRef(a.at(r, c)) * b.at(r, c));
        mulsig.push_back(a.at(r, c) * SigmoidRef(b.at(r, c)));
        copy.push_back(b.at(r, c));
      }
    }
    Mat om = out.mat();
    ASSERT_EQ(SwiGluCpu(pool_, a.mat(), b.mat(), om), KernelStatus::kOk);
    ExpectClose(out, swiglu, kAbsTol, kRelTol, "swiglu");
    ASSERT_EQ(CopyCpu(pool_, b.mat(), om), KernelStatus::kOk);
    ExpectClose(out, copy, 0.0, 0.0, "copy");
    EXPECT_TRUE(out.PaddingIntact());
    HostMat a2 = a;
    Mat a2m = a2.mat();
    ASSERT_EQ(MulSigmoidCpu(pool_, a2m, b.mat()), KernelStatus::kOk);
    ExpectClose(a2, mulsig, kAbsTol, kRelTol, "mul sigmoid");
    Mat am = a.mat();
    ASSERT_EQ(AddCpu(pool_, am, b.mat()), KernelStatus::kOk);
    ExpectClose(a, add, kAbsTol, kRelTol, "add");
    EXPECT_TRUE(a.PaddingIntact());
  }
}

TEST_P(NormOpsTest, MulSigmoidWithOneGatePerRow) {
  Rng rng(6);
  HostMat x(4, 33, 1), gate(4, 1, 2);
  rng.FillNormal(x);
  rng.FillNormal(gate, 3.0f);
  std::vector<double> expected;
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 33; ++c) expected.push_back(x.at(r, c) * SigmoidRef(gate.at(r, 0)));
  }
  Mat xm = x.mat();
  ASSERT_EQ(MulSigmoidCpu(pool_, xm, gate.mat()), KernelStatus::kOk);
  ExpectClose(x, expected, kAbsTol, kRelTol, "per-row gate");
}

INSTANTIATE_TEST_SUITE_P(Threads, NormOpsTest, ::testing::Values(1, 2));

TEST(DeltaNetGatesTest, DecayAndBetaMatchSpec) {
  // g = ssm_a * softplus(alpha + dt_bias) with ssm_a = -exp(A_log); beta = sigmoid(beta).
  // Alpha up to +-30 crosses the softplus cut-over at 20.
  Rng rng(7);
  const int64_t t = 5, nv = 6;
  HostMat alpha(t, nv, 1), beta(t, nv, 2);
  rng.FillUniform(alpha, -30.0f, 30.0f);
  rng.FillNormal(beta, 4.0f);
  std::vector<float> a_log = rng.NormalVector(nv), ssm_a(nv), dt_bias = rng.NormalVector(nv);
  for (int64_t h = 0; h < nv; ++h) ssm_a[h] = -std::exp(a_log[h]);
  std::vector<double> g_ref, beta_ref;
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t h = 0; h < nv; ++h) {
      const double x = double{alpha.at(r, h)} + dt_bias[h];
      g_ref.push_back(ssm_a[h] * std::log1p(std::exp(x)));
      beta_ref.push_back(SigmoidRef(beta.at(r, h)));
    }
  }
  Mat am = alpha.mat(), bm = beta.mat();
  ASSERT_EQ(DeltaNetGatesCpu(am, bm, Vec{ssm_a.data(), nv}, Vec{dt_bias.data(), nv}),
            KernelStatus::kOk);
  ExpectClose(alpha, g_ref, kAbsTol, kRelTol, "g");
  ExpectClose(beta, beta_ref, kAbsTol, kRelTol, "beta");
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t h = 0; h < nv; ++h) EXPECT_LT(alpha.at(r, h), 0.0f);
  }
}

TEST(NormOpsShapeTest, MismatchesAreInvalidArgument) {
  ThreadPool pool(1);
  HostMat a(3, 8), b(3, 9), c(2, 8), one(3, 1);
  std::vector<float> w(8, 1.0f);
  Mat am = a.mat(), bm = b.mat(), cm = c.mat(), onem = one.mat();
  const KernelStatus bad = KernelStatus::kInvalidArgument;
  EXPECT_EQ(RmsNormCpu(pool, a.mat(), Vec{w.data(), 8}, 1e-6f, bm), bad);
  EXPECT_EQ(RmsNormCpu(pool, a.mat(), Vec{w.data(), 7}, 1e-6f, am), bad);
  EXPECT_EQ(L2NormCpu(pool, am, 3, 1e-6f), bad);
  EXPECT_EQ(L2NormCpu(pool, am, 0, 1e-6f), bad);
  EXPECT_EQ(GatedRmsNormCpu(pool, a.mat(), Vec{w.data(), 8}, c.mat(), 1e-6f, am), bad);
  EXPECT_EQ(GatedRmsNormCpu(pool, a.mat(), Vec{nullptr, 0}, a.mat(), 1e-6f, am), bad);
  EXPECT_EQ(CopyCpu(pool, a.mat(), cm), bad);
  EXPECT_EQ(AddCpu(pool, am, b.mat()), bad);
  EXPECT_EQ(SwiGluCpu(pool, a.mat(), c.mat(), am), bad);
  EXPECT_EQ(MulSigmoidCpu(pool, am, b.mat()), bad);
  EXPECT_EQ(MulSigmoidCpu(pool, am, c.mat()), bad);
  EXPECT_EQ(DeltaNetGatesCpu(am, cm, Vec{w.data(), 8}, Vec{w.data(), 8}), bad);
  EXPECT_EQ(DeltaNetGatesCpu(am, am, Vec{w.data(), 7}, Vec{w.data(), 8}), bad);
  Mat bad_stride{a.mat().data, 3, 8, 4};
  EXPECT_EQ(AddCpu(pool, bad_stride, a.mat()), bad);
  EXPECT_EQ(MulSigmoidCpu(pool, am, onem), KernelStatus::kOk);
}

}  // namespace
}  // namespace deltaserve::kernels
