// Paged attention (StoreKvCpu + PagedAttentionCpu) against a double-precision reference written
// from MODEL_SPEC §2.3 steps 5-6 (query head h reads kv head h / (n_head / n_head_kv); token t
// sees positions 0..n_past+t). The reference reads K and V as the cache holds them: each stored
// head row (pages are head-major, backend.h) decoded with quants.cc's DequantizeRow, so every K/V
// type is held to the same tolerance and the quantization itself is checked separately (stored
// bytes == QuantizeRow's, at offsets written out from the layout). Tolerance: f32
// dot products over head_dim <= 256 terms, an f32 online softmax over <= 1100 keys whose
// running sums are rescaled (FastExp, relative error 1e-7): a few 1e-6 of the output scale;
// 2e-5 absolute + 1e-4 relative.
#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/op_test_support.h"

namespace deltaserve::kernels {

// Test names and failure messages say "avx2", not "4-byte object <01-00 00-00>".
void PrintTo(CpuIsa isa, std::ostream* os) { *os << CpuIsaName(isa); }

namespace {

using testing::ExpectClose;
using testing::HostMat;
using testing::Rng;

constexpr double kAbsTol = 2e-5;
constexpr double kRelTol = 1e-4;

struct Case {
  int64_t n_tokens, n_past, n_head, n_head_kv, head_dim;
  WeightType k_type = WeightType::kF32, v_type = WeightType::kF32;
  int64_t page_tokens = 16;
};

// A paged cache of one layer for one sequence: pools with spare pages and a shuffled page table,
// so that positions that follow each other live in pages far apart.
class TestCache {
 public:
  TestCache(const Case& c, int64_t n_positions, uint32_t seed)
      : kv_dim_(c.n_head_kv * c.head_dim), head_dim_(c.head_dim) {
    const int64_t pages = (n_positions + c.page_tokens - 1) / c.page_tokens;
    const int64_t pool_pages = pages + 3;
    std::vector<int32_t> ids(pool_pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    table_.assign(ids.begin(), ids.begin() + pages);
    view_.page_tokens = c.page_tokens;
    view_.page_table = table_.data();
    view_.n_pages = pages;
    view_.n_head_kv = c.n_head_kv;
    InitPool(view_.k, k_bytes_, c.k_type, pool_pages, c.page_tokens);
    InitPool(view_.v, v_bytes_, c.v_type, pool_pages, c.page_tokens);
  }

  const PagedKvView& view() const { return view_; }

  // Position pos of the K (or V) pool decoded to f32, heads concatenated.
  std::vector<float> Decoded(bool key, int64_t pos) const {
    const KvPool& pool = key ? view_.k : view_.v;
    const std::vector<uint8_t> bytes = Bytes(key, pos);
    const size_t head_bytes = pool.row_bytes / view_.n_head_kv;
    std::vector<float> row(kv_dim_);
    for (int64_t h = 0; h < view_.n_head_kv; ++h) {
      EXPECT_EQ(DequantizeRow(pool.type, bytes.data() + h * head_bytes, row.data() + h * head_dim_,
                              head_dim_),
                KernelStatus::kOk);
    }
    return row;
  }

  // The stored bytes of a position (K or V), heads concatenated. The offsets are written out
  // from backend.h's layout (page, then head, then slot) rather than taken from KvHeadOffset.
  std::vector<uint8_t> Bytes(bool key, int64_t pos) const {
    const KvPool& pool = key ? view_.k : view_.v;
    const auto* base = static_cast<const uint8_t*>(pool.data);
    const int64_t pt = view_.page_tokens, page = table_[pos / pt];
    const size_t head_bytes = pool.row_bytes / view_.n_head_kv;
    std::vector<uint8_t> row;
    for (int64_t h = 0; h < view_.n_head_kv; ++h) {
      const uint8_t* head =
          base + page * pt * pool.row_bytes + (h * pt + pos % pt) * head_bytes;
      EXPECT_EQ(head, base + KvHeadOffset(pool, view_, pos, h));
      row.insert(row.end(), head, head + head_bytes);
    }
    return row;
  }

 private:
  void InitPool(KvPool& pool, std::vector<uint8_t>& bytes, WeightType type, int64_t pages,
                int64_t page_tokens) {
    pool.type = type;
    pool.row_bytes = RowBytes(type, kv_dim_);
    pool.n_pages = pages;
    // 0xFF bytes decode to NaN in f32/f16/bf16 scales: an unwritten row that is read shows.
    bytes.assign(pool.row_bytes * page_tokens * pages, 0xFF);
    pool.data = bytes.data();
  }

  int64_t kv_dim_, head_dim_;
  std::vector<int32_t> table_;
  std::vector<uint8_t> k_bytes_, v_bytes_;
  PagedKvView view_;
};

std::vector<double> AttentionRef(const HostMat& q, const TestCache& cache, const Case& c,
                                 double scale) {
  const int64_t n_kv = c.n_past + c.n_tokens;
  std::vector<std::vector<float>> k(n_kv), v(n_kv);
  for (int64_t j = 0; j < n_kv; ++j) {
    k[j] = cache.Decoded(true, j);
    v[j] = cache.Decoded(false, j);
  }
  std::vector<double> out(q.rows() * q.cols());
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    for (int64_t h = 0; h < c.n_head; ++h) {
      const int64_t kvh = h / (c.n_head / c.n_head_kv);
      const int64_t visible = c.n_past + t + 1;
      std::vector<double> s(visible);
      for (int64_t j = 0; j < visible; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < c.head_dim; ++d) {
          dot += double{q.at(t, h * c.head_dim + d)} * k[j][kvh * c.head_dim + d];
        }
        s[j] = scale * dot;
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0.0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < c.head_dim; ++d) {
        double acc = 0.0;
        for (int64_t j = 0; j < visible; ++j) acc += s[j] * v[j][kvh * c.head_dim + d];
        out[t * q.cols() + h * c.head_dim + d] = acc / sum;
      }
    }
  }
  return out;
}

// Stores rows of k/v in chunks of `chunk` positions (as prefill chunks and decode steps do).
void StoreAll(const HostMat& k, const HostMat& v, const TestCache& cache, int64_t chunk) {
  for (int64_t first = 0; first < k.rows(); first += chunk) {
    const int64_t n = std::min(chunk, k.rows() - first);
    HostMat kc = k, vc = v;
    ASSERT_EQ(StoreKvCpu(kc.mat().Rows(first, n), vc.mat().Rows(first, n), cache.view(), first),
              KernelStatus::kOk);
  }
}

// Parameters: threads, kernel level. Every level this CPU supports runs in one ctest run
// (internal::PagedAttentionCpuIsa), whatever DELTASERVE_CPU_ISA says.
class PagedAttentionTest : public ::testing::TestWithParam<std::tuple<int, CpuIsa>> {
 protected:
  PagedAttentionTest() : pool_(std::get<0>(GetParam())), isa_(std::get<1>(GetParam())) {}

