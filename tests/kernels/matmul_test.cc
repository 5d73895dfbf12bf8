// Matrix products and row gathers of the CPU backend (kernels/cpu/matmul.h) on every weight
// type and every ISA path: against a double-precision product of the scalar-decoded weights,
// SIMD paths against the scalar path, views with strides, blocking edges, thread counts, and
// the argument checks. Expected values come from DequantizeRow (itself tested in
// quants_test.cc) and plain double sums.
#include "kernels/cpu/matmul.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"
#include "tests/kernels/quant_test_util.h"

namespace deltaserve::kernels {
namespace {

using internal::GetRowsCpuIsa;
using internal::MatMulCpuIsa;
using testing::AllWeightTypes;
using testing::RandomValues;
using testing::TypeName;

// These tests check the f32-activation path; the int8 one (the default for quantized weights)
// is tested in matmul_int8_test.cc.
constexpr MatMulActivations kF32 = MatMulActivations::kF32;

// Float summation error allowed, relative to sum |w * x| of the output: the paths differ only
// in association order (and the fused kernels in one rounding of w), ~1e-7 in practice.
constexpr double kRelTol = 1e-5;

ThreadPool& Pool() {
  static ThreadPool pool(2);
  return pool;
}

// A quantized weight matrix and its scalar-decoded values.
struct Weights {
  WeightType type;
  int64_t in;
  int64_t out;
  std::vector<uint8_t> bytes;
  std::vector<float> decoded;  // [out][in]

  WeightView View() const { return {bytes.data(), type, in, out, RowBytes(type, in), 1}; }
};

Weights MakeWeights(WeightType type, int64_t in, int64_t out, std::mt19937& rng) {
  Weights w{type, in, out, std::vector<uint8_t>(RowBytes(type, in) * out),
            std::vector<float>(static_cast<size_t>(in * out))};
  const std::vector<float> values = RandomValues(in * out, rng);
  const size_t row_bytes = RowBytes(type, in);
  for (int64_t o = 0; o < out; ++o) {
    EXPECT_EQ(QuantizeRow(type, values.data() + o * in, w.bytes.data() + o * row_bytes, in),
              KernelStatus::kOk);
    EXPECT_EQ(DequantizeRow(type, w.bytes.data() + o * row_bytes, w.decoded.data() + o * in, in),
              KernelStatus::kOk);
  }
  return w;
}

std::vector<float> RandomActivations(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = normal(rng);
  return v;
}

// Checks y (t rows, y_stride apart) against the double product of the decoded weights.
void ExpectMatchesReference(const Weights& w, const float* x, int64_t x_stride, int64_t t,
                            const float* y, int64_t y_stride, const std::string& what) {
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t o = 0; o < w.out; ++o) {
      double sum = 0;
      double abs_sum = 0;
      for (int64_t k = 0; k < w.in; ++k) {
        const double p = static_cast<double>(w.decoded[o * w.in + k]) * x[r * x_stride + k];
        sum += p;
        abs_sum += std::fabs(p);
      }
      const double got = y[r * y_stride + o];
      ASSERT_LE(std::fabs(got - sum), kRelTol * abs_sum + 1e-30)
          << what << " row " << r << " out " << o << ": got " << got << ", want " << sum;
    }
  }
}

// Input lengths per type: a short one and one that crosses the kernel's 1024-value K slices.
std::vector<int64_t> InLengths(WeightType type) {
  switch (BlockLayoutOf(type).block_size) {
    case 1:
      return {67, 1031};
    case 32:
      return {160, 1312};
    default:
      return {256, 1280};
  }
}

class MatMulTest : public ::testing::TestWithParam<std::tuple<CpuIsa, WeightType>> {};

TEST_P(MatMulTest, MatchesDoubleReference) {
  const auto [isa, type] = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << CpuIsaName(isa) << " not supported here";
  std::mt19937 rng(11);
  for (int64_t in : InLengths(type)) {
    for (int64_t out : {37, 5}) {
      const Weights w = MakeWeights(type, in, out, rng);
      for (int64_t t : {1, 3, 17, 64}) {
        const std::vector<float> x = RandomActivations(t * in, rng);
        std::vector<float> y(static_cast<size_t>(t * out), NAN);
        const Mat xm{const_cast<float*>(x.data()), t, in, in};
        Mat ym{y.data(), t, out, out};
        ASSERT_EQ(MatMulCpuIsa(Pool(), w.View(), xm, ym, isa, kF32), KernelStatus::kOk);
        ExpectMatchesReference(w, x.data(), in, t, y.data(), out,
                               TypeName(type) + " in=" + std::to_string(in) +
                                   " out=" + std::to_string(out) + " T=" + std::to_string(t));
      }
    }
  }
}

