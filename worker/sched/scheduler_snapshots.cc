// Session snapshots in the scheduler (scheduler.h, docs/snapshots.md): what to restore at
// admission, capturing at snapshot positions, and the end-of-output snapshot.
#include "worker/sched/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/sched/internal/scheduler_sequence.h"

namespace deltaserve::worker {

bool Scheduler::BeginClosing(Sequence& seq) {
  if (snapshots_ == nullptr || seq.turn_end.empty() || seq.state == nullptr) return false;
  // Only when the state holds exactly tokens[0, n_past) with the last sampled token unfed (not
  // after a speculative step that ended mid-way).
  const int64_t n_past = seq.n_past();
  if (n_past != static_cast<int64_t>(seq.tokens.size()) - 1) return false;
  std::vector<int32_t> tail = {seq.tokens.back()};
  const size_t skip = seq.tokens.back() == seq.turn_end.front() ? 1 : 0;
  tail.insert(tail.end(), seq.turn_end.begin() + skip, seq.turn_end.end());
  if (n_past + static_cast<int64_t>(tail.size()) > options_.max_context) return false;
  seq.tokens.insert(seq.tokens.end(), tail.begin() + 1, tail.end());
  seq.feed = std::move(tail);
  seq.closing = true;
  return true;
}

Scheduler::RestorePoint Scheduler::ChooseRestore(Sequence& seq) {
  RestorePoint point;
  // At least the last token is computed: its logits give the first new token.
  const int64_t max_pos = static_cast<int64_t>(seq.tokens.size()) - 1;
  std::shared_ptr<const LocalSnapshot> best =
      snapshots_->FindLongest(seq.lookup_keys, seq.lookup_positions, max_pos, seq.tokens);
  // After a preemption the sequence's own latest snapshot may be the longest (its tokens are a
  // prefix of seq.tokens by construction; captured is in position order).
  for (auto it = seq.captured.rbegin(); it != seq.captured.rend(); ++it) {
    std::shared_ptr<const LocalSnapshot> own = it->lock();
    if (own == nullptr || own->n_tokens() > max_pos) continue;
    if (best == nullptr || own->n_tokens() > best->n_tokens()) best = std::move(own);
    break;
  }
  const SnapshotImage* remote = seq.remote.get();
  if (remote != nullptr) {
    const int64_t n = static_cast<int64_t>(remote->tokens.size());
    if (n > max_pos || (best != nullptr && n <= best->n_tokens()) ||
        !std::equal(remote->tokens.begin(), remote->tokens.end(), seq.tokens.begin())) {
      remote = nullptr;
    }
  }
  point.local = std::move(best);
  point.remote = remote;
  return point;
}

int64_t Scheduler::SharedPages(const RestorePoint& point) const {
  // Every page of a RAM snapshot is shared. Its partial last page is copied on the first write
  // when the snapshot still holds it; a cache too full for that copy drops the snapshot instead
  // (RunBatch), so the sequence needs no page for it.
  const int64_t pt = cache_->page_tokens();
  return point.remote == nullptr && point.local != nullptr
             ? (point.local->n_tokens() + pt - 1) / pt
             : 0;
}

void Scheduler::RestoreAtAdmission(Sequence& seq, const RestorePoint& point,
                                   bool first_admission) {
  const SnapshotImage* remote = point.remote;
  const std::shared_ptr<const LocalSnapshot>& best = point.local;
  SnapshotSource source = SnapshotSource::kNone;
  absl::Status st;
  if (remote != nullptr) {
    st = snapshots_->RestoreImage(*remote, *seq.state);
    if (st.ok()) source = SnapshotSource::kRemote;
  }
  if (source == SnapshotSource::kNone && best != nullptr) {
    st = snapshots_->Restore(*best, *seq.state);
    if (st.ok()) source = SnapshotSource::kRam;
  }
  if (!st.ok()) {
    // Whatever was half restored is undone: the sequence runs cold.
    static_cast<PagedSequenceKv&>(*seq.state->kv).Truncate(0);
    seq.state->n_past = 0;
    RecurrentSlot& slot = seq.slot();
    if (!slot.pool().Zero(slot.index()).ok()) source = SnapshotSource::kNone;
  }
  seq.remote.reset();  // its memory is not needed any longer
  if (!first_admission) return;
  const int64_t reused = source == SnapshotSource::kNone ? 0 : seq.state->n_past;
  seq.result.cached_prompt_tokens = std::min(reused, seq.prompt_len);
  seq.result.cached_from = source;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.snapshot_lookups;
  if (!st.ok()) ++stats_.snapshot_restore_failures;
  switch (source) {
    case SnapshotSource::kRam:
      ++stats_.snapshot_hits_ram;
      break;
    case SnapshotSource::kRemote:
      ++stats_.snapshot_hits_remote;
      break;
    case SnapshotSource::kNone:
      ++stats_.snapshot_misses;
      break;
  }
  stats_.snapshot_tokens_reused += seq.result.cached_prompt_tokens;
}

bool Scheduler::WantsCapture(const Sequence& seq, size_t index) const {
  const int64_t n = seq.capture_at[index];
  const int max_taken = options_.max_snapshots_per_sequence;
  if (n <= seq.prompt_len) {
    // Of the prompt's positions only the last max_taken are worth a snapshot: a later request
    // resumes from the deepest one it shares.
    int64_t later = 0;
    for (size_t i = index + 1; i < seq.capture_at.size(); ++i) {
      if (seq.capture_at[i] <= seq.prompt_len) ++later;
    }
    return later < max_taken;
  }
  return static_cast<int>(seq.captured.size()) < 2 * max_taken;
}

int64_t Scheduler::PlanChunk(Sequence& seq, int64_t take, int64_t& next_capture,
                             uint64_t& step_tap_bytes) {
  seq.taps.clear();
  seq.tap_states.clear();
  const int64_t n_past = seq.n_past();
  while (seq.next_capture < seq.capture_at.size() && seq.capture_at[seq.next_capture] <= n_past) {
    ++seq.next_capture;
  }
  // A snapshot position inside the chunk is tapped (the engine copies the state there and the
  // chunk goes on) while taps are on, the sequence has fewer than a snapshot's worth of them and
  // the step's tap buffers stay within max_step_tap_bytes (a large model's state is tens of MB, and
  // several prompts may start in one step); otherwise the chunk ends there, and the snapshot is
  // taken from the slot after the pass.
  const uint64_t state_bytes = slots_->layout().bytes();
  const bool taps = options_.capture_inside_chunks && state_bytes > 0 &&
                    snapshots_ != nullptr && snapshots_->enabled();
  size_t i = seq.next_capture;
  for (; i < seq.capture_at.size() && seq.capture_at[i] < n_past + take; ++i) {
    const int64_t p = seq.capture_at[i];
    if (taps && !WantsCapture(seq, i)) continue;  // no snapshot due there: nothing to stop for
    if (!taps || static_cast<int>(seq.taps.size()) >= options_.max_snapshots_per_sequence ||
        (step_tap_bytes > 0 && step_tap_bytes + state_bytes > options_.max_step_tap_bytes)) {
      take = p - n_past;
      break;
    }
    step_tap_bytes += state_bytes;
    seq.tap_states.push_back(std::make_unique_for_overwrite<uint8_t[]>(state_bytes));
    seq.taps.push_back({p - n_past, seq.tap_states.back().get()});
  }
  next_capture = i < seq.capture_at.size() ? seq.capture_at[i]
                                           : std::numeric_limits<int64_t>::max();
  return take;
}

void Scheduler::CaptureTaps(Sequence& seq, int64_t fed_before) {
  for (size_t i = 0; i < seq.taps.size(); ++i) {
    CaptureAt(seq, fed_before + seq.taps[i].after, std::move(seq.tap_states[i]));
  }
  seq.taps.clear();
  seq.tap_states.clear();
}

void Scheduler::CaptureIfDue(Sequence& seq) {
  const int64_t n = seq.n_past();
  while (seq.next_capture < seq.capture_at.size() && seq.capture_at[seq.next_capture] < n) {
    ++seq.next_capture;
  }
  const bool at_position =
      seq.next_capture < seq.capture_at.size() && seq.capture_at[seq.next_capture] == n;
  if (!seq.closing && !at_position) return;
  if (at_position) ++seq.next_capture;
  if (!seq.closing && !WantsCapture(seq, seq.next_capture - 1)) return;
  CaptureAt(seq, n, nullptr);
}

void Scheduler::CaptureAt(Sequence& seq, int64_t n, std::unique_ptr<uint8_t[]> tapped_state) {
  const absl::Span<const int32_t> prefix = absl::Span<const int32_t>(seq.tokens).first(n);
  common::SnapshotKey key;
  auto it = std::lower_bound(seq.lookup_positions.begin(), seq.lookup_positions.end(), n);
  if (it != seq.lookup_positions.end() && *it == n) {
    key = seq.lookup_keys[it - seq.lookup_positions.begin()];
  } else {
    const int64_t at[] = {n};
    absl::StatusOr<std::vector<common::SnapshotKey>> keys =
        common::SnapshotKeysAt(snapshots_->root(), prefix, at);
    if (!keys.ok()) return;
    key = keys->front();
  }
  const bool tapped = tapped_state != nullptr;
  absl::StatusOr<std::shared_ptr<const LocalSnapshot>> snap =
      tapped ? snapshots_->CaptureTapped(*seq.state, prefix, key, std::move(tapped_state))
             : snapshots_->Capture(*seq.state, prefix, key);
  if (!snap.ok() || *snap == nullptr) return;
  seq.captured.push_back(std::move(*snap));
  if (tapped) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.snapshot_tapped_captures;
  }
}

}  // namespace deltaserve::worker