  void SetUp() override {
    if (!IsaSupported(isa_)) GTEST_SKIP() << CpuIsaName(isa_) << " not supported here";
  }

  KernelStatus Attend(const Mat& q, const PagedKvView& kv, int64_t n_past, int64_t n_head,
                      int64_t n_head_kv, float scale, Mat& out) {
    return internal::PagedAttentionCpuIsa(pool_, q, kv, n_past, n_head, n_head_kv, scale, out,
                                          isa_);
  }

  void Check(const Case& c, uint32_t seed) {
    SCOPED_TRACE(::testing::Message()
                 << "T=" << c.n_tokens << " past=" << c.n_past << " heads=" << c.n_head << "/"
                 << c.n_head_kv << " hd=" << c.head_dim << " k=" << static_cast<int>(c.k_type)
                 << " v=" << static_cast<int>(c.v_type) << " page=" << c.page_tokens);
    Rng rng(seed);
    const int64_t n_kv = c.n_past + c.n_tokens;
    HostMat q(c.n_tokens, c.n_head * c.head_dim, 2);
    HostMat k(n_kv, c.n_head_kv * c.head_dim, 1), v(n_kv, c.n_head_kv * c.head_dim, 3);
    rng.FillNormal(q);
    rng.FillNormal(k);
    rng.FillNormal(v);
    TestCache cache(c, n_kv, seed);
    StoreAll(k, v, cache, std::max<int64_t>(1, c.n_past));
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    HostMat out(c.n_tokens, c.n_head * c.head_dim, 4);
    Mat om = out.mat();
    ASSERT_EQ(Attend(q.mat(), cache.view(), c.n_past, c.n_head, c.n_head_kv, scale, om),
              KernelStatus::kOk);
    ExpectClose(out, AttentionRef(q, cache, c, scale), kAbsTol, kRelTol, "attention");
    EXPECT_TRUE(out.PaddingIntact());
  }

