#include "worker/cache/snapshot_cache.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace deltaserve::worker {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

}  // namespace

SnapshotCache::SnapshotCache(std::shared_ptr<PagedKvCache> kv,
                             std::shared_ptr<RecurrentStateSlots> slots,
                             const common::SnapshotDomain& domain, uint64_t ram_budget_bytes)
    : kv_(std::move(kv)),
      slots_(std::move(slots)),
      domain_(domain),
      root_(common::SnapshotRootKey(domain)),
      budget_(ram_budget_bytes) {
  stats_.ram_budget = budget_;
}

SnapshotCache::~SnapshotCache() {
  std::lock_guard<std::mutex> lock(mu_);
  // Whoever still holds an entry (a writer) is stopped before the cache goes: give every page
  // back so the KV cache's counts stay right for its other users.
  for (const Entry& e : lru_) DropPagesLocked(*e);
  for (const Entry& e : evicted_in_use_) DropPagesLocked(*e);
  lru_.clear();
  index_.clear();
  evicted_in_use_.clear();
}

void SnapshotCache::DropPagesLocked(const LocalSnapshot& snap) {
  for (int32_t page : snap.pages_) {
    auto it = pinned_.find(page);
    if (it != pinned_.end() && --it->second == 0) pinned_.erase(it);
    kv_->Release(page);
  }
}

bool SnapshotCache::EvictOneLocked() {
  if (lru_.empty()) return false;
  Entry victim = std::move(lru_.back());
  lru_.pop_back();
  index_.erase(victim->key());
  stats_.ram_bytes -= victim->ram_bytes();
  ++stats_.evictions;
  if (victim.use_count() == 1) {
    DropPagesLocked(*victim);
  } else {
    evicted_in_use_.push_back(std::move(victim));
  }
  return true;
}

bool SnapshotCache::FitBudgetLocked(uint64_t incoming) {
  if (incoming > budget_) return false;
  while (stats_.ram_bytes + incoming > budget_ && EvictOneLocked()) {
  }
  return stats_.ram_bytes + incoming <= budget_;
}

std::shared_ptr<const LocalSnapshot> SnapshotCache::AddLocked(Entry entry) {
  for (int32_t page : entry->pages_) {
    kv_->Retain(page);
    ++pinned_[page];
  }
  stats_.ram_bytes += entry->ram_bytes();
  lru_.push_front(entry);
  index_[entry->key()] = lru_.begin();
  return entry;
}

absl::StatusOr<std::shared_ptr<const LocalSnapshot>> SnapshotCache::Capture(
    const SequenceState& seq, absl::Span<const int32_t> tokens, const common::SnapshotKey& key) {
  if (!enabled()) return nullptr;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n != seq.n_past || n == 0) {
    return absl::InternalError(absl::StrCat("a snapshot of ", n, " tokens of a sequence at ",
                                            seq.n_past));
  }
  return CaptureWith(seq, tokens, key, nullptr);
}

absl::StatusOr<std::shared_ptr<const LocalSnapshot>> SnapshotCache::CaptureTapped(
    const SequenceState& seq, absl::Span<const int32_t> tokens, const common::SnapshotKey& key,
    std::unique_ptr<uint8_t[]> tapped_state) {
  if (!enabled()) return nullptr;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n > seq.n_past || n == 0 || tapped_state == nullptr) {
    return absl::InternalError(absl::StrCat("a tapped snapshot of ", n,
                                            " tokens of a sequence at ", seq.n_past));
  }
  return CaptureWith(seq, tokens, key, std::move(tapped_state));
}

