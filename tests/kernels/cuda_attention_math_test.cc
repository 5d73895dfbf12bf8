// The host-testable half of the CUDA attention kernels (kernels/cuda/kv_codec.cuh,
// paged_attention.cuh, attention_checks.h), on the build machine, which has no GPU:
// - the KV codec against quants.cc bit for bit: f16/bf16 conversions, every cache type's
//   encoder against QuantizeRow and decoder against DequantizeRow on random and edge rows;
// - the page offsets against kernels::KvHeadOffset;
// - the work split: every key in exactly one split, every (token, head) in exactly one row of
//   one block, block key ranges, the scratch size the planner gets;
// - the online softmax and the merge of partials of any split against a double softmax;
// - the argument checks against the CPU backend's answers.
// cuda_attention_kernels_test runs the kernels themselves on the CPU (the CUDA emulator); what
// only a GPU can show (real warps, timing, the launches) is tests/gpu/cuda_attention_test.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/attention_checks.h"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "tests/kernels/cuda_attention_test_util.h"
#include "tests/kernels/op_test_support.h"
#include "tests/kernels/quant_test_util.h"

namespace deltaserve::kernels {
namespace {

using testing::HostMat;
using testing::Rng;

using attention_test::HostCache;
using attention_test::kCacheTypes;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// --- codec ----------------------------------------------------------------------------------

TEST(CudaKvCodecTest, HalfToFloatIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto x = static_cast<uint16_t>(h);
    ASSERT_EQ(Bits(cuda::HalfToFloat(x)), Bits(Fp16ToFp32(x))) << h;
  }
}

TEST(CudaKvCodecTest, FloatToHalfAndBf16RoundAsQuantsCc) {
  // Every 97th float bit pattern (all exponents, signs, NaN payloads), plus the values around
  // each f16 rounding boundary: halfway points, the subnormal and overflow thresholds.
  auto check = [](uint32_t u) {
    const float f = FromBits(u);
    ASSERT_EQ(cuda::FloatToHalf(f), Fp32ToFp16(f)) << std::hex << u;
    ASSERT_EQ(cuda::FloatToBf16(f), Fp32ToBf16(f)) << std::hex << u;
  };
  for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 97) check(static_cast<uint32_t>(u));
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const uint32_t mid = Bits(Fp16ToFp32(static_cast<uint16_t>(h)));
    for (uint32_t d : {0u, 1u, 0x0FFFu, 0x1000u, 0x1001u, 0x1FFFu}) {
      check(mid + d);
      check((mid + d) | 0x80000000u);
    }
  }
  for (uint32_t u : {0x477FEFFFu, 0x477FF000u, 0x33000000u, 0x32FFFFFFu, 0x38800000u, 0x387FFFFFu,
                     0x7F800000u, 0x7FC00001u}) {
    check(u);
  }
}

