// PagedKvCache and PagedSequenceKv (worker/cache/paged_kv_cache.h) on the CPU backend: the free
// list and reference counts, ResourceExhausted without losing held pages, Fork sharing pages and
// copy-on-write on the first write into a shared page (bytes read back through View()),
// Truncate and destruction returning pages, the byte sizes per type pair, and the refusal of bad
// types and shapes. Expected sizes come from the GGML block layouts (f32 4 B/value, f16 and bf16
// 2 B, q8_0 34 B per 32 values, q4_0 18 B, q4_1 20 B, q5_0 22 B) and MODEL_SPEC §1.2 / §4.1
// (0.8B: 6 attention layers, 2 KV heads of 256; 9B: 8 layers, 4 KV heads of 256).
#include "worker/cache/paged_kv_cache.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace deltaserve::worker {
namespace {

using kernels::WeightType;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// 2 attention layers, 2 KV heads of 32 values: small, and head_dim a multiple of every block.
constexpr KvCacheShape kShape{/*n_layers=*/2, /*kv_dim=*/64, /*head_dim=*/32};
constexpr KvCacheOptions kF32Pages4{WeightType::kF32, WeightType::kF32, /*page_tokens=*/4};

class PagedKvCacheTest : public ::testing::Test {
 protected:
  std::shared_ptr<PagedKvCache> MakeCache(int64_t n_pages,
                                          const KvCacheOptions& options = kF32Pages4) {
    auto cache = PagedKvCache::Create(*backend_, kShape, options, n_pages);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::shared_ptr<PagedKvCache>(std::move(*cache)) : nullptr;
  }

  // Writes f32 K and V rows for positions [first, first + n) of every layer of `seq` (its pages
  // must already be prepared): K value i of position p in layer l is KValue(l, p, i, tag), V the
  // negative of it.
  void Store(const PagedSequenceKv& seq, int64_t first, int64_t n, float tag) {
    std::vector<float> k(n * kShape.kv_dim), v(n * kShape.kv_dim);
    const std::vector<int32_t> table(seq.pages().begin(), seq.pages().end());
    for (int layer = 0; layer < kShape.n_layers; ++layer) {
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < kShape.kv_dim; ++i) {
          k[t * kShape.kv_dim + i] = KValue(layer, first + t, i, tag);
          v[t * kShape.kv_dim + i] = -KValue(layer, first + t, i, tag);
        }
      }
      const kernels::Mat km{k.data(), n, kShape.kv_dim, kShape.kv_dim};
      const kernels::Mat vm{v.data(), n, kShape.kv_dim, kShape.kv_dim};
      ASSERT_EQ(backend_->StoreKv(km, vm, seq.View(layer, table.data()), first),
                kernels::KernelStatus::kOk);
    }
  }

  static float KValue(int layer, int64_t pos, int64_t i, float tag) {
    return tag + 1000.0f * layer + 10.0f * static_cast<float>(pos) + 0.01f * static_cast<float>(i);
  }

  // The f32 K (or V) row of position `pos` in `layer`, read through the sequence's View().
  static std::vector<float> Row(const PagedSequenceKv& seq, int layer, int64_t pos, bool key) {
    const std::vector<int32_t> table(seq.pages().begin(), seq.pages().end());
    const kernels::PagedKvView view = seq.View(layer, table.data());
    const kernels::KvPool& pool = key ? view.k : view.v;
    EXPECT_EQ(pool.type, WeightType::kF32);
    std::vector<float> row(kShape.kv_dim);
    for (int64_t h = 0; h < view.n_head_kv; ++h) {
      std::memcpy(
          row.data() + h * kShape.head_dim,
          static_cast<const uint8_t*>(pool.data) + kernels::KvHeadOffset(pool, view, pos, h),
          kShape.head_dim * sizeof(float));
    }
    return row;
  }

  // True when every position in [first, first + n) holds the values Store(tag) wrote.
  static bool Holds(const PagedSequenceKv& seq, int64_t first, int64_t n, float tag) {
    for (int layer = 0; layer < kShape.n_layers; ++layer) {
      for (int64_t p = first; p < first + n; ++p) {
        const std::vector<float> k = Row(seq, layer, p, true), v = Row(seq, layer, p, false);
        for (int64_t i = 0; i < kShape.kv_dim; ++i) {
          if (k[i] != KValue(layer, p, i, tag) || v[i] != -KValue(layer, p, i, tag)) return false;
        }
      }
    }
    return true;
  }

  std::unique_ptr<kernels::Backend> backend_ = kernels::MakeCpuBackend(1);
};

