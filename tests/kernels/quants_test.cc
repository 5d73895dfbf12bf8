// Block formats (kernels/cpu/quants.h): f16/bf16 conversions against IEEE rules and the F16C
// instructions, hand-built blocks decoded to values worked out from the GGML layouts
// (ggml-common.h / ggml-quants.c), quantize -> dequantize round trips within each format's
// step, and the AVX2 / AVX-512 decoders bit-identical to the scalar one.
#include "kernels/cpu/quants.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_internal.h"
#include "tests/kernels/quant_test_util.h"

namespace deltaserve::kernels {
namespace {

using testing::AllWeightTypes;
using testing::RandomBlocks;
using testing::RandomValues;
using testing::TypeName;

__attribute__((target("f16c"))) uint16_t HardwareFp32ToFp16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, 0));
}
__attribute__((target("f16c"))) float HardwareFp16ToFp32(uint16_t h) { return _cvtsh_ss(h); }

// --- f16 / bf16 ---------------------------------------------------------------------------

TEST(HalfTest, DecodesKnownValues) {
  EXPECT_EQ(Fp16ToFp32(0x3C00), 1.0f);
  EXPECT_EQ(Fp16ToFp32(0xC000), -2.0f);
  EXPECT_EQ(Fp16ToFp32(0x7BFF), 65504.0f);
  EXPECT_EQ(Fp16ToFp32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(Fp16ToFp32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(Fp16ToFp32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(Fp16ToFp32(0x7E00)));
  EXPECT_TRUE(std::signbit(Fp16ToFp32(0x8000)));
}

TEST(HalfTest, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Fp16ToFp32(Fp32ToFp16(f)))) << h;
    } else {
      ASSERT_EQ(Fp32ToFp16(f), h) << "half 0x" << std::hex << h;
    }
  }
}

// Midpoints between neighbouring halves are exact floats; they must go to the even one.
TEST(HalfTest, TiesRoundToEven) {
  for (uint32_t h = 0; h < 0x7BFF; ++h) {
    const float lo = Fp16ToFp32(static_cast<uint16_t>(h));
    const float hi = Fp16ToFp32(static_cast<uint16_t>(h + 1));
    const float mid = (lo + hi) / 2;
    ASSERT_EQ(Fp32ToFp16(mid), (h & 1) ? h + 1 : h) << h;
    ASSERT_EQ(Fp32ToFp16(std::nextafter(mid, 0.0f)), h) << h;
    ASSERT_EQ(Fp32ToFp16(std::nextafter(mid, hi)), h + 1) << h;
    ASSERT_EQ(Fp32ToFp16(-mid), 0x8000 | ((h & 1) ? h + 1 : h)) << h;
  }
  EXPECT_EQ(Fp32ToFp16(65519.0f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(1e30f), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);  // tie with 0: even
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(HalfTest, MatchesF16cInstructions) {
  if (!DetectedCpuFeatures().f16c) GTEST_SKIP() << "CPU has no F16C";
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float a = Fp16ToFp32(static_cast<uint16_t>(h));
    const float b = HardwareFp16ToFp32(static_cast<uint16_t>(h));
    ASSERT_EQ(std::memcmp(&a, &b, sizeof(a)), 0) << h;
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2'000'000; ++i) {
    // Half the draws in the f16 range, where the rounding matters.
    uint32_t u = bits(rng);
    if (i & 1) u = (u & 0x80FFFFFF) | ((0x66 + (u >> 24) % 0x1A) << 24);
    float f;
    std::memcpy(&f, &u, sizeof(f));
    ASSERT_EQ(Fp32ToFp16(f), HardwareFp32ToFp16(f)) << "bits 0x" << std::hex << u;
  }
}

TEST(Bf16Test, RoundsToNearestEvenAndRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Bf16ToFp32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(Fp32ToBf16(f), h) << h;
    }
  }
  auto from_bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  };
  EXPECT_EQ(Fp32ToBf16(from_bits(0x3F808000)), 0x3F80);  // tie, even below
  EXPECT_EQ(Fp32ToBf16(from_bits(0x3F818000)), 0x3F82);  // tie, even above
  EXPECT_EQ(Fp32ToBf16(from_bits(0x3F808001)), 0x3F81);
  EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

// --- layouts ------------------------------------------------------------------------------

