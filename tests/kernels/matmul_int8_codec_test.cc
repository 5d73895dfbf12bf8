// The codecs of the int8-activation path (kernels/cpu/matmul_int8.h) at every SIMD level this
// CPU supports against the plain C++ ones, bit for bit: the activation quantizers (packed panels
// and flat rows) and the weight-row decoders. The products built on them are tested in
// matmul_int8_test.cc.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"
#include "tests/kernels/quant_test_util.h"

namespace deltaserve::kernels {
namespace {

using testing::TypeName;

std::vector<float> Activations(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = normal(rng);
  // A few outliers, as in real hidden states: they set the block scale of their block.
  for (size_t i = 0; i < v.size(); i += 97) v[i] *= 8.0f;
  return v;
}

std::vector<CpuIsa> AllIsas() { return {std::begin(kAllCpuIsas), std::end(kAllCpuIsas)}; }

// The SIMD levels this CPU supports (each has an activation quantizer: AVX2 for avx2 and
// avx_vnni, AVX-512 for avx512).
std::vector<CpuIsa> SimdLevels() {
  std::vector<CpuIsa> levels;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvxVnni, CpuIsa::kAvx512}) {
    if (IsaSupported(isa)) levels.push_back(isa);
  }
  return levels;
}

// The activation shapes both quantizer tests cover: blocks of 32 (legacy, n not a multiple of
// 256) and super-blocks of 256 with G = 32 and 16.
struct QuantCase {
  bool k_quant;
  int group;
  int64_t n;
};
constexpr QuantCase kQuantCases[] = {
    {false, 32, 160}, {false, 32, 1312}, {true, 32, 1280}, {true, 16, 768}};

// rows x c.n activations with the edge cases: an all-zero block (row 0, block 1) and a block
// whose largest magnitude occurs twice with both signs (row 1, block 0: -50 first, then +50).
std::vector<float> EdgeActivations(const QuantCase& c, int64_t rows, std::mt19937& rng) {
  std::vector<float> x = Activations(rows * c.n, rng);
  const int super = c.k_quant ? kQkK : kQk;
  std::fill(x.begin() + super, x.begin() + 2 * super, 0.0f);
  if (rows > 1) {
    x[c.n + 3] = -50.0f;
    x[c.n + 9] = 50.0f;
  }
  return x;
}

std::string Describe(CpuIsa isa, const QuantCase& c, int64_t rows) {
  return std::string(CpuIsaName(isa)) + (c.k_quant ? " K" : " legacy") +
         " G=" + std::to_string(c.group) + " n=" + std::to_string(c.n) +
         " rows=" + std::to_string(rows);
}