  ThreadPool pool_;
  CpuIsa isa_;
};

TEST_P(PagedAttentionTest, F32MatchesReference) {
  const Case cases[] = {
      {5, 0, 4, 2, 32},       // prefill from empty, GQA 2:1
      {3, 7, 4, 1, 16},       // continuing after a cached prefix, all heads on one kv head
      {1, 40, 8, 2, 64},      // decode
      {64, 200, 4, 2, 128},   // big enough for the pool
      {6, 2, 3, 3, 8},        // plain multi-head, head_dim not a multiple of 16
      {1, 300, 8, 2, 64},     // decode split over keys on two threads
      {2, 300, 6, 2, 24},     // a short verification batch, odd head_dim, group of 3
      {1, 1100, 8, 2, 256},   // decode at the Qwen3.5 head size, many splits
      {40, 33, 16, 2, 256},   // prefill with a group of 8 (rows not a multiple of 4 per block)
  };
  uint32_t seed = 21;
  for (const Case& c : cases) Check(c, seed++);
}

TEST_P(PagedAttentionTest, EveryCacheTypeMatchesReference) {
  const WeightType types[] = {WeightType::kF16, WeightType::kBF16, WeightType::kQ8_0,
                              WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0};
  uint32_t seed = 40;
  for (WeightType kt : types) {
    Check({1, 77, 8, 2, 64, kt, kt, 32}, seed++);   // decode
    Check({9, 20, 8, 2, 64, kt, kt, 32}, seed++);   // prefill chunk after a prefix
  }
  // K and V in different types, as --cache-type-k / --cache-type-v allow.
  Check({3, 50, 4, 2, 64, WeightType::kQ8_0, WeightType::kQ4_0, 16}, seed++);
  Check({1, 600, 8, 2, 256, WeightType::kF16, WeightType::kQ8_0, 256}, seed++);
  Check({1, 600, 8, 2, 256, WeightType::kBF16, WeightType::kF32, 64}, seed++);
}

TEST_P(PagedAttentionTest, F16InPlaceMatchesReference) {
  // f16 K/V are read in place and converted inside the tiles at the avx512, avx_vnni and avx2
  // levels: pages whose size is not a multiple of the 32-key tile nor of 4 (tiles end at page
  // ends, the last one with padding keys), groups of 3, 4 and 8, the Qwen3.5 head size with key
  // splits.
  uint32_t seed = 80;
  for (int64_t page : {13, 20, 256}) {
    Check({1, 300, 8, 2, 64, WeightType::kF16, WeightType::kF16, page}, seed++);
    Check({2, 130, 8, 2, 64, WeightType::kF16, WeightType::kF16, page}, seed++);
    Check({1, 77, 6, 2, 32, WeightType::kF16, WeightType::kF16, page}, seed++);
    Check({1, 45, 8, 1, 32, WeightType::kF16, WeightType::kF16, page}, seed++);
  }
  Check({1, 1100, 8, 2, 256, WeightType::kF16, WeightType::kF16, 256}, seed++);
  Check({1, 3, 4, 2, 256, WeightType::kF16, WeightType::kF16, 256}, seed++);
}

TEST_P(PagedAttentionTest, PageBoundaries) {
  // Sequences ending one before, on and one after a page boundary, and spanning many pages.
  uint32_t seed = 60;
  for (int64_t page : {16, 64}) {
    for (int64_t n_kv : {page - 1, page, page + 1, 5 * page + 3}) {
      Check({1, n_kv - 1, 4, 2, 32, WeightType::kF16, WeightType::kF16, page}, seed++);
      Check({std::min<int64_t>(n_kv, 7), n_kv - std::min<int64_t>(n_kv, 7), 4, 2, 32,
             WeightType::kQ8_0, WeightType::kQ8_0, page},
            seed++);
    }
  }
}

TEST_P(PagedAttentionTest, RaggedShapesOfEveryCacheType) {
  // Every K/V type (each level's in-place and decoded reads) over shapes that fill no tile
  // evenly: contexts that are no multiple of the 32-key tile or of 4, partial first and last
  // pages, pages of 13 / 20 / 256 keys, GQA groups of 1, 3, 4 and 8 (query rows per item not a
  // multiple of 4, the padding rows), prefill chunks of several token blocks at depth, decode
  // with key splits, and head sizes of 32 to 256 (the p·V tiles' narrower column tails at 16
  // lanes).
  const WeightType types[] = {WeightType::kF32,  WeightType::kF16,  WeightType::kBF16,
                              WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,
                              WeightType::kQ5_0};
  uint32_t seed = 100;
  for (WeightType t : types) {
    Check({37, 0, 8, 2, 64, t, t, 13}, seed++);     // prefill from empty, 3 token blocks
    Check({41, 203, 8, 2, 128, t, t, 20}, seed++);  // a chunk at depth, 6 blocks, group 4
    Check({11, 70, 6, 2, 96, t, t, 256}, seed++);   // group 3, head_dim 96 (64 + 32 columns)
    Check({5, 29, 8, 1, 160, t, t, 13}, seed++);    // group 8, head_dim 160 (128 + 32)
    Check({7, 9, 3, 3, 32, t, t, 20}, seed++);      // no grouping, 7 tokens in one block
    Check({1, 517, 8, 2, 256, t, t, 20}, seed++);   // decode: key splits, ragged pages
    Check({1, 2, 8, 2, 128, t, t, 256}, seed++);    // decode of the third token
    Check({3, 259, 4, 1, 64, t, t, 13}, seed++);    // a verification batch, group 4
  }
}

TEST_P(PagedAttentionTest, FuturePositionsDoNotLeak) {
  // Token t must not see positions past n_past + t: replacing them with values 1000x larger
  // leaves row t as it was.
  const Case c{6, 3, 4, 2, 16};
  Rng rng(22);
  const int64_t n_kv = c.n_past + c.n_tokens;
  HostMat q(c.n_tokens, c.n_head * c.head_dim), k(n_kv, c.n_head_kv * c.head_dim),
      v(n_kv, c.n_head_kv * c.head_dim);
  rng.FillNormal(q);
  rng.FillNormal(k);
  rng.FillNormal(v);
  TestCache full(c, n_kv, 5);
  StoreAll(k, v, full, n_kv);
  const std::vector<double> expected = AttentionRef(q, full, c, 0.25);
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    HostMat kp = k, vp = v;
    for (int64_t j = c.n_past + t + 1; j < n_kv; ++j) {
      for (int64_t d = 0; d < kp.cols(); ++d) {
        kp.at(j, d) = 1000.0f * rng.Normal();
        vp.at(j, d) = 1000.0f * rng.Normal();
      }
    }
    TestCache changed(c, n_kv, 5);
    StoreAll(kp, vp, changed, n_kv);
    HostMat out(c.n_tokens, q.cols());
    Mat om = out.mat();
    ASSERT_EQ(Attend(q.mat(), changed.view(), c.n_past, c.n_head, c.n_head_kv, 0.25f, om),
              KernelStatus::kOk);
    for (int64_t d = 0; d < q.cols(); ++d) {
      ASSERT_NEAR(out.at(t, d), expected[t * q.cols() + d], kAbsTol + kRelTol) << t << " " << d;
    }
  }
}

