// The host-side halves of the CUDA matrix products (kernels/cuda/dequant.cuh, matmul_plan.cuh,
// moe_sort.cuh), run on the CPU: the block decoders the GEMV/GEMM/GetRows kernels use, bit for
// bit against the CPU backend's DequantizeRow (kernels/cpu/quants.cc, itself checked against
// llama.cpp's decoders) on random blocks of every type; the group -> product lookup of the
// grouped launches; the MoE counting-sort plan and scratch layout against a recomputation.
// Built with -ffp-contract=off like quants.cc: both sides then do the same f32 roundings.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/quants.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/matmul_plan.cuh"
#include "kernels/cuda/moe_sort.cuh"
#include "tests/kernels/quant_test_util.h"

namespace deltaserve::kernels::cuda {
namespace {

using kernels::testing::AllWeightTypes;
using kernels::testing::RandomBlocks;
using kernels::testing::RandomValues;
using kernels::testing::TypeName;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Every unit and every value of a row of n values, decoded by dequant.cuh, must be the bits
// DequantizeRow writes.
void ExpectRowDecodesLikeCpu(WeightType type, const std::vector<uint8_t>& row, int64_t n) {
  std::vector<float> want(static_cast<size_t>(n));
  ASSERT_EQ(DequantizeRow(type, row.data(), want.data(), n), KernelStatus::kOk);
  const KernelStatus s = DispatchWeightType(type, KernelStatus::kUnsupportedType, [&](auto tag) {
    constexpr WeightType T = decltype(tag)::value;
    for (int64_t u = 0; u < n / 8; ++u) {
      float v[8];
      DecodeUnit<T>(row.data(), u, v);
      for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(Bits(v[i]), Bits(want[8 * u + i]))
            << TypeName(type) << " unit " << u << " value " << i << ": " << v[i] << " vs "
            << want[8 * u + i];
      }
    }
    for (int64_t k = 0; k < n; ++k) {
      EXPECT_EQ(Bits(DecodeValue<T>(row.data(), k)), Bits(want[k])) << TypeName(type) << " " << k;
    }
    return KernelStatus::kOk;
  });
  EXPECT_EQ(s, KernelStatus::kOk) << TypeName(type);
}

TEST(CudaDequantTest, RandomBlocksDecodeBitIdenticalToCpu) {
  std::mt19937 rng(16);
  for (WeightType type : AllWeightTypes()) {
    const int64_t n = 1024;  // 4 K-quant super-blocks, 32 legacy blocks
    for (int rep = 0; rep < 8; ++rep) {
      ExpectRowDecodesLikeCpu(type, RandomBlocks(type, n, rng), n);
    }
  }
}

// Quantized real-looking values (what a model file holds), not only random bit patterns.
TEST(CudaDequantTest, QuantizedRowsDecodeBitIdenticalToCpu) {
  std::mt19937 rng(17);
  for (WeightType type : AllWeightTypes()) {
    const int64_t n = 512;
    const std::vector<float> values = RandomValues(n, rng);
    std::vector<uint8_t> row(RowBytes(type, n));
    ASSERT_EQ(QuantizeRow(type, values.data(), row.data(), n), KernelStatus::kOk);
    ExpectRowDecodesLikeCpu(type, row, n);
  }
}

// Dense rows of any length: units plus single values at the end.
TEST(CudaDequantTest, DenseRowsWithTailsDecodeLikeCpu) {
  std::mt19937 rng(18);
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16}) {
    for (int64_t n : {1, 7, 9, 13, 100}) {
      ExpectRowDecodesLikeCpu(type, RandomBlocks(type, n, rng), n);
    }
  }
}

// Every f16 bit pattern that is finite or infinite converts to the CPU's float.
TEST(CudaDequantTest, HalfConversionMatchesCpuForEveryFiniteHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) continue;  // NaN payloads may differ
    ASSERT_EQ(Bits(DqHalfToFloat(static_cast<uint16_t>(h))),
              Bits(Fp16ToFp32(static_cast<uint16_t>(h))))
        << h;
  }
}