TEST_F(PagedKvCacheTest, FreshCacheHandsOutPagesInOrderAndTakesThemBack) {
  auto cache = MakeCache(3);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->total_pages(), 3);
  EXPECT_EQ(cache->free_pages(), 3);
  auto a = cache->AllocatePage(), b = cache->AllocatePage(), c = cache->AllocatePage();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, 0);
  EXPECT_EQ(*b, 1);
  EXPECT_EQ(*c, 2);
  EXPECT_EQ(cache->RefCount(*b), 1);
  EXPECT_EQ(cache->free_pages(), 0);

  auto none = cache->AllocatePage();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(none.status().message(), HasSubstr("all 3 pages"));

  cache->Retain(*b);
  EXPECT_EQ(cache->RefCount(*b), 2);
  cache->Release(*b);
  EXPECT_EQ(cache->free_pages(), 0) << "one reference is left";
  cache->Release(*b);
  EXPECT_EQ(cache->RefCount(*b), 0);
  EXPECT_EQ(cache->free_pages(), 1);
  auto again = cache->AllocatePage();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *b) << "the freed page is reused";
}

TEST_F(PagedKvCacheTest, PrepareAllocatesOnePagePerPageTokensPositions) {
  auto cache = MakeCache(8);
  ASSERT_NE(cache, nullptr);
  PagedSequenceKv seq(cache, /*capacity=*/32);
  EXPECT_EQ(seq.capacity(), 32);
  EXPECT_EQ(seq.page_tokens(), 4);
  EXPECT_TRUE(seq.pages().empty());
  ASSERT_TRUE(seq.Prepare(0, 1).ok());
  EXPECT_THAT(seq.pages(), ElementsAre(0));
  ASSERT_TRUE(seq.Prepare(1, 4).ok());
  EXPECT_THAT(seq.pages(), ElementsAre(0)) << "positions 0..3 fit one page of 4";
  ASSERT_TRUE(seq.Prepare(4, 5).ok());
  EXPECT_THAT(seq.pages(), ElementsAre(0, 1));
  ASSERT_TRUE(seq.Prepare(5, 13).ok());
  EXPECT_THAT(seq.pages(), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(cache->free_pages(), 4);
  for (int32_t p : seq.pages()) EXPECT_EQ(cache->RefCount(p), 1);

  const std::vector<int32_t> table(seq.pages().begin(), seq.pages().end());
  const kernels::PagedKvView view = seq.View(1, table.data());
  EXPECT_EQ(view.n_pages, 4);
  EXPECT_EQ(view.page_tokens, 4);
  EXPECT_EQ(view.page_table, table.data());
  EXPECT_EQ(view.n_head_kv, 2) << "kv_dim 64 / head_dim 32";
  EXPECT_EQ(view.k.n_pages, 8) << "the pool holds every page of the cache";
  EXPECT_EQ(view.k.row_bytes, 64u * 4);
  EXPECT_EQ(view.v.row_bytes, 64u * 4);
  EXPECT_NE(view.k.data, seq.View(0, table.data()).k.data) << "each layer has its own pool";
}

TEST_F(PagedKvCacheTest, PrepareBeyondCapacityIsOutOfRange) {
  auto cache = MakeCache(8);
  ASSERT_NE(cache, nullptr);
  PagedSequenceKv seq(cache, /*capacity=*/6);
  ASSERT_TRUE(seq.Prepare(0, 6).ok());
  const absl::Status s = seq.Prepare(6, 7);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("capacity is 6"));
  EXPECT_EQ(seq.pages().size(), 2u);
}

