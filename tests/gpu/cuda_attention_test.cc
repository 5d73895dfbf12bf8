// CUDA StoreKv + PagedAttention (kernels/cuda/kv_store.cu, attention.cu) against the CPU backend
// on random inputs, through the Backend interface:
// - StoreKv: the GPU pools hold exactly the CPU pools' bytes (both encode with quants.cc's rules;
//   kv_codec.cuh), for every cache type, prefix chunks and single-token steps, shuffled pages;
// - PagedAttention: the same output within the f32 error of two implementations (below) for
//   head_dim 64/128/256 (and sizes between), GQA ratios 1/2/3/4/8, n_past 0..5000 over pages of
//   1..256 tokens, T = 1 (decode, split into up to 40 key ranges), 2..8 (split, several tokens
//   per block) and 9..257 (prefill, no split), every K type with every V type, out aliasing q,
//   strided rows;
// - what the launchers refuse (as the CPU backend does), the scratch contract, determinism, and
//   that a page id outside the pools is skipped rather than written.
//
// Tolerance of the attention comparisons: both backends read identical K/V values (the bytes
// are equal and both decoders are bit-exact to DequantizeRow) and compute in f32, so the
// difference is the two implementations' rounding. Each has (a) score errors from f32 dot
// products over <= 256 terms, which the CPU test bounds with the accumulation below by 2e-5 +
// 1e-4 relative against double precision up to 1,100 keys, and (b) running sums of exp() and
// p*v added sequentially once per 32-key tile (and once per split in the merge), each add
// rounding by 2^-24 relative: at most n_keys / 32 * 6e-8 <= 2e-9 * n_keys relative per
// implementation, times |out| <= max |v| (about 4 for N(0,1) values). Hence
// |gpu - cpu| <= 4e-5 + 2e-8 * n_keys + 2e-4 * |cpu|: 2e-4 absolute at 5,000 keys.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/quants.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/gpu/gpu_test_support.h"

namespace deltaserve::kernels::gpu_test {
namespace {

constexpr float kSentinel = -12345.0f;

const WeightType kCacheTypes[] = {WeightType::kF32,  WeightType::kF16,  WeightType::kBF16,
                                  WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,
                                  WeightType::kQ5_0};

std::string TypeName(WeightType t) {
  switch (t) {
    case WeightType::kF32:
      return "F32";
    case WeightType::kF16:
      return "F16";
    case WeightType::kBF16:
      return "BF16";
    case WeightType::kQ8_0:
      return "Q8_0";
    case WeightType::kQ4_0:
      return "Q4_0";
    case WeightType::kQ4_1:
      return "Q4_1";
    case WeightType::kQ5_0:
      return "Q5_0";
    default:
      return "type " + std::to_string(static_cast<int>(t));
  }
}

struct Case {
  int64_t n_tokens, n_past, n_head, n_head_kv, head_dim;
  WeightType k_type = WeightType::kF16, v_type = WeightType::kF16;
  int64_t page_tokens = 16;
  bool alias = false;        // GPU out is q itself
  int64_t prefix_chunk = 0;  // StoreKv of the prefix in chunks of this many positions (0: one)
  float q_sigma = 1.0f, k_sigma = 1.0f;
};

std::string Describe(const Case& c) {
  return "T=" + std::to_string(c.n_tokens) + " past=" + std::to_string(c.n_past) +
         " heads=" + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) +
         " hd=" + std::to_string(c.head_dim) + " k=" + TypeName(c.k_type) +
         " v=" + TypeName(c.v_type) + " page=" + std::to_string(c.page_tokens) +
         (c.alias ? " aliased" : "");
}

// A row-major host matrix with padded rows (the padding holds kSentinel).
struct HostRows {
  HostRows(int64_t rows, int64_t cols, int64_t pad)
      : rows(rows),
        cols(cols),
        stride(cols + pad),
        data(static_cast<size_t>(rows * (cols + pad)), kSentinel) {}
  void FillNormal(std::mt19937& gen, float sigma) {
    std::normal_distribution<float> normal(0.0f, sigma);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) data[r * stride + c] = normal(gen);
    }
  }
  int64_t rows, cols, stride;
  std::vector<float> data;
};

