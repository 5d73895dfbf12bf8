// The int8-activation path of the CPU matrix product (kernels/cpu/matmul_int8.h): every ISA
// path against the scalar reference of the same integer arithmetic (exact int32 block sums, so
// only the f32 scaling order can differ), and against a double product of the scalar-decoded
// weights within the error the activation quantization allows; plus the mode switch.
#include "kernels/cpu/matmul_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"
#include "tests/kernels/quant_test_util.h"

namespace deltaserve::kernels {
namespace {

using internal::MatMulCpuIsa;
using internal::UsesInt8Path;
using testing::RandomValues;
using testing::TypeName;

ThreadPool& Pool() {
  static ThreadPool pool(2);
  return pool;
}

std::vector<WeightType> Int8Types() {
  return {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0,
          WeightType::kQ5_1, WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K};
}

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

std::vector<float> Activations(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = normal(rng);
  // A few outliers, as in real hidden states: they set the block scale of their block.
  for (size_t i = 0; i < v.size(); i += 97) v[i] *= 8.0f;
  return v;
}

bool IsKQuant(WeightType type) {
  return type == WeightType::kQ4_K || type == WeightType::kQ5_K || type == WeightType::kQ6_K;
}

// In lengths per type: one block group, and several crossing odd multiples.
std::vector<int64_t> InLengths(WeightType type) {
  return IsKQuant(type) ? std::vector<int64_t>{256, 1280} : std::vector<int64_t>{160, 1312};
}

std::vector<float> RunProduct(const Weights& w, const std::vector<float>& x, int64_t t, CpuIsa isa,
                              MatMulActivations mode) {
  std::vector<float> y(static_cast<size_t>(t * w.out), NAN);
  const Mat xm{const_cast<float*>(x.data()), t, w.in, w.in};
  Mat ym{y.data(), t, w.out, w.out};
  EXPECT_EQ(MatMulCpuIsa(Pool(), w.View(), xm, ym, isa, mode), KernelStatus::kOk);
  return y;
}

class MatMulInt8Test : public ::testing::TestWithParam<std::tuple<CpuIsa, WeightType>> {};

// Integer sums are exact, so the ISA path and the scalar reference differ only in the order of
// the f32 block scaling (1e-6 relative to sum |w * x|, observed ~1e-7).
TEST_P(MatMulInt8Test, MatchesScalarInt8Reference) {
  const auto [isa, type] = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << CpuIsaName(isa) << " not supported here";
  if (isa == CpuIsa::kScalar) {
    GTEST_SKIP() << "the scalar path is this test's reference; WithinActivationQuantizationBound "
                    "checks it against the exact product";
  }
  std::mt19937 rng(21);
  for (int64_t in : InLengths(type)) {
    const Weights w = MakeWeights(type, in, 37, rng);
    for (int64_t t : {1, 3, 4, 17, 64, 300}) {
      const std::vector<float> x = Activations(t * in, rng);
      const std::vector<float> ref = RunProduct(w, x, t, CpuIsa::kScalar, MatMulActivations::kInt8);
      const std::vector<float> got = RunProduct(w, x, t, isa, MatMulActivations::kInt8);
      const bool int8 = UsesInt8Path(type, isa, t);
      for (int64_t r = 0; r < t; ++r) {
        for (int64_t o = 0; o < w.out; ++o) {
          double abs_sum = 0, exact = 0;
          for (int64_t k = 0; k < in; ++k) {
            const double p = static_cast<double>(w.decoded[o * in + k]) * x[r * in + k];
            abs_sum += std::fabs(p);
            exact += p;
          }
          if (!int8) {
            // The f32 path on this ISA (AVX2, or the fused decode rows): the exact product of the
            // decoded weights and the f32 activations, up to f32 summation (1e-5 sum |w * x|).
            ASSERT_LE(std::fabs(got[r * w.out + o] - exact), 1e-5 * abs_sum + 1e-30)
                << TypeName(type) << " in=" << in << " T=" << t << " row " << r << " out " << o
                << " (f32 path)";
            continue;
          }
          ASSERT_LE(std::fabs(got[r * w.out + o] - ref[r * w.out + o]), 1e-6 * abs_sum + 1e-30)
              << TypeName(type) << " in=" << in << " T=" << t << " row " << r << " out " << o;
        }
      }
    }
  }
}

// Against the exact product: each activation moves by at most half its block's step
// d = amax / 127 (block of 32 for the legacy types, 256 for the K-quants), plus for the legacy
// types the f16 rounding of d (<= 2^-11 relative, times |q| <= 127: 0.062 d). So
// |error| <= sum_k |w_k| * 0.57 * d_k, plus the f32 summation error (1e-5 sum |w * x|).
TEST_P(MatMulInt8Test, WithinActivationQuantizationBound) {
  const auto [isa, type] = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << CpuIsaName(isa) << " not supported here";
  std::mt19937 rng(22);
  const int block = IsKQuant(type) ? kQkK : kQk;
  for (int64_t in : InLengths(type)) {
    const Weights w = MakeWeights(type, in, 19, rng);
    for (int64_t t : {4, 17, 300}) {
      const std::vector<float> x = Activations(t * in, rng);
      const std::vector<float> got = RunProduct(w, x, t, isa, MatMulActivations::kInt8);
      double worst = 0;  // largest error / bound seen
      for (int64_t r = 0; r < t; ++r) {
        std::vector<double> step(static_cast<size_t>(in));
        for (int64_t k0 = 0; k0 < in; k0 += block) {
          double amax = 0;
          for (int k = 0; k < block; ++k) {
            amax = std::max(amax, static_cast<double>(std::fabs(x[r * in + k0 + k])));
          }
          for (int k = 0; k < block; ++k) step[k0 + k] = amax / 127.0;
        }
        for (int64_t o = 0; o < w.out; ++o) {
          double sum = 0;
          double abs_sum = 0;
          double bound = 0;
          for (int64_t k = 0; k < in; ++k) {
            const double wk = w.decoded[o * in + k];
            sum += wk * x[r * in + k];
            abs_sum += std::fabs(wk * x[r * in + k]);
            bound += std::fabs(wk) * 0.57 * step[k];
          }
          bound += 1e-5 * abs_sum;
          const double err = std::fabs(got[r * w.out + o] - sum);
          ASSERT_LE(err, bound) << TypeName(type) << " in=" << in << " T=" << t << " row " << r
                                << " out " << o << ": got " << got[r * w.out + o] << ", want "
                                << sum;
          worst = std::max(worst, err / bound);
        }
      }
      // Rounding errors cancel: the bound is far from tight, but not vacuous either.
      if (UsesInt8Path(type, isa, t)) {
        EXPECT_GT(worst, 1e-3) << TypeName(type) << " T=" << t;
      }
    }
  }
}

std::vector<CpuIsa> AllIsas() { return {std::begin(kAllCpuIsas), std::end(kAllCpuIsas)}; }

INSTANTIATE_TEST_SUITE_P(Int8Types, MatMulInt8Test,
                         ::testing::Combine(::testing::ValuesIn(AllIsas()),
                                            ::testing::ValuesIn(Int8Types())),
                         [](const auto& info) {
                           return std::string(CpuIsaName(std::get<0>(info.param))) + "_" +
                                  TypeName(std::get<1>(info.param));
                         });

// The SIMD levels with int8 kernels that this CPU runs (avx512 only with AVX512-VNNI).
std::vector<CpuIsa> SimdInt8Levels() {
  std::vector<CpuIsa> levels;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvxVnni, CpuIsa::kAvx512}) {
    if (IsaSupported(isa) && UsesInt8Path(WeightType::kQ4_K, isa, 64)) levels.push_back(isa);
  }
  return levels;
}