TEST_P(PagedAttentionTest, CachedPrefixEqualsOneCall) {
  // Attending the last 4 tokens with n_past = 9 gives the rows of all 13 tokens at once, to
  // rounding: the key tiles start at other positions relative to the query blocks.
  const Case c{13, 0, 4, 2, 32};
  Rng rng(23);
  HostMat q(13, 128), k(13, 64), v(13, 64);
  rng.FillNormal(q);
  rng.FillNormal(k);
  rng.FillNormal(v);
  TestCache cache(c, 13, 7);
  StoreAll(k, v, cache, 13);
  HostMat full(13, 128), tail(4, 128);
  Mat fm = full.mat(), tm = tail.mat();
  ASSERT_EQ(Attend(q.mat(), cache.view(), 0, 4, 2, 0.2f, fm), KernelStatus::kOk);
  ASSERT_EQ(Attend(q.mat().Rows(9, 4), cache.view(), 9, 4, 2, 0.2f, tm), KernelStatus::kOk);
  for (int64_t t = 0; t < 4; ++t) {
    for (int64_t d = 0; d < 128; ++d) EXPECT_NEAR(tail.at(t, d), full.at(9 + t, d), 1e-6);
  }
}

TEST_P(PagedAttentionTest, LargeScoresStayFinite) {
  // Scores around +-1e4 overflow exp() unless the running maximum is subtracted.
  const Case c{4, 40, 2, 1, 16};
  Rng rng(24);
  HostMat q(4, 32), k(44, 16), v(44, 16);
  rng.FillNormal(q, 30.0f);
  rng.FillNormal(k, 30.0f);
  rng.FillNormal(v);
  TestCache cache(c, 44, 9);
  StoreAll(k, v, cache, 44);
  HostMat out(4, 32);
  Mat om = out.mat();
  ASSERT_EQ(Attend(q.mat(), cache.view(), 40, 2, 1, 1.0f, om), KernelStatus::kOk);
  ExpectClose(out, AttentionRef(q, cache, c, 1.0), 1e-4, 1e-3, "large scores");
}

