#include "worker/sched/scheduler.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace deltaserve::worker {

using Clock = std::chrono::steady_clock;

namespace {

double Ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

std::string_view EndReasonName(EndReason reason) {
  switch (reason) {
    case EndReason::kStop:
      return "stop";
    case EndReason::kLength:
      return "length";
    case EndReason::kCancelled:
      return "cancelled";
    case EndReason::kError:
      return "error";
  }
  return "error";
}

struct Scheduler::Sequence {
  Sequence(Sampler s, StopCondition st) : sampler(std::move(s)), stop(std::move(st)) {}

  uint64_t handle = 0;
  std::string id;
  std::shared_ptr<GenerationSink> sink;
  bool want_logprobs = false;
  std::vector<int32_t> tokens;  // prompt, then every generated token (the stop token included)
  int64_t prompt_len = 0;
  Sampler sampler;
  StopCondition stop;
  std::unique_ptr<SequenceState> state;     // null while waiting
  std::unique_ptr<RecurrentSlot> snapshot;  // during a speculative step
  Clock::time_point submitted, admitted, first_token;
  bool was_admitted = false, has_token = false, finished = false;
  GenerationResult result;
  // This step's input: tokens[n_past ..] followed by `draft`.
  std::vector<int32_t> feed;
  std::vector<int32_t> draft;
  int64_t pending = 0;  // of feed, the tokens from `tokens`

  // Session snapshots. Lookup candidates: the prompt's snapshot positions below its length
  // with their keys; capture_at: positions still to snapshot (ascending), next_capture indexes
  // it; captured: what this sequence took, for restoring after preemption and for publishing.
  std::vector<int64_t> lookup_positions;
  std::vector<common::SnapshotKey> lookup_keys;
  std::vector<int64_t> capture_at;
  size_t next_capture = 0;
  std::vector<int32_t> turn_end;
  std::shared_ptr<const SnapshotImage> remote;
  // Weak: a sequence must not keep its own snapshots from giving their pages back (its next
  // write into a page a snapshot shares needs a copy, which a full cache can only make by
  // dropping the snapshot).
  std::vector<std::weak_ptr<const LocalSnapshot>> captured;
  // Finished for the client; feeding the turn-end tokens (feed) for the end-of-output snapshot.
  bool closing = false;
  // Reasoning budget (GenerationRequest): -1 none; in_reasoning while inside the block.
  int32_t reasoning_budget = -1;
  int32_t reasoning_start = -1;
  std::vector<int32_t> reasoning_end;
  bool in_reasoning = false;
  int32_t reasoning_used = 0;
  // Output constraint (GenerationRequest.grammar): what Submit took, and the constraint made
  // from it at the first admission; null when unconstrained.
  std::shared_ptr<common::grammar::CompiledGrammar> grammar;
  std::shared_ptr<const TokenTrie> trie;
  SequenceConstraintOptions constraint_options;
  std::unique_ptr<SequenceConstraint> constraint;

  int64_t n_past() const { return state == nullptr ? 0 : state->n_past; }
  RecurrentSlot& slot() const { return static_cast<RecurrentSlot&>(*state->state); }
};

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    Qwen35Model& model, std::shared_ptr<PagedKvCache> cache,
    std::shared_ptr<RecurrentStateSlots> slots, const SchedulerOptions& options,
    std::vector<int32_t> eos_token_ids, int32_t n_valid_tokens,
    std::shared_ptr<SnapshotCache> snapshots) {
  if (options.max_sequences <= 0 || options.step_tokens <= 0 || options.max_context <= 0 ||
      options.max_waiting < 0) {
    return absl::InvalidArgumentError("scheduler options must be positive");
  }
  const int needed_slots = options.max_sequences * (options.speculation ? 2 : 1);
  if (slots->total_slots() < needed_slots) {
    return absl::InvalidArgumentError(absl::StrCat("the scheduler needs ", needed_slots,
                                                   " recurrent state slots, got ",
                                                   slots->total_slots()));
  }
  std::unique_ptr<Scheduler> s(new Scheduler());
  s->model_ = &model;
  s->cache_ = std::move(cache);
  s->slots_ = std::move(slots);
  s->options_ = options;
  s->options_.step_tokens =
      std::max<int64_t>(options.step_tokens, options.max_sequences * (1 + options.ngram.draft_max));
  s->eos_ = std::move(eos_token_ids);
  s->n_valid_ = n_valid_tokens;
  s->stats_.free_pages = s->cache_->free_pages();
  s->stats_.total_pages = s->cache_->total_pages();
  s->stats_.free_slots = s->slots_->free_slots();
  if (snapshots != nullptr && snapshots->enabled()) s->snapshots_ = std::move(snapshots);
  return s;
}

