// The attention KV cache of the serving engine: fixed-size pages of `page_tokens` positions in
// backend memory, only for the full-attention layers (DeltaNet layers keep fixed-size recurrent
// state instead, see recurrent_state_slots.h). One page id addresses a page in every layer's K
// pool and V pool at once, so a sequence needs one page table for all layers; inside a page the
// values are head-major ([kv head][token][head_dim], kernels::KvPool). K and V each have
// their own type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0), read by the attention kernel in that
// type. Pages are reference-counted: a forked sequence shares its parent's pages until it writes
// into one (copy-on-write), which is what prefix sharing needs.
//
//   auto cache = PagedKvCache::Create(backend, shape, {kF16, kQ8_0, 256}, /*n_pages=*/64);
//   PagedSequenceKv seq(*cache, /*capacity=*/4096);
//   RETURN_IF_ERROR(seq.Prepare(/*first_write=*/0, /*n=*/300));   // 2 pages, private
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/flags.h"
#include "kernels/backend.h"
#include "worker/engine/sequence_state.h"

namespace deltaserve::worker {

// Types and page size of a KV cache (the --cache-type-k / --cache-type-v / --page-tokens flags).
struct KvCacheOptions {
  kernels::WeightType k_type = kernels::WeightType::kF16;
  kernels::WeightType v_type = kernels::WeightType::kF16;
  int64_t page_tokens = 256;
};

// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0" (the names llama.cpp's --cache-type-k
// takes) to the type; InvalidArgument naming the accepted ones otherwise.
absl::StatusOr<kernels::WeightType> ParseKvCacheType(std::string_view name);
// A --cache-type-k / --cache-type-v row of a program's flag table (common/flags.h), read with
// ParseKvCacheType (whose message is the error).
common::Flag KvCacheTypeFlag(std::string name, kernels::WeightType* out);
// The inverse; "?" for a type that is not a cache type.
std::string_view KvCacheTypeName(kernels::WeightType type);

// What the model needs cached per position.
struct KvCacheShape {
  int n_layers = 0;      // attention layers
  int64_t kv_dim = 0;    // n_head_kv * head_dim values per position and layer, for K and for V
  int64_t head_dim = 0;  // each head must start on a block of the cache types
};

// Bytes one position takes in every attention layer, K plus V, with block scales.
uint64_t KvBytesPerToken(const KvCacheShape& shape, kernels::WeightType k_type,
                         kernels::WeightType v_type);

// See the file comment. Not thread-safe: the engine thread owns it.
class PagedKvCache {
 public:
  // Allocates the pools: n_pages pages of every layer's K and V. Fails on an unusable type or
  // shape (naming it) and when the backend has no memory for it.
  static absl::StatusOr<std::unique_ptr<PagedKvCache>> Create(kernels::Backend& backend,
                                                              const KvCacheShape& shape,
                                                              const KvCacheOptions& options,
                                                              int64_t n_pages);

  const KvCacheShape& shape() const { return shape_; }
  const KvCacheOptions& options() const { return options_; }
  int64_t page_tokens() const { return options_.page_tokens; }
  int64_t total_pages() const { return n_pages_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  // Bytes of one page over all layers, K plus V.
  uint64_t page_bytes() const;

  // Takes a free page (reference count 1); ResourceExhausted when none is left.
  absl::StatusOr<int32_t> AllocatePage();
  // Adds / drops a reference; a page whose count reaches 0 returns to the free list.
  void Retain(int32_t page);
  void Release(int32_t page);
  int32_t RefCount(int32_t page) const { return refs_[page]; }
  // Copies page `from` into page `to` in every layer, K and V.
  absl::Status CopyPage(int32_t from, int32_t to);

  // Layer `layer`'s pools for a page table in backend memory.
  kernels::PagedKvView View(int layer, const int32_t* page_table, int64_t n_pages) const;

  // Bytes of one page of one layer's K pool / V pool (page_tokens rows, head-major inside).
  uint64_t k_page_bytes() const { return options_.page_tokens * k_row_bytes_; }
  uint64_t v_page_bytes() const { return options_.page_tokens * v_row_bytes_; }
  // Copies page `page` of layer `layer` (K then V, k_page_bytes() + v_page_bytes()) to host
  // memory / from host memory: how a session snapshot leaves the process and comes back.
  absl::Status ReadPage(int layer, int32_t page, uint8_t* k_dst, uint8_t* v_dst) const;
  absl::Status WritePage(int layer, int32_t page, const uint8_t* k_src, const uint8_t* v_src);
  // The page's bytes in place when backend memory is host memory (the CPU backend), else
  // nullptr: lets a snapshot be serialized from another thread without a staging copy, which is
  // safe because a page held by a snapshot is never written (writers copy shared pages first).
  const uint8_t* HostKPage(int layer, int32_t page) const;
  const uint8_t* HostVPage(int layer, int32_t page) const;

 private:
  PagedKvCache() = default;

  kernels::Backend* backend_ = nullptr;
  KvCacheShape shape_;
  KvCacheOptions options_;
  int64_t n_pages_ = 0;
  size_t k_row_bytes_ = 0, v_row_bytes_ = 0;
  std::vector<kernels::DeviceBuffer> k_pools_, v_pools_;  // per layer
  std::vector<int32_t> free_;                             // stack of free page ids
  std::vector<int32_t> refs_;                             // per page
};

// One sequence's positions in a PagedKvCache: its page table. Releases its pages when destroyed.
class PagedSequenceKv : public SequenceKv {
 public:
  // `cache` must outlive this object (it may be shared with other sequences); `capacity` bounds
  // the positions the sequence may ever hold.
  PagedSequenceKv(std::shared_ptr<PagedKvCache> cache, int64_t capacity);
  ~PagedSequenceKv() override;
  PagedSequenceKv(const PagedSequenceKv&) = delete;
  PagedSequenceKv& operator=(const PagedSequenceKv&) = delete;

  int64_t capacity() const override { return capacity_; }
  absl::Status Prepare(int64_t first_write, int64_t n) override;
  absl::Span<const int32_t> pages() const override { return pages_; }
  kernels::PagedKvView View(int layer, const int32_t* page_table) const override;
  int64_t page_tokens() const override { return cache_->page_tokens(); }

  // A new sequence sharing the pages that hold positions [0, n) (n <= what this one holds); its
  // first write into a shared page copies that page.
  std::unique_ptr<PagedSequenceKv> Fork(int64_t n) const;
  // Drops the pages past those needed for positions [0, n).
  void Truncate(int64_t n);
  // Makes an empty sequence share `pages` (a snapshot's, from the same cache): each is retained,
  // and the first write into one copies it.
  void AdoptShared(absl::Span<const int32_t> pages);
  const PagedKvCache& cache() const { return *cache_; }

 private:
  std::shared_ptr<PagedKvCache> cache_;
  int64_t capacity_;
  std::vector<int32_t> pages_;
};

}  // namespace deltaserve::worker