// A matrix in a backend's memory.
struct BackendRows {
  DeviceBuffer buf;
  Mat mat;
};

// One layer's cache in a backend: pools filled with 0xFF (NaN in f32/f16/bf16 values and in
// every block scale, so a read of a position nobody wrote shows) and the page table.
struct BackendCache {
  DeviceBuffer k, v, table;
  PagedKvView view;
  size_t k_bytes = 0, v_bytes = 0;
};

// Pages in shuffled order from a pool with 3 spare pages: consecutive positions live far apart.
std::vector<int32_t> ShuffledTable(int64_t pages, int64_t pool_pages, uint32_t seed) {
  std::vector<int32_t> ids(pool_pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  ids.resize(pages);
  return ids;
}

double AbsTolerance(int64_t n_keys) { return 4e-5 + 2e-8 * static_cast<double>(n_keys); }
constexpr double kRelTolerance = 2e-4;

class CudaAttentionTest : public GpuBackendTest {
 protected:
  // A host matrix copied into backend memory.
  static BackendRows ToBackend(Backend& b, const HostRows& h) {
    BackendRows r;
    r.buf = Upload(b, h.data);
    r.mat = {r.buf.floats(), h.rows, h.cols, h.stride};
    return r;
  }

  static BackendCache MakeCache(Backend& b, const Case& c, const std::vector<int32_t>& table,
                                int64_t pool_pages) {
    BackendCache cache;
    const int64_t kv_dim = c.n_head_kv * c.head_dim;
    const size_t k_row = RowBytes(c.k_type, kv_dim), v_row = RowBytes(c.v_type, kv_dim);
    cache.k_bytes = k_row * c.page_tokens * pool_pages;
    cache.v_bytes = v_row * c.page_tokens * pool_pages;
    cache.k = Upload(b, std::vector<uint8_t>(cache.k_bytes, 0xFF));
    cache.v = Upload(b, std::vector<uint8_t>(cache.v_bytes, 0xFF));
    cache.table = Upload(b, table);
    cache.view.k = {cache.k.data(), c.k_type, k_row, pool_pages};
    cache.view.v = {cache.v.data(), c.v_type, v_row, pool_pages};
    cache.view.page_tokens = c.page_tokens;
    cache.view.page_table = static_cast<const int32_t*>(cache.table.data());
    cache.view.n_pages = static_cast<int64_t>(table.size());
    cache.view.n_head_kv = c.n_head_kv;
    return cache;
  }

  // Stores the case's K/V into a cache on each backend (prefix, then the T new tokens, as the
  // engine does), checks the bytes are equal, and returns both caches.
  void StoreBoth(const Case& c, const HostRows& k, const HostRows& v, uint32_t seed,
                 BackendCache& cpu_cache, BackendCache& gpu_cache) {
    const int64_t n_kv = c.n_past + c.n_tokens;
    const int64_t pages = (n_kv + c.page_tokens - 1) / c.page_tokens, pool_pages = pages + 3;
    const std::vector<int32_t> table = ShuffledTable(pages, pool_pages, seed);
    cpu_cache = MakeCache(*cpu_, c, table, pool_pages);
    gpu_cache = MakeCache(*gpu_, c, table, pool_pages);
    BackendRows kc = ToBackend(*cpu_, k), vc = ToBackend(*cpu_, v);
    BackendRows kg = ToBackend(*gpu_, k), vg = ToBackend(*gpu_, v);
    std::vector<std::pair<int64_t, int64_t>> stores;  // (first, n)
    const int64_t chunk = c.prefix_chunk > 0 ? c.prefix_chunk : std::max<int64_t>(c.n_past, 1);
    for (int64_t first = 0; first < c.n_past; first += chunk) {
      stores.emplace_back(first, std::min(chunk, c.n_past - first));
    }
    stores.emplace_back(c.n_past, c.n_tokens);
    for (auto [first, n] : stores) {
      ASSERT_EQ(cpu_->StoreKv(kc.mat.Rows(first, n), vc.mat.Rows(first, n), cpu_cache.view, first),
                KernelStatus::kOk);
      ASSERT_EQ(gpu_->StoreKv(kg.mat.Rows(first, n), vg.mat.Rows(first, n), gpu_cache.view, first),
                KernelStatus::kOk);
    }
    const auto ck = Download<uint8_t>(*cpu_, cpu_cache.k.data(), cpu_cache.k_bytes);
    const auto cv = Download<uint8_t>(*cpu_, cpu_cache.v.data(), cpu_cache.v_bytes);
    const auto gk = Download<uint8_t>(*gpu_, gpu_cache.k.data(), gpu_cache.k_bytes);
    const auto gv = Download<uint8_t>(*gpu_, gpu_cache.v.data(), gpu_cache.v_bytes);
    ASSERT_TRUE(ck == gk) << "K pool bytes differ: first at " << FirstDifference(ck, gk);
    ASSERT_TRUE(cv == gv) << "V pool bytes differ: first at " << FirstDifference(cv, gv);
  }

  static size_t FirstDifference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    return i;
  }

  // Runs the case on both backends and compares (see the file comment for the tolerance).
  void Check(const Case& c, uint32_t seed) {
    SCOPED_TRACE(Describe(c));
    std::mt19937 gen(seed);
    const int64_t n_kv = c.n_past + c.n_tokens, kv_dim = c.n_head_kv * c.head_dim;
    const int64_t q_cols = c.n_head * c.head_dim;
    HostRows q(c.n_tokens, q_cols, 5), k(n_kv, kv_dim, 1), v(n_kv, kv_dim, 2);
    q.FillNormal(gen, c.q_sigma);
    k.FillNormal(gen, c.k_sigma);
    v.FillNormal(gen, 1.0f);
    BackendCache cpu_cache, gpu_cache;
    StoreBoth(c, k, v, seed, cpu_cache, gpu_cache);
    if (HasFatalFailure()) return;

    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    HostRows out_init(c.n_tokens, q_cols, 3);
    BackendRows qc = ToBackend(*cpu_, q), oc = ToBackend(*cpu_, out_init);
    ASSERT_EQ(cpu_->PagedAttention(qc.mat, cpu_cache.view, c.n_past, c.n_head, c.n_head_kv, scale,
                                   oc.mat),
              KernelStatus::kOk);
    const auto expect = Download<float>(*cpu_, oc.buf.data(), out_init.data.size());

    BackendRows qg = ToBackend(*gpu_, q);
    BackendRows og = c.alias ? BackendRows{} : ToBackend(*gpu_, out_init);
    Mat out = c.alias ? qg.mat : og.mat;
    ASSERT_EQ(
        gpu_->PagedAttention(qg.mat, gpu_cache.view, c.n_past, c.n_head, c.n_head_kv, scale, out),
        KernelStatus::kOk);
    const HostRows& layout = c.alias ? q : out_init;
    const auto got = Download<float>(*gpu_, out.data, layout.data.size());

    const double abs_tol = AbsTolerance(n_kv) * (c.k_sigma > 1.0f ? 10.0 : 1.0);
    int failures = 0;
    double worst = 0.0;
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      for (int64_t d = 0; d < q_cols; ++d) {
        const double e = expect[t * out_init.stride + d], a = got[t * layout.stride + d];
        const double err = std::fabs(a - e);
        worst = std::max(worst, std::isnan(err) ? 1e30 : err);
        if (!(err <= abs_tol + kRelTolerance * std::fabs(e)) && ++failures <= 5) {
          ADD_FAILURE() << "out[" << t << "][" << d << "] = " << a << ", CPU " << e;
        }
      }
      for (int64_t d = q_cols; d < layout.stride; ++d) {
        ASSERT_EQ(got[t * layout.stride + d], kSentinel) << "row padding written, row " << t;
      }
    }
    EXPECT_EQ(failures, 0) << "worst abs error " << worst;
  }
};