Scheduler::~Scheduler() { Stop(/*drain=*/false); }

void Scheduler::StartConstraint(Sequence& seq) {
  if (seq.grammar == nullptr || seq.constraint != nullptr) return;
  if (masks_ == nullptr) masks_ = std::make_unique<TokenMaskCache>(seq.trie, mask_budget_bytes_);
  seq.constraint = std::make_unique<SequenceConstraint>(std::move(seq.grammar),
                                                        std::move(seq.constraint_options));
  seq.grammar.reset();
  seq.trie.reset();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.constrained_sequences;
}

absl::StatusOr<uint64_t> Scheduler::Submit(GenerationRequest request,
                                           std::shared_ptr<GenerationSink> sink) {
  if (request.prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= model_->n_vocab()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt token id ", id, " outside the vocabulary (", model_->n_vocab(), ")"));
    }
  }
  const int64_t max_new = request.sampling.max_tokens.value_or(1);
  if (static_cast<int64_t>(request.prompt.size()) + max_new > options_.max_context) {
    return absl::OutOfRangeError(
        absl::StrCat("prompt (", request.prompt.size(), " tokens) + max_tokens (", max_new,
                     ") exceeds the context of ", options_.max_context, " tokens"));
  }
  absl::StatusOr<Sampler> sampler = Sampler::Create(request.sampling, n_valid_);
  if (!sampler.ok()) return sampler.status();
  sampler->AcceptPrompt(request.prompt);
  auto seq = std::make_unique<Sequence>(std::move(*sampler), StopCondition(request.sampling, eos_));
  seq->id = std::move(request.id);
  seq->sink = std::move(sink);
  seq->want_logprobs = request.sampling.top_logprobs > 0 || request.logprobs;
  seq->prompt_len = static_cast<int64_t>(request.prompt.size());
  if (snapshots_ != nullptr) {
    // Hashing the prompt (SHA-256, ~0.1 ms for 8K tokens) happens here, on the caller's thread.
    const std::vector<int64_t> positions = common::SnapshotPositions(
        request.message_boundaries, options_.max_context, options_.snapshot_interval);
    for (int64_t p : positions) {
      if (p < seq->prompt_len) seq->lookup_positions.push_back(p);
    }
    if (!seq->lookup_positions.empty()) {
      absl::StatusOr<std::vector<common::SnapshotKey>> keys =
          common::SnapshotKeysAt(snapshots_->root(), request.prompt, seq->lookup_positions);
      if (keys.ok()) {
        seq->lookup_keys = std::move(*keys);
      } else {
        seq->lookup_positions.clear();
      }
    }
    // Of the prompt's positions only the last max_snapshots_per_sequence are snapshotted (the
    // deepest a later request can share); the others need not split prefill chunks either.
    int64_t in_prompt = 0;
    for (int64_t p : positions) in_prompt += p <= seq->prompt_len ? 1 : 0;
    int64_t skip = std::max<int64_t>(0, in_prompt - options_.max_snapshots_per_sequence);
    for (int64_t p : positions) {
      if (p <= seq->prompt_len && skip > 0) {
        --skip;
        continue;
      }
      seq->capture_at.push_back(p);
    }
    seq->turn_end = std::move(request.turn_end_tokens);
    seq->remote = std::move(request.remote_snapshot);
  }
  if (request.grammar != nullptr) {
    if (tokenizer_ == nullptr || request.trie == nullptr) {
      return absl::FailedPreconditionError("constrained decoding is not enabled on this model");
    }
    SequenceConstraintOptions o;
    o.n_vocab = request.trie->n_vocab();
    o.waiting_for_reasoning = request.grammar_after_reasoning && request.reasoning_open &&
                              !request.reasoning_end_tokens.empty();
    o.reasoning_may_open = request.grammar_after_reasoning && !request.reasoning_open &&
                           request.grammar_reasoning_may_open;
    o.reasoning_start = request.reasoning_start_token;
    o.reasoning_end =
        request.reasoning_end_tokens.empty() ? -1 : request.reasoning_end_tokens.front();
    o.end_tokens = request.sampling.stop_token_ids;
    if (!request.sampling.ignore_eos)
      o.end_tokens.insert(o.end_tokens.end(), eos_.begin(), eos_.end());
    seq->grammar = std::move(request.grammar);
    seq->trie = std::move(request.trie);
    seq->constraint_options = std::move(o);
  }
  if (request.reasoning_budget >= 0 && !request.reasoning_end_tokens.empty()) {
    for (int32_t id : request.reasoning_end_tokens) {
      if (id < 0 || id >= model_->n_vocab()) {
        return absl::InvalidArgumentError(
            absl::StrCat("reasoning end token id ", id, " outside the vocabulary"));
      }
    }
    seq->reasoning_budget = request.reasoning_budget;
    seq->reasoning_start = request.reasoning_start_token;
    seq->reasoning_end = std::move(request.reasoning_end_tokens);
    seq->in_reasoning = request.reasoning_open;
  }
  seq->tokens = std::move(request.prompt);
  seq->submitted = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return absl::UnavailableError("the scheduler is stopping");
  if (stats_.waiting + static_cast<int64_t>(inbox_.size()) >= options_.max_waiting) {
    return absl::ResourceExhaustedError(
        absl::StrCat("queue full: ", options_.max_waiting, " requests are waiting"));
  }
  seq->handle = next_handle_++;
  const uint64_t handle = seq->handle;
  inbox_.push_back(std::move(seq));
  cv_.notify_all();
  return handle;
}