TEST(CudaDequantTest, LayoutsMatchBackend) {
  for (WeightType type : AllWeightTypes()) {
    DispatchWeightType(type, 0, [&](auto tag) {
      constexpr WeightType T = decltype(tag)::value;
      EXPECT_EQ(DqLayout<T>::kBlock, BlockLayoutOf(type).block_size) << TypeName(type);
      EXPECT_EQ(DqLayout<T>::kBytes, BlockLayoutOf(type).block_bytes) << TypeName(type);
      EXPECT_EQ(DqLayout<T>::kBlock % 8 == 0 || kDqDense<T>, true);
      return 0;
    });
  }
  EXPECT_EQ(DispatchWeightType(static_cast<WeightType>(10), -1, [](auto) { return 1; }), -1);
}

// --- GEMV warp and GEMM tile, replayed on the host ------------------------------------------

struct Product {
  WeightType type;
  int64_t in;
  int64_t out;
  std::vector<uint8_t> bytes;
  std::vector<float> decoded;
  size_t row_bytes;
};

Product MakeProduct(WeightType type, int64_t in, int64_t out, std::mt19937& rng) {
  Product p{type, in, out, {}, std::vector<float>(static_cast<size_t>(in * out)), RowBytes(type, in)};
  p.bytes.resize(p.row_bytes * static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const std::vector<float> v = RandomValues(in, rng);
    EXPECT_EQ(QuantizeRow(type, v.data(), p.bytes.data() + o * p.row_bytes, in), KernelStatus::kOk);
    EXPECT_EQ(DequantizeRow(type, p.bytes.data() + o * p.row_bytes, p.decoded.data() + o * in, in),
              KernelStatus::kOk);
  }
  return p;
}

std::vector<float> RandomX(int64_t rows, int64_t stride, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * stride));
  for (float& v : x) v = normal(rng);
  return x;
}

// 32 lanes of GemvLanePartial and the butterfly: the sums lane 0 of the GPU warp writes.
std::vector<float> ReplayGemvWarp(const Product& p, int64_t o, const float* const* xr, int nr) {
  std::vector<float> lanes(static_cast<size_t>(32 * kGemvMaxRows));
  DispatchWeightType(p.type, 0, [&](auto tag) {
    for (int lane = 0; lane < 32; ++lane) {
      GemvLanePartial<decltype(tag)::value>(p.bytes.data() + o * p.row_bytes, p.in, xr, nr, lane,
                                            lanes.data() + lane * kGemvMaxRows);
    }
    return 0;
  });
  std::vector<float> out(nr);
  for (int r = 0; r < nr; ++r) {
    float v[32];
    for (int l = 0; l < 32; ++l) v[l] = lanes[l * kGemvMaxRows + r];
    out[r] = ButterflySum(v);
  }
  return out;
}

// Every unit of every row is summed once: the replayed warp equals the double product within
// f32 summation error (1e-5 of sum |w x|), for every type, rows 1..8, dense tails.
TEST(CudaGemvReplayTest, WarpComputesTheProduct) {
  std::mt19937 rng(21);
  for (WeightType type : AllWeightTypes()) {
    const std::vector<int64_t> lengths =
        BlockLayoutOf(type).block_size == 1 ? std::vector<int64_t>{5, 8, 100, 300, 777}
        : BlockLayoutOf(type).block_size == 32 ? std::vector<int64_t>{32, 96, 1056}
                                               : std::vector<int64_t>{256, 1280};
    for (int64_t in : lengths) {
      const Product p = MakeProduct(type, in, 3, rng);
      const int64_t stride = in + 3;
      const std::vector<float> x = RandomX(kGemvMaxRows, stride, rng);
      for (int nr = 1; nr <= kGemvMaxRows; ++nr) {
        const float* xr[kGemvMaxRows];
        for (int r = 0; r < kGemvMaxRows; ++r) xr[r] = x.data() + r * stride;
        for (int64_t o = 0; o < p.out; ++o) {
          const std::vector<float> got = ReplayGemvWarp(p, o, xr, nr);
          for (int r = 0; r < nr; ++r) {
            double want = 0;
            double scale = 0;
            for (int64_t k = 0; k < in; ++k) {
              want += double{p.decoded[o * in + k]} * xr[r][k];
              scale += std::fabs(double{p.decoded[o * in + k]} * xr[r][k]);
            }
            EXPECT_NEAR(got[r], want, 1e-5 * scale + 1e-30)
                << TypeName(type) << " in=" << in << " nr=" << nr << " o=" << o << " r=" << r;
          }
        }
      }
    }
  }
}

double RoundHalf(float v) { return Fp16ToFp32(Fp32ToFp16(v)); }