TEST(CudaKvCodecTest, TruncToInt8MatchesTheCastInRange) {
  // The encoders' arguments lie in [-128, 128) for finite rows, where the C++ cast is defined.
  Rng rng(3);
  for (int i = 0; i < 200000; ++i) {
    const float v = rng.Uniform(-128.0f, 127.999f);
    ASSERT_EQ(cuda::TruncToInt8(v), static_cast<int>(static_cast<int8_t>(v))) << v;
  }
  // Outside, x86 gives INT32_MIN's low byte (0) for NaN and huge values, the low byte otherwise.
  EXPECT_EQ(cuda::TruncToInt8(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(cuda::TruncToInt8(std::numeric_limits<float>::infinity()), 0);
  EXPECT_EQ(cuda::TruncToInt8(3e9f), 0);
  EXPECT_EQ(cuda::TruncToInt8(200.7f), 200 - 256);
  EXPECT_EQ(cuda::TruncToInt8(-200.7f), 56);
}

// Rows that reach every branch of the encoders: random blocks with other scales and offsets,
// zeros, constants, a single large value, ties of the largest magnitude of either sign, tiny
// values whose scale is subnormal in f16, and the largest magnitude last or first.
std::vector<std::vector<float>> EncoderRows(std::mt19937& gen) {
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 200; ++i) rows.push_back(testing::RandomValues(256, gen));
  rows.emplace_back(64, 0.0f);
  rows.emplace_back(64, 1.25f);
  rows.emplace_back(64, -3.0f);
  std::vector<float> spike(64, 0.01f);
  spike[37] = -50.0f;
  rows.push_back(spike);
  std::vector<float> ties(64, 0.5f);
  ties[3] = -2.0f;
  ties[9] = 2.0f;
  ties[40] = 2.0f;
  ties[50] = -2.0f;
  rows.push_back(ties);
  std::vector<float> tiny = testing::RandomValues(64, gen);
  for (float& x : tiny) x *= 1e-6f;
  rows.push_back(tiny);
  std::vector<float> ramp(64);
  for (int i = 0; i < 64; ++i) ramp[i] = static_cast<float>(i % 32) - 15.5f;
  rows.push_back(ramp);
  std::reverse(ramp.begin(), ramp.end());
  rows.push_back(ramp);
  return rows;
}

TEST(CudaKvCodecTest, EncodeKvRunWritesQuantizeRowBytes) {
  std::mt19937 gen(11);
  const std::vector<std::vector<float>> rows = EncoderRows(gen);
  for (WeightType type : kCacheTypes) {
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto n = static_cast<int64_t>(rows[r].size());
      std::vector<uint8_t> expect(RowBytes(type, n)), got(RowBytes(type, n), 0xAB);
      ASSERT_EQ(QuantizeRow(type, rows[r].data(), expect.data(), n), KernelStatus::kOk);
      cuda::EncodeKvRun(type, rows[r].data(), static_cast<int>(n), got.data());
      ASSERT_EQ(got, expect) << testing::TypeName(type) << " row " << r;
    }
  }
}

TEST(CudaKvCodecTest, DecodeKvValueIsDequantizeRow) {
  // Random payload bits (every nibble, every qh bit, both signs of d) and encoded rows.
  std::mt19937 gen(12);
  const std::vector<std::vector<float>> rows = EncoderRows(gen);
  for (WeightType type : kCacheTypes) {
    EXPECT_EQ(cuda::KvLayoutOf(type).values, BlockLayoutOf(type).block_size);
    EXPECT_EQ(cuda::KvLayoutOf(type).bytes, BlockLayoutOf(type).block_bytes);
    std::vector<std::vector<uint8_t>> runs;
    for (int i = 0; i < 100; ++i) runs.push_back(testing::RandomBlocks(type, 256, gen));
    for (const std::vector<float>& row : rows) {
      runs.emplace_back(RowBytes(type, static_cast<int64_t>(row.size())));
      ASSERT_EQ(QuantizeRow(type, row.data(), runs.back().data(), static_cast<int64_t>(row.size())),
                KernelStatus::kOk);
    }
    for (const std::vector<uint8_t>& run : runs) {
      const int64_t n = static_cast<int64_t>(run.size()) / BlockLayoutOf(type).block_bytes *
                        BlockLayoutOf(type).block_size;
      std::vector<float> expect(n);
      ASSERT_EQ(DequantizeRow(type, run.data(), expect.data(), n), KernelStatus::kOk);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(cuda::DecodeKvValue(type, run.data(), static_cast<int>(i))), Bits(expect[i]))
            << testing::TypeName(type) << " value " << i;
      }
    }
  }
  EXPECT_EQ(cuda::KvLayoutOf(WeightType::kQ4_K).values, 0);
}

// --- index math -----------------------------------------------------------------------------