TEST_F(CudaAttentionTest, DecodeEveryHeadSizeAndGroup) {
  uint32_t seed = 1;
  for (int64_t hd : {64, 128, 256}) {
    for (int64_t group : {1, 2, 4, 8}) {
      const int64_t n_head_kv = group == 1 ? 4 : 2;
      for (int64_t n_past : {0, 1, 31, 127, 128, 129, 1000, 5000}) {
        Case c{1, n_past, group * n_head_kv, n_head_kv, hd};
        c.page_tokens = seed % 2 == 0 ? 16 : 64;
        c.alias = seed % 3 == 0;
        Check(c, seed++);
      }
    }
  }
}

TEST_F(CudaAttentionTest, ShortBatchesSplitTheKeys) {
  // T = 2..8 (speculative verification, the decode of a few sequences' chunks): split keys with
  // rows of several tokens in one block, groups of 3 and 8, head sizes between the buckets.
  uint32_t seed = 200;
  for (int64_t t = 2; t <= 8; ++t) {
    Check({t, 300 + 97 * t, 8, 1, 256, WeightType::kF16, WeightType::kF16, 16, t % 2 == 0}, seed++);
    Check({t, 129 - t, 6, 2, 80, WeightType::kF32, WeightType::kF32, 64, t % 2 == 1}, seed++);
    Check({t, 2500, 16, 2, 128, WeightType::kQ8_0, WeightType::kQ8_0, 64}, seed++);
    Check({t, 0, 4, 4, 64, WeightType::kBF16, WeightType::kF16, 16}, seed++);
  }
}