TEST_F(PagedKvCacheTest, FullCacheFailsWithoutLosingHeldPages) {
  auto cache = MakeCache(4);
  ASSERT_NE(cache, nullptr);
  PagedSequenceKv a(cache, 64), b(cache, 64);
  ASSERT_TRUE(a.Prepare(0, 8).ok());  // pages 0, 1
  ASSERT_TRUE(b.Prepare(0, 4).ok());  // page 2
  Store(a, 0, 8, 1.0f);
  // a needs 3 more pages (positions 8..19), one is free: the call takes it, fails, gives it back.
  const absl::Status s = a.Prepare(8, 20);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("KV cache full"));
  EXPECT_THAT(a.pages(), ElementsAre(0, 1));
  EXPECT_THAT(b.pages(), ElementsAre(2));
  EXPECT_EQ(cache->free_pages(), 1);
  EXPECT_TRUE(Holds(a, 0, 8, 1.0f));
  // What fits still works afterwards.
  ASSERT_TRUE(a.Prepare(8, 12).ok());
  EXPECT_THAT(a.pages(), ElementsAre(0, 1, 3));
  EXPECT_EQ(cache->free_pages(), 0);
}

TEST_F(PagedKvCacheTest, FullCacheFailsCopyOnWriteWithoutLosingSharedPages) {
  auto cache = MakeCache(2);
  ASSERT_NE(cache, nullptr);
  PagedSequenceKv parent(cache, 64);
  ASSERT_TRUE(parent.Prepare(0, 6).ok());  // pages 0, 1
  Store(parent, 0, 6, 2.0f);
  std::unique_ptr<PagedSequenceKv> child = parent.Fork(6);
  // Writing position 6 of the child needs a private copy of page 1, and no page is free.
  const absl::Status s = child->Prepare(6, 7);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(child->pages(), ElementsAre(0, 1));
  EXPECT_EQ(cache->RefCount(0), 2);
  EXPECT_EQ(cache->RefCount(1), 2);
  EXPECT_TRUE(Holds(*child, 0, 6, 2.0f));
  EXPECT_TRUE(Holds(parent, 0, 6, 2.0f));
}

// A Prepare that appends pages and then fails in copy-on-write gives back what it appended.
TEST_F(PagedKvCacheTest, FailedCopyOnWriteGivesBackPagesTakenByTheSameCall) {
  auto cache = MakeCache(3);
  ASSERT_NE(cache, nullptr);
  PagedSequenceKv parent(cache, 64);
  ASSERT_TRUE(parent.Prepare(0, 6).ok());  // pages 0, 1
  std::unique_ptr<PagedSequenceKv> child = parent.Fork(6);
  // Positions 6..8 need a new page (the last free one) and a private copy of page 1 (none left).
  const absl::Status s = child->Prepare(6, 9);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(child->pages(), ElementsAre(0, 1));
  EXPECT_EQ(cache->free_pages(), 1);
}