void Scheduler::Cancel(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(handle);
  cv_.notify_all();
}

void Scheduler::TakeInbox() {
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!inbox_.empty()) {
      waiting_.push_back(std::move(inbox_.front()));
      inbox_.pop_front();
    }
    cancels.swap(cancels_);
  }
  for (uint64_t h : cancels) {
    for (auto& s : running_) {
      if (s->handle == h && !s->finished) Finish(*s, EndReason::kCancelled);
    }
    for (auto& s : waiting_) {
      if (s->handle == h && !s->finished) Finish(*s, EndReason::kCancelled);
    }
  }
}

void Scheduler::Release(Sequence& seq) {
  seq.snapshot.reset();
  seq.state.reset();  // pages and slot back to their pools now
  seq.closing = false;
  if (publisher_ && !seq.captured.empty()) {
    std::vector<std::shared_ptr<const LocalSnapshot>> alive;
    for (const auto& w : seq.captured) {
      if (auto snap = w.lock()) alive.push_back(std::move(snap));
    }
    if (!alive.empty()) publisher_(std::move(alive), seq.prompt_len);
  }
  seq.captured.clear();
}

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

void Scheduler::Finish(Sequence& seq, EndReason reason, absl::Status error) {
  const Clock::time_point now = Clock::now();
  GenerationResult& r = seq.result;
  r.reason = reason;
  r.error = std::move(error);
  r.prompt_tokens = seq.prompt_len;
  r.completion_tokens = seq.stop.n_generated();
  if (seq.was_admitted) {
    r.queue_ms = Ms(seq.submitted, seq.admitted);
    const Clock::time_point first = seq.has_token ? seq.first_token : now;
    r.prefill_ms = Ms(seq.admitted, first);
    r.decode_ms = seq.has_token ? Ms(seq.first_token, now) : 0.0;
  } else {
    r.queue_ms = Ms(seq.submitted, now);
  }
  r.first_token_ms = seq.has_token ? Ms(seq.submitted, seq.first_token) : 0.0;
  r.snapshots_taken = static_cast<int>(seq.captured.size());
  seq.snapshot.reset();
  const bool ok_end = reason == EndReason::kStop || reason == EndReason::kLength;
  if (!ok_end || !BeginClosing(seq)) Release(seq);
  seq.finished = true;
  if (seq.sink != nullptr) seq.sink->OnFinish(r);
  seq.sink.reset();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.completed;
}

void Scheduler::Preempt(Sequence& seq) {
  seq.snapshot.reset();
  seq.state.reset();
  ++seq.result.preemptions;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.preemptions;
}