TEST_F(CudaAttentionTest, PrefillTiles) {
  // T > 8: one block per rows x kv head over all the keys its last token sees, no split;
  // prefill from empty and a chunk after a cached prefix.
  uint32_t seed = 300;
  Check({9, 0, 8, 2, 64}, seed++);
  Check({100, 0, 16, 2, 256, WeightType::kF16, WeightType::kF16, 64, true}, seed++);
  Check({100, 37, 4, 4, 128, WeightType::kF32, WeightType::kF32, 16}, seed++);
  Check({130, 2000, 8, 1, 256, WeightType::kQ8_0, WeightType::kF16, 64, false, 512}, seed++);
  Check({257, 5, 12, 4, 64, WeightType::kQ4_0, WeightType::kQ5_0, 16, true}, seed++);
  Check({64, 900, 24, 4, 256, WeightType::kBF16, WeightType::kBF16, 256}, seed++);  // group 6
  Check({33, 100, 6, 2, 24, WeightType::kF32, WeightType::kF32, 7}, seed++);        // hd 24, page 7
}

TEST_F(CudaAttentionTest, EveryKTypeWithEveryVType) {
  uint32_t seed = 400;
  for (WeightType kt : kCacheTypes) {
    for (WeightType vt : kCacheTypes) {
      Check({1, 300, 8, 2, 64, kt, vt, 16, seed % 2 == 0}, seed++);  // decode, split
      Check({20, 40, 8, 2, 64, kt, vt, 32}, seed++);                 // prefill
    }
  }
  for (WeightType t : kCacheTypes) Check({3, 1500, 16, 2, 256, t, t, 64}, seed++);
}

TEST_F(CudaAttentionTest, PageSizesAndBoundaries) {
  // Sequences ending one before, on and one after a page boundary; tiles crossing pages of 1, 7
  // and 13 tokens; pages of 256 tokens holding a whole split.
  uint32_t seed = 500;
  for (int64_t page : {1, 7, 13, 16, 64, 256}) {
    for (int64_t n_kv : {page - 1, page, page + 1, 5 * page + 3, int64_t{700}}) {
      if (n_kv < 1) continue;
      Check({1, n_kv - 1, 4, 2, 128, WeightType::kF16, WeightType::kF16, page}, seed++);
      const int64_t t = std::min<int64_t>(n_kv, 12);
      Check({t, n_kv - t, 4, 2, 64, WeightType::kQ8_0, WeightType::kQ4_1, page, true}, seed++);
    }
  }
}

TEST_F(CudaAttentionTest, PrefixStoredInDecodeSteps) {
  // The prefix written one position at a time (decode steps) and in 100-position chunks that do
  // not align with pages: the same bytes as the CPU's, the same attention.
  uint32_t seed = 600;
  for (WeightType t : kCacheTypes) {
    Check({1, 70, 4, 2, 64, t, t, 16, false, 1}, seed++);
    Check({4, 450, 4, 2, 256, t, t, 64, false, 100}, seed++);
  }
}