TEST_F(PagedKvCacheTest, ForkSharesPagesHoldingThePrefix) {
  auto cache = MakeCache(8);
  ASSERT_NE(cache, nullptr);
  PagedSequenceKv parent(cache, 64);
  ASSERT_TRUE(parent.Prepare(0, 10).ok());  // pages 0, 1, 2 (positions 8, 9 in page 2)
  std::unique_ptr<PagedSequenceKv> all = parent.Fork(10);
  EXPECT_THAT(all->pages(), ElementsAre(0, 1, 2));
  EXPECT_EQ(all->capacity(), 64);
  std::unique_ptr<PagedSequenceKv> prefix = parent.Fork(5);  // positions 0..4: pages 0, 1
  EXPECT_THAT(prefix->pages(), ElementsAre(0, 1));
  std::unique_ptr<PagedSequenceKv> aligned = parent.Fork(8);
  EXPECT_THAT(aligned->pages(), ElementsAre(0, 1));
  std::unique_ptr<PagedSequenceKv> more = parent.Fork(100);  // capped at what the parent holds
  EXPECT_THAT(more->pages(), ElementsAre(0, 1, 2));
  std::unique_ptr<PagedSequenceKv> empty = parent.Fork(0);
  EXPECT_TRUE(empty->pages().empty());

  EXPECT_EQ(cache->RefCount(0), 5);
  EXPECT_EQ(cache->RefCount(1), 5);
  EXPECT_EQ(cache->RefCount(2), 3);
  EXPECT_EQ(cache->free_pages(), 5) << "forking takes no page";
  all.reset();
  more.reset();
  EXPECT_EQ(cache->RefCount(2), 1);
  prefix.reset();
  aligned.reset();
  EXPECT_EQ(cache->RefCount(0), 1);
  EXPECT_EQ(cache->free_pages(), 5);
}

TEST_F(PagedKvCacheTest, FirstWriteIntoASharedPageCopiesIt) {
  auto cache = MakeCache(8);
  ASSERT_NE(cache, nullptr);
  PagedSequenceKv parent(cache, 64);
  ASSERT_TRUE(parent.Prepare(0, 6).ok());  // pages 0, 1; page 1 half full
  Store(parent, 0, 6, 3.0f);
  std::unique_ptr<PagedSequenceKv> child = parent.Fork(6);

  // The child continues at position 6, inside shared page 1: page 0 stays shared, page 1 is
  // replaced by a copy holding positions 4, 5 of the parent.
  ASSERT_TRUE(child->Prepare(6, 8).ok());
  EXPECT_EQ(child->pages()[0], 0);
  const int32_t copy = child->pages()[1];
  EXPECT_NE(copy, 1);
  EXPECT_EQ(cache->RefCount(0), 2);
  EXPECT_EQ(cache->RefCount(1), 1);
  EXPECT_EQ(cache->RefCount(copy), 1);
  EXPECT_TRUE(Holds(*child, 0, 6, 3.0f)) << "the copy carries the shared prefix";

  Store(*child, 6, 2, 7.0f);
  EXPECT_TRUE(Holds(*child, 6, 2, 7.0f));
  EXPECT_TRUE(Holds(parent, 0, 6, 3.0f)) << "the parent's bytes are unchanged";
  // The parent's page 1 past position 5 was never written by the child (zero-filled pool).
  for (int64_t p = 6; p < 8; ++p) {
    EXPECT_THAT(Row(parent, 0, p, true), ::testing::Each(0.0f)) << "position " << p;
  }

  // A second write into the now-private page copies nothing.
  ASSERT_TRUE(child->Prepare(7, 8).ok());
  EXPECT_EQ(child->pages()[1], copy);
  EXPECT_EQ(cache->free_pages(), 5);

  // The parent writing into page 0, still shared with the child, gets its own copy too.
  ASSERT_TRUE(parent.Prepare(2, 6).ok());
  EXPECT_NE(parent.pages()[0], 0);
  EXPECT_EQ(cache->RefCount(0), 1);
  Store(parent, 2, 4, 9.0f);
  EXPECT_TRUE(Holds(*child, 0, 6, 3.0f)) << "the child's prefix is unchanged";
  EXPECT_TRUE(Holds(parent, 0, 2, 3.0f));
  EXPECT_TRUE(Holds(parent, 2, 4, 9.0f));
}