INSTANTIATE_TEST_SUITE_P(
    ThreadsAndLevels, PagedAttentionTest,
    ::testing::Combine(::testing::Values(1, 2), ::testing::ValuesIn(kAllCpuIsas)),
    [](const ::testing::TestParamInfo<std::tuple<int, CpuIsa>>& info) {
      return std::string(CpuIsaName(std::get<1>(info.param))) + "_" +
             std::to_string(std::get<0>(info.param)) + "threads";
    });

TEST(StoreKvTest, StoredBytesAreQuantizeRowOutput) {
  // What the cache holds is exactly the encoder of quants.cc (llama.cpp's rules), row by row.
  const WeightType types[] = {WeightType::kF32,  WeightType::kF16,  WeightType::kBF16,
                              WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,
                              WeightType::kQ5_0};
  Rng rng(30);
  for (WeightType t : types) {
    const Case c{0, 0, 4, 2, 64, t, t, 8};
    HostMat k(20, 128), v(20, 128);
    rng.FillNormal(k);
    rng.FillNormal(v, 3.0f);
    TestCache cache(c, 20, 3);
    StoreAll(k, v, cache, 6);
    for (int64_t pos = 0; pos < 20; ++pos) {
      std::vector<uint8_t> expect_k(RowBytes(t, 128)), expect_v(RowBytes(t, 128));
      ASSERT_EQ(QuantizeRow(t, &k.at(pos, 0), expect_k.data(), 128), KernelStatus::kOk);
      ASSERT_EQ(QuantizeRow(t, &v.at(pos, 0), expect_v.data(), 128), KernelStatus::kOk);
      EXPECT_EQ(cache.Bytes(true, pos), expect_k) << static_cast<int>(t) << " " << pos;
      EXPECT_EQ(cache.Bytes(false, pos), expect_v) << static_cast<int>(t) << " " << pos;
    }
  }
}