TEST_F(CudaAttentionTest, LargeScoresStayFinite) {
  // Scores around +-1e3..1e4 overflow exp() unless the running maximum is subtracted; the
  // tolerance is scaled with them (a 1e-7 relative error of a score of 1e4 is 1e-3 in exp).
  uint32_t seed = 700;
  for (int64_t t : {1, 4, 40}) {
    Case c{t, 400, 4, 2, 64, WeightType::kF32, WeightType::kF32, 16};
    c.q_sigma = 30.0f;
    c.k_sigma = 30.0f;
    Check(c, seed++);
  }
}

TEST_F(CudaAttentionTest, RepeatedCallsAreBitIdentical) {
  // No atomics, no order that depends on scheduling: the same call gives the same bits.
  const Case c{3, 2000, 16, 2, 256, WeightType::kF16, WeightType::kQ8_0, 64};
  std::mt19937 gen(800);
  HostRows q(c.n_tokens, c.n_head * c.head_dim, 0), k(2003, 512, 0), v(2003, 512, 0);
  q.FillNormal(gen, 1.0f);
  k.FillNormal(gen, 1.0f);
  v.FillNormal(gen, 1.0f);
  BackendCache cpu_cache, gpu_cache;
  StoreBoth(c, k, v, 800, cpu_cache, gpu_cache);
  if (HasFatalFailure()) return;
  BackendRows qg = ToBackend(*gpu_, q), o1 = ToBackend(*gpu_, q), o2 = ToBackend(*gpu_, q);
  ASSERT_EQ(gpu_->PagedAttention(qg.mat, gpu_cache.view, 2000, 16, 2, 0.0625f, o1.mat),
            KernelStatus::kOk);
  ASSERT_EQ(gpu_->PagedAttention(qg.mat, gpu_cache.view, 2000, 16, 2, 0.0625f, o2.mat),
            KernelStatus::kOk);
  EXPECT_EQ(Download<float>(*gpu_, o1.buf.data(), q.data.size()),
            Download<float>(*gpu_, o2.buf.data(), q.data.size()));
}