void Scheduler::Admit() {
  const int64_t pt = cache_->page_tokens();
  auto pages_for = [pt](int64_t tokens) { return (tokens + pt - 1) / pt; };
  // Pages the prompts already admitted still need to finish their prefill.
  int64_t reserved = 0;
  for (const auto& s : running_) {
    if (s->finished || s->state == nullptr) continue;
    const int64_t need = pages_for(static_cast<int64_t>(s->tokens.size()) + 1);
    reserved += std::max<int64_t>(0, need - static_cast<int64_t>(s->state->kv->pages().size()));
  }
  while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_sequences) {
    Sequence& seq = *waiting_.front();
    if (seq.finished) {
      waiting_.pop_front();
      continue;
    }
    const int64_t need = pages_for(static_cast<int64_t>(seq.tokens.size()) + 1);
    if (need > cache_->total_pages()) {
      Finish(seq, EndReason::kError,
             absl::ResourceExhaustedError(absl::StrCat("the request needs ", need, " KV pages of ",
                                                       pt, " tokens; the cache has ",
                                                       cache_->total_pages())));
      waiting_.pop_front();
      continue;
    }
    // The prefix to restore is chosen first: the pages it shares are not needed anew (and the
    // reference held here keeps them while other snapshots give theirs back).
    RestorePoint point;
    if (snapshots_ != nullptr) point = ChooseRestore(seq);
    const int64_t need_new = need - SharedPages(point);
    if (cache_->free_pages() - reserved < need_new && snapshots_ != nullptr) {
      snapshots_->EvictForPages(reserved + need_new);  // RAM snapshots give pages back first
    }
    if (cache_->free_pages() - reserved < need_new) break;  // FIFO: the head waits for memory
    absl::StatusOr<std::unique_ptr<SequenceState>> state =
        model_->NewSequence(cache_, slots_, options_.max_context);
    if (!state.ok()) break;  // no free slot: wait
    seq.state = std::move(*state);
    StartConstraint(seq);
    const bool first_admission = !seq.was_admitted;
    if (!seq.was_admitted) {
      seq.was_admitted = true;
      seq.admitted = Clock::now();
    }
    if (snapshots_ != nullptr) RestoreAtAdmission(seq, point, first_admission);
    reserved += need_new;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
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

void Scheduler::CaptureIfDue(Sequence& seq) {
  const int64_t n = seq.n_past();
  while (seq.next_capture < seq.capture_at.size() && seq.capture_at[seq.next_capture] < n) {
    ++seq.next_capture;
  }
  const bool at_position =
      seq.next_capture < seq.capture_at.size() && seq.capture_at[seq.next_capture] == n;
  if (!seq.closing && !at_position) return;
  if (at_position) ++seq.next_capture;
  const int max_taken = options_.max_snapshots_per_sequence;
  if (!seq.closing) {
    if (n <= seq.prompt_len) {
      // Of the prompt's positions only the last max_taken are worth a snapshot: a later request
      // resumes from the deepest one it shares.
      int64_t later = 0;
      for (size_t i = seq.next_capture; i < seq.capture_at.size(); ++i) {
        if (seq.capture_at[i] <= seq.prompt_len) ++later;
      }
      if (later >= max_taken) return;
    } else if (static_cast<int>(seq.captured.size()) >= 2 * max_taken) {
      return;
    }
  }
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
  absl::StatusOr<std::shared_ptr<const LocalSnapshot>> snap =
      snapshots_->Capture(*seq.state, prefix, key);
  if (snap.ok() && *snap != nullptr) seq.captured.push_back(std::move(*snap));
}

bool Scheduler::ReasoningBudgetSpent(Sequence& seq, int32_t token) {
  if (!seq.in_reasoning) {
    if (token == seq.reasoning_start) {
      seq.in_reasoning = true;
      seq.reasoning_used = 0;
    }
    return false;
  }
  if (token == seq.reasoning_end.front()) {
    seq.in_reasoning = false;
    return false;
  }
  if (seq.reasoning_used >= seq.reasoning_budget) {
    seq.in_reasoning = false;
    return true;
  }
  ++seq.reasoning_used;
  return false;
}

void Scheduler::Consume(Sequence& seq, absl::Span<const float> logits, int64_t n_rows,
                        int64_t fed_before) {
  const int64_t n_vocab = model_->n_vocab();
  const int64_t k = static_cast<int64_t>(seq.draft.size());
  // Rows [first, n_rows) belong to the last real token and the drafts after it.
  const int64_t first = n_rows - (k + 1);
  std::vector<GeneratedToken> out;
  int64_t accepted = 0;
  EndReason end = EndReason::kStop;
  absl::Status end_error;
  bool ended = false;
  for (int64_t i = 0; i <= k && !ended; ++i) {
    TokenLogprobs lp;
    const TokenMask* allowed = nullptr;
    if (seq.constraint != nullptr) {
      allowed = &seq.constraint->Allowed(*masks_);
      if (allowed->Count() == 0) {
        ended = true;
        end = EndReason::kError;
        end_error = absl::ResourceExhaustedError(
            "the output constraint allows no token here (its grammar reached a size limit)");
        break;
      }
    }
    const int32_t sampled = seq.sampler.Sample(logits.subspan((first + i) * n_vocab, n_vocab),
                                               seq.want_logprobs ? &lp : nullptr, allowed);
    // A spent reasoning budget: the closing tokens go out instead of the sampled one.
    const bool forced = seq.reasoning_budget >= 0 && ReasoningBudgetSpent(seq, sampled);
    const absl::Span<const int32_t> emit =
        forced ? absl::Span<const int32_t>(seq.reasoning_end) : absl::MakeConstSpan(&sampled, 1);
    for (int32_t token : emit) {
      GeneratedToken g;
      g.token = token;
      if (seq.want_logprobs) g.logprobs = forced ? TokenLogprobs{} : std::move(lp);
      seq.sampler.Accept(g.token);
      seq.tokens.push_back(g.token);
      if (!seq.has_token) {
        seq.has_token = true;
        seq.first_token = Clock::now();
      }
      const FinishReason why = seq.stop.Check(g.token);
      if (why == FinishReason::kStop) {
        ended = true;
        end = EndReason::kStop;
        break;
      }
      out.push_back(std::move(g));
      if (seq.constraint != nullptr) {
        switch (seq.constraint->Accept(token, tokenizer_->Piece(token), forced)) {
          case SequenceConstraint::Step::kContinue:
            break;
          case SequenceConstraint::Step::kComplete:
            // Complete and nothing can follow: the output is whole ("stop", even on the
            // max_tokens-th token).
            ended = true;
            end = EndReason::kStop;
            break;
          case SequenceConstraint::Step::kRejected:
            ended = true;
            end = EndReason::kError;
            end_error = absl::InternalError(
                absl::StrCat("token ", token, " does not continue the output constraint"));
            break;
        }
        if (ended) break;
      }
      if (why == FinishReason::kLength ||
          static_cast<int64_t>(seq.tokens.size()) >= options_.max_context) {
        ended = true;
        end = EndReason::kLength;
        break;
      }
    }
    // After forced tokens the drafts no longer follow: rewound below like a rejected draft.
    if (ended || forced || i == k || out.back().token != seq.draft[i]) break;
    ++accepted;
  }
  if (k > 0) {
    seq.result.drafted_tokens += k;
    seq.result.accepted_tokens += accepted;
    std::lock_guard<std::mutex> lock(mu_);
    stats_.drafted_tokens += k;
    stats_.accepted_tokens += accepted;
  }
  if (!out.empty() && seq.sink != nullptr) seq.sink->OnTokens(out);
  if (ended) {
    if (end == EndReason::kError) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.constraint_failures;  // the only errors Consume ends a sequence with
    }
    Finish(seq, end, std::move(end_error));
    return;
  }
  if (k > 0) {
    if (accepted < k) {
      // The state consumed rejected drafts: back to before this step; the accepted tokens
      // are fed again next step (they are in seq.tokens past n_past).
      if (absl::Status s = seq.slot().CopyFrom(*seq.snapshot); !s.ok()) {
        Finish(seq, EndReason::kError, s);
        return;
      }
      seq.state->n_past = fed_before;
    } else {
      seq.state->n_past = static_cast<int64_t>(seq.tokens.size()) - 1;
    }
    seq.snapshot.reset();
  }
}