TEST_F(PagedKvCacheTest, ForkAtAPageBoundaryCopiesNothingOnAppend) {
  auto cache = MakeCache(8);
  ASSERT_NE(cache, nullptr);
  PagedSequenceKv parent(cache, 64);
  ASSERT_TRUE(parent.Prepare(0, 8).ok());
  Store(parent, 0, 8, 4.0f);
  std::unique_ptr<PagedSequenceKv> child = parent.Fork(8);
  ASSERT_TRUE(child->Prepare(8, 9).ok());
  EXPECT_THAT(child->pages(), ElementsAre(0, 1, 2));
  EXPECT_EQ(cache->RefCount(0), 2);
  EXPECT_EQ(cache->RefCount(1), 2);
  EXPECT_EQ(cache->free_pages(), 5);
  EXPECT_TRUE(Holds(*child, 0, 8, 4.0f));
}

TEST_F(PagedKvCacheTest, TruncateAndDestructionReturnPages) {
  auto cache = MakeCache(8);
  ASSERT_NE(cache, nullptr);
  {
    PagedSequenceKv seq(cache, 64);
    ASSERT_TRUE(seq.Prepare(0, 17).ok());  // 5 pages
    EXPECT_EQ(cache->free_pages(), 3);
    seq.Truncate(9);  // positions 0..8: 3 pages
    EXPECT_THAT(seq.pages(), ElementsAre(0, 1, 2));
    EXPECT_EQ(cache->free_pages(), 5);
    seq.Truncate(8);
    EXPECT_THAT(seq.pages(), ElementsAre(0, 1));
    seq.Truncate(100);  // more than held: nothing changes
    EXPECT_THAT(seq.pages(), ElementsAre(0, 1));
    std::unique_ptr<PagedSequenceKv> fork = seq.Fork(8);
    seq.Truncate(0);
    EXPECT_TRUE(seq.pages().empty());
    EXPECT_EQ(cache->free_pages(), 6) << "the fork still holds pages 0 and 1";
    EXPECT_EQ(cache->RefCount(0), 1);
    ASSERT_TRUE(seq.Prepare(0, 4).ok());
    EXPECT_EQ(cache->free_pages(), 5);
  }  // seq and its fork destroyed
  EXPECT_EQ(cache->free_pages(), 8);
  for (int32_t p = 0; p < 8; ++p) EXPECT_EQ(cache->RefCount(p), 0);
}

TEST_F(PagedKvCacheTest, SequencesKeepTheCacheAlive) {
  auto cache = MakeCache(2);
  ASSERT_NE(cache, nullptr);
  auto seq = std::make_unique<PagedSequenceKv>(cache, 8);
  ASSERT_TRUE(seq->Prepare(0, 8).ok());
  std::weak_ptr<PagedKvCache> weak = cache;
  cache.reset();
  EXPECT_FALSE(weak.expired());
  seq.reset();
  EXPECT_TRUE(weak.expired());
}

TEST_F(PagedKvCacheTest, CopyPageCopiesEveryLayerKAndV) {
  auto cache = MakeCache(4);
  ASSERT_NE(cache, nullptr);
  PagedSequenceKv seq(cache, 16);
  ASSERT_TRUE(seq.Prepare(0, 4).ok());
  Store(seq, 0, 4, 5.0f);
  auto page = cache->AllocatePage();
  ASSERT_TRUE(page.ok());
  ASSERT_TRUE(cache->CopyPage(seq.pages()[0], *page).ok());
  const int32_t table[1] = {*page};
  for (int layer = 0; layer < kShape.n_layers; ++layer) {
    const kernels::PagedKvView view = cache->View(layer, table, 1);
    const auto* k = static_cast<const float*>(view.k.data) + *page * 4 * kShape.kv_dim;
    const auto* v = static_cast<const float*>(view.v.data) + *page * 4 * kShape.kv_dim;
    // Head-major inside the page: [head][slot][head_dim].
    const int64_t hd = kShape.head_dim;
    for (int64_t p = 0; p < 4; ++p) {
      for (int64_t i = 0; i < kShape.kv_dim; ++i) {
        const int64_t at = (i / hd * 4 + p) * hd + i % hd;
        ASSERT_EQ(k[at], KValue(layer, p, i, 5.0f));
        ASSERT_EQ(v[at], -KValue(layer, p, i, 5.0f));
      }
    }
  }
}