TEST(CudaAttentionIndexTest, HeadOffsetIsKvHeadOffset) {
  std::mt19937 gen(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t page_tokens = std::uniform_int_distribution<int64_t>(1, 300)(gen);
    const int64_t n_head_kv = std::uniform_int_distribution<int64_t>(1, 8)(gen);
    const WeightType type = kCacheTypes[trial % 7];
    const int64_t head_dim = cuda::KvLayoutOf(type).values == 1 ? 8 * (1 + trial % 32) : 256;
    std::vector<int32_t> table(50);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), gen);
    KvPool pool{nullptr, type, cuda::KvRowBytes(type, n_head_kv * head_dim), 50};
    PagedKvView view{pool, pool, page_tokens, table.data(), 50, n_head_kv};
    const cuda::KvPageGeometry g{page_tokens, n_head_kv,
                                 static_cast<int64_t>(pool.row_bytes) / n_head_kv};
    for (int i = 0; i < 50; ++i) {
      const int64_t pos = std::uniform_int_distribution<int64_t>(0, 50 * page_tokens - 1)(gen);
      const int64_t head = std::uniform_int_distribution<int64_t>(0, n_head_kv - 1)(gen);
      ASSERT_EQ(cuda::KvHeadByteOffset(g, table[pos / page_tokens], pos, head),
                KvHeadOffset(pool, view, pos, head));
    }
  }
}

TEST(CudaAttentionIndexTest, SplitsCoverEveryKeyOnce) {
  int64_t prev_splits = 1;
  for (int64_t n_keys = 1; n_keys <= 70000; n_keys += (n_keys < 2000 ? 1 : 997)) {
    for (int64_t t : {int64_t{1}, int64_t{5}, int64_t{8}, int64_t{9}, int64_t{300}}) {
      const cuda::SplitPlan plan = cuda::PlanSplits(t, n_keys);
      ASSERT_GE(plan.n_splits, 1);
      ASSERT_LE(plan.n_splits, cuda::kMaxSplits);
      if (t > cuda::kMaxSplitTokens || n_keys <= cuda::kSplitKeys) {
        ASSERT_EQ(plan.n_splits, 1);
      }
      std::vector<int> seen(n_keys, 0);
      int64_t nonempty = 0;
      for (int64_t s = 0; s < plan.n_splits; ++s) {
        const cuda::KeyRange r = cuda::SplitRange(plan, n_keys, s);
        if (r.begin < r.end) ++nonempty;
        for (int64_t k = r.begin; k < r.end; ++k) ++seen[k];
      }
      for (int64_t k = 0; k < n_keys; ++k) ASSERT_EQ(seen[k], 1) << n_keys << " " << k;
      // Splits with no key only appear when the cap stretched the ranges (more than 32K keys),
      // and are a small fraction of them.
      if (n_keys <= cuda::kMaxSplits * cuda::kSplitKeys) {
        ASSERT_EQ(nonempty, plan.n_splits);
      }
      ASSERT_GE(nonempty * 10, plan.n_splits * 9) << n_keys;
      if (t == 1) {
        ASSERT_GE(plan.n_splits, prev_splits) << n_keys;  // more keys never mean fewer splits
        prev_splits = plan.n_splits;
      }
    }
  }
}

TEST(CudaAttentionIndexTest, ScratchBoundCoversEverySmallerCall) {
  for (int64_t n_head : {1, 16, 40}) {
    for (int64_t hd : {64, 256}) {
      for (int64_t t_max : {1, 4, 8, 9, 512}) {
        for (int64_t ctx : {1, 100, 129, 4096, 40000, 200000}) {
          const size_t bound = cuda::AttentionScratchBound(t_max, n_head, hd, ctx);
          const int64_t t_top = std::min(t_max, cuda::kMaxSplitTokens);
          EXPECT_EQ(bound, cuda::AttentionScratchBytesFor(t_top, n_head, hd, ctx));
          for (int64_t t = 1; t <= t_max; t = t < 16 ? t + 1 : t * 2) {
            for (int64_t n = t; n <= ctx; n = n < 300 ? n + 1 : n * 5 / 4) {
              ASSERT_LE(cuda::AttentionScratchBytesFor(t, n_head, hd, n), bound)
                  << t << " " << n << " " << ctx;
            }
          }
          // What a split call writes: (max, sum) and head_dim floats per row and split.
          const cuda::SplitPlan plan = cuda::PlanSplits(t_top, ctx);
          const size_t partials = plan.n_splits > 1
                                      ? cuda::PartialStatsFloats(plan.n_splits, t_top * n_head) +
                                            static_cast<size_t>(plan.n_splits * t_top * n_head * hd)
                                      : 0;
          EXPECT_EQ(bound, partials * sizeof(float));
        }
      }
    }
  }
}

