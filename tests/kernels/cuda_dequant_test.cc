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
#include "tests/gpu/matmul_test_util.h"
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
  Product p{
      type, in, out, {}, std::vector<float>(static_cast<size_t>(in * out)), RowBytes(type, in)};
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

// 32 lanes of GemvLanePartial (or, fast, gemv_fast.cuh's Q4_K lane) and the butterfly: the
// sums lane 0 of the GPU warp writes.
std::vector<float> ReplayGemvWarp(WeightType type, const uint8_t* wrow, int64_t in,
                                  const float* const* xr, int nr, bool fast = false) {
  std::vector<float> lanes(static_cast<size_t>(32 * kGemvMaxRows));
  DispatchWeightType(type, 0, [&](auto tag) {
    for (int lane = 0; lane < 32; ++lane) {
      float* acc = lanes.data() + lane * kGemvMaxRows;
      if (fast) {
        GemvLaneQ4KFast(wrow, in, xr, nr, lane, acc);
      } else {
        GemvLanePartial<decltype(tag)::value>(wrow, in, xr, nr, lane, acc);
      }
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
std::vector<float> ReplayGemvWarp(const Product& p, int64_t o, const float* const* xr, int nr,
                                  bool fast = false) {
  return ReplayGemvWarp(p.type, p.bytes.data() + o * p.row_bytes, p.in, xr, nr, fast);
}

double RoundHalf(float v) { return Fp16ToFp32(Fp32ToFp16(v)); }

// gemm.cuh GemmTile on the host: the slices filled unit by unit through GemmWeightUnit /
// GemmActivationUnit, rounded to f16, the 2 x 2 warps' WMMA products as double sums, then the
// epilogue's writes yrow[t][y_col0 + o] for o < n_out.
void ReplayGemmTile(WeightType type, const uint8_t* w, size_t row_bytes, int n_out, int64_t in,
                    const float* const* xrow, float* const* yrow, int64_t y_col0) {
  std::vector<double> c(kGemmTileOut * kGemmTileRows, 0.0);
  for (int64_t k0 = 0; k0 < in; k0 += kGemmTileK) {
    // Every slot a unit fails to write would poison the sums.
    std::vector<double> ws(kGemmTileOut * kGemmLd, -1e300), xs(kGemmTileRows * kGemmLd, -1e300);
    for (int u = 0; u < kGemmTileOut * kGemmUnitsPerRow; ++u) {
      float v[8];
      const int at = DispatchWeightType(type, -1, [&](auto tag) {
        return GemmWeightUnit<decltype(tag)::value>(w, row_bytes, n_out, in, k0, u, v);
      });
      for (int i = 0; i < 8; ++i) ws[at + i] = RoundHalf(v[i]);
    }
    for (int u = 0; u < kGemmTileRows * kGemmUnitsPerRow; ++u) {
      float v[8];
      const int at = GemmActivationUnit(xrow[u / kGemmUnitsPerRow], in, k0, u, v);
      for (int i = 0; i < 8; ++i) xs[at + i] = RoundHalf(v[i]);
    }
    for (int o = 0; o < kGemmTileOut; ++o) {
      for (int t = 0; t < kGemmTileRows; ++t) {
        for (int kk = 0; kk < kGemmTileK; ++kk) {
          c[o * kGemmTileRows + t] += ws[o * kGemmLd + kk] * xs[t * kGemmLd + kk];
        }
      }
    }
  }
  for (int t = 0; t < kGemmTileRows; ++t) {
    for (int o = 0; o < kGemmTileOut; ++o) {
      if (yrow[t] != nullptr && o < n_out) {
        yrow[t][y_col0 + o] = static_cast<float>(c[o * kGemmTileRows + t]);
      }
    }
  }
}

// Every unit of every row is summed once: the replayed warp equals the double product within
// f32 summation error (1e-5 of sum |w x|), for every type, rows 1..8, dense tails.
TEST(CudaGemvReplayTest, WarpComputesTheProduct) {
  std::mt19937 rng(21);
  for (WeightType type : AllWeightTypes()) {
    const std::vector<int64_t> lengths =
        BlockLayoutOf(type).block_size == 1    ? std::vector<int64_t>{5, 8, 100, 300, 777}
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

// The fast Q4_K lane (gemv_fast.cuh) replayed: within f32 summation error of the double
// product of the exactly decoded weights (its fused dequantisation moves a weight by at most an
// ulp), rows 1..8; and picked only for Q4_K rows with 16-byte aligned data and row_bytes.
TEST(CudaGemvReplayTest, FastQ4KLaneComputesTheProduct) {
  std::mt19937 rng(24);
  for (int64_t in : {256, 512, 2048, 8448}) {
    const Product p = MakeProduct(WeightType::kQ4_K, in, 4, rng);
    const int64_t stride = in + 4;
    const std::vector<float> x = RandomX(kGemvMaxRows, stride, rng);
    const float* xr[kGemvMaxRows];
    for (int r = 0; r < kGemvMaxRows; ++r) xr[r] = x.data() + r * stride;
    for (int nr = 1; nr <= kGemvMaxRows; ++nr) {
      for (int64_t o = 0; o < p.out; ++o) {
        const std::vector<float> got = ReplayGemvWarp(p, o, xr, nr, /*fast=*/true);
        for (int r = 0; r < nr; ++r) {
          double want = 0;
          double scale = 0;
          for (int64_t k = 0; k < in; ++k) {
            want += double{p.decoded[o * in + k]} * xr[r][k];
            scale += std::fabs(double{p.decoded[o * in + k]} * xr[r][k]);
          }
          EXPECT_NEAR(got[r], want, 1e-5 * scale) << "in=" << in << " nr=" << nr << " o=" << o;
        }
      }
    }
  }
  alignas(16) static const uint8_t buf[64] = {};
  EXPECT_TRUE(GemvFastEligible(WeightType::kQ4_K, buf, 144 * 4));
  EXPECT_FALSE(GemvFastEligible(WeightType::kQ4_K, buf + 2, 144 * 4));
  EXPECT_FALSE(GemvFastEligible(WeightType::kQ4_K, buf, 144 * 4 + 2));
  EXPECT_FALSE(GemvFastEligible(WeightType::kQ6_K, buf, 210 * 8));
  for (uint32_t w : {0u, 0x0F0A0501u, 0xFFFFFFFFu, 0x80402010u}) {
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(GemvByteToFloat(w, j), static_cast<float>((w >> (8 * j)) & 0xFF));
    }
  }
}

// One GEMM tile replayed slice by slice: equals the double product of the f16-rounded operands,
// with zeros from missing rows (n_out < 64, null activation rows) and past `in`, written only
// to the valid (row, column) cells at the column offset.
TEST(CudaGemmReplayTest, TileSlicesHoldTheRightOperands) {
  std::mt19937 rng(22);
  for (WeightType type : AllWeightTypes()) {
    const int64_t in = BlockLayoutOf(type).block_size == 1    ? 77
                       : BlockLayoutOf(type).block_size == 32 ? 160
                                                              : 512;
    for (int n_out : {64, 37, 1}) {
      const Product p = MakeProduct(type, in, n_out + 5, rng);  // the tile covers rows 5 ..
      const int64_t stride = in + 1;
      const std::vector<float> x = RandomX(kGemmTileRows, stride, rng);
      const float* xrow[kGemmTileRows];
      float* yrow[kGemmTileRows];
      const int64_t y_stride = 3 + kGemmTileOut + 2;
      std::vector<float> y(kGemmTileRows * y_stride, -99.0f);
      for (int t = 0; t < kGemmTileRows; ++t) {
        xrow[t] = t % 7 == 3 ? nullptr : x.data() + t * stride;
        yrow[t] = t % 11 == 5 ? nullptr : y.data() + t * y_stride;
      }
      ReplayGemmTile(type, p.bytes.data() + 5 * p.row_bytes, p.row_bytes, n_out, in, xrow, yrow, 3);
      for (int t = 0; t < kGemmTileRows; ++t) {
        for (int64_t col = 0; col < y_stride; ++col) {
          const int64_t o = col - 3;
          const float got = y[t * y_stride + col];
          if (yrow[t] == nullptr || o < 0 || o >= n_out) {
            ASSERT_EQ(got, -99.0f) << "written outside the tile: t=" << t << " col=" << col;
            continue;
          }
          double want = 0;
          if (xrow[t] != nullptr) {
            for (int64_t k = 0; k < in; ++k) {
              want += RoundHalf(p.decoded[(5 + o) * in + k]) * RoundHalf(xrow[t][k]);
            }
          }
          ASSERT_NEAR(got, want, 1e-6 * (1 + std::fabs(want)))
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
      const int32_t e =
          rep % 3 == 0
              ? std::uniform_int_distribution<int32_t>(0, n_expert - 1)(rng)
              : std::min<int32_t>(n_expert - 1,
                                  static_cast<int32_t>(std::geometric_distribution<int>(0.3)(rng)));
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

// MoeSortKernel's plan on the host: `n_threads` chunks (MoePlanChunk), their sums scanned in
// thread order (what the block's scan computes), each chunk written from its exclusive prefix,
// the last thread finishing.
void MoePlanInChunks(const int32_t* counts, int32_t n_expert, int32_t tile, int32_t n_threads,
                     int32_t* offsets, int32_t* fill, int32_t* active, int32_t* tile_expert,
                     int32_t* tile_start, int32_t* header) {
  std::vector<MoePlanSums> sums(n_threads);
  for (int32_t t = 0; t < n_threads; ++t) {
    sums[t] = MoePlanChunkSums(counts, MoePlanChunk(n_expert, n_threads, t),
                               MoePlanChunk(n_expert, n_threads, t + 1), tile);
  }
  MoePlanSums below{0, 0, 0};
  // Written in reverse thread order: no chunk may depend on another having been written.
  std::vector<MoePlanSums> prefix(n_threads);
  for (int32_t t = 0; t < n_threads; ++t) {
    prefix[t] = below;
    below.positions += sums[t].positions;
    below.active += sums[t].active;
    below.tiles += sums[t].tiles;
  }
  for (int32_t t = n_threads - 1; t >= 0; --t) {
    MoePlanChunkWrite(counts, MoePlanChunk(n_expert, n_threads, t),
                      MoePlanChunk(n_expert, n_threads, t + 1), tile, prefix[t], offsets, fill,
                      active, tile_expert, tile_start);
  }
  MoePlanFinish(below, n_expert, offsets, header);
}

// The block's plan equals the one-thread plan, for arena-sized expert counts and any number of
// threads (chunks of one expert, of many, empty chunks at the end).
TEST(CudaMoePlanTest, ChunkedPlanEqualsTheSequentialOne) {
  std::mt19937 rng(31);
  for (const int32_t n_expert : {1, 7, 256, 1023, 1024, 1025, 5000}) {
    for (const int32_t n_threads : {1, 3, 1024}) {
      const int64_t n_assign = std::uniform_int_distribution<int64_t>(1, 3000)(rng);
      std::vector<int32_t> counts(n_expert, 0);
      for (int64_t a = 0; a < n_assign; ++a) {
        ++counts[std::uniform_int_distribution<int32_t>(0, n_expert - 1)(rng)];
      }
      const int64_t max_tiles = MoeMaxTiles(n_assign, n_expert, kGemmTileRows);
      auto run = [&](bool chunked) {
        std::vector<int32_t> out((n_expert + 1) + 2 * n_expert + 2 * max_tiles + 4, -7);
        int32_t* offsets = out.data();
        int32_t* fill = offsets + n_expert + 1;
        int32_t* active = fill + n_expert;
        int32_t* tile_expert = active + n_expert;
        int32_t* tile_start = tile_expert + max_tiles;
        int32_t* header = tile_start + max_tiles;
        if (chunked) {
          MoePlanInChunks(counts.data(), n_expert, kGemmTileRows, n_threads, offsets, fill, active,
                          tile_expert, tile_start, header);
        } else {
          MoePlan(counts.data(), n_expert, kGemmTileRows, offsets, fill, active, tile_expert,
                  tile_start, header);
        }
        return out;
      };
      EXPECT_EQ(run(true), run(false)) << n_expert << " experts, " << n_threads << " threads";
    }
  }
}

// The arrays of the scratch layout are 256-byte aligned, disjoint, in bounds, large enough.
TEST(CudaMoePlanTest, ScratchLayoutHoldsEveryArray) {
  for (const auto& [t, k, e, embd, ff] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>>{
           {1, 1, 1, 8, 8}, {1, 8, 256, 2048, 512}, {300, 8, 64, 96, 40}, {7, 3, 5, 33, 17}}) {
    const MoeScratchLayout l = MoeLayout(t, k, e, embd, ff, kGemmTileRows);
    const int64_t tiles = MoeMaxTiles(t * k, e, kGemmTileRows);
    const std::vector<std::pair<size_t, size_t>> arrays = {{l.counts, e * 4},
                                                           {l.offsets, (e + 1) * 4},
                                                           {l.fill, e * 4},
                                                           {l.order, t * k * 4},
                                                           {l.inv, t * k * 4},
                                                           {l.active, e * 4},
                                                           {l.tile_expert, tiles * 4},
                                                           {l.tile_start, tiles * 4},
                                                           {l.header, 16},
                                                           {l.gate, t * k * ff * 4},
                                                           {l.up, t * k * std::max(ff, embd) * 4}};
    // down reuses up's bytes (up is dead once SwiGLU has run).
    EXPECT_EQ(l.down, l.up);
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

// moe_ffn.cu's pipeline replayed on the host with its DS_HOST_DEVICE pieces (the sort kernel's
// three phases sequentially, MoePlan, the expert products as GEMV warps or GEMM tiles over the
// plan's items, SwiGLU, MoeCombine) from a scratch area laid out by MoeLayout.
class MoeReplay {
 public:
  MoeReplay(const gpu_test::HostWeights& gate, const gpu_test::HostWeights& up,
            const gpu_test::HostWeights& down)
      : MoeReplay(gate.View(gate.bytes.data()), up.View(up.bytes.data()),
                  down.View(down.bytes.data())) {}
  // Stacks in any layout (matrix_stride: an expert arena's slots).
  MoeReplay(const WeightView& gate, const WeightView& up, const WeightView& down)
      : gate_(gate), up_(up), down_(down) {}

  std::vector<float> Run(const std::vector<float>& x, int64_t xs, int64_t n_tokens,
                         const std::vector<int32_t>& ids, const std::vector<float>& weights,
                         int64_t k) {
    const int64_t n_expert = gate_.count;
    const int64_t n_embd = gate_.in;
    const int64_t ff = gate_.out;
    const MoeScratchLayout l = MoeLayout(n_tokens, k, n_expert, n_embd, ff, kGemmTileRows);
    // Not zeroed: a position the replay fails to write shows up as garbage.
    scratch_.assign(l.total / sizeof(float), -3e38f);
    plan_ = PlanPtrs(scratch_.data(), l);
    const int64_t n_assign = n_tokens * k;
    for (int64_t e = 0; e < n_expert; ++e) plan_.counts[e] = 0;
    for (int64_t a = 0; a < n_assign; ++a) {
      if (ids[a] >= 0 && ids[a] < n_expert) ++plan_.counts[ids[a]];
    }
    // As MoeSortKernel builds it: 1024 threads' chunks.
    MoePlanInChunks(plan_.counts, static_cast<int32_t>(n_expert), kGemmTileRows, 1024,
                    plan_.offsets, plan_.fill, plan_.active, plan_.tile_expert, plan_.tile_start,
                    plan_.header);
    for (int64_t a = 0; a < n_assign; ++a) {
      if (ids[a] >= 0 && ids[a] < n_expert) {
        const int32_t p = plan_.fill[ids[a]]++;
        plan_.order[p] = static_cast<int32_t>(a);
        plan_.inv[a] = p;
      } else {
        plan_.inv[a] = MoeUnplaced(ids[a]);
      }
    }
    auto* base = reinterpret_cast<uint8_t*>(scratch_.data());
    float* g = reinterpret_cast<float*>(base + l.gate);
    float* u = reinterpret_cast<float*>(base + l.up);
    float* d = reinterpret_cast<float*>(base + l.down);
    gemv_ = MoeUsesGemv(n_tokens, k, n_expert);

    const WeightView& gv = gate_;
    const WeightView& uv = up_;
    const WeightView& dv = down_;
    const Mat xm{const_cast<float*>(x.data()), n_tokens, n_embd, xs};
    const MoeProduct gu = MoeGateUpProduct(gv, uv, xm, k, g, u);
    if (gv.type == uv.type && gv.row_bytes == uv.row_bytes) {
      Product(gv.type, gu, 2);
    } else {
      Product(gv.type, gu, 1);
      Product(uv.type, MoeUpOnlyProduct(gu, uv), 1);
    }
    for (int64_t i = 0; i < int64_t{plan_.header[2]} * ff; ++i) g[i] = MoeSwiGlu(g[i], u[i]);
    Product(dv.type, MoeDownProduct(dv, g, k, d), 1);
    std::vector<float> y(static_cast<size_t>(n_tokens * n_embd));
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t c = 0; c < n_embd; ++c) {
        y[t * n_embd + c] = MoeCombine(d, n_embd, plan_.inv, weights.data(), k, t, c);
      }
    }
    return y;
  }
  bool gemv() const { return gemv_; }

 private:
  // MoeGemvKernel / MoeGemmKernel over every block of their grids.
  void Product(WeightType type, const MoeProduct& m, int n_mats) {
    for (int z = 0; z < n_mats; ++z) {
      if (gemv_) {
        for (int32_t s = 0; s < plan_.header[0]; ++s) {
          const int32_t e = plan_.active[s];
          const int32_t end = plan_.offsets[e + 1];
          for (int64_t o = 0; o < m.out; ++o) {
            for (int32_t p0 = plan_.offsets[e]; p0 < end; p0 += kGemvMaxRows) {
              const int nr = std::min<int32_t>(kGemvMaxRows, end - p0);
              const float* xr[kGemvMaxRows];
              for (int r = 0; r < kGemvMaxRows; ++r) {
                xr[r] = MoeActivationRow(m, plan_.order, p0 + (r < nr ? r : 0));
              }
              // moe_ffn.cu's choice of lane (the host buffers' alignment stands in).
              const bool fast = type == WeightType::kQ4_K && MoeRowsAligned16(m, n_mats);
              const std::vector<float> acc =
                  ReplayGemvWarp(type, MoeWeightRow(m, z, e, o), m.in, xr, nr, fast);
              for (int r = 0; r < nr; ++r) MoeOutput(m, z)[(p0 + r) * m.y_stride + o] = acc[r];
            }
          }
        }
      } else {
        for (int32_t tile = 0; tile < plan_.header[1]; ++tile) {
          const int32_t e = plan_.tile_expert[tile];
          const int32_t start = plan_.tile_start[tile];
          const int32_t end = plan_.offsets[e + 1];
          for (int64_t o0 = 0; o0 < m.out; o0 += kGemmTileOut) {
            const int n_out = static_cast<int>(std::min<int64_t>(kGemmTileOut, m.out - o0));
            const float* xrow[kGemmTileRows];
            float* yrow[kGemmTileRows];
            for (int t = 0; t < kGemmTileRows; ++t) {
              const int32_t p = start + t;
              xrow[t] = p < end ? MoeActivationRow(m, plan_.order, p) : nullptr;
              yrow[t] = p < end ? MoeOutput(m, z) + p * m.y_stride : nullptr;
            }
            ReplayGemmTile(type, MoeWeightRow(m, z, e, o0), m.row_bytes, n_out, m.in, xrow, yrow,
                           o0);
          }
        }
      }
    }
  }

  WeightView gate_;
  WeightView up_;
  WeightView down_;
  std::vector<float> scratch_;
  MoePlanPtrs plan_{};
  bool gemv_ = true;
};

// The replayed pipeline within the bound of tests/gpu/matmul_test_util.h MoeReference (the one
// cuda_moe_test holds the GPU to), on both the GEMV and the GEMM paths, k 1..8, idle experts,
// gate and up of different types, an out-of-range id (NaN row for its token only).
TEST(CudaMoeReplayTest, PipelineComputesTheExpertFfn) {
  std::mt19937 rng(23);
  struct Config {
    WeightType gate, up, down;
    int64_t n_embd, ff, n_expert;
  };
  const Config configs[] = {
      {WeightType::kQ4_K, WeightType::kQ4_K, WeightType::kQ6_K, 256, 256, 6},
      {WeightType::kF16, WeightType::kBF16, WeightType::kQ5_1, 40, 32, 9},
      {WeightType::kQ8_0, WeightType::kQ8_0, WeightType::kQ4_0, 64, 96, 12},
  };
  for (const Config& c : configs) {
    const auto gate = gpu_test::MakeHostWeights(c.gate, c.n_embd, c.ff, c.n_expert, 0.3f, rng);
    const auto up = gpu_test::MakeHostWeights(c.up, c.n_embd, c.ff, c.n_expert, 0.3f, rng);
    const auto down = gpu_test::MakeHostWeights(c.down, c.ff, c.n_embd, c.n_expert, 0.3f, rng);
    MoeReplay replay(gate, up, down);
    for (const auto& [n_tokens, k] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 1}, {2, 4}, {8, 2}, {5, 1}, {12, 3}, {70, 2}}) {
      if (k >= c.n_expert) continue;
      SCOPED_TRACE(TypeName(c.gate) + "/" + TypeName(c.up) + "/" + TypeName(c.down) +
                   " T=" + std::to_string(n_tokens) + " k=" + std::to_string(k));
      // k distinct experts among all but the last two (idle), positive weights summing to 1.
      std::vector<int32_t> ids;
      std::vector<float> weights;
      std::vector<int32_t> pool(static_cast<size_t>(c.n_expert - 2));
      for (size_t e = 0; e < pool.size(); ++e) pool[e] = static_cast<int32_t>(e);
      for (int64_t t = 0; t < n_tokens; ++t) {
        std::shuffle(pool.begin(), pool.end(), rng);
        float sum = 0;
        std::vector<float> w(k);
        for (float& v : w) sum += (v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng));
        for (int64_t j = 0; j < k; ++j) {
          ids.push_back(pool[j % pool.size()]);
          weights.push_back(w[j] / sum);
        }
      }
      const int64_t xs = c.n_embd + 2;
      const std::vector<float> x = RandomX(n_tokens, xs, rng);
      const std::vector<float> y = replay.Run(x, xs, n_tokens, ids, weights, k);
      const gpu_test::MoeExpected ref = gpu_test::MoeReference(
          gate, up, down, x.data(), xs, n_tokens, ids, weights, k, !replay.gemv());
      int reported = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        if (!(std::fabs(y[i] - ref.want[i]) <= ref.bound[i]) && reported++ < 5) {
          ADD_FAILURE() << "gemv=" << replay.gemv() << " i=" << i << " replay=" << y[i]
                        << " want=" << ref.want[i] << " bound=" << ref.bound[i];
        }
      }
      // One bad id: that token's row is NaN, the others unchanged.
      std::vector<int32_t> bad = ids;
      bad[(n_tokens / 2) * k] = static_cast<int32_t>(c.n_expert);
      const std::vector<float> yb = replay.Run(x, xs, n_tokens, bad, weights, k);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t o = 0; o < c.n_embd; ++o) {
          const float v = yb[t * c.n_embd + o];
          if (t == n_tokens / 2) {
            ASSERT_TRUE(std::isnan(v));
          } else {
            ASSERT_EQ(v, y[t * c.n_embd + o]) << t << " " << o;
          }
        }
      }
    }
  }
}

// Stacks over an expert arena (matrix_stride = slot size, slots in another order than the
// experts, empty slots full of NaN bytes) and ids split between the arena and the host: the
// replay of the device half equals MoeReference over the original stacks with the host's ids
// skipped; tokens with no device expert get zeros, on both the GEMV and the GEMM paths.
TEST(CudaMoeReplayTest, ArenaStacksAndSkippedIds) {
  std::mt19937 rng(29);
  struct Config {
    WeightType gate, up, down;
    int64_t n_embd, ff;
  };
  const Config configs[] = {
      {WeightType::kQ4_K, WeightType::kQ4_K, WeightType::kQ6_K, 256, 256},  // the Q4_K fast lane
      {WeightType::kF16, WeightType::kBF16, WeightType::kQ5_1, 40, 32},
      {WeightType::kF32, WeightType::kF32, WeightType::kF32, 24, 20},
  };
  const int64_t n_expert = 8;
  // Experts 6, 1, 3, 0 in slots 0, 2, 3, 5 of 6; 2, 4, 5, 7 stay on the host.
  const std::vector<int32_t> slot_expert = {6, -1, 1, 3, -1, 0};
  for (const Config& c : configs) {
    const auto gate = gpu_test::MakeHostWeights(c.gate, c.n_embd, c.ff, n_expert, 0.3f, rng);
    const auto up = gpu_test::MakeHostWeights(c.up, c.n_embd, c.ff, n_expert, 0.3f, rng);
    const auto down = gpu_test::MakeHostWeights(c.down, c.ff, c.n_embd, n_expert, 0.3f, rng);
    const gpu_test::ExpertArena arena = gpu_test::MakeExpertArena(gate, up, down, slot_expert);
    MoeReplay replay(arena.Gate(gate, arena.bytes.data()), arena.Up(up, arena.bytes.data()),
                     arena.Down(down, arena.bytes.data()));
    for (const auto& [n_tokens, k] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 2}, {5, 3}, {40, 4}}) {
      SCOPED_TRACE(TypeName(c.gate) + " T=" + std::to_string(n_tokens) + " k=" + std::to_string(k));
      std::vector<int32_t> ids;
      std::vector<float> weights;
      std::vector<int32_t> pool(n_expert);
      for (int32_t e = 0; e < n_expert; ++e) pool[e] = e;
      for (int64_t t = 0; t < n_tokens; ++t) {
        std::shuffle(pool.begin(), pool.end(), rng);
        if (t == 0 && n_tokens > 1) pool = {2, 4, 5, 7, 0, 1, 3, 6};  // all on the host
        for (int64_t j = 0; j < k; ++j) {
          ids.push_back(pool[j]);
          weights.push_back(std::uniform_real_distribution<float>(0.1f, 1.0f)(rng));
        }
      }
      const gpu_test::SplitRoute split = gpu_test::SplitByArena(ids, slot_expert);
      const int64_t xs = c.n_embd + 1;
      const std::vector<float> x = RandomX(n_tokens, xs, rng);
      const std::vector<float> y = replay.Run(x, xs, n_tokens, split.slot_ids, weights, k);
      const gpu_test::MoeExpected ref = gpu_test::MoeReference(
          gate, up, down, x.data(), xs, n_tokens, split.device_experts, weights, k, !replay.gemv());
      int reported = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        if (!(std::fabs(y[i] - ref.want[i]) <= ref.bound[i]) && reported++ < 5) {
          ADD_FAILURE() << "gemv=" << replay.gemv() << " i=" << i << " replay=" << y[i]
                        << " want=" << ref.want[i] << " bound=" << ref.bound[i];
        }
      }
      if (n_tokens > 1) {
        for (int64_t o = 0; o < c.n_embd; ++o) {
          ASSERT_EQ(y[o], 0.0f) << o;
        }
      }
      // A slot id past the arena still poisons its token only.
      std::vector<int32_t> bad = split.slot_ids;
      bad[(n_tokens - 1) * k] = static_cast<int32_t>(slot_expert.size());
      const std::vector<float> yb = replay.Run(x, xs, n_tokens, bad, weights, k);
      for (int64_t o = 0; o < c.n_embd; ++o) {
        ASSERT_TRUE(std::isnan(yb[(n_tokens - 1) * c.n_embd + o]));
        if (n_tokens > 1) {
          ASSERT_EQ(yb[o], y[o]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace deltaserve::kernels::cuda