struct TypeSizes {
  WeightType k, v;
  uint64_t k_row_bytes_64;  // one row of kShape (64 values)
  uint64_t v_row_bytes_64;
  uint64_t bytes_per_token_0_8b;  // MODEL_SPEC shapes, computed by hand from the block layouts
  uint64_t bytes_per_token_9b;
};

// 0.8B: 6 layers x 512 values; 9B: 8 layers x 1024 values. Per 512 values: f32 2048, f16/bf16
// 1024, q8_0 16 blocks x 34 = 544, q4_0 x 18 = 288, q4_1 x 20 = 320, q5_0 x 22 = 352.
constexpr TypeSizes kTypeSizes[] = {
    {WeightType::kF32, WeightType::kF32, 256, 256, 6 * (2048 + 2048), 8 * 2 * (2048 + 2048)},
    {WeightType::kF16, WeightType::kF16, 128, 128, 12288, 32768},  // MODEL_SPEC §4.1 16-bit
    {WeightType::kBF16, WeightType::kBF16, 128, 128, 12288, 32768},
    {WeightType::kQ8_0, WeightType::kQ8_0, 68, 68, 6 * (544 + 544), 8 * 2 * (544 + 544)},
    {WeightType::kQ8_0, WeightType::kQ4_0, 68, 36, 6 * (544 + 288), 8 * 2 * (544 + 288)},
    {WeightType::kQ4_0, WeightType::kQ4_0, 36, 36, 6 * (288 + 288), 8 * 2 * (288 + 288)},
    {WeightType::kQ4_1, WeightType::kQ4_1, 40, 40, 6 * (320 + 320), 8 * 2 * (320 + 320)},
    {WeightType::kQ5_0, WeightType::kQ5_0, 44, 44, 6 * (352 + 352), 8 * 2 * (352 + 352)},
    {WeightType::kF16, WeightType::kQ8_0, 128, 68, 6 * (1024 + 544), 8 * 2 * (1024 + 544)},
    {WeightType::kQ8_0, WeightType::kF16, 68, 128, 6 * (544 + 1024), 8 * 2 * (544 + 1024)},
};

TEST_F(PagedKvCacheTest, BytesPerTokenAndPageBytesFollowTheBlockLayouts) {
  const KvCacheShape shape_0_8b{6, 2 * 256, 256};
  const KvCacheShape shape_9b{8, 4 * 256, 256};
  for (const TypeSizes& t : kTypeSizes) {
    const std::string name =
        std::string(KvCacheTypeName(t.k)) + "/" + std::string(KvCacheTypeName(t.v));
    EXPECT_EQ(KvBytesPerToken(shape_0_8b, t.k, t.v), t.bytes_per_token_0_8b) << name;
    EXPECT_EQ(KvBytesPerToken(shape_9b, t.k, t.v), t.bytes_per_token_9b) << name;
    EXPECT_EQ(KvBytesPerToken(kShape, t.k, t.v), 2 * (t.k_row_bytes_64 + t.v_row_bytes_64)) << name;

    auto cache = MakeCache(3, {t.k, t.v, /*page_tokens=*/16});
    ASSERT_NE(cache, nullptr) << name;
    EXPECT_EQ(cache->page_bytes(), 16 * KvBytesPerToken(kShape, t.k, t.v)) << name;
    const int32_t table[1] = {0};
    const kernels::PagedKvView view = cache->View(1, table, 1);
    EXPECT_EQ(view.k.type, t.k) << name;
    EXPECT_EQ(view.v.type, t.v) << name;
    EXPECT_EQ(view.k.row_bytes, t.k_row_bytes_64) << name;
    EXPECT_EQ(view.v.row_bytes, t.v_row_bytes_64) << name;
  }
}