TEST(CudaAttentionIndexTest, RowBlocksCoverEveryTokenHeadOnce) {
  for (int kd : {64, 128, 256}) {
    const int rows = cuda::RowsPerBlock(kd);
    EXPECT_EQ(cuda::HeadDimBucket(kd), kd);
    EXPECT_EQ(cuda::HeadDimBucket(kd - 1), kd);
    for (int64_t t : {1, 2, 3, 7, 8, 9, 100}) {
      for (int64_t n_head_kv : {1, 2, 3}) {
        for (int64_t group : {1, 2, 3, 4, 8, 16}) {
          const int64_t n_head = group * n_head_kv, n_past = 11;
          std::vector<int> seen(t * n_head, 0);
          const int64_t blocks = cuda::RowBlocks(t, group, rows);
          for (int64_t kvh = 0; kvh < n_head_kv; ++kvh) {
            for (int64_t b = 0; b < blocks; ++b) {
              int64_t max_limit = 0;
              for (int rr = 0; rr < rows; ++rr) {
                const int64_t r = b * rows + rr;
                if (r >= t * group) continue;
                const cuda::AttnRow row = cuda::RowOf(r, kvh, group);
                ASSERT_LT(row.token, t);
                ASSERT_EQ(row.head / group, kvh);  // query head h reads kv head h / group
                ++seen[row.token * n_head + row.head];
                max_limit = std::max(max_limit, cuda::TokenKeyLimit(n_past, row.token));
              }
              ASSERT_GT(max_limit, 0) << "an empty block";
              ASSERT_EQ(cuda::BlockKeyEnd(b * rows, rows, t, group, n_past), max_limit);
            }
          }
          for (int x : seen) ASSERT_EQ(x, 1);
        }
      }
    }
  }
  EXPECT_EQ(cuda::HeadDimBucket(257), 0);
}

// --- softmax algebra ------------------------------------------------------------------------

// One row's partial over keys [begin, end) the way a block computes it: 32-key tiles, each
// entered with its max (EnterTile), then ProbOf of each score; masked keys are -inf.
struct Partial {
  cuda::SoftmaxRow st;
  std::vector<float> acc;
};
Partial RowPartial(const std::vector<float>& s, const std::vector<float>& v, int64_t begin,
                   int64_t end) {
  Partial p;
  p.acc.assign(1, 0.0f);
  for (int64_t kb = begin; kb < end; kb += cuda::kAttnKeyTile) {
    const int64_t nk = std::min<int64_t>(cuda::kAttnKeyTile, end - kb);
    float tile_max = cuda::NegInf();
    for (int64_t j = 0; j < nk; ++j) tile_max = std::max(tile_max, s[kb + j]);
    const float factor = cuda::EnterTile(p.st, tile_max);
    float sum = 0.0f, pv = 0.0f;
    for (int64_t j = 0; j < nk; ++j) {
      const float prob = cuda::ProbOf(s[kb + j], p.st.max);
      sum += prob;
      pv += prob * v[kb + j];
    }
    p.st.sum = p.st.sum * factor + sum;
    p.acc[0] = p.acc[0] * factor + pv;
  }
  return p;
}