// The types of a level's fused decode and batch kernels: every int8 type on the 256-bit levels,
// the K-quants and Q8_0 on AVX-512 (the others take its f32 fused kernels for 1-3 rows).
std::vector<WeightType> FusedTypes(CpuIsa isa) {
  if (isa == CpuIsa::kAvx512) {
    return {WeightType::kQ8_0, WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K};
  }
  return Int8Types();
}

double AbsSum(const Weights& w, const std::vector<float>& x, int64_t r, int64_t o) {
  double abs_sum = 0;
  for (int64_t k = 0; k < w.in; ++k) {
    abs_sum += std::fabs(static_cast<double>(w.decoded[o * w.in + k]) * x[r * w.in + k]);
  }
  return abs_sum;
}

// Decode (T = 1) runs the fused kernels several weight rows per call (on AVX-512 four for the
// K-quants, with a 1 .. 3 row tail); T = 3 runs the batch kernel, one weight row at a time. Each
// output must not depend on how rows were grouped: row o of an out-row product equals, bit for
// bit, the product of row o alone (a one-row view, so a one-row call), and stays within the
// MatchesScalarInt8Reference tolerance of the scalar reference. out = 1, 3, 5, 7, 21, 37 gives
// every tail length after 0 .. 9 full blocks of rows. At every SIMD level with int8 kernels.
TEST(MatMulInt8DecodeTest, RowGroupingDoesNotChangeResults) {
  if (SimdInt8Levels().empty()) GTEST_SKIP() << "no SIMD int8 kernels on this CPU";
  ThreadPool one(1);
  std::mt19937 rng(25);
  for (CpuIsa isa : SimdInt8Levels()) {
    for (WeightType type : FusedTypes(isa)) {
      for (int64_t in : InLengths(type)) {
        for (int64_t out : {1, 3, 5, 7, 21, 37}) {
          const Weights w = MakeWeights(type, in, out, rng);
          for (int64_t t : {1, 3}) {
            ASSERT_TRUE(UsesInt8Path(type, isa, t)) << CpuIsaName(isa) << " " << TypeName(type);
            const std::vector<float> x = Activations(t * in, rng);
            const Mat xm{const_cast<float*>(x.data()), t, in, in};
            std::vector<float> got(static_cast<size_t>(t * out), NAN);
            Mat gm{got.data(), t, out, out};
            ASSERT_EQ(MatMulCpuIsa(one, w.View(), xm, gm, isa, MatMulActivations::kInt8),
                      KernelStatus::kOk);
            const std::vector<float> ref =
                RunProduct(w, x, t, CpuIsa::kScalar, MatMulActivations::kInt8);
            for (int64_t o = 0; o < out; ++o) {
              WeightView row = w.View();
              row.data = w.bytes.data() + o * row.row_bytes;
              row.out = 1;
              std::vector<float> alone(static_cast<size_t>(t), NAN);
              Mat am{alone.data(), t, 1, 1};
              ASSERT_EQ(MatMulCpuIsa(one, row, xm, am, isa, MatMulActivations::kInt8),
                        KernelStatus::kOk);
              for (int64_t r = 0; r < t; ++r) {
                const float g = got[r * out + o];
                EXPECT_EQ(std::memcmp(&g, &alone[r], sizeof(float)), 0)
                    << CpuIsaName(isa) << " " << TypeName(type) << " in=" << in << " out=" << out
                    << " T=" << t << " row " << r << " out " << o << ": " << g << " vs "
                    << alone[r];
                ASSERT_LE(std::fabs(g - ref[r * out + o]), 1e-6 * AbsSum(w, x, r, o) + 1e-30)
                    << CpuIsaName(isa) << " " << TypeName(type) << " in=" << in << " out=" << out
                    << " T=" << t << " row " << r << " out " << o;
              }
            }
          }
        }
      }
    }
  }
}