absl::StatusOr<std::shared_ptr<const LocalSnapshot>> SnapshotCache::CaptureWith(
    const SequenceState& seq, absl::Span<const int32_t> tokens, const common::SnapshotKey& key,
    std::unique_ptr<uint8_t[]> state) {
  const Clock::time_point t0 = Clock::now();
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return std::shared_ptr<const LocalSnapshot>(*it->second);
  }
  const uint64_t state_bytes = slots_->layout().bytes();
  auto entry = std::make_shared<LocalSnapshot>();
  entry->key_ = key;
  entry->state_bytes_ = state_bytes;
  if (!FitBudgetLocked(state_bytes + n * sizeof(int32_t))) {
    ++stats_.capture_skipped;
    return nullptr;
  }
  entry->tokens_.assign(tokens.begin(), tokens.end());
  if (state != nullptr) {
    entry->state_ = std::move(state);
  } else {
    entry->state_ = std::make_unique_for_overwrite<uint8_t[]>(state_bytes);
    const auto& slot = static_cast<const RecurrentSlot&>(*seq.state);
    if (absl::Status s = slots_->CopyToHost(slot.index(), entry->state_.get()); !s.ok()) {
      ++stats_.capture_skipped;
      return s;
    }
  }
  // The pages of [0, n). Of a snapshot taken inside a pass (CaptureTapped) the last page may
  // also hold positions >= n the sequence wrote in that pass: whoever continues from the
  // snapshot writes those positions before attention reads them (copying the shared page
  // first), so they are never seen.
  const int64_t pt = kv_->page_tokens();
  const absl::Span<const int32_t> pages = seq.kv->pages();
  const int64_t n_pages = (n + pt - 1) / pt;
  if (static_cast<int64_t>(pages.size()) < n_pages) {
    return absl::InternalError(absl::StrCat("a sequence at ", n, " tokens holds only ",
                                            pages.size(), " KV pages"));
  }
  entry->pages_.assign(pages.begin(), pages.begin() + n_pages);
  std::shared_ptr<const LocalSnapshot> out = AddLocked(std::move(entry));
  ++stats_.captures;
  stats_.capture_us += MicrosSince(t0);
  return out;
}

absl::Status SnapshotCache::RestoreImage(const SnapshotImage& image, SequenceState& seq) {
  const Clock::time_point t0 = Clock::now();
  auto& kv = static_cast<PagedSequenceKv&>(*seq.kv);
  if (seq.n_past != 0 || !kv.pages().empty()) {
    return absl::InternalError("a snapshot is restored into a fresh sequence only");
  }
  const int64_t n = static_cast<int64_t>(image.tokens.size());
  const int64_t pt = kv_->page_tokens();
  const int64_t n_pages = (n + pt - 1) / pt;
  const int n_layers = kv_->shape().n_layers;
  const uint64_t kb = kv_->k_page_bytes(), vb = kv_->v_page_bytes();
  if (n == 0 || n > kv.capacity() || image.state.size() != slots_->layout().bytes() ||
      image.kv.size() != static_cast<uint64_t>(n_layers) * n_pages * (kb + vb)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "snapshot of ", n, " tokens with ", image.state.size(), " state bytes and ",
        image.kv.size(), " KV bytes does not fit this cache's layout"));
  }
  if (kv_->free_pages() < n_pages) EvictForPages(n_pages);
  if (absl::Status s = kv.Prepare(0, n); !s.ok()) {
    kv.Truncate(0);
    return s;
  }
  const absl::Span<const int32_t> pages = kv.pages();
  for (int layer = 0; layer < n_layers; ++layer) {
    for (int64_t p = 0; p < n_pages; ++p) {
      const uint8_t* k = image.kv.data() + (static_cast<uint64_t>(layer) * n_pages + p) * (kb + vb);
      if (absl::Status s = kv_->WritePage(layer, pages[p], k, k + kb); !s.ok()) {
        kv.Truncate(0);
        return s;
      }
    }
  }
  const auto& slot = static_cast<const RecurrentSlot&>(*seq.state);
  if (absl::Status s = slots_->CopyFromHost(slot.index(), image.state.data()); !s.ok()) {
    kv.Truncate(0);
    return s;
  }
  seq.n_past = n;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.image_restores;
  stats_.restore_us += MicrosSince(t0);
  if (!enabled() || index_.contains(image.key)) return absl::OkStatus();
  if (!FitBudgetLocked(image.state.size() + n * sizeof(int32_t))) return absl::OkStatus();
  auto entry = std::make_shared<LocalSnapshot>();
  entry->key_ = image.key;
  entry->tokens_ = image.tokens;
  entry->state_bytes_ = image.state.size();
  entry->state_ = std::make_unique_for_overwrite<uint8_t[]>(image.state.size());
  std::memcpy(entry->state_.get(), image.state.data(), image.state.size());
  entry->pages_.assign(pages.begin(), pages.begin() + n_pages);
  AddLocked(std::move(entry));
  return absl::OkStatus();
}