// One GEMM tile replayed slice by slice through GemmWeightUnit / GemmActivationUnit into f16
// slices, multiplied in double: equals the double product of the f16-rounded operands, with
// zeros from missing rows (n_out < 64, null activation rows) and past `in`.
TEST(CudaGemmReplayTest, TileSlicesHoldTheRightOperands) {
  std::mt19937 rng(22);
  for (WeightType type : AllWeightTypes()) {
    const int64_t in = BlockLayoutOf(type).block_size == 1 ? 77
                       : BlockLayoutOf(type).block_size == 32 ? 160 : 512;
    for (int n_out : {64, 37, 1}) {
      const Product p = MakeProduct(type, in, n_out + 5, rng);  // the tile covers rows 5 ..
      const int64_t stride = in + 1;
      const std::vector<float> x = RandomX(kGemmTileRows, stride, rng);
      const float* xrow[kGemmTileRows];
      for (int t = 0; t < kGemmTileRows; ++t) xrow[t] = t % 7 == 3 ? nullptr : x.data() + t * stride;
      const uint8_t* w = p.bytes.data() + 5 * p.row_bytes;
      std::vector<double> c(kGemmTileOut * kGemmTileRows, 0.0);
      for (int64_t k0 = 0; k0 < in; k0 += kGemmTileK) {
        std::vector<double> ws(kGemmTileOut * kGemmLd, -1e300), xs(kGemmTileRows * kGemmLd, -1e300);
        for (int u = 0; u < kGemmTileOut * kGemmUnitsPerRow; ++u) {
          float v[8];
          const int at = DispatchWeightType(type, -1, [&](auto tag) {
            return GemmWeightUnit<decltype(tag)::value>(w, p.row_bytes, n_out, in, k0, u, v);
          });
          for (int i = 0; i < 8; ++i) ws[at + i] = RoundHalf(v[i]);
        }
        for (int u = 0; u < kGemmTileRows * kGemmUnitsPerRow; ++u) {
          float v[8];
          const int at = GemmActivationUnit(xrow[u / kGemmUnitsPerRow], in, k0, u, v);
          for (int i = 0; i < 8; ++i) xs[at + i] = RoundHalf(v[i]);
        }
        // What the 2 x 2 warps' WMMA products compute: C[o][t] += Ws[o][:] . Xs[t][:].
        for (int o = 0; o < kGemmTileOut; ++o) {
          for (int t = 0; t < kGemmTileRows; ++t) {
            for (int kk = 0; kk < kGemmTileK; ++kk) {
              c[o * kGemmTileRows + t] += ws[o * kGemmLd + kk] * xs[t * kGemmLd + kk];
            }
          }
        }
      }
      for (int o = 0; o < kGemmTileOut; ++o) {
        for (int t = 0; t < kGemmTileRows; ++t) {
          double want = 0;
          if (o < n_out && xrow[t] != nullptr) {
            for (int64_t k = 0; k < in; ++k) {
              want += RoundHalf(p.decoded[(5 + o) * in + k]) * RoundHalf(xrow[t][k]);
            }
          }
          ASSERT_NEAR(c[o * kGemmTileRows + t], want, 1e-9 * (1 + std::fabs(want)))
              << TypeName(type) << " n_out=" << n_out << " o=" << o << " t=" << t;
        }
      }
    }
  }
}

// --- grouped launches ------------------------------------------------------------------------

TEST(CudaMatMulPlanTest, GroupItemsMapBackToTheirProductAndRow) {
  for (int64_t item_rows : {int64_t{1}, int64_t{kGemmTileOut}}) {
    GroupArgs args;
    const int64_t outs[] = {5, 0, 64, 1, 0, 130, 0};
    args.n = 7;
    for (int i = 0; i < args.n; ++i) args.p[i].out = outs[i];
    PlanGroupItems(args, item_rows);
    // Recomputation: walk the products and list (product, first row) of each item.
    std::vector<std::pair<int, int64_t>> want;
    for (int i = 0; i < args.n; ++i) {
      for (int64_t o = 0; o < outs[i]; o += item_rows) want.emplace_back(i, o);
    }
    ASSERT_EQ(args.first[args.n], static_cast<int64_t>(want.size()));
    for (int64_t item = 0; item < args.first[args.n]; ++item) {
      const int i = FindGroupProduct(args.first, args.n, item);
      EXPECT_EQ(i, want[item].first) << item;
      EXPECT_EQ((item - args.first[i]) * item_rows, want[item].second) << item;
      EXPECT_GT(args.p[i].out, 0);
    }
  }
  EXPECT_EQ(CeilDiv(130, 64), 3);
  EXPECT_EQ(CeilDiv(128, 64), 2);
}