TEST_F(CudaAttentionTest, RefusesWhatTheCpuRefuses) {
  const Case c{3, 2, 4, 2, 32, WeightType::kQ8_0, WeightType::kF16, 4};
  const std::vector<int32_t> table = {2, 0};
  BackendCache cc = MakeCache(*cpu_, c, table, 3), gc = MakeCache(*gpu_, c, table, 3);
  HostRows q(3, 128, 0), o(3, 128, 0), obad(3, 64, 0), k(3, 64, 0), v(3, 64, 0);
  BackendRows qc = ToBackend(*cpu_, q), occ = ToBackend(*cpu_, o), obc = ToBackend(*cpu_, obad);
  BackendRows qg = ToBackend(*gpu_, q), ocg = ToBackend(*gpu_, o), obg = ToBackend(*gpu_, obad);
  BackendRows kc = ToBackend(*cpu_, k), vc = ToBackend(*cpu_, v);
  BackendRows kg = ToBackend(*gpu_, k), vg = ToBackend(*gpu_, v);
  struct Variant {
    const char* what;
    int64_t n_past, n_head, n_head_kv;
    bool bad_out;
    void (*edit)(PagedKvView&);
  };
  const Variant variants[] = {
      {"good", 2, 4, 2, false, [](PagedKvView&) {}},
      {"past the table", 6, 4, 2, false, [](PagedKvView&) {}},
      {"4 % 3", 2, 4, 3, false, [](PagedKvView&) {}},
      {"row bytes", 2, 4, 1, false, [](PagedKvView&) {}},
      {"out cols", 2, 4, 2, true, [](PagedKvView&) {}},
      {"negative past", -1, 4, 2, false, [](PagedKvView&) {}},
      {"hd 16 with q8_0", 2, 8, 4, false, [](PagedKvView&) {}},
      {"q4_k cache", 2, 4, 2, false, [](PagedKvView& v) { v.k.type = WeightType::kQ4_K; }},
      {"page size 0", 2, 4, 2, false, [](PagedKvView& v) { v.page_tokens = 0; }},
      {"head split", 2, 4, 2, false, [](PagedKvView& v) { v.n_head_kv = 1; }},
  };
  for (const Variant& x : variants) {
    PagedKvView vc_view = cc.view, vg_view = gc.view;
    x.edit(vc_view);
    x.edit(vg_view);
    const KernelStatus want = cpu_->PagedAttention(qc.mat, vc_view, x.n_past, x.n_head, x.n_head_kv,
                                                   1.0f, x.bad_out ? obc.mat : occ.mat);
    EXPECT_EQ(gpu_->PagedAttention(qg.mat, vg_view, x.n_past, x.n_head, x.n_head_kv, 1.0f,
                                   x.bad_out ? obg.mat : ocg.mat),
              want)
        << x.what;
  }
  EXPECT_EQ(gpu_->StoreKv(kg.mat, vg.mat, gc.view, 0), cpu_->StoreKv(kc.mat, vc.mat, cc.view, 0));
  EXPECT_EQ(gpu_->StoreKv(kg.mat, vg.mat, gc.view, 6), cpu_->StoreKv(kc.mat, vc.mat, cc.view, 6));
  EXPECT_EQ(gpu_->StoreKv(kg.mat, vg.mat, gc.view, -1), cpu_->StoreKv(kc.mat, vc.mat, cc.view, -1));
  EXPECT_EQ(gpu_->StoreKv(kg.mat, vg.mat.Cols(0, 32), gc.view, 0), KernelStatus::kInvalidArgument);

  // head_dim 288: the CPU computes it, the GPU has no kernel.
  const Case w{1, 3, 1, 1, 288, WeightType::kF32, WeightType::kF32, 4};
  BackendCache wg = MakeCache(*gpu_, w, {0}, 1);
  HostRows qw(1, 288, 0);
  BackendRows qwg = ToBackend(*gpu_, qw), owg = ToBackend(*gpu_, qw);
  EXPECT_EQ(gpu_->PagedAttention(qwg.mat, wg.view, 3, 1, 1, 1.0f, owg.mat),
            KernelStatus::kUnsupportedType);
}

TEST_F(CudaAttentionTest, PageOutsideThePoolsIsSkipped) {
  // The launcher cannot check page ids (device memory): the kernels skip such positions. Pool
  // bytes stay as they were for them, and every other position is stored as on the CPU.
  const Case c{4, 0, 2, 1, 64, WeightType::kQ8_0, WeightType::kF16, 2};
  std::mt19937 gen(900);
  HostRows k(4, 64, 0), v(4, 64, 0);
  k.FillNormal(gen, 1.0f);
  v.FillNormal(gen, 1.0f);
  BackendCache gc = MakeCache(*gpu_, c, {1, 7}, 2);  // page 7 does not exist
  BackendRows kg = ToBackend(*gpu_, k), vg = ToBackend(*gpu_, v);
  ASSERT_EQ(gpu_->StoreKv(kg.mat, vg.mat, gc.view, 0), KernelStatus::kOk);
  const auto kb = Download<uint8_t>(*gpu_, gc.k.data(), gc.k_bytes);
  std::vector<uint8_t> expect(gc.k_bytes, 0xFF);
  for (int64_t pos = 0; pos < 2; ++pos) {
    QuantizeRow(WeightType::kQ8_0, &k.data[pos * 64], &expect[(2 + pos) * 68], 64);  // page 1
  }
  EXPECT_EQ(kb, expect);
}