std::shared_ptr<const LocalSnapshot> SnapshotCache::FindLongest(
    absl::Span<const common::SnapshotKey> keys, absl::Span<const int64_t> positions,
    int64_t max_position, absl::Span<const int32_t> prompt) {
  if (!enabled()) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = std::min(keys.size(), positions.size()); i-- > 0;) {
    if (positions[i] > max_position) continue;
    auto it = index_.find(keys[i]);
    if (it == index_.end()) continue;
    const Entry& e = *it->second;
    // 128-bit keys make a collision practically impossible; comparing the tokens makes it
    // impossible, for the price of a memcmp.
    if (e->n_tokens() != positions[i] || static_cast<int64_t>(prompt.size()) < e->n_tokens() ||
        !std::equal(e->tokens_.begin(), e->tokens_.end(), prompt.begin())) {
      continue;
    }
    lru_.splice(lru_.begin(), lru_, it->second);
    return e;
  }
  return nullptr;
}

absl::Status SnapshotCache::Restore(const LocalSnapshot& snap, SequenceState& seq) {
  const Clock::time_point t0 = Clock::now();
  auto& kv = static_cast<PagedSequenceKv&>(*seq.kv);
  if (seq.n_past != 0 || !kv.pages().empty()) {
    return absl::InternalError("a snapshot is restored into a fresh sequence only");
  }
  const auto& slot = static_cast<const RecurrentSlot&>(*seq.state);
  if (absl::Status s = slots_->CopyFromHost(slot.index(), snap.state_.get()); !s.ok()) return s;
  kv.AdoptShared(snap.pages());
  seq.n_past = snap.n_tokens();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.restores;
  stats_.restore_us += MicrosSince(t0);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> SnapshotCache::CopyKv(const LocalSnapshot& snap) const {
  const int n_layers = kv_->shape().n_layers;
  const uint64_t kb = kv_->k_page_bytes(), vb = kv_->v_page_bytes();
  const size_t n_pages = snap.pages_.size();
  std::vector<uint8_t> out(static_cast<uint64_t>(n_layers) * n_pages * (kb + vb));
  uint8_t* dst = out.data();
  for (int layer = 0; layer < n_layers; ++layer) {
    for (int32_t page : snap.pages_) {
      if (absl::Status s = kv_->ReadPage(layer, page, dst, dst + kb); !s.ok()) return s;
      dst += kb + vb;
    }
  }
  return out;
}

int64_t SnapshotCache::EvictForPages(int64_t free_pages) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t before = kv_->free_pages();
  while (kv_->free_pages() < free_pages && !lru_.empty()) {
    EvictOneLocked();
    ++stats_.evictions_for_pages;
  }
  return kv_->free_pages() - before;
}

bool SnapshotCache::EvictOne() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!EvictOneLocked()) return false;
  ++stats_.evictions_for_pages;
  return true;
}

int64_t SnapshotCache::EvictablePages() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [page, snapshots] : pinned_) n += kv_->RefCount(page) == snapshots ? 1 : 0;
  return n;
}

void SnapshotCache::ReleaseUnreferenced() {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(evicted_in_use_, [this](const Entry& e) {
    if (e.use_count() != 1) return false;
    DropPagesLocked(*e);
    return true;
  });
}

std::vector<uint64_t> SnapshotCache::KeyPrefixes(size_t max) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out;
  out.reserve(std::min(max, lru_.size()));
  for (const Entry& e : lru_) {
    if (out.size() >= max) break;
    out.push_back(e->key().Prefix64());
  }
  return out;
}

bool SnapshotCache::Contains(const common::SnapshotKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.contains(key);
}

SnapshotCacheStats SnapshotCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SnapshotCacheStats s = stats_;
  s.entries = static_cast<int64_t>(lru_.size());
  s.pinned_pages = static_cast<int64_t>(pinned_.size());
  return s;
}

}  // namespace deltaserve::worker