TEST(BlockLayoutTest, StructsMatchBlockLayoutOf) {
  EXPECT_EQ(BlockLayoutOf(WeightType::kQ4_0).block_bytes, int64_t{sizeof(BlockQ4_0)});
  EXPECT_EQ(BlockLayoutOf(WeightType::kQ4_1).block_bytes, int64_t{sizeof(BlockQ4_1)});
  EXPECT_EQ(BlockLayoutOf(WeightType::kQ5_0).block_bytes, int64_t{sizeof(BlockQ5_0)});
  EXPECT_EQ(BlockLayoutOf(WeightType::kQ5_1).block_bytes, int64_t{sizeof(BlockQ5_1)});
  EXPECT_EQ(BlockLayoutOf(WeightType::kQ8_0).block_bytes, int64_t{sizeof(BlockQ8_0)});
  EXPECT_EQ(BlockLayoutOf(WeightType::kQ4_K).block_bytes, int64_t{sizeof(BlockQ4_K)});
  EXPECT_EQ(BlockLayoutOf(WeightType::kQ5_K).block_bytes, int64_t{sizeof(BlockQ5_K)});
  EXPECT_EQ(BlockLayoutOf(WeightType::kQ6_K).block_bytes, int64_t{sizeof(BlockQ6_K)});
  EXPECT_EQ(RowBytes(WeightType::kQ4_K, 4096), 16u * 144u);
  EXPECT_EQ(RowBytes(WeightType::kF16, 7), 14u);
  EXPECT_EQ(RowBytes(static_cast<WeightType>(99), 256), 0u);
}

TEST(BlockLayoutTest, RejectsBadArguments) {
  std::vector<uint8_t> blocks(1024);
  std::vector<float> values(512);
  EXPECT_EQ(DequantizeRow(WeightType::kQ4_K, blocks.data(), values.data(), 255),
            KernelStatus::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(WeightType::kQ8_0, values.data(), blocks.data(), 33),
            KernelStatus::kInvalidArgument);
  EXPECT_EQ(DequantizeRow(static_cast<WeightType>(10), blocks.data(), values.data(), 256),
            KernelStatus::kUnsupportedType);  // Q2_K: a GGML type we do not compute with
  EXPECT_EQ(QuantizeRow(static_cast<WeightType>(99), values.data(), blocks.data(), 256),
            KernelStatus::kUnsupportedType);
}

// --- known answers: hand-built blocks, values worked out from the layout comments -----------

template <class Block>
std::vector<float> Decode(WeightType type, const Block& b, int n) {
  std::vector<float> out(static_cast<size_t>(n));
  EXPECT_EQ(DequantizeRow(type, &b, out.data(), n), KernelStatus::kOk);
  return out;
}

TEST(KnownAnswerTest, Legacy32Blocks) {
  BlockQ4_0 q40{};
  q40.d = Fp32ToFp16(1.0f);
  q40.qs[3] = 0x5A;  // value 3: low nibble 10 - 8; value 19: high nibble 5 - 8
  std::vector<float> y = Decode(WeightType::kQ4_0, q40, 32);
  EXPECT_EQ(y[3], 2.0f);
  EXPECT_EQ(y[19], -3.0f);
  EXPECT_EQ(y[0], -8.0f);

  BlockQ4_1 q41{};
  q41.d = Fp32ToFp16(0.5f);
  q41.m = Fp32ToFp16(-1.0f);
  q41.qs[0] = 0xF3;
  y = Decode(WeightType::kQ4_1, q41, 32);
  EXPECT_EQ(y[0], 0.5f);   // 3 * 0.5 - 1
  EXPECT_EQ(y[16], 6.5f);  // 15 * 0.5 - 1

  BlockQ5_0 q50{};
  q50.d = Fp32ToFp16(1.0f);
  q50.qs[0] = 0x21;
  q50.qh[0] = 0x01;  // bit 0: value 0
  q50.qh[2] = 0x01;  // bit 16: value 16
  y = Decode(WeightType::kQ5_0, q50, 32);
  EXPECT_EQ(y[0], 1.0f);   // (1 | 16) - 16
  EXPECT_EQ(y[16], 2.0f);  // (2 | 16) - 16
  EXPECT_EQ(y[1], -16.0f);

  BlockQ5_1 q51{};
  q51.d = Fp32ToFp16(2.0f);
  q51.m = Fp32ToFp16(0.25f);
  q51.qs[7] = 0x0F;
  q51.qh[0] = 0x80;  // bit 7: value 7
  q51.qh[2] = 0x80;  // bit 23: value 23
  y = Decode(WeightType::kQ5_1, q51, 32);
  EXPECT_EQ(y[7], 31 * 2.0f + 0.25f);
  EXPECT_EQ(y[23], 16 * 2.0f + 0.25f);

  BlockQ8_0 q80{};
  q80.d = Fp32ToFp16(0.25f);
  q80.qs[5] = -7;
  y = Decode(WeightType::kQ8_0, q80, 32);
  EXPECT_EQ(y[5], -1.75f);
}