TEST_F(CudaAttentionTest, SplitCallsNeedTheScratchTheyDeclare) {
  // A backend with no scratch: calls that do not split (<= 128 keys, or prefill) run, a split
  // decode is refused with kOutOfMemory, not run on memory it does not have.
  std::string error;
  CudaBackendOptions options;
  options.scratch_bytes = 0;
  std::unique_ptr<Backend> small = MakeCudaBackend(options, &error);
  ASSERT_NE(small, nullptr) << error;
  const Case c{1, 0, 4, 2, 64};
  const std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  BackendCache cache = MakeCache(*small, c, table, 17);
  HostRows q(9, 256, 0);
  BackendRows qb = ToBackend(*small, q), ob = ToBackend(*small, q);
  Mat q1 = qb.mat.Rows(0, 1), o1 = ob.mat.Rows(0, 1);
  EXPECT_EQ(small->PagedAttention(q1, cache.view, 127, 4, 2, 1.0f, o1), KernelStatus::kOk);
  EXPECT_EQ(small->PagedAttention(q1, cache.view, 200, 4, 2, 1.0f, o1), KernelStatus::kOutOfMemory);
  EXPECT_EQ(small->PagedAttention(qb.mat, cache.view, 200, 4, 2, 1.0f, ob.mat), KernelStatus::kOk);
}

// Not a test: the kernels' speed alone on Qwen3.5-9B-like attention (16 query heads, 4 kv
// heads, head_dim 256), for a session with a GPU:
//   tests/gpu/cuda_attention_test --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'
// Decode (T = 1 and 4) reports the K/V bytes it reads per second (a memory-bound kernel's
// roofline is the device's bandwidth); prefill (a 512-token chunk ending at the context) the
// flops of q.k and p.v per second (4 * head_dim * n_head per visible key and token).
TEST_F(CudaAttentionTest, DISABLED_Throughput) {
  const int64_t n_head = 16, n_head_kv = 4, hd = 256, page = 64;
  std::mt19937 gen(1000);
  HostRows src(4096, n_head_kv * hd, 0);
  src.FillNormal(gen, 1.0f);
  BackendRows s = ToBackend(*gpu_, src);
  // Seconds per call: one warm-up, then repeats for about half a second.
  auto time_call = [&](auto&& call) {
    EXPECT_EQ(call(), KernelStatus::kOk);
    EXPECT_EQ(gpu_->Synchronize(), KernelStatus::kOk);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(call(), KernelStatus::kOk);
    EXPECT_EQ(gpu_->Synchronize(), KernelStatus::kOk);
    const double once =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int reps = static_cast<int>(std::clamp(0.5 / std::max(once, 1e-6), 3.0, 200.0));
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) call();
    EXPECT_EQ(gpu_->Synchronize(), KernelStatus::kOk);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  for (WeightType type : {WeightType::kF16, WeightType::kQ8_0}) {
    for (int64_t ctx : {512, 4096, 32768, 131072}) {
      const Case c{1, ctx - 1, n_head, n_head_kv, hd, type, type, page};
      const int64_t pages = (ctx + page - 1) / page;
      std::vector<int32_t> table(pages);
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), gen);
      BackendCache cache = MakeCache(*gpu_, c, table, pages);
      for (int64_t first = 0; first < ctx; first += src.rows) {
        const int64_t n = std::min(src.rows, ctx - first);
        ASSERT_EQ(gpu_->StoreKv(s.mat.Rows(0, n), s.mat.Rows(0, n), cache.view, first),
                  KernelStatus::kOk);
      }
      const double kv_bytes =
          static_cast<double>(ctx) * (cache.view.k.row_bytes + cache.view.v.row_bytes);
      for (int64_t t : {1, 4, 512}) {
        if (t > ctx) continue;
        HostRows qh(t, n_head * hd, 0);
        qh.FillNormal(gen, 1.0f);
        BackendRows q = ToBackend(*gpu_, qh), out = ToBackend(*gpu_, qh);
        const double sec = time_call([&] {
          return gpu_->PagedAttention(q.mat, cache.view, ctx - t, n_head, n_head_kv, 0.0625f,
                                      out.mat);
        });
        const double visible = static_cast<double>(t) * (ctx - t) + t * (t + 1) / 2.0;
        std::printf("%-4s ctx %6lld T %3lld: %9.1f us  %7.1f GB/s of K/V  %7.2f TFLOP/s\n",
                    TypeName(type).c_str(), static_cast<long long>(ctx), static_cast<long long>(t),
                    sec * 1e6, kv_bytes / sec * 1e-9, 4.0 * hd * n_head * visible / sec * 1e-12);
      }
    }
  }
}

}  // namespace
}  // namespace deltaserve::kernels::gpu_test
