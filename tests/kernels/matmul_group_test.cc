// The grouped product (MatMulGroupCpu, Backend::MatMulGroup): products sharing one input must
// give, bit for bit, what one MatMulCpu call per product gives, on every ISA path and activation
// mode, for the batch sizes of every route (fused one-row, fused batch, panels, f32), with
// strided column views as outputs (the engine writes q/k/v into slices of wider buffers), mixed
// weight types in one group and groups larger than one job takes. The separate products are
// themselves tested against double references in matmul_test.cc and matmul_int8_test.cc.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"
#include "tests/kernels/quant_test_util.h"

namespace deltaserve::kernels {
namespace {

using internal::MatMulCpuIsa;
using internal::MatMulGroupCpuIsa;
using testing::RandomValues;
using testing::TypeName;

ThreadPool& Pool() {
  static ThreadPool pool(2);
  return pool;
}

struct Matrix {
  std::vector<uint8_t> bytes;
  WeightView view;
};

Matrix MakeMatrix(WeightType type, int64_t in, int64_t out, std::mt19937& rng) {
  Matrix m;
  const size_t row_bytes = RowBytes(type, in);
  m.bytes.resize(row_bytes * out);
  const std::vector<float> values = RandomValues(in * out, rng);
  for (int64_t o = 0; o < out; ++o) {
    EXPECT_EQ(QuantizeRow(type, values.data() + o * in, m.bytes.data() + o * row_bytes, in),
              KernelStatus::kOk);
  }
  m.view = {m.bytes.data(), type, in, out, row_bytes, 1};
  return m;
}

// Runs the group of `specs` (type, out) on t random rows of `in` values, grouped and one product
// at a time, outputs side by side in one [t][sum of outs + 3] buffer (column views with a
// stride), and expects identical bytes.
void ExpectGroupEqualsSeparate(ThreadPool& pool,
                               const std::vector<std::pair<WeightType, int64_t>>& specs, int64_t in,
                               int64_t t, CpuIsa isa, MatMulActivations mode, std::mt19937& rng) {
  std::vector<Matrix> mats;
  int64_t width = 3;
  for (const auto& [type, out] : specs) {
    mats.push_back(MakeMatrix(type, in, out, rng));
    width += out;
  }
  std::vector<float> x = RandomValues(t * in, rng);
  const Mat xm{x.data(), t, in, in};
  std::vector<float> grouped(static_cast<size_t>(t * width), -1.0f);
  std::vector<float> separate(grouped.size(), -1.0f);
  std::vector<WeightView> ws;
  std::vector<Mat> ys;
  int64_t col = 1;
  for (const Matrix& m : mats) {
    ws.push_back(m.view);
    ys.push_back(Mat{grouped.data(), t, width, width}.Cols(col, m.view.out));
    Mat one = Mat{separate.data(), t, width, width}.Cols(col, m.view.out);
    ASSERT_EQ(MatMulCpuIsa(pool, m.view, xm, one, isa, mode), KernelStatus::kOk);
    col += m.view.out;
  }
  ASSERT_EQ(
      MatMulGroupCpuIsa(pool, ws.data(), static_cast<int>(ws.size()), xm, ys.data(), isa, mode),
      KernelStatus::kOk);
  EXPECT_EQ(std::memcmp(grouped.data(), separate.data(), grouped.size() * sizeof(float)), 0)
      << CpuIsaName(isa) << (mode == MatMulActivations::kInt8 ? " int8" : " f32") << " T=" << t
      << " in=" << in << " first type " << TypeName(specs[0].first);
}

std::vector<CpuIsa> Isas() { return {std::begin(kAllCpuIsas), std::end(kAllCpuIsas)}; }

// T = 1..3 take the fused one-row kernels, 2..16 the fused batch kernel, 17 and 40 the panel
// kernel (run product by product).
const std::vector<int64_t> kTokens = {1, 2, 3, 5, 8, 12, 16, 17, 40};

TEST(MatMulGroupTest, QkvLikeGroupEqualsSeparateProductsBitForBit) {
  std::mt19937 rng(31);
  // q (Q4_K), k (Q4_K), v (Q6_K) as in a Q4_K_M model; rows not multiples of 4 or 16.
  const std::vector<std::pair<WeightType, int64_t>> specs = {
      {WeightType::kQ4_K, 301}, {WeightType::kQ4_K, 70}, {WeightType::kQ6_K, 69}};
  for (CpuIsa isa : Isas()) {
    for (MatMulActivations mode : {MatMulActivations::kInt8, MatMulActivations::kF32}) {
      for (int64_t t : kTokens) ExpectGroupEqualsSeparate(Pool(), specs, 1024, t, isa, mode, rng);
    }
  }
}

TEST(MatMulGroupTest, DeltaNetLikeGroupWithTinyProductsAndOtherTypes) {
  std::mt19937 rng(32);
  // qkv, z, beta, alpha: two 16-row products that one task takes whole; Q8_0 and Q5_K too.
  const std::vector<std::pair<WeightType, int64_t>> specs = {{WeightType::kQ6_K, 260},
                                                             {WeightType::kQ8_0, 130},
                                                             {WeightType::kQ5_K, 16},
                                                             {WeightType::kQ4_K, 16}};
  for (CpuIsa isa : Isas()) {
    for (int64_t t : {1, 2, 7, 9}) {
      ExpectGroupEqualsSeparate(Pool(), specs, 512, t, isa, MatMulActivations::kInt8, rng);
    }
  }
}

TEST(MatMulGroupTest, GroupsWithoutAFusedKernelRunProductByProduct) {
  std::mt19937 rng(33);
  // F32 has no int8 kernel (nor Q4_0 a fused one on AVX-512): the group falls back to separate
  // products.
  const std::vector<std::pair<WeightType, int64_t>> specs = {
      {WeightType::kQ4_K, 40}, {WeightType::kF32, 20}, {WeightType::kQ4_0, 24}};
  for (CpuIsa isa : Isas()) {
    for (int64_t t : {1, 4}) {
      ExpectGroupEqualsSeparate(Pool(), specs, 256, t, isa, MatMulActivations::kInt8, rng);
    }
  }
}

TEST(MatMulGroupTest, LargeGroupsRunInPiecesAndThreadCountDoesNotMatter) {
  std::mt19937 rng(34);
  std::vector<std::pair<WeightType, int64_t>> specs;
  for (int i = 0; i < internal::kMaxMatMulGroup + 3; ++i) {
    specs.emplace_back(i % 2 == 0 ? WeightType::kQ4_K : WeightType::kQ6_K, 8 + 5 * i);
  }
  ThreadPool one(1);
  ThreadPool three(3);
  for (ThreadPool* pool : {&one, &three}) {
    for (int64_t t : {1, 3}) {
      ExpectGroupEqualsSeparate(*pool, specs, 256, t, ActiveIsa(), MatMulActivations::kInt8, rng);
    }
  }
}

TEST(MatMulGroupTest, BackendOpMatchesMatMulAndChecksArguments) {
  std::mt19937 rng(35);
  std::unique_ptr<Backend> backend = MakeCpuBackend(2);
  const Matrix a = MakeMatrix(WeightType::kQ4_K, 256, 40, rng);
  const Matrix b = MakeMatrix(WeightType::kQ6_K, 256, 24, rng);
  std::vector<float> x = RandomValues(256, rng);
  const Mat xm{x.data(), 1, 256, 256};
  std::vector<float> ya(40), yb(24), sa(40), sb(24);
  const WeightView ws[] = {a.view, b.view};
  Mat ys[] = {{ya.data(), 1, 40, 40}, {yb.data(), 1, 24, 24}};
  ASSERT_EQ(backend->MatMulGroup(ws, 2, xm, ys), KernelStatus::kOk);
  Mat one_a{sa.data(), 1, 40, 40};
  Mat one_b{sb.data(), 1, 24, 24};
  ASSERT_EQ(backend->MatMul(a.view, xm, one_a), KernelStatus::kOk);
  ASSERT_EQ(backend->MatMul(b.view, xm, one_b), KernelStatus::kOk);
  EXPECT_EQ(ya, sa);
  EXPECT_EQ(yb, sb);

  EXPECT_EQ(backend->MatMulGroup(ws, 0, xm, ys), KernelStatus::kOk);
  EXPECT_EQ(backend->MatMulGroup(nullptr, 2, xm, ys), KernelStatus::kInvalidArgument);
  EXPECT_EQ(backend->MatMulGroup(ws, -1, xm, ys), KernelStatus::kInvalidArgument);
  Mat wrong[] = {{ya.data(), 1, 40, 40}, {yb.data(), 1, 23, 24}};  // y.cols != w.out
  EXPECT_EQ(backend->MatMulGroup(ws, 2, xm, wrong), KernelStatus::kInvalidArgument);
}

}  // namespace
}  // namespace deltaserve::kernels
