#include "worker/cache/paged_kv_cache.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/str_util.h"

namespace deltaserve::worker {
namespace {

using kernels::BlockLayoutOf;
using kernels::WeightType;

uint64_t RowBytes(WeightType type, int64_t n) {
  const kernels::BlockLayout layout = BlockLayoutOf(type);
  return static_cast<uint64_t>(n / layout.block_size * layout.block_bytes);
}

absl::Status CheckType(WeightType type, const KvCacheShape& shape, const char* which) {
  if (!kernels::IsKvCacheType(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(which, " cache type ", static_cast<int>(type),
                     " (GGML id) is not one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0"));
  }
  const int64_t block = BlockLayoutOf(type).block_size;
  if (shape.head_dim % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        which, " cache type needs head_dim (", shape.head_dim, ") to be a multiple of ", block));
  }
  return absl::OkStatus();
}

constexpr std::pair<std::string_view, WeightType> kCacheTypes[] = {
    {"f32", WeightType::kF32},   {"f16", WeightType::kF16},   {"bf16", WeightType::kBF16},
    {"q8_0", WeightType::kQ8_0}, {"q4_0", WeightType::kQ4_0}, {"q4_1", WeightType::kQ4_1},
    {"q5_0", WeightType::kQ5_0},
};

}  // namespace

absl::StatusOr<WeightType> ParseKvCacheType(std::string_view name) {
  for (const auto& [n, t] : kCacheTypes) {
    if (n == name) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown KV cache type '", common::Sv(name),
                   "' (use f32, f16, bf16, q8_0, q4_0, q4_1 or q5_0)"));
}

common::Flag KvCacheTypeFlag(std::string name, WeightType* out) {
  return common::CustomFlag(std::move(name),
                            [out](std::string_view v) -> std::string {
                              absl::StatusOr<WeightType> t = ParseKvCacheType(v);
                              if (!t.ok()) return std::string(t.status().message());
                              *out = *t;
                              return "";
                            })
      .MissingMessage("{flag} needs a type");
}

std::string_view KvCacheTypeName(WeightType type) {
  for (const auto& [n, t] : kCacheTypes) {
    if (t == type) return n;
  }
  return "?";
}

uint64_t KvBytesPerToken(const KvCacheShape& shape, WeightType k_type, WeightType v_type) {
  return static_cast<uint64_t>(shape.n_layers) *
         (RowBytes(k_type, shape.kv_dim) + RowBytes(v_type, shape.kv_dim));
}

absl::StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::Create(kernels::Backend& backend,
                                                                   const KvCacheShape& shape,
                                                                   const KvCacheOptions& options,
                                                                   int64_t n_pages) {
  if (shape.n_layers < 0 || shape.head_dim <= 0 || shape.kv_dim <= 0 ||
      shape.kv_dim % shape.head_dim != 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad KV cache shape: ", shape.n_layers,
                                                   " layers, kv_dim ", shape.kv_dim, ", head_dim ",
                                                   shape.head_dim));
  }
  if (auto s = CheckType(options.k_type, shape, "K"); !s.ok()) return s;
  if (auto s = CheckType(options.v_type, shape, "V"); !s.ok()) return s;
  if (options.page_tokens <= 0 || options.page_tokens > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page size must be 1 .. 1048576 tokens, got ", options.page_tokens));
  }
  if (n_pages < 0 || n_pages > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("bad page count ", n_pages));
  }
  std::unique_ptr<PagedKvCache> c(new PagedKvCache());
  c->backend_ = &backend;
  c->shape_ = shape;
  c->options_ = options;
  c->n_pages_ = n_pages;
  c->k_row_bytes_ = RowBytes(options.k_type, shape.kv_dim);
  c->v_row_bytes_ = RowBytes(options.v_type, shape.kv_dim);
  const uint64_t rows = static_cast<uint64_t>(n_pages) * options.page_tokens;
  for (int layer = 0; layer < shape.n_layers; ++layer) {
    c->k_pools_.push_back(backend.Allocate(rows * c->k_row_bytes_));
    c->v_pools_.push_back(backend.Allocate(rows * c->v_row_bytes_));
    if (c->k_pools_.back().data() == nullptr || c->v_pools_.back().data() == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("no memory for a KV cache of ", n_pages,
                                                       " pages (", c->page_bytes() * n_pages,
                                                       " bytes)"));
    }
  }
  c->refs_.assign(n_pages, 0);
  // Lowest ids on top, so a fresh cache hands out pages in address order.
  for (int64_t p = n_pages - 1; p >= 0; --p) c->free_.push_back(static_cast<int32_t>(p));
  return c;
}