TEST_F(PagedKvCacheTest, QuantizedPagesAreCopiedOnWriteByteForByte) {
  auto cache = MakeCache(4, {WeightType::kQ4_1, WeightType::kQ5_0, 4});
  ASSERT_NE(cache, nullptr);
  PagedSequenceKv parent(cache, 16);
  ASSERT_TRUE(parent.Prepare(0, 3).ok());
  std::vector<float> k(3 * 64), v(3 * 64);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = 0.1f * static_cast<float>(i % 17) - 0.7f;
    v[i] = 0.05f * static_cast<float>(i % 23) - 0.4f;
  }
  const std::vector<int32_t> table(parent.pages().begin(), parent.pages().end());
  for (int layer = 0; layer < 2; ++layer) {
    ASSERT_EQ(backend_->StoreKv({k.data(), 3, 64, 64}, {v.data(), 3, 64, 64},
                                parent.View(layer, table.data()), 0),
              kernels::KernelStatus::kOk);
  }
  auto page_bytes = [&](int32_t page, int layer, bool key) {
    const kernels::PagedKvView view = cache->View(layer, table.data(), 1);
    const kernels::KvPool& pool = key ? view.k : view.v;
    const auto* p = static_cast<const uint8_t*>(pool.data) + page * 4 * pool.row_bytes;
    return std::vector<uint8_t>(p, p + 4 * pool.row_bytes);
  };
  std::unique_ptr<PagedSequenceKv> child = parent.Fork(3);
  ASSERT_TRUE(child->Prepare(3, 4).ok());
  const int32_t copy = child->pages()[0];
  ASSERT_NE(copy, parent.pages()[0]);
  for (int layer = 0; layer < 2; ++layer) {
    for (bool key : {true, false}) {
      EXPECT_EQ(page_bytes(copy, layer, key), page_bytes(parent.pages()[0], layer, key))
          << "layer " << layer << (key ? " K" : " V");
    }
  }
}

TEST_F(PagedKvCacheTest, AttentionThroughACopiedPageEqualsTheParents) {
  // Pages are copied whole whatever their inner (head-major) layout: after the child's first
  // write copies the shared page, attention over the shared positions reads the same keys
  // through either page table, bit for bit (f32 and f16 read in place, block types decoded).
  const KvCacheOptions options[] = {{WeightType::kF32, WeightType::kF32, 4},
                                    {WeightType::kF16, WeightType::kF16, 4},
                                    {WeightType::kQ8_0, WeightType::kQ4_0, 4}};
  for (const KvCacheOptions& opt : options) {
    SCOPED_TRACE(std::string(KvCacheTypeName(opt.k_type)) + "/" +
                 std::string(KvCacheTypeName(opt.v_type)));
    auto cache = MakeCache(6, opt);
    ASSERT_NE(cache, nullptr);
    PagedSequenceKv parent(cache, 16);
    ASSERT_TRUE(parent.Prepare(0, 7).ok());
    std::vector<float> k(8 * 64), v(8 * 64), q(4 * 32);  // 4 query heads on 2 kv heads of 32
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = std::sin(0.37f * static_cast<float>(i));
      v[i] = std::cos(0.11f * static_cast<float>(i));
    }
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.23f * static_cast<float>(i) + 1.0f);
    auto store = [&](const PagedSequenceKv& seq, int64_t first, int64_t n) {
      const std::vector<int32_t> table(seq.pages().begin(), seq.pages().end());
      ASSERT_EQ(
          backend_->StoreKv({k.data() + first * 64, n, 64, 64}, {v.data() + first * 64, n, 64, 64},
                            seq.View(1, table.data()), first),
          kernels::KernelStatus::kOk);
    };
    store(parent, 0, 7);
    std::unique_ptr<PagedSequenceKv> child = parent.Fork(7);
    ASSERT_TRUE(child->Prepare(7, 8).ok());  // position 7 is in page 1: copied
    EXPECT_EQ(child->pages()[0], parent.pages()[0]);
    ASSERT_NE(child->pages()[1], parent.pages()[1]);
    for (float& x : k) x = -x;  // the child's own position 7 differs from anything shared
    store(*child, 7, 1);
    auto attend = [&](const PagedSequenceKv& seq) {
      const std::vector<int32_t> table(seq.pages().begin(), seq.pages().end());
      std::vector<float> out(q.size());
      kernels::Mat om{out.data(), 1, 128, 128};
      EXPECT_EQ(backend_->PagedAttention({q.data(), 1, 128, 128}, seq.View(1, table.data()),
                                         /*n_past=*/6, 4, 2, 0.25f, om),
                kernels::KernelStatus::kOk);
      return out;
    };
    EXPECT_EQ(attend(*child), attend(parent));
  }
}