bool Scheduler::RunBatch() {
  // Decode-like sequences (few pending tokens) first, then prompt chunks, under the budget.
  int64_t budget = options_.step_tokens;
  std::vector<Sequence*> batch;
  const int64_t small = 1 + options_.ngram.draft_max;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& sp : running_) {
      Sequence& s = *sp;
      if (s.finished || s.state == nullptr || budget <= 0) continue;
      if (s.closing) continue;
      const int64_t pending = static_cast<int64_t>(s.tokens.size()) - s.n_past();
      if ((pending <= small) != (pass == 0)) continue;
      int64_t take = std::min(pending, budget);
      // Chunked prefill stops at the next snapshot position.
      while (s.next_capture < s.capture_at.size() && s.capture_at[s.next_capture] <= s.n_past()) {
        ++s.next_capture;
      }
      const int64_t next_capture = s.next_capture < s.capture_at.size()
                                       ? s.capture_at[s.next_capture]
                                       : std::numeric_limits<int64_t>::max();
      take = std::min(take, next_capture - s.n_past());
      s.pending = take;
      s.feed.assign(s.tokens.begin() + s.n_past(), s.tokens.begin() + s.n_past() + take);
      s.draft.clear();
      if (options_.speculation && take == pending &&
          next_capture > s.n_past() + take + options_.ngram.draft_max) {
        NgramDraftOptions o = options_.ngram;
        const int64_t room = options_.max_context - static_cast<int64_t>(s.tokens.size());
        o.draft_max = static_cast<int>(std::min<int64_t>({o.draft_max, room, budget - take}));
        if (o.draft_max > 0) s.draft = DraftFromHistory(s.tokens, o);
        if (!s.draft.empty() && s.constraint != nullptr) {
          // Drafts the grammar rejects could never be sampled: not worth feeding.
          s.draft.resize(s.constraint->AllowedPrefix(
              s.draft, [this](int32_t t) { return tokenizer_->Piece(t); }));
        }
        if (!s.draft.empty()) {
          absl::StatusOr<std::unique_ptr<RecurrentSlot>> snap = RecurrentSlot::Acquire(slots_);
          if (snap.ok() && (*snap)->CopyFrom(s.slot()).ok()) {
            s.snapshot = std::move(*snap);
          } else {
            s.draft.clear();  // no spare slot: no speculation this step
          }
        }
        s.feed.insert(s.feed.end(), s.draft.begin(), s.draft.end());
      }
      budget -= static_cast<int64_t>(s.feed.size());
      batch.push_back(&s);
    }
  }
  // Sequences finished for their client that feed their turn-end tokens (a token or two each).
  std::vector<Sequence*> closing;
  for (auto& sp : running_) {
    if (sp->closing && sp->state != nullptr) closing.push_back(sp.get());
  }
  if (batch.empty() && closing.empty()) return false;

  // Pages for every entry; when the cache is full, preempt the latest admitted sequence.
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence& s = *batch[i];
    if (s.state == nullptr) continue;  // preempted by an earlier entry
    for (;;) {
      absl::Status st = s.state->kv->Prepare(s.n_past(), s.n_past() + s.feed.size());
      if (st.ok()) break;
      if (!absl::IsResourceExhausted(st)) {
        Finish(s, EndReason::kError, st);
        break;
      }
      // The least recently used RAM snapshot gives its pages back (or stops sharing one this
      // sequence must otherwise copy); then try again.
      if (snapshots_ != nullptr && snapshots_->EvictOne()) continue;
      Sequence* victim = nullptr;
      for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
        if (!(*it)->finished && (*it)->state != nullptr) {
          victim = it->get();
          break;
        }
      }
      if (victim == &s) {
        bool alone = true;
        for (auto& r : running_) alone &= (r.get() == &s || r->finished || r->state == nullptr);
        if (alone) {
          Finish(s, EndReason::kError,
                 absl::ResourceExhaustedError("the KV cache cannot hold this sequence"));
        } else {
          Preempt(s);
        }
        break;
      }
      Preempt(*victim);
    }
  }
  std::vector<BatchEntry> entries;
  std::vector<Sequence*> live;
  for (Sequence* s : closing) {
    // No preemption for these: without pages the end-of-output snapshot is simply not taken.
    if (!s->state->kv->Prepare(s->n_past(), s->n_past() + s->feed.size()).ok()) {
      Release(*s);
      continue;
    }
    BatchEntry e{s->state.get(), s->feed, /*all_logits=*/false};
    e.no_logits = true;
    entries.push_back(e);
    live.push_back(s);
  }
  for (Sequence* s : batch) {
    if (s->finished || s->state == nullptr) continue;
    const bool last = s->pending == static_cast<int64_t>(s->tokens.size()) - s->n_past();
    BatchEntry e{s->state.get(), s->feed, /*all_logits=*/false};
    e.no_logits = !last;
    // The last real token and the drafts after it; the rows before are not sampled.
    e.last_logits = static_cast<int64_t>(s->draft.size()) + 1;
    entries.push_back(e);
    live.push_back(s);
  }
  if (!entries.empty()) {
    std::vector<int64_t> fed_before;
    for (Sequence* s : live) fed_before.push_back(s->n_past());
    if (absl::Status st = model_->Forward(entries, logits_); !st.ok()) {
      for (Sequence* s : live) {
        if (s->closing) {
          Release(*s);
        } else {
          Finish(*s, EndReason::kError, st);
        }
      }
    } else {
      int64_t row = 0;
      for (size_t i = 0; i < live.size(); ++i) {
        Sequence& s = *live[i];
        if (s.closing) {
          // The end-of-output snapshot, then the sequence's memory goes back.
          CaptureIfDue(s);
          Release(s);
          continue;
        }
        const BatchEntry& e = entries[i];
        const int64_t rows = e.LogitsRows();
        if (rows > 0) {
          const int64_t n_vocab = model_->n_vocab();
          Consume(s, absl::Span<const float>(logits_).subspan(row * n_vocab, rows * n_vocab),
                  rows, fed_before[i]);
        }
        row += rows;
        if (!s.finished && s.state != nullptr) CaptureIfDue(s);
      }
    }
  }
  return true;
}