uint64_t PagedKvCache::page_bytes() const {
  return static_cast<uint64_t>(options_.page_tokens) * shape_.n_layers *
         (k_row_bytes_ + v_row_bytes_);
}

absl::StatusOr<int32_t> PagedKvCache::AllocatePage() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: all ", n_pages_, " pages of ",
                                                     options_.page_tokens, " tokens are in use"));
  }
  const int32_t page = free_.back();
  free_.pop_back();
  refs_[page] = 1;
  return page;
}

void PagedKvCache::Retain(int32_t page) { ++refs_[page]; }

void PagedKvCache::Release(int32_t page) {
  if (--refs_[page] == 0) free_.push_back(page);
}

absl::Status PagedKvCache::CopyPage(int32_t from, int32_t to) {
  // A page is one contiguous block per pool whatever its inner (head-major) layout.
  const uint64_t k_bytes = options_.page_tokens * k_row_bytes_;
  const uint64_t v_bytes = options_.page_tokens * v_row_bytes_;
  for (int layer = 0; layer < shape_.n_layers; ++layer) {
    auto* k = static_cast<uint8_t*>(k_pools_[layer].data());
    auto* v = static_cast<uint8_t*>(v_pools_[layer].data());
    if (backend_->CopyOnDevice(k + to * k_bytes, k + from * k_bytes, k_bytes) !=
            kernels::KernelStatus::kOk ||
        backend_->CopyOnDevice(v + to * v_bytes, v + from * v_bytes, v_bytes) !=
            kernels::KernelStatus::kOk) {
      return absl::InternalError(absl::StrCat("copying KV page ", from, " to ", to, " failed"));
    }
  }
  return absl::OkStatus();
}

absl::Status PagedKvCache::ReadPage(int layer, int32_t page, uint8_t* k_dst,
                                    uint8_t* v_dst) const {
  if (layer < 0 || layer >= shape_.n_layers || page < 0 || page >= n_pages_) {
    return absl::InvalidArgumentError(absl::StrCat("no KV page ", page, " in layer ", layer));
  }
  const auto* k = static_cast<const uint8_t*>(k_pools_[layer].data());
  const auto* v = static_cast<const uint8_t*>(v_pools_[layer].data());
  if (backend_->CopyToHost(k_dst, k + page * k_page_bytes(), k_page_bytes()) !=
          kernels::KernelStatus::kOk ||
      backend_->CopyToHost(v_dst, v + page * v_page_bytes(), v_page_bytes()) !=
          kernels::KernelStatus::kOk) {
    return absl::InternalError(absl::StrCat("reading KV page ", page, " failed"));
  }
  return absl::OkStatus();
}

absl::Status PagedKvCache::WritePage(int layer, int32_t page, const uint8_t* k_src,
                                     const uint8_t* v_src) {
  if (layer < 0 || layer >= shape_.n_layers || page < 0 || page >= n_pages_) {
    return absl::InvalidArgumentError(absl::StrCat("no KV page ", page, " in layer ", layer));
  }
  auto* k = static_cast<uint8_t*>(k_pools_[layer].data());
  auto* v = static_cast<uint8_t*>(v_pools_[layer].data());
  if (backend_->CopyToDevice(k + page * k_page_bytes(), k_src, k_page_bytes()) !=
          kernels::KernelStatus::kOk ||
      backend_->CopyToDevice(v + page * v_page_bytes(), v_src, v_page_bytes()) !=
          kernels::KernelStatus::kOk) {
    return absl::InternalError(absl::StrCat("writing KV page ", page, " failed"));
  }
  return absl::OkStatus();
}