TEST(StoreKvTest, PagesAreHeadMajor) {
  // backend.h's layout written out: inside page p, kv head h's slot s starts at float
  // ((p * n_head_kv + h) * page_tokens + s) * head_dim of the pool.
  const Case c{0, 0, 6, 3, 16, WeightType::kF32, WeightType::kF32, 4};
  HostMat k(10, 48), v(10, 48);
  for (int64_t t = 0; t < 10; ++t) {
    for (int64_t i = 0; i < 48; ++i) {
      k.at(t, i) = static_cast<float>(1000 * t + i);
      v.at(t, i) = -static_cast<float>(1000 * t + i);
    }
  }
  TestCache cache(c, 10, 4);
  StoreAll(k, v, cache, 3);
  const PagedKvView& view = cache.view();
  const auto* kp = static_cast<const float*>(view.k.data);
  const auto* vp = static_cast<const float*>(view.v.data);
  for (int64_t t = 0; t < 10; ++t) {
    const int64_t page = view.page_table[t / 4];
    for (int64_t h = 0; h < 3; ++h) {
      for (int64_t d = 0; d < 16; ++d) {
        const int64_t at = ((page * 3 + h) * 4 + t % 4) * 16 + d;
        ASSERT_EQ(kp[at], static_cast<float>(1000 * t + 16 * h + d)) << t << " " << h << " " << d;
        ASSERT_EQ(vp[at], -static_cast<float>(1000 * t + 16 * h + d)) << t << " " << h << " " << d;
      }
    }
  }
}

TEST(PagedAttentionShapeTest, BadArgumentsAreInvalid) {
  ThreadPool pool(1);
  const Case c{3, 2, 4, 2, 32, WeightType::kQ8_0, WeightType::kF16, 4};
  TestCache cache(c, 5, 1);
  HostMat q(3, 128), out(3, 128), out_bad(3, 64);
  Mat om = out.mat(), obad = out_bad.mat();
  const KernelStatus bad = KernelStatus::kInvalidArgument;
  const PagedKvView good = cache.view();
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), good, 2, 4, 2, 1.0f, om), KernelStatus::kOk);
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), good, 6, 4, 2, 1.0f, om), bad);  // past the table
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), good, 2, 4, 3, 1.0f, om), bad);  // 4 % 3
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), good, 2, 4, 1, 1.0f, om), bad);  // row bytes
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), good, 2, 4, 2, 1.0f, obad), bad);
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), good, -1, 4, 2, 1.0f, om), bad);
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), good, 2, 8, 4, 1.0f, om), bad);  // hd 16 % 32
  PagedKvView v = good;
  std::vector<int32_t> table(good.page_table, good.page_table + good.n_pages);
  table[1] = static_cast<int32_t>(good.k.n_pages);  // a page id outside the pool
  v.page_table = table.data();
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), v, 2, 4, 2, 1.0f, om), bad);
  table[1] = -1;
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), v, 2, 4, 2, 1.0f, om), bad);
  v = good;
  v.k.type = WeightType::kQ4_K;  // not a cache type
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), v, 2, 4, 2, 1.0f, om), bad);
  v = good;
  v.page_tokens = 0;
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), v, 2, 4, 2, 1.0f, om), bad);
  v = good;
  v.n_head_kv = 1;  // the pages' head split disagrees with the call's
  EXPECT_EQ(PagedAttentionCpu(pool, q.mat(), v, 2, 4, 2, 1.0f, om), bad);
  HostMat k(2, 64), vv(2, 64);
  EXPECT_EQ(StoreKvCpu(k.mat(), vv.mat(), good, 7), bad);  // position 8 has no page
  EXPECT_EQ(StoreKvCpu(k.mat(), vv.mat(), good, 6), KernelStatus::kOk);
  v = good;
  v.n_head_kv = 0;  // no head split
  EXPECT_EQ(StoreKvCpu(k.mat(), vv.mat(), v, 0), bad);
  v.n_head_kv = 3;  // 64 values do not split into 3 heads
  EXPECT_EQ(StoreKvCpu(k.mat(), vv.mat(), v, 0), bad);
  v.n_head_kv = 4;  // heads of 16 values cannot hold q8_0 blocks of 32
  EXPECT_EQ(StoreKvCpu(k.mat(), vv.mat(), v, 0), bad);
}

}  // namespace
}  // namespace deltaserve::kernels