// Batches of 2 .. 16 rows (fewer where in > 1024, for Q8_0 and on the 256-bit levels:
// kMaxFusedBatchInt8* in matmul.cc) take the fused batch kernel, which decodes each weight block
// once for a block of tokens (on AVX-512 up to 8: 13 = 7 + 6, 16 = 8 + 8; the 256-bit levels
// take up to 6 rows, in one block). Each of its outputs must equal, bit for bit, the one-token
// call on that token's row alone (the fused one-row kernel), and stay within the
// MatchesScalarInt8Reference tolerance of the scalar reference; larger batches take the
// many-token kernel: reference only. In lengths: one block group, several (legacy types: 31
// blocks, an odd last group; 41 and 113: a last group of 1), past 1024 and the widest input of a
// 0.8B model (3584). Odd weight row counts (1, 5, 19, 37) cover the tails of every 16-row group.
// At every SIMD level with int8 kernels.
TEST(MatMulInt8BatchTest, EachTokenEqualsOneTokenCall) {
  if (SimdInt8Levels().empty()) GTEST_SKIP() << "no SIMD int8 kernels on this CPU";
  ThreadPool one(1);
  std::mt19937 rng(28);
  for (CpuIsa isa : SimdInt8Levels()) {
    for (WeightType type : FusedTypes(isa)) {
      const std::vector<int64_t> ins = IsKQuant(type) ? std::vector<int64_t>{256, 768, 1280, 3584}
                                                      : std::vector<int64_t>{160, 992, 1312, 3616};
      for (int64_t in : ins) {
        for (int64_t out : {1, 5, 19, 37}) {
          if (in > 1312 && out > 5) continue;  // the widest input once per type is enough
          const Weights w = MakeWeights(type, in, out, rng);
          for (int64_t t : {2, 3, 4, 5, 6, 7, 8, 13, 16, 17}) {
            if (!UsesInt8Path(type, isa, t)) continue;
            const bool fused = internal::UsesFusedInt8Kernel(type, in, isa, t);
            const std::vector<float> x = Activations(t * in, rng);
            const std::vector<float> ref =
                RunProduct(w, x, t, CpuIsa::kScalar, MatMulActivations::kInt8);
            // Two threads: tasks split the weight rows at arbitrary points.
            const std::vector<float> got = RunProduct(w, x, t, isa, MatMulActivations::kInt8);
            for (int64_t r = 0; r < t; ++r) {
              const Mat xr{const_cast<float*>(x.data()) + r * in, 1, in, in};
              std::vector<float> alone(static_cast<size_t>(out), NAN);
              Mat am{alone.data(), 1, out, out};
              ASSERT_EQ(MatMulCpuIsa(one, w.View(), xr, am, isa, MatMulActivations::kInt8),
                        KernelStatus::kOk);
              for (int64_t o = 0; o < out; ++o) {
                const float g = got[r * out + o];
                if (fused) {
                  EXPECT_EQ(std::memcmp(&g, &alone[o], sizeof(float)), 0)
                      << CpuIsaName(isa) << " " << TypeName(type) << " in=" << in << " out=" << out
                      << " T=" << t << " row " << r << " out " << o << ": " << g << " vs "
                      << alone[o];
                }
                ASSERT_LE(std::fabs(g - ref[r * out + o]), 1e-6 * AbsSum(w, x, r, o) + 1e-30)
                    << CpuIsaName(isa) << " " << TypeName(type) << " in=" << in << " out=" << out
                    << " T=" << t << " row " << r << " out " << o;
              }
            }
          }
        }
      }
    }
  }
}