// Sub-block 1: sc 7, m 9 (scales[1], scales[5]); sub-block 5: sc 37, m 50, split between the
// nibbles of scales[9] and the top bits of scales[1] / scales[5].
template <class Block>
void SetKScales(Block& b) {
  b.d = Fp32ToFp16(1.0f);
  b.dmin = Fp32ToFp16(0.5f);
  b.scales[1] = static_cast<uint8_t>(((37 >> 4) << 6) | 7);
  b.scales[5] = static_cast<uint8_t>(((50 >> 4) << 6) | 9);
  b.scales[9] = static_cast<uint8_t>((37 & 0xF) | ((50 & 0xF) << 4));
}

TEST(KnownAnswerTest, KQuant45Blocks) {
  BlockQ4_K q4{};
  SetKScales(q4);
  q4.qs[2] = 0x40;       // value 34 = chunk 0, high nibble (sub-block 1), l = 2
  q4.qs[64 + 3] = 0xB0;  // value 163 = chunk 2, high nibble (sub-block 5), l = 3
  std::vector<float> y = Decode(WeightType::kQ4_K, q4, 256);
  EXPECT_EQ(y[34], 7 * 4 - 0.5f * 9);
  EXPECT_EQ(y[163], 37 * 11 - 0.5f * 50);
  EXPECT_EQ(y[0], 0.0f);  // sub-block 0: scale and min 0

  BlockQ5_K q5{};
  SetKScales(q5);
  q5.qs[64 + 3] = 0xB0;
  q5.qh[3] = 1 << 5;  // bit 2c + 1 for c = 2: the high value of chunk 2, l = 3
  q5.qh[2] = 1 << 1;  // bit 1 (c = 0, high): value 34
  y = Decode(WeightType::kQ5_K, q5, 256);
  EXPECT_EQ(y[163], 37 * (11 + 16) - 0.5f * 50);
  EXPECT_EQ(y[34], 7 * 16 - 0.5f * 9);
  EXPECT_EQ(y[131], 0.0f);  // chunk 2 low, l = 3: sub-block 4 has scale and min 0
}

TEST(KnownAnswerTest, Q6KBlock) {
  BlockQ6_K b{};
  b.d = Fp32ToFp16(0.5f);
  b.scales[12] = -3;
  b.scales[3] = 2;
  b.ql[64 + 5] = 0x70;  // value 197 = half 1, +64 (high nibble of ql[64 + l]), l = 5
  b.qh[32 + 5] = 0x20;  // its bits 4-5: 2
  b.ql[52] = 0x0E;      // value 52 = half 0, +32 (low nibble of ql[32 + l]), l = 20
  b.qh[20] = 0x0C;      // its bits 2-3: 3
  std::vector<float> y = Decode(WeightType::kQ6_K, b, 256);
  EXPECT_EQ(y[197], 0.5f * -3 * ((7 | (2 << 4)) - 32));
  EXPECT_EQ(y[52], 0.5f * 2 * ((14 | (3 << 4)) - 32));
}

// --- round trips ----------------------------------------------------------------------------

// Error bound of value i of a quantized row: `clamp` steps (0.5, or 1 where the format's
// asymmetric range can clamp the value opposite the largest magnitude) plus what the f16
// rounding of the block scale and offset can add over qmax steps.
struct Bound {
  double step;
  double tol;
};

Bound BoundOf(WeightType type, const uint8_t* row, int64_t i, double block_amax) {
  const double step = testing::QuantStep(type, row, i);
  const double eps = 4 * std::numeric_limits<float>::epsilon() * block_amax;
  const double f16 = std::ldexp(1.0, -10);
  double m = 0;  // the block offset of Q4_1 / Q5_1, rounded to f16 by the encoder
  if (type == WeightType::kQ4_1 || type == WeightType::kQ5_1) {
    uint16_t h;
    std::memcpy(&h, row + i / 32 * BlockLayoutOf(type).block_bytes + 2, sizeof(h));
    m = std::fabs(Fp16ToFp32(h));
  }
  switch (type) {
    case WeightType::kQ8_0:
      return {step, 0.5 * step + f16 * 127 * step + eps};
    case WeightType::kQ4_0:
      return {step, 1.0 * step + f16 * 8 * step + eps};
    case WeightType::kQ5_0:
      return {step, 1.0 * step + f16 * 16 * step + eps};
    case WeightType::kQ4_1:
      return {step, 0.5 * step + f16 * (15 * step + m) + eps};
    case WeightType::kQ5_1:
      return {step, 0.5 * step + f16 * (31 * step + m) + eps};
    default:
      return {step, 0.5 * step + eps};  // K-quants: no f16 term, scales rounded up
  }
}