TEST(PagedKvCacheCreate, RejectsBadTypesAndShapesNamingThem) {
  auto backend = kernels::MakeCpuBackend(1);
  auto create = [&](const KvCacheShape& shape, const KvCacheOptions& options, int64_t pages) {
    return PagedKvCache::Create(*backend, shape, options, pages).status();
  };
  const KvCacheOptions f16{};
  absl::Status s = create(kShape, {WeightType::kQ4_K, WeightType::kF16, 16}, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("K cache type 12"));
  EXPECT_THAT(s.message(), HasSubstr("q5_0"));
  s = create(kShape, {WeightType::kF16, WeightType::kQ5_1, 16}, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("V cache type 7"));
  s = create(kShape, {WeightType::kF16, static_cast<WeightType>(99), 16}, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("V cache type 99"));

  // head_dim 16 cannot hold blocks of 32.
  s = create({2, 32, 16}, {WeightType::kQ8_0, WeightType::kF16, 16}, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("head_dim (16) to be a multiple of 32"));
  EXPECT_TRUE(create({2, 32, 16}, f16, 4).ok()) << "f16 has no blocks to align";

  for (const KvCacheShape& bad : {KvCacheShape{2, 64, 0}, KvCacheShape{2, 0, 32},
                                  KvCacheShape{2, 48, 32}, KvCacheShape{-1, 64, 32}}) {
    s = create(bad, f16, 4);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("bad KV cache shape"));
  }
  s = create(kShape, {WeightType::kF16, WeightType::kF16, 0}, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("page size"));
  s = create(kShape, {WeightType::kF16, WeightType::kF16, (1 << 20) + 1}, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = create(kShape, f16, -1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("page count -1"));

  // An empty cache is valid and simply full.
  auto empty = PagedKvCache::Create(*backend, kShape, f16, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->AllocatePage().status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ParseKvCacheType, AcceptsLlamaCppNamesAndRoundTrips) {
  const std::pair<const char*, WeightType> names[] = {
      {"f32", WeightType::kF32},   {"f16", WeightType::kF16},   {"bf16", WeightType::kBF16},
      {"q8_0", WeightType::kQ8_0}, {"q4_0", WeightType::kQ4_0}, {"q4_1", WeightType::kQ4_1},
      {"q5_0", WeightType::kQ5_0},
  };
  std::set<WeightType> seen;
  for (const auto& [name, type] : names) {
    auto parsed = ParseKvCacheType(name);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    EXPECT_EQ(*parsed, type) << name;
    EXPECT_EQ(KvCacheTypeName(type), name);
    EXPECT_TRUE(kernels::IsKvCacheType(type)) << name;
    seen.insert(type);
  }
  EXPECT_EQ(seen.size(), 7u);
  for (const char* bad : {"", "F16", "fp16", "q4_k", "q5_1", "q8", "f16 ", "int8"}) {
    auto parsed = ParseKvCacheType(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_THAT(parsed.status().message(), HasSubstr(std::string("'") + bad + "'"));
    EXPECT_THAT(parsed.status().message(), HasSubstr("q4_1"));
  }
  EXPECT_EQ(KvCacheTypeName(WeightType::kQ4_K), "?");
  EXPECT_EQ(KvCacheTypeName(WeightType::kQ5_1), "?");
}

}  // namespace
}  // namespace deltaserve::worker