// The AVX2 and AVX-VNNI fused kernels are one template over two integer dot products that give
// the same exact sums (vpmaddubsw + vpmaddwd never saturating on the ranges they see), with the
// same f32 operations: their outputs are the same bits, for every type, ragged row counts and
// every batch size of the fused route.
TEST(MatMulInt8BatchTest, Avx2AndAvxVnniFusedProductsAreTheSameBits) {
  if (!IsaSupported(CpuIsa::kAvxVnni)) GTEST_SKIP() << "AVX-VNNI not supported here";
  std::mt19937 rng(30);
  for (WeightType type : Int8Types()) {
    for (int64_t in : InLengths(type)) {
      const Weights w = MakeWeights(type, in, 37, rng);
      for (int64_t t : {1, 2, 3, 4, 5, 6}) {
        ASSERT_TRUE(internal::UsesFusedInt8Kernel(type, in, CpuIsa::kAvx2, t));
        ASSERT_TRUE(internal::UsesFusedInt8Kernel(type, in, CpuIsa::kAvxVnni, t));
        const std::vector<float> x = Activations(t * in, rng);
        const std::vector<float> avx2 =
            RunProduct(w, x, t, CpuIsa::kAvx2, MatMulActivations::kInt8);
        const std::vector<float> vnni =
            RunProduct(w, x, t, CpuIsa::kAvxVnni, MatMulActivations::kInt8);
        EXPECT_EQ(std::memcmp(avx2.data(), vnni.data(), avx2.size() * sizeof(float)), 0)
            << TypeName(type) << " in=" << in << " T=" << t;
      }
    }
  }
}

