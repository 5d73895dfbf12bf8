// The RAM tier of session snapshots (docs/snapshots.md): a sequence's state after its first n
// tokens — a host copy of every DeltaNet layer's conv window and delta-rule matrices, plus
// references to the attention KV pages holding positions [0, n) — kept under a content key
// (common/snapshot_key.h) so that a later request starting with the same n tokens resumes there
// instead of prefilling them.
//
// Memory. The state copies count against a RAM budget (--snapshot-ram) with LRU eviction. The KV
// pages stay in the paged cache, shared copy-on-write with the sequences that made or restored
// them, so a snapshot costs at most one extra page (the partial last page its owner copies when
// it writes on); pages pinned only by snapshots are given back (LRU first) whenever admission or
// a growing sequence needs them (EvictForPages), so snapshots never take memory that serving
// needs. A page held by a snapshot is never written (writers copy shared pages first), which is
// what lets the Redis tier serialize one from another thread.
//
// Threading: Capture, Restore, FindLongest, EvictForPages and ReleaseUnreferenced run on the
// engine thread (they touch the KV cache's reference counts). KeyPrefixes, Contains and stats
// may be called from any thread. An evicted snapshot that another thread still holds (a Redis
// write in progress) keeps its pages until ReleaseUnreferenced finds it unreferenced.
//
//   SnapshotCache cache(kv, slots, domain, /*ram_budget_bytes=*/4ull << 30);
//   ASSIGN_OR_RETURN(auto snap, cache.Capture(seq, tokens, key));    // after a prefill chunk
//   if (auto hit = cache.FindLongest(keys, positions, prompt.size() - 1)) cache.Restore(*hit, seq);
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/snapshot_key.h"
#include "worker/cache/paged_kv_cache.h"
#include "worker/cache/recurrent_state_slots.h"
#include "worker/engine/sequence_state.h"

namespace deltaserve::worker {

// One snapshot held in RAM. Immutable once made; shared by the cache and, while it is being
// written to Redis, the writer.
class LocalSnapshot {
 public:
  const common::SnapshotKey& key() const { return key_; }
  int64_t n_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  // The prefix: token ids [0, n_tokens).
  absl::Span<const int32_t> tokens() const { return tokens_; }
  // Host copy of the recurrent state, RecurrentStateLayout::bytes(): [layer][conv | delta] f32.
  absl::Span<const uint8_t> state() const { return {state_.get(), state_bytes_}; }
  // KV pages holding positions [0, n_tokens), ceil(n_tokens / page_tokens) of them.
  absl::Span<const int32_t> pages() const { return pages_; }
  // RAM charged to the budget: the state copy and the token ids.
  uint64_t ram_bytes() const { return state_bytes_ + tokens_.size() * sizeof(int32_t); }

 private:
  friend class SnapshotCache;
  common::SnapshotKey key_;
  std::vector<int32_t> tokens_;
  std::unique_ptr<uint8_t[]> state_;
  uint64_t state_bytes_ = 0;
  std::vector<int32_t> pages_;
};

// A snapshot that came from outside the process (the Redis tier), decoded and verified: the
// spans stay valid while `owner` lives.
struct SnapshotImage {
  common::SnapshotKey key;
  std::vector<int32_t> tokens;        // the prefix, n_tokens ids
  absl::Span<const uint8_t> state;    // RecurrentStateLayout::bytes(): [layer][conv | delta] f32
  // ceil(n_tokens / page_tokens) pages per attention layer: for each layer, for each page, the
  // K page (k_page_bytes) then the V page (v_page_bytes).
  absl::Span<const uint8_t> kv;
  std::shared_ptr<const void> owner;
};

// Counters of the RAM tier (monotonic unless said otherwise).
struct SnapshotCacheStats {
  int64_t entries = 0;          // now
  uint64_t ram_bytes = 0;       // now: state copies + token ids
  uint64_t ram_budget = 0;      // --snapshot-ram
  int64_t pinned_pages = 0;     // now: distinct pages referenced by snapshots
  int64_t captures = 0;         // snapshots taken
  double capture_us = 0;        // total time taking them, microseconds
  int64_t capture_skipped = 0;  // not taken: larger than the whole budget, or a copy failed
  int64_t restores = 0;         // sequences resumed from a RAM snapshot
  int64_t image_restores = 0;   // sequences resumed from a snapshot of another tier (Redis)
  double restore_us = 0;        // total time restoring, microseconds
  int64_t evictions = 0;        // snapshots dropped (budget or pages needed)
  int64_t evictions_for_pages = 0;  // of which: pages needed by serving
};

// See the file comment.
class SnapshotCache {
 public:
  // `kv` and `slots` are the serving caches the snapshots come from and go back to.
  // ram_budget_bytes 0: every call is a no-op (snapshots off).
  SnapshotCache(std::shared_ptr<PagedKvCache> kv, std::shared_ptr<RecurrentStateSlots> slots,
                const common::SnapshotDomain& domain, uint64_t ram_budget_bytes);
  ~SnapshotCache();
  SnapshotCache(const SnapshotCache&) = delete;
  SnapshotCache& operator=(const SnapshotCache&) = delete;