TEST_P(MatMulTest, SimdPathAgreesWithScalarPath) {
  const auto [isa, type] = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << CpuIsaName(isa) << " not supported here";
  std::mt19937 rng(12);
  const int64_t in = InLengths(type)[1];
  const int64_t out = 23;
  const Weights w = MakeWeights(type, in, out, rng);
  for (int64_t t : {1, 6}) {
    const std::vector<float> x = RandomActivations(t * in, rng);
    std::vector<float> y_scalar(static_cast<size_t>(t * out));
    std::vector<float> y_simd(static_cast<size_t>(t * out));
    const Mat xm{const_cast<float*>(x.data()), t, in, in};
    Mat ys{y_scalar.data(), t, out, out};
    Mat yv{y_simd.data(), t, out, out};
    ASSERT_EQ(MatMulCpuIsa(Pool(), w.View(), xm, ys, CpuIsa::kScalar, kF32), KernelStatus::kOk);
    ASSERT_EQ(MatMulCpuIsa(Pool(), w.View(), xm, yv, isa, kF32), KernelStatus::kOk);
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double abs_sum = 0;
        for (int64_t k = 0; k < in; ++k) {
          abs_sum += std::fabs(static_cast<double>(w.decoded[o * in + k]) * x[r * in + k]);
        }
        ASSERT_LE(std::fabs(y_simd[r * out + o] - y_scalar[r * out + o]), kRelTol * abs_sum)
            << TypeName(type) << " T=" << t << " row " << r << " out " << o;
      }
    }
  }
}

std::vector<CpuIsa> AllIsas() { return {std::begin(kAllCpuIsas), std::end(kAllCpuIsas)}; }

INSTANTIATE_TEST_SUITE_P(AllTypes, MatMulTest,
                         ::testing::Combine(::testing::ValuesIn(AllIsas()),
                                            ::testing::ValuesIn(AllWeightTypes())),
                         [](const auto& info) {
                           return std::string(CpuIsaName(std::get<0>(info.param))) + "_" +
                                  TypeName(std::get<1>(info.param));
                         });

// x and y as column windows of wider matrices, W as a row window of a bigger matrix; the
// columns of y outside the window must stay untouched.
TEST(MatMulViewsTest, StridedViewsAndRowSubsets) {
  std::mt19937 rng(13);
  const Weights full = MakeWeights(WeightType::kQ4_K, 512, 40, rng);
  Weights part{full.type, full.in, 10, {}, {}};
  part.decoded.assign(full.decoded.begin() + 7 * 512, full.decoded.begin() + 17 * 512);
  const WeightView wv = full.View().Rows(7, 10);
  for (CpuIsa isa : AllIsas()) {
    for (int64_t t : {1, 5}) {
      const std::vector<float> xwide = RandomActivations(t * 600, rng);
      std::vector<float> ywide(static_cast<size_t>(t * 30), 123.0f);
      const Mat xm = Mat{const_cast<float*>(xwide.data()), t, 600, 600}.Cols(40, 512);
      Mat ym = Mat{ywide.data(), t, 30, 30}.Cols(4, 10);
      ASSERT_EQ(MatMulCpuIsa(Pool(), wv, xm, ym, isa, kF32), KernelStatus::kOk);
      ExpectMatchesReference(part, xwide.data() + 40, 600, t, ywide.data() + 4, 30,
                             std::string(CpuIsaName(isa)) + " T=" + std::to_string(t));
      for (int64_t r = 0; r < t; ++r) {
        for (int64_t c = 0; c < 30; ++c) {
          if (c < 4 || c >= 14) {
            ASSERT_EQ(ywide[r * 30 + c], 123.0f) << r << "," << c;
          }
        }
      }
    }
  }
}

// Batches that cross the 64-row activation blocks and 16-row weight chunks, K across slices.
TEST(MatMulViewsTest, BlockingEdges) {
  std::mt19937 rng(14);
  const Weights w = MakeWeights(WeightType::kQ8_0, 2080, 50, rng);
  for (CpuIsa isa : AllIsas()) {
    const int64_t t = 130;
    const std::vector<float> x = RandomActivations(t * w.in, rng);
    std::vector<float> y(static_cast<size_t>(t * w.out));
    const Mat xm{const_cast<float*>(x.data()), t, w.in, w.in};
    Mat ym{y.data(), t, w.out, w.out};
    ASSERT_EQ(MatMulCpuIsa(Pool(), w.View(), xm, ym, isa, kF32), KernelStatus::kOk);
    ExpectMatchesReference(w, x.data(), w.in, t, y.data(), w.out, std::string(CpuIsaName(isa)));
  }
}

// Each output is computed by one task in a fixed order, so the thread count cannot change bits.
TEST(MatMulViewsTest, ThreadCountDoesNotChangeResults) {
  std::mt19937 rng(15);
  const Weights w = MakeWeights(WeightType::kQ6_K, 2048, 300, rng);
  ThreadPool one(1);
  ThreadPool three(3);
  for (int64_t t : {1, 9}) {
    const std::vector<float> x = RandomActivations(t * w.in, rng);
    std::vector<float> y1(static_cast<size_t>(t * w.out));
    std::vector<float> y3(static_cast<size_t>(t * w.out));
    const Mat xm{const_cast<float*>(x.data()), t, w.in, w.in};
    Mat m1{y1.data(), t, w.out, w.out};
    Mat m3{y3.data(), t, w.out, w.out};
    ASSERT_EQ(MatMulCpu(one, w.View(), xm, m1), KernelStatus::kOk);
    ASSERT_EQ(MatMulCpu(three, w.View(), xm, m3), KernelStatus::kOk);
    EXPECT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)), 0) << "T=" << t;
  }
}