// The prefill kernel (batches past the fused kernels) tiles weight rows by activation panels
// within chunks of kInt8ChunkRows rows: on AVX-512 4 rows x 3 panels of 16 tokens (2 for the
// K-quants, which also sum per super-block before scaling), on AVX-VNNI 3 rows x 2 half-panels
// of 8 tokens, on AVX2 2 x 2 (with per-type int16 spans and weight offsets). Every tail must
// match the scalar reference within the MatchesScalarInt8Reference tolerance: out gives row
// tails of 1, 2 and 3 (1, 2, 3, 6), and after full chunks of 32 rows a last chunk of 6, 27 and 3
// rows (70, 59, 131); T gives one partial half-panel (7), partial half-panels and panels, odd
// counts of halves, and panel counts past a full tile (9, 17, 23, 33, 48, 49, 81).
TEST(MatMulInt8PrefillTest, TileTailsMatchScalarReference) {
  if (SimdInt8Levels().empty()) GTEST_SKIP() << "no SIMD int8 kernels on this CPU";
  std::mt19937 rng(26);
  for (CpuIsa isa : SimdInt8Levels()) {
    const std::vector<WeightType> types =
        isa == CpuIsa::kAvx512 ? std::vector<WeightType>{WeightType::kQ8_0, WeightType::kQ4_1,
                                                         WeightType::kQ4_K, WeightType::kQ6_K}
                               : Int8Types();
    for (WeightType type : types) {
      const int64_t in = IsKQuant(type) ? 768 : 96;  // 3 super-blocks / 3 blocks
      for (int64_t out : {1, 2, 3, 6, 70, 59, 131}) {
        const Weights w = MakeWeights(type, in, out, rng);
        for (int64_t t : {7, 9, 17, 23, 33, 48, 49, 81}) {
          // 7 and 9 take the fused batch kernel on AVX-512.
          if (!UsesInt8Path(type, isa, t) || internal::UsesFusedInt8Kernel(type, in, isa, t)) {
            continue;
          }
          const std::vector<float> x = Activations(t * in, rng);
          const std::vector<float> ref =
              RunProduct(w, x, t, CpuIsa::kScalar, MatMulActivations::kInt8);
          const std::vector<float> got = RunProduct(w, x, t, isa, MatMulActivations::kInt8);
          for (int64_t r = 0; r < t; ++r) {
            for (int64_t o = 0; o < out; ++o) {
              ASSERT_LE(std::fabs(got[r * out + o] - ref[r * out + o]),
                        1e-6 * AbsSum(w, x, r, o) + 1e-30)
                  << CpuIsaName(isa) << " " << TypeName(type) << " out=" << out << " T=" << t
                  << " row " << r << " out " << o;
            }
          }
        }
      }
    }
  }
}