const uint8_t* PagedKvCache::HostKPage(int layer, int32_t page) const {
  if (!backend_->host_memory()) return nullptr;
  return static_cast<const uint8_t*>(k_pools_[layer].data()) + page * k_page_bytes();
}

const uint8_t* PagedKvCache::HostVPage(int layer, int32_t page) const {
  if (!backend_->host_memory()) return nullptr;
  return static_cast<const uint8_t*>(v_pools_[layer].data()) + page * v_page_bytes();
}

kernels::PagedKvView PagedKvCache::View(int layer, const int32_t* page_table,
                                        int64_t n_pages) const {
  kernels::PagedKvView v;
  v.k = {k_pools_[layer].data(), options_.k_type, k_row_bytes_, n_pages_};
  v.v = {v_pools_[layer].data(), options_.v_type, v_row_bytes_, n_pages_};
  v.page_tokens = options_.page_tokens;
  v.page_table = page_table;
  v.n_pages = n_pages;
  v.n_head_kv = shape_.kv_dim / shape_.head_dim;
  return v;
}

PagedSequenceKv::PagedSequenceKv(std::shared_ptr<PagedKvCache> cache, int64_t capacity)
    : cache_(std::move(cache)), capacity_(capacity) {}

PagedSequenceKv::~PagedSequenceKv() { Truncate(0); }

absl::Status PagedSequenceKv::Prepare(int64_t first_write, int64_t n) {
  if (n > capacity_) {
    return absl::OutOfRangeError(
        absl::StrCat("sequence would hold ", n, " tokens; its capacity is ", capacity_));
  }
  const int64_t pt = cache_->page_tokens();
  const int64_t needed = (n + pt - 1) / pt;
  const size_t held = pages_.size();
  // On failure, give back what this call took: the sequence keeps exactly what it held before.
  auto undo = [&](absl::Status s) {
    while (pages_.size() > held) {
      cache_->Release(pages_.back());
      pages_.pop_back();
    }
    return s;
  };
  while (static_cast<int64_t>(pages_.size()) < needed) {
    absl::StatusOr<int32_t> page = cache_->AllocatePage();
    if (!page.ok()) return undo(page.status());
    pages_.push_back(*page);
  }
  // Copy-on-write: a shared page about to be written becomes a private copy.
  for (int64_t i = std::max<int64_t>(0, first_write) / pt; i < needed; ++i) {
    const int32_t page = pages_[i];
    if (cache_->RefCount(page) == 1) continue;
    absl::StatusOr<int32_t> copy = cache_->AllocatePage();
    if (!copy.ok()) return undo(copy.status());
    if (auto s = cache_->CopyPage(page, *copy); !s.ok()) {
      cache_->Release(*copy);
      return undo(s);
    }
    cache_->Release(page);
    pages_[i] = *copy;
  }
  return absl::OkStatus();
}

kernels::PagedKvView PagedSequenceKv::View(int layer, const int32_t* page_table) const {
  return cache_->View(layer, page_table, static_cast<int64_t>(pages_.size()));
}

std::unique_ptr<PagedSequenceKv> PagedSequenceKv::Fork(int64_t n) const {
  auto fork = std::make_unique<PagedSequenceKv>(cache_, capacity_);
  const int64_t pt = cache_->page_tokens();
  const int64_t shared = std::min<int64_t>((n + pt - 1) / pt, pages_.size());
  for (int64_t i = 0; i < shared; ++i) {
    cache_->Retain(pages_[i]);
    fork->pages_.push_back(pages_[i]);
  }
  return fork;
}

void PagedSequenceKv::AdoptShared(absl::Span<const int32_t> pages) {
  Truncate(0);
  for (int32_t page : pages) {
    cache_->Retain(page);
    pages_.push_back(page);
  }
}

void PagedSequenceKv::Truncate(int64_t n) {
  const int64_t pt = cache_->page_tokens();
  const size_t keep = static_cast<size_t>((std::max<int64_t>(n, 0) + pt - 1) / pt);
  while (pages_.size() > keep) {
    cache_->Release(pages_.back());
    pages_.pop_back();
  }
}

}  // namespace deltaserve::worker