TEST(MatMulViewsTest, RejectsBadArguments) {
  std::mt19937 rng(16);
  const Weights w = MakeWeights(WeightType::kQ4_0, 64, 8, rng);
  std::vector<float> x(3 * 64);
  std::vector<float> y(3 * 8);
  const Mat xm{x.data(), 3, 64, 64};
  Mat ym{y.data(), 3, 8, 8};
  ASSERT_EQ(MatMulCpu(Pool(), w.View(), xm, ym), KernelStatus::kOk);

  Mat y_short{y.data(), 2, 8, 8};
  EXPECT_EQ(MatMulCpu(Pool(), w.View(), xm, y_short), KernelStatus::kInvalidArgument);
  Mat y_narrow{y.data(), 3, 7, 8};
  EXPECT_EQ(MatMulCpu(Pool(), w.View(), xm, y_narrow), KernelStatus::kInvalidArgument);
  const Mat x_narrow{x.data(), 3, 63, 64};
  EXPECT_EQ(MatMulCpu(Pool(), w.View(), x_narrow, ym), KernelStatus::kInvalidArgument);
  const Mat x_bad_stride{x.data(), 3, 64, 32};
  EXPECT_EQ(MatMulCpu(Pool(), w.View(), x_bad_stride, ym), KernelStatus::kInvalidArgument);

  WeightView not_whole_blocks = w.View();
  not_whole_blocks.in = 48;
  const Mat x48{x.data(), 3, 48, 64};
  EXPECT_EQ(MatMulCpu(Pool(), not_whole_blocks, x48, ym), KernelStatus::kInvalidArgument);
  WeightView short_rows = w.View();
  short_rows.row_bytes = 18;
  EXPECT_EQ(MatMulCpu(Pool(), short_rows, xm, ym), KernelStatus::kInvalidArgument);
  WeightView stack = w.View();
  stack.count = 2;
  EXPECT_EQ(MatMulCpu(Pool(), stack, xm, ym), KernelStatus::kInvalidArgument);
  WeightView unknown = w.View();
  unknown.type = static_cast<WeightType>(11);  // Q3_K
  EXPECT_EQ(MatMulCpu(Pool(), unknown, xm, ym), KernelStatus::kUnsupportedType);

  // An empty batch is a no-op.
  const Mat x0{x.data(), 0, 64, 64};
  Mat y0{y.data(), 0, 8, 8};
  EXPECT_EQ(MatMulCpu(Pool(), w.View(), x0, y0), KernelStatus::kOk);
}

class GetRowsTest : public ::testing::TestWithParam<std::tuple<CpuIsa, WeightType>> {};

TEST_P(GetRowsTest, DecodesRequestedRows) {
  const auto [isa, type] = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << CpuIsaName(isa) << " not supported here";
  std::mt19937 rng(17);
  const int64_t in = InLengths(type)[0];
  const Weights w = MakeWeights(type, in, 10, rng);
  const std::vector<int32_t> ids = {3, 0, 9, 3};
  const int64_t stride = in + 5;
  std::vector<float> out(static_cast<size_t>(ids.size() * stride), -7.0f);
  Mat om{out.data(), static_cast<int64_t>(ids.size()), in, stride};
  ASSERT_EQ(GetRowsCpuIsa(w.View(), ids.data(), 4, om, isa), KernelStatus::kOk);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t k = 0; k < in; ++k) {
      const float want = w.decoded[ids[i] * in + k];
      const float got = out[i * stride + k];
      ASSERT_EQ(std::memcmp(&want, &got, sizeof(float)), 0) << "id " << ids[i] << " k " << k;
    }
    for (int64_t k = in; k < stride; ++k) ASSERT_EQ(out[i * stride + k], -7.0f);
  }

  const std::vector<int32_t> bad = {2, 10};
  Mat two = om.Rows(0, 2);
  EXPECT_EQ(GetRowsCpuIsa(w.View(), bad.data(), 2, two, isa), KernelStatus::kInvalidArgument);
  const std::vector<int32_t> negative = {-1};
  Mat one = om.Rows(0, 1);
  EXPECT_EQ(GetRowsCpuIsa(w.View(), negative.data(), 1, one, isa), KernelStatus::kInvalidArgument);
  EXPECT_EQ(GetRowsCpuIsa(w.View(), ids.data(), 3, om, isa), KernelStatus::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GetRowsTest,
                         ::testing::Combine(::testing::ValuesIn(AllIsas()),
                                            ::testing::ValuesIn(AllWeightTypes())),
                         [](const auto& info) {
                           return std::string(CpuIsaName(std::get<0>(info.param))) + "_" +
                                  TypeName(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace deltaserve::kernels