// Every byte pattern a file may hold, not only what QuantizeRow writes: random block payloads
// (Q8_0 weights of -128, all nibble and high-bit patterns, K-quant scales and mins up to 63,
// negative scales) through the decode, batch and prefill kernels of every SIMD level, against the
// scalar reference within the MatchesScalarInt8Reference tolerance. The 256-bit kernels' int16
// steps must not saturate on any of them.
TEST(MatMulInt8PayloadTest, RandomBlockPayloadsMatchScalarReference) {
  if (SimdInt8Levels().empty()) GTEST_SKIP() << "no SIMD int8 kernels on this CPU";
  std::mt19937 rng(32);
  for (WeightType type : Int8Types()) {
    const int64_t in = 1024;
    const int64_t out = 19;
    Weights w{type, in, out, {}, std::vector<float>(static_cast<size_t>(in * out))};
    for (int64_t o = 0; o < out; ++o) {
      const std::vector<uint8_t> row = testing::RandomBlocks(type, in, rng);
      w.bytes.insert(w.bytes.end(), row.begin(), row.end());
      ASSERT_EQ(DequantizeRow(type, row.data(), w.decoded.data() + o * in, in), KernelStatus::kOk);
    }
    for (int64_t t : {1, 5, 40}) {
      const std::vector<float> x = Activations(t * in, rng);
      const std::vector<float> ref = RunProduct(w, x, t, CpuIsa::kScalar, MatMulActivations::kInt8);
      for (CpuIsa isa : SimdInt8Levels()) {
        if (!UsesInt8Path(type, isa, t)) continue;
        const std::vector<float> got = RunProduct(w, x, t, isa, MatMulActivations::kInt8);
        for (int64_t r = 0; r < t; ++r) {
          for (int64_t o = 0; o < out; ++o) {
            ASSERT_LE(std::fabs(got[r * out + o] - ref[r * out + o]),
                      1e-6 * AbsSum(w, x, r, o) + 1e-30)
                << CpuIsaName(isa) << " " << TypeName(type) << " T=" << t << " row " << r << " out "
                << o;
          }
        }
      }
    }
  }
}

// The process-wide switch reaches MatMulCpu; f32 weights never take the int8 path.
TEST(MatMulInt8ModeTest, SwitchSelectsPath) {
  std::mt19937 rng(23);
  const Weights w = MakeWeights(WeightType::kQ4_K, 512, 24, rng);
  const int64_t t = 9;
  const std::vector<float> x = Activations(t * w.in, rng);
  const CpuIsa isa = ActiveIsa();
  for (MatMulActivations mode : {MatMulActivations::kF32, MatMulActivations::kInt8}) {
    SetMatMulActivations(mode);
    EXPECT_EQ(ActiveMatMulActivations(), mode);
    std::vector<float> y(static_cast<size_t>(t * w.out));
    const Mat xm{const_cast<float*>(x.data()), t, w.in, w.in};
    Mat ym{y.data(), t, w.out, w.out};
    ASSERT_EQ(MatMulCpu(Pool(), w.View(), xm, ym), KernelStatus::kOk);
    const std::vector<float> want = RunProduct(w, x, t, isa, mode);
    EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0);
  }
  SetMatMulActivations(std::nullopt);
  EXPECT_FALSE(UsesInt8Path(WeightType::kF32, CpuIsa::kScalar, 64));
  EXPECT_FALSE(UsesInt8Path(WeightType::kBF16, CpuIsa::kAvx512, 64));
  EXPECT_TRUE(UsesInt8Path(WeightType::kQ8_0, CpuIsa::kScalar, 64));
}

// Each output is computed by one task in a fixed order: thread count cannot change bits.
TEST(MatMulInt8ModeTest, ThreadCountDoesNotChangeResults) {
  std::mt19937 rng(24);
  const Weights w = MakeWeights(WeightType::kQ6_K, 1024, 70, rng);
  ThreadPool one(1);
  ThreadPool three(3);
  const int64_t t = 40;
  const std::vector<float> x = Activations(t * w.in, rng);
  std::vector<float> y1(static_cast<size_t>(t * w.out));
  std::vector<float> y3(static_cast<size_t>(t * w.out));
  const Mat xm{const_cast<float*>(x.data()), t, w.in, w.in};
  Mat m1{y1.data(), t, w.out, w.out};
  Mat m3{y3.data(), t, w.out, w.out};
  ASSERT_EQ(MatMulCpuIsa(one, w.View(), xm, m1, ActiveIsa(), MatMulActivations::kInt8),
            KernelStatus::kOk);
  ASSERT_EQ(MatMulCpuIsa(three, w.View(), xm, m3, ActiveIsa(), MatMulActivations::kInt8),
            KernelStatus::kOk);
  EXPECT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace deltaserve::kernels