TEST(CudaAttentionSoftmaxTest, MergedPartialsOfAnySplitAreTheSoftmax) {
  std::mt19937 gen(8);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 3000)(gen);
    const float spread = trial % 4 == 0 ? 300.0f : trial % 4 == 1 ? 20.0f : 3.0f;
    std::normal_distribution<float> normal(0.0f, spread);
    std::vector<float> s(n), v(n);
    for (int64_t j = 0; j < n; ++j) {
      s[j] = normal(gen);
      v[j] = std::normal_distribution<float>(0.0f, 1.0f)(gen);
    }
    // Masked keys, sometimes whole stretches (a split can see none of its keys).
    const int64_t masked_from = trial % 3 == 0 ? n / 2 : n;
    for (int64_t j = masked_from; j < n; ++j) s[j] = cuda::NegInf();
    if (trial % 5 == 0) s[0] = cuda::NegInf();
    if (std::all_of(s.begin(), s.end(), [](float x) { return x == cuda::NegInf(); })) continue;

    double mx = -1e300, sum = 0.0, acc = 0.0;
    for (float x : s) {
      if (x != cuda::NegInf()) mx = std::max(mx, double{x});
    }
    for (int64_t j = 0; j < n; ++j) {
      if (s[j] == cuda::NegInf()) continue;
      const double w = std::exp(double{s[j]} - mx);
      sum += w;
      acc += w * v[j];
    }
    const double expect = acc / sum;

    // Random cut points: 1 to 40 ranges of any lengths, empty ones included.
    const int64_t n_parts = std::uniform_int_distribution<int64_t>(1, 40)(gen);
    std::vector<int64_t> cuts = {0, n};
    for (int64_t i = 1; i < n_parts; ++i) {
      cuts.push_back(std::uniform_int_distribution<int64_t>(0, n)(gen));
    }
    std::sort(cuts.begin(), cuts.end());
    std::vector<float> stats, accs;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      const Partial p = RowPartial(s, v, cuts[i], cuts[i + 1]);
      stats.push_back(p.st.max);
      stats.push_back(p.st.sum);
      accs.push_back(p.acc[0]);
    }
    const auto parts = static_cast<int64_t>(accs.size());
    const float max = cuda::MergedMax(stats.data(), parts, 2);
    float l = 0.0f, o = 0.0f;
    for (int64_t i = 0; i < parts; ++i) {
      const float w = cuda::MergeWeight(stats[2 * i], max);
      l += w * stats[2 * i + 1];
      o += w * accs[i];
    }
    const double got = o / l;
    // f32 over <= 3000 terms, each weight within 1e-7 of exp's exact value: well inside 1e-6 of
    // the output's scale (the mean |v| is about 1, a softmax average stays below max |v|).
    double vmax = 0.0;
    for (float x : v) vmax = std::max(vmax, std::fabs(double{x}));
    ASSERT_NEAR(got, expect, 1e-6 * vmax) << "trial " << trial << " n " << n;
    ASSERT_TRUE(std::isfinite(got));
  }
}

TEST(CudaAttentionSoftmaxTest, RowsWithoutKeysStayZero) {
  cuda::SoftmaxRow row;
  EXPECT_EQ(cuda::EnterTile(row, cuda::NegInf()), 0.0f);
  EXPECT_EQ(row.max, cuda::NegInf());
  EXPECT_EQ(cuda::ProbOf(cuda::NegInf(), row.max), 0.0f);
  EXPECT_EQ(cuda::EnterTile(row, 2.0f), 0.0f);
  EXPECT_EQ(row.max, 2.0f);
  EXPECT_EQ(cuda::EnterTile(row, cuda::NegInf()), 1.0f);  // a fully masked tile changes nothing
  EXPECT_FLOAT_EQ(cuda::EnterTile(row, 3.0f), std::exp(-1.0f));
  EXPECT_EQ(cuda::MergeWeight(cuda::NegInf(), 3.0f), 0.0f);
}

// --- argument checks ------------------------------------------------------------------------