class RoundTripTest : public ::testing::TestWithParam<WeightType> {};

TEST_P(RoundTripTest, DequantizedWithinStep) {
  const WeightType type = GetParam();
  constexpr int64_t kN = 256 * 16;
  std::mt19937 rng(42);
  const std::vector<float> x = RandomValues(kN, rng);
  std::vector<uint8_t> blocks(RowBytes(type, kN));
  ASSERT_EQ(QuantizeRow(type, x.data(), blocks.data(), kN), KernelStatus::kOk);
  std::vector<float> y(kN);
  ASSERT_EQ(DequantizeRow(type, blocks.data(), y.data(), kN), KernelStatus::kOk);

  const int64_t bs = BlockLayoutOf(type).block_size;
  double sum_err_over_step = 0;
  int64_t n_steps = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
    switch (type) {
      case WeightType::kF32:
        ASSERT_EQ(y[i], x[i]) << i;
        continue;
      case WeightType::kF16:  // relative 2^-11, absolute 2^-25 among the subnormals
        ASSERT_LE(err, std::max(std::ldexp(std::fabs(double{x[i]}), -11), std::ldexp(1.0, -25)))
            << i;
        continue;
      case WeightType::kBF16:
        ASSERT_LE(err, std::ldexp(std::fabs(x[i]), -8)) << i;
        continue;
      default:
        break;
    }
    double amax = 0;
    const int64_t group = std::max<int64_t>(bs, 32);
    for (int64_t j = i / group * group; j < (i / group + 1) * group; ++j) {
      amax = std::max(amax, std::fabs(static_cast<double>(x[j])));
    }
    const Bound bound = BoundOf(type, blocks.data(), i, amax);
    ASSERT_LE(err, bound.tol) << TypeName(type) << " value " << i << " x=" << x[i] << " y=" << y[i]
                              << " step=" << bound.step;
    if (bound.step > 0) {
      sum_err_over_step += err / bound.step;
      ++n_steps;
    }
  }
  // Round to nearest leaves about a quarter step on average; a decoder that reads the wrong
  // nibble or scale shows up here even when it stays inside the bound.
  if (n_steps > 0) {
    EXPECT_LT(sum_err_over_step / n_steps, 0.3) << TypeName(type);
  }
}

TEST_P(RoundTripTest, ZeroRowStaysZero) {
  const WeightType type = GetParam();
  constexpr int64_t kN = 512;
  const std::vector<float> x(kN, 0.0f);
  std::vector<uint8_t> blocks(RowBytes(type, kN));
  ASSERT_EQ(QuantizeRow(type, x.data(), blocks.data(), kN), KernelStatus::kOk);
  std::vector<float> y(kN, 1.0f);
  ASSERT_EQ(DequantizeRow(type, blocks.data(), y.data(), kN), KernelStatus::kOk);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(y[i], 0.0f) << i;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, RoundTripTest, ::testing::ValuesIn(AllWeightTypes()),
                         [](const auto& info) { return TypeName(info.param); });

// --- SIMD decoders == scalar decoder ------------------------------------------------------

class SimdDequantizeTest : public ::testing::TestWithParam<std::tuple<CpuIsa, WeightType>> {};

TEST_P(SimdDequantizeTest, BitIdenticalToScalar) {
  const auto [isa, type] = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << CpuIsaName(isa) << " not supported here";
  // Dense types get an odd length to reach the scalar tail of the vector loop.
  const int64_t n = BlockLayoutOf(type).block_size == 1 ? 1031 : 256 * 12;
  std::mt19937 rng(7);
  for (int rep = 0; rep < 20; ++rep) {
    const std::vector<uint8_t> blocks = RandomBlocks(type, n, rng);
    std::vector<float> want(static_cast<size_t>(n));
    std::vector<float> got(static_cast<size_t>(n), -1.0f);
    ASSERT_EQ(DequantizeRow(type, blocks.data(), want.data(), n), KernelStatus::kOk);
    ASSERT_EQ(internal::DequantizeRowIsa(type, blocks.data(), got.data(), n, isa),
              KernelStatus::kOk);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(float)), 0)
          << TypeName(type) << " value " << i << ": scalar " << want[i] << ", " << CpuIsaName(isa)
          << " " << got[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SimdDequantizeTest,
                         ::testing::Combine(::testing::ValuesIn(testing::SimdIsas()),
                                            ::testing::ValuesIn(AllWeightTypes())),
                         [](const auto& info) {
                           return std::string(CpuIsaName(std::get<0>(info.param))) + "_" +
                                  TypeName(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace deltaserve::kernels