// --- MoE grouping ----------------------------------------------------------------------------

TEST(CudaMoePlanTest, PlanMatchesRecomputationAndTileBound) {
  std::mt19937 rng(19);
  for (int rep = 0; rep < 200; ++rep) {
    const int32_t n_expert = std::uniform_int_distribution<int32_t>(1, 40)(rng);
    const int64_t n_assign = std::uniform_int_distribution<int64_t>(1, 600)(rng);
    const int32_t tile = rep % 2 == 0 ? kGemmTileRows : 3;
    // Skewed ids: some experts get most assignments, many none.
    std::vector<int32_t> counts(n_expert, 0);
    for (int64_t a = 0; a < n_assign; ++a) {
      const int32_t e = rep % 3 == 0 ? std::uniform_int_distribution<int32_t>(0, n_expert - 1)(rng)
                                     : std::min<int32_t>(n_expert - 1, static_cast<int32_t>(
                                                                           std::geometric_distribution<int>(0.3)(rng)));
      ++counts[e];
    }
    const int64_t max_tiles = MoeMaxTiles(n_assign, n_expert, tile);
    std::vector<int32_t> offsets(n_expert + 1), fill(n_expert), active(n_expert);
    std::vector<int32_t> tile_expert(max_tiles, -7), tile_start(max_tiles, -7), header(4);
    MoePlan(counts.data(), n_expert, tile, offsets.data(), fill.data(), active.data(),
            tile_expert.data(), tile_start.data(), header.data());
    int32_t pos = 0;
    int32_t n_active = 0;
    int32_t n_tiles = 0;
    for (int32_t e = 0; e < n_expert; ++e) {
      EXPECT_EQ(offsets[e], pos);
      EXPECT_EQ(fill[e], pos);
      if (counts[e] > 0) {
        ASSERT_LT(n_active, n_expert);
        EXPECT_EQ(active[n_active++], e);
        // This expert's tiles cover [pos, pos + count) in steps of `tile`, in order.
        for (int32_t s = 0; s < counts[e]; s += tile, ++n_tiles) {
          ASSERT_LT(n_tiles, max_tiles) << "tile bound too small";
          EXPECT_EQ(tile_expert[n_tiles], e);
          EXPECT_EQ(tile_start[n_tiles], pos + s);
        }
      }
      pos += counts[e];
    }
    EXPECT_EQ(offsets[n_expert], n_assign);
    EXPECT_EQ(header[0], n_active);
    EXPECT_EQ(header[1], n_tiles);
    EXPECT_EQ(header[2], n_assign);
  }
}

// The arrays of the scratch layout are 256-byte aligned, disjoint, in bounds, large enough.
TEST(CudaMoePlanTest, ScratchLayoutHoldsEveryArray) {
  for (const auto& [t, k, e, embd, ff] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>>{
           {1, 1, 1, 8, 8}, {1, 8, 256, 2048, 512}, {300, 8, 64, 96, 40}, {7, 3, 5, 33, 17}}) {
    const MoeScratchLayout l = MoeLayout(t, k, e, embd, ff, kGemmTileRows);
    const int64_t tiles = MoeMaxTiles(t * k, e, kGemmTileRows);
    const std::vector<std::pair<size_t, size_t>> arrays = {
        {l.counts, e * 4},          {l.offsets, (e + 1) * 4},  {l.fill, e * 4},
        {l.order, t * k * 4},       {l.inv, t * k * 4},        {l.active, e * 4},
        {l.tile_expert, tiles * 4}, {l.tile_start, tiles * 4}, {l.header, 16},
        {l.gate, t * k * ff * 4},   {l.up, t * k * ff * 4},    {l.down, t * k * embd * 4}};
    size_t end = 0;
    for (const auto& [off, bytes] : arrays) {
      EXPECT_EQ(off % 256, 0u);
      EXPECT_GE(off, end) << "overlap";
      end = off + bytes;
    }
    EXPECT_LE(end, l.total);
    EXPECT_LT(l.total - end, 256u);  // exact up to the alignment of the last array
  }
}

}  // namespace
}  // namespace deltaserve::kernels::cuda