TEST(CudaAttentionChecksTest, RefuseWhatTheCpuBackendRefuses) {
  ThreadPool pool(1);
  HostCache cache(WeightType::kQ8_0, WeightType::kF16, 2, 32, 4, 5, 1);
  HostMat q(3, 128), out(3, 128), out_bad(3, 64), k(3, 64), v(3, 64), k_bad(3, 60), v2(2, 64);
  Mat om = out.mat(), obad = out_bad.mat();
  const PagedKvView good = cache.view;
  auto same = [&](const PagedKvView& view, int64_t n_past, int64_t n_head, int64_t n_head_kv,
                  Mat& o, const char* what) {
    EXPECT_EQ(cuda::CheckPagedAttention(q.mat(), view, n_past, n_head, n_head_kv, o),
              PagedAttentionCpu(pool, q.mat(), view, n_past, n_head, n_head_kv, 1.0f, o))
        << what;
  };
  same(good, 2, 4, 2, om, "good");
  same(good, 6, 4, 2, om, "past the table");
  same(good, 2, 4, 3, om, "4 % 3");
  same(good, 2, 4, 1, om, "row bytes");
  same(good, 2, 4, 2, obad, "out cols");
  same(good, -1, 4, 2, om, "negative past");
  same(good, 2, 8, 4, om, "head_dim 16 not a multiple of 32");
  same(good, 2, 0, 2, om, "no heads");
  PagedKvView bad = good;
  bad.k.type = WeightType::kQ4_K;
  same(bad, 2, 4, 2, om, "not a cache type");
  bad = good;
  bad.page_tokens = 0;
  same(bad, 2, 4, 2, om, "page size");
  bad = good;
  bad.n_head_kv = 1;
  same(bad, 2, 4, 2, om, "head split");
  bad = good;
  bad.v.row_bytes += 2;
  same(bad, 2, 4, 2, om, "v row bytes");
  bad = good;
  bad.k.data = nullptr;
  same(bad, 2, 4, 2, om, "no pool");
  bad = good;
  bad.page_table = nullptr;
  same(bad, 2, 4, 2, om, "no table");

  // Page ids are the one thing the CPU checks and the launcher cannot (device memory): the
  // kernels skip positions on pages outside the pools instead.
  std::vector<int32_t> table = cache.table;
  table[1] = static_cast<int32_t>(good.k.n_pages);
  bad = good;
  bad.page_table = table.data();
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), bad, 2, 4, 2, 1.0f, om),
            KernelStatus::kInvalidArgument);
  EXPECT_EQ(cuda::CheckPagedAttention(q.mat(), bad, 2, 4, 2, om), KernelStatus::kOk);

  // A head size the CPU computes and the GPU has no kernel for.
  HostCache wide(WeightType::kF32, WeightType::kF32, 1, 288, 4, 5, 1);
  HostMat qw(1, 288), ow(1, 288);
  Mat owm = ow.mat();
  EXPECT_EQ(PagedAttentionCpu(pool, qw.mat(), wide.view, 4, 1, 1, 1.0f, owm), KernelStatus::kOk);
  EXPECT_EQ(cuda::CheckPagedAttention(qw.mat(), wide.view, 4, 1, 1, owm),
            KernelStatus::kUnsupportedType);

  // StoreKv.
  auto same_store = [&](const Mat& km, const Mat& vm, const PagedKvView& view, int64_t first,
                        const char* what) {
    EXPECT_EQ(cuda::CheckStoreKv(km, vm, view, first), StoreKvCpu(km, vm, view, first)) << what;
  };
  same_store(k.mat(), v.mat(), good, 0, "good");
  same_store(k.mat(), v.mat(), good, 2, "past the table");
  same_store(k.mat(), v.mat(), good, -1, "negative position");
  same_store(k_bad.mat(), v.mat(), good, 0, "k and v differ");
  same_store(k.mat(), v2.mat(), good, 0, "rows differ");
  same_store(k.mat().Rows(0, 0), v.mat().Rows(0, 0), good, 1, "nothing to store");
  same_store(k.mat().Cols(0, 0), v.mat().Cols(0, 0), good, 0, "no columns");
  bad = good;
  bad.n_head_kv = 3;
  same_store(k.mat(), v.mat(), bad, 0, "64 % 3");
  bad = good;
  bad.v.type = WeightType::kQ5_1;
  same_store(k.mat(), v.mat(), bad, 0, "q5_1 is not a cache type");
  bad = good;
  bad.n_pages = 1;
  same_store(k.mat(), v.mat(), bad, 0, "table too short");
}

}  // namespace
}  // namespace deltaserve::kernels