bool Scheduler::Step() {
  if (snapshots_ != nullptr) snapshots_->ReleaseUnreferenced();
  TakeInbox();
  Admit();
  const bool worked = RunBatch();
  // Preempted sequences go back to the head of the queue, in admission order.
  std::vector<std::unique_ptr<Sequence>> kept;
  std::vector<std::unique_ptr<Sequence>> requeue;
  for (auto& s : running_) {
    if (s->finished && !s->closing) continue;
    (s->state == nullptr ? requeue : kept).push_back(std::move(s));
  }
  running_ = std::move(kept);
  for (auto it = requeue.rbegin(); it != requeue.rend(); ++it) waiting_.push_front(std::move(*it));
  std::erase_if(waiting_, [](const auto& s) { return s->finished; });
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.steps;
  stats_.running = static_cast<int64_t>(running_.size());
  stats_.waiting = static_cast<int64_t>(waiting_.size());
  // Pages held only by RAM snapshots are free as far as admission goes (they are given back on
  // demand), and so for the router's load picture too.
  stats_.free_pages =
      cache_->free_pages() + (snapshots_ != nullptr ? snapshots_->EvictablePages() : 0);
  stats_.total_pages = cache_->total_pages();
  stats_.free_slots = slots_->free_slots();
  if (masks_ != nullptr) {
    stats_.grammar_mask_hits = static_cast<int64_t>(masks_->hits());
    stats_.grammar_mask_misses = static_cast<int64_t>(masks_->misses());
  }
  return worked || !waiting_.empty();
}

bool Scheduler::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !inbox_.empty() || stats_.running > 0 || stats_.waiting > 0;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerStats s = stats_;
  s.waiting += static_cast<int64_t>(inbox_.size());
  return s;
}

void Scheduler::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] {
          return stop_ || !inbox_.empty() || !cancels_.empty() || stats_.running > 0 ||
                 stats_.waiting > 0;
        });
        const bool idle = inbox_.empty() && stats_.running == 0 && stats_.waiting == 0;
        if (stop_ && (!drain_ || idle)) break;
      }
      Step();
    }
    // Stopping without drain: whatever is left is cancelled.
    TakeInbox();
    for (auto& s : running_) {
      if (!s->finished) Finish(*s, EndReason::kCancelled);
    }
    for (auto& s : waiting_) {
      if (!s->finished) Finish(*s, EndReason::kCancelled);
    }
    running_.clear();
    waiting_.clear();
    std::lock_guard<std::mutex> lock(mu_);
    stats_.running = stats_.waiting = 0;
  });
}

void Scheduler::Stop(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stop_ = true;
    drain_ = drain;
    cv_.notify_all();
  }
  thread_.join();
}

}  // namespace deltaserve::worker