// The SIMD activation quantizers write the bytes and floats of the plain one, bit for bit:
// partial last panels (zero rows), blocks of 32 (legacy, n not a multiple of 256) and
// super-blocks of 256 with G = 32 and 16, an all-zero block, and a block whose largest
// magnitude occurs twice with both signs (the first one sets the sign of d).
TEST(MatMulInt8QuantizeTest, SimdEqualsScalarBitForBit) {
  if (SimdLevels().empty()) GTEST_SKIP() << "no SIMD level on this CPU";
  std::mt19937 rng(27);
  for (const QuantCase& c : kQuantCases) {
    for (int64_t rows : {1, 5, 16, 17, 35}) {
      std::vector<float> x = EdgeActivations(c, rows, rng);
      const Mat xm{x.data(), rows, c.n, c.n};
      const int64_t panels = (rows + internal::kActPanel - 1) / internal::kActPanel;
      const auto blocks = static_cast<size_t>(panels * (c.n / c.group) * internal::kActPanel);
      for (CpuIsa isa : SimdLevels()) {
        std::vector<uint8_t> q[2];
        std::vector<float> d[2];
        std::vector<float> dsum[2];
        for (int i = 0; i < 2; ++i) {
          q[i].assign(static_cast<size_t>(panels * c.n * internal::kActPanel), 0x55);
          d[i].assign(blocks, NAN);
          dsum[i].assign(blocks, NAN);
          const internal::Int8ActivationsOut out{c.n, c.group, q[i].data(), d[i].data(),
                                                 dsum[i].data()};
          if (i == 0) {
            internal::QuantizeInt8PanelsScalar(c.k_quant, xm, out, 0, panels);
          } else {
            ASSERT_TRUE(internal::QuantizeInt8PanelsSimd(isa, c.k_quant, xm, out, 0, panels));
          }
        }
        const std::string what = Describe(isa, c, rows);
        EXPECT_EQ(q[0], q[1]) << what;
        EXPECT_EQ(std::memcmp(d[0].data(), d[1].data(), blocks * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(dsum[0].data(), dsum[1].data(), blocks * sizeof(float)), 0) << what;
      }
    }
  }
}
// The same for the flat rows of the fused kernels (QuantizeInt8FlatSimd against
// QuantizeInt8FlatScalar): signed bytes, per-row d and dsum, rows quantized from an offset t0.
TEST(MatMulInt8QuantizeTest, FlatSimdEqualsScalarBitForBit) {
  if (SimdLevels().empty()) GTEST_SKIP() << "no SIMD level on this CPU";
  std::mt19937 rng(29);
  for (const QuantCase& c : kQuantCases) {
    for (int64_t rows : {1, 5, 17}) {
      std::vector<float> x = EdgeActivations(c, rows, rng);
      const Mat xm{x.data(), rows, c.n, c.n};
      const auto blocks = static_cast<size_t>(rows * (c.n / c.group));
      for (CpuIsa isa : SimdLevels()) {
        std::vector<int8_t> q[2];
        std::vector<float> d[2];
        std::vector<float> dsum[2];
        std::vector<int32_t> qsum[2];
        for (int i = 0; i < 2; ++i) {
          q[i].assign(static_cast<size_t>(rows * c.n), 0x55);
          d[i].assign(blocks, NAN);
          dsum[i].assign(blocks, NAN);
          qsum[i].assign(blocks, INT32_MIN);
          const internal::Int8FlatOut out{c.n,         c.group,        q[i].data(),
                                          d[i].data(), dsum[i].data(), qsum[i].data()};
          if (i == 0) {
            internal::QuantizeInt8FlatScalar(c.k_quant, xm, out, 0, rows);
          } else {
            // Two calls: the second starts at row t0 = 1.
            ASSERT_TRUE(internal::QuantizeInt8FlatSimd(isa, c.k_quant, xm, out, 0, 1));
            internal::QuantizeInt8FlatSimd(isa, c.k_quant, xm, out, 1, rows);
          }
        }
        const std::string what = Describe(isa, c, rows);
        EXPECT_EQ(q[0], q[1]) << what;
        EXPECT_EQ(std::memcmp(d[0].data(), d[1].data(), blocks * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(dsum[0].data(), dsum[1].data(), blocks * sizeof(float)), 0) << what;
        EXPECT_EQ(qsum[0], qsum[1]) << what;
        // qsum is the integer sum of each block's q (what the Q8_0 kernels take off).
        for (size_t b = 0; b < blocks; ++b) {
          int32_t sum = 0;
          for (int k = 0; k < c.group; ++k) sum += q[0][b * c.group + k];
          ASSERT_EQ(qsum[0][b], sum) << what << " block " << b;
        }
      }
    }
  }
}

// Each level quantizes with its own code: plain C++ at scalar, even on a SIMD CPU
// (DELTASERVE_CPU_ISA caps the level), AVX2 at avx2 and avx_vnni, AVX-512 at avx512; a level
// the CPU lacks has none.
TEST(MatMulInt8QuantizeTest, SimdQuantizersRunAtTheSimdLevels) {
  std::mt19937 rng(31);
  const int64_t n = 256;
  const std::vector<float> x = Activations(n, rng);
  const Mat xm{const_cast<float*>(x.data()), 1, n, n};
  std::vector<uint8_t> q(static_cast<size_t>(n * internal::kActPanel));
  std::vector<int8_t> flat_q(n);
  std::vector<float> d(n), dsum(n);
  std::vector<int32_t> qsum(n);
  const internal::Int8ActivationsOut panels{n, 32, q.data(), d.data(), dsum.data()};
  const internal::Int8FlatOut flat{n, 32, flat_q.data(), d.data(), dsum.data(), qsum.data()};
  for (CpuIsa isa : AllIsas()) {
    const bool simd = isa != CpuIsa::kScalar && IsaSupported(isa);
    EXPECT_EQ(internal::QuantizeInt8PanelsSimd(isa, false, xm, panels, 0, 1), simd)
        << CpuIsaName(isa);
    EXPECT_EQ(internal::QuantizeInt8FlatSimd(isa, false, xm, flat, 0, 1), simd) << CpuIsaName(isa);
  }
}

std::vector<WeightType> Int8Types() {
  return {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0,
          WeightType::kQ5_1, WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K};
}

// The weight-row decoders of the SIMD levels (hand-vectorized for every type) write the int8
// values, scales, mins, block sums and has_min of the plain loops, bit for bit, on random block
// payloads (every byte value, so Q8_0 weights of -128 and every nibble and high-bit pattern), for
// rows read row_bytes apart with padding between them.
TEST(MatMulInt8DecodeRowsTest, SimdDecodersEqualTheBaselineBitForBit) {
  std::mt19937 rng(41);
  for (CpuIsa isa : SimdLevels()) {
    const internal::Int8DecodeFn decode = internal::Int8DecoderFor(isa);
    if (decode == nullptr) continue;  // avx512 without VNNI: no int8 path
    for (WeightType type : Int8Types()) {
      const int64_t block = BlockLayoutOf(type).block_size;
      for (int64_t n : {block, 5 * block}) {
        const int64_t rows = 7;
        const size_t row_bytes = RowBytes(type, n) + 6;
        std::vector<uint8_t> w(row_bytes * rows);
        for (int64_t r = 0; r < rows; ++r) {
          const std::vector<uint8_t> row = testing::RandomBlocks(type, n, rng);
          std::memcpy(w.data() + r * row_bytes, row.data(), row.size());
        }
        internal::Int8WeightBuffer base_buf;
        internal::Int8WeightBuffer simd_buf;
        const internal::Int8WeightRows base =
            internal::DecodeInt8Rows(type, w.data(), row_bytes, rows, n, base_buf);
        const internal::Int8WeightRows simd =
            internal::DecodeInt8Rows(type, w.data(), row_bytes, rows, n, simd_buf, decode);
        const std::string what =
            std::string(CpuIsaName(isa)) + " " + TypeName(type) + " n=" + std::to_string(n);
        const size_t nb = static_cast<size_t>(rows * (n / base.group));
        EXPECT_EQ(simd.has_min, base.has_min) << what;
        EXPECT_EQ(simd.type, type) << what;
        EXPECT_EQ(base_buf.q, simd_buf.q) << what;
        EXPECT_EQ(std::memcmp(base.scale, simd.scale, nb * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(base.minc, simd.minc, nb * sizeof(float)), 0) << what;
        EXPECT_EQ(base_buf.wsum, simd_buf.wsum) << what;
        // wsum is the sum of each block's q (what the VNNI kernels take 128 times off).
        for (size_t b = 0; b < nb; ++b) {
          int32_t sum = 0;
          for (int k = 0; k < base.group; ++k) sum += base_buf.q[b * base.group + k];
          ASSERT_EQ(base_buf.wsum[b], sum) << what << " block " << b;
        }
      }
    }
  }
}

}  // namespace
}  // namespace deltaserve::kernels