  bool enabled() const { return budget_ > 0; }
  const common::SnapshotDomain& domain() const { return domain_; }
  // The key chain's root for this cache's domain.
  const common::SnapshotKey& root() const { return root_; }

  // Snapshots `seq` (a RecurrentSlot state and PagedSequenceKv pages from this cache's pools)
  // after `tokens` (exactly its n_past tokens) under `key`. An existing entry for `key` is
  // reused (and moved to the front). Evicts LRU entries to stay within the budget; returns
  // nullptr (not an error) when the snapshot alone exceeds it or snapshots are off.
  absl::StatusOr<std::shared_ptr<const LocalSnapshot>> Capture(const SequenceState& seq,
                                                               absl::Span<const int32_t> tokens,
                                                               const common::SnapshotKey& key);
  // The same at a position inside the sequence's last forward pass: `tokens` (n <= n_past) with
  // the recurrent state a StateTap (qwen35.h) copied after them (RecurrentStateLayout::bytes(),
  // kept as the snapshot's state copy) and the pages holding [0, n).
  absl::StatusOr<std::shared_ptr<const LocalSnapshot>> CaptureTapped(
      const SequenceState& seq, absl::Span<const int32_t> tokens, const common::SnapshotKey& key,
      std::unique_ptr<uint8_t[]> tapped_state);

  // The entry for the longest of `keys` (keys[i] is the key of positions[i], ascending) whose
  // position is at most `max_position` and whose tokens equal `prompt`'s first n; nullptr when
  // none. The hit moves to the front of the LRU order.
  std::shared_ptr<const LocalSnapshot> FindLongest(absl::Span<const common::SnapshotKey> keys,
                                                   absl::Span<const int64_t> positions,
                                                   int64_t max_position,
                                                   absl::Span<const int32_t> prompt);

  // Makes a fresh `seq` (n_past 0, no pages) continue from `snap`: shares its pages
  // (copy-on-write), copies its state into seq's slot, sets n_past.
  absl::Status Restore(const LocalSnapshot& snap, SequenceState& seq);

  // Makes a fresh `seq` continue from `image`: allocates its pages (evicting RAM snapshots when
  // the pool has too few free), writes the KV and the state, sets n_past, and keeps the result as
  // a RAM snapshot too (when the budget allows) so the conversation's next turn hits locally.
  // InvalidArgument when the image's sizes do not fit this cache's layout; ResourceExhausted
  // when the pool cannot hold it. On failure `seq` is left fresh.
  absl::Status RestoreImage(const SnapshotImage& image, SequenceState& seq);

  // The KV of `snap` in SnapshotImage::kv's layout ([layer][page][K page | V page]), copied out
  // of the pool through the backend (CopyToHost). Its pages are never written while `snap` is
  // held, so on host memory (the CPU backend) any thread may call it; on device memory only the
  // engine thread, which alone drives the backend.
  absl::StatusOr<std::vector<uint8_t>> CopyKv(const LocalSnapshot& snap) const;

  // Drops least recently used snapshots until the KV cache has `free_pages` free pages or no
  // snapshot is left that could give any back. Returns the pages freed.
  int64_t EvictForPages(int64_t free_pages);
  // Drops the least recently used snapshot; false when none is left. A sequence that cannot get
  // a page calls it until it can: dropping a snapshot frees its pages or unshares one the
  // sequence would have to copy.
  bool EvictOne();
  // Pages referenced by snapshots and by nothing else: what EvictForPages could give back.
  int64_t EvictablePages() const;
  // Gives back the pages of evicted snapshots nobody else holds any longer.
  void ReleaseUnreferenced();

  // The first 8 bytes of the keys held, most recently used first, at most `max` (any thread).
  std::vector<uint64_t> KeyPrefixes(size_t max) const;
  bool Contains(const common::SnapshotKey& key) const;
  SnapshotCacheStats stats() const;

 private:
  using Entry = std::shared_ptr<LocalSnapshot>;
  // Capture and CaptureTapped: `state` is the state copy, or null to copy seq's slot.
  absl::StatusOr<std::shared_ptr<const LocalSnapshot>> CaptureWith(
      const SequenceState& seq, absl::Span<const int32_t> tokens, const common::SnapshotKey& key,
      std::unique_ptr<uint8_t[]> state);
  // Removes the least recently used entry (mu_ held). False when there is none.
  bool EvictOneLocked();
  void DropPagesLocked(const LocalSnapshot& snap);
  bool FitBudgetLocked(uint64_t incoming);
  std::shared_ptr<const LocalSnapshot> AddLocked(Entry entry);

  std::shared_ptr<PagedKvCache> kv_;
  std::shared_ptr<RecurrentStateSlots> slots_;
  common::SnapshotDomain domain_;
  common::SnapshotKey root_;
  uint64_t budget_;

  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recently used
  absl::flat_hash_map<common::SnapshotKey, std::list<Entry>::iterator> index_;
  std::vector<Entry> evicted_in_use_;  // evicted, still held elsewhere: pages not yet released
  absl::flat_hash_map<int32_t, int32_t> pinned_;  // page -> snapshots referencing it
  SnapshotCacheStats stats_;
};

}  // namespace deltaserve::worker
