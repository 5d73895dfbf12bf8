// The scheduler's queue, admission and lifecycle (scheduler.h); one engine step is in
// scheduler_batch.cc, session snapshots in scheduler_snapshots.cc, n > 1 choices in
// scheduler_fork.cc.
#include "worker/sched/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/sched/internal/scheduler_sequence.h"

namespace deltaserve::worker {

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
  std::vector<std::shared_ptr<GenerationSink>> sinks;
  sinks.push_back(std::move(sink));
  return Submit(std::move(request), std::move(sinks));
}

absl::StatusOr<uint64_t> Scheduler::Submit(GenerationRequest request,
                                           std::vector<std::shared_ptr<GenerationSink>> sinks) {
  const int64_t n = static_cast<int64_t>(sinks.size());
  if (n < 1 || n > kMaxChoices) {
    return absl::InvalidArgumentError(
        absl::StrCat("n: ", n, " choices asked; between 1 and ", kMaxChoices, " are allowed"));
  }
  if (n > options_.max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("n: ", n, " choices asked; this worker runs ",
                                                   options_.max_sequences,
                                                   " sequences at once"));
  }
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
  if (n > 1) {
    // All n choices at full length must fit the cache at once, or they could only make
    // progress by preempting one another.
    const int64_t capacity = cache_->total_pages() * cache_->page_tokens();
    const int64_t positions = static_cast<int64_t>(request.prompt.size()) + n * max_new;
    if (positions > capacity) {
      return absl::InvalidArgumentError(absl::StrCat(
          "n: ", n, " choices of up to ", max_new, " tokens after a prompt of ",
          request.prompt.size(), " tokens need ", positions,
          " KV positions; this worker's cache holds ", capacity));
    }
  }
  absl::StatusOr<Sampler> sampler = Sampler::Create(request.sampling, n_valid_);
  if (!sampler.ok()) return sampler.status();
  sampler->AcceptPrompt(request.prompt);
  auto seq = std::make_unique<Sequence>(std::move(*sampler), StopCondition(request.sampling, eos_));
  seq->id = std::move(request.id);
  seq->sink = std::move(sinks.front());
  seq->fork_sinks.assign(std::make_move_iterator(sinks.begin() + 1),
                         std::make_move_iterator(sinks.end()));
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
    if (n > 1) {
      seq->fork_grammar = request.grammar;
      seq->fork_constraint_options = o;
    }
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
  cancels_.emplace_back(handle, -1);
  cv_.notify_all();
}

void Scheduler::CancelChoice(uint64_t handle, int choice) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.emplace_back(handle, choice);
  cv_.notify_all();
}

void Scheduler::SetExpertMigration(ExpertTiers* tiers, uint64_t max_bytes_per_step) {
  std::lock_guard<std::mutex> lock(mu_);
  expert_tiers_ = tiers;
  expert_move_bytes_ = max_bytes_per_step;
  expert_moves_wanted_ = tiers != nullptr && tiers->stats().moves_pending > 0;
}

void Scheduler::ExpertMovesQueued() {
  std::lock_guard<std::mutex> lock(mu_);
  if (expert_tiers_ == nullptr) return;
  expert_moves_wanted_ = true;
  cv_.notify_all();
}

void Scheduler::AdvanceExpertMoves() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (expert_tiers_ == nullptr || !expert_moves_wanted_) return;
    // Cleared before the call: a placement queued meanwhile (ExpertMovesQueued) sets it again.
    expert_moves_wanted_ = false;
  }
  const absl::StatusOr<uint64_t> copied = expert_tiers_->Advance(expert_move_bytes_);
  const bool more = copied.ok() && expert_tiers_->stats().moves_pending > 0;
  if (!copied.ok()) {
    // Degraded, not fatal: every expert stays usable where it is (the host copy is always
    // there), so serving goes on; the moves are retried with the next placement.
    std::fprintf(stderr,
                 "deltaserve-worker: expert migration stopped: %s (experts stay where they are "
                 "until the next placement; deltaserve_model_expert_move_failures_total)\n",
                 std::string(copied.status().message()).c_str());
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.expert_advances;
  if (!copied.ok()) ++stats_.expert_move_failures;
  if (more) expert_moves_wanted_ = true;
}

void Scheduler::TakeInbox() {
  std::vector<std::pair<uint64_t, int>> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!inbox_.empty()) {
      waiting_.push_back(std::move(inbox_.front()));
      inbox_.pop_front();
    }
    cancels.swap(cancels_);
  }
  // A choice's cancel reaches only that choice; a whole request's every choice, those not yet
  // forked included (Finish ends them with their parent).
  auto matches = [](const Sequence& s, uint64_t h, int choice) {
    return s.handle == h && !s.finished && (choice < 0 || s.choice == choice);
  };
  for (const auto& [h, choice] : cancels) {
    for (auto& s : running_) {
      if (matches(*s, h, choice)) Finish(*s, EndReason::kCancelled);
    }
    for (auto& s : waiting_) {
      if (matches(*s, h, choice)) Finish(*s, EndReason::kCancelled);
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
  // Choices not forked yet end with the one they were to be forked from (an error, a cancel or
  // a stop before the prompt was prefilled), each with its own OnFinish and no tokens.
  for (std::shared_ptr<GenerationSink>& fork : seq.fork_sinks) {
    GenerationResult fr = r;
    fr.completion_tokens = 0;
    fr.first_token_ms = 0;
    fork->OnFinish(fr);
  }
  seq.fork_sinks.clear();
  seq.fork_grammar.reset();
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
  // Pages the prompts already admitted still need to finish their prefill, and one page per
  // choice still to fork from them (the copy of the prompt's last, shared page, or its first
  // own page).
  int64_t reserved = 0;
  for (const auto& s : running_) {
    if (s->finished || s->state == nullptr) continue;
    const int64_t need = pages_for(static_cast<int64_t>(s->tokens.size()) + 1);
    reserved += std::max<int64_t>(0, need - static_cast<int64_t>(s->state->kv->pages().size()));
    reserved += static_cast<int64_t>(s->fork_sinks.size());
  }
  // Places among max_sequences: a sequence that ended before this step's batch (a cancel taken
  // from the inbox) has given its pages and slot back and leaves running_ only after the batch,
  // so it does not count; one still closing holds its state and does.
  int64_t live = 0;
  for (const auto& s : running_) live += !s->finished || s->state != nullptr ? 1 : 0;
  // Slots (and places among max_sequences) kept for choices still to fork.
  int64_t reserved_slots = ReservedForkSlots();
  while (!waiting_.empty()) {
    Sequence& seq = *waiting_.front();
    if (seq.finished) {
      waiting_.pop_front();
      continue;
    }
    const int64_t forks = static_cast<int64_t>(seq.fork_sinks.size());
    if (live + reserved_slots + 1 + forks > options_.max_sequences ||
        slots_->free_slots() - reserved_slots < 1 + forks) {
      break;  // FIFO: the head waits for sequences to end
    }
    const int64_t need = pages_for(static_cast<int64_t>(seq.tokens.size()) + 1) + forks;
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
    const Clock::time_point restore_began = Clock::now();
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
    if (snapshots_ != nullptr) {
      RestoreAtAdmission(seq, point, first_admission);
      if (first_admission) seq.result.restore_ms = Ms(restore_began, Clock::now());
    }
    reserved += need_new;
    reserved_slots += forks;
    ++live;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
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
  // The step is over (its pass done, its outputs sampled): experts may change tier now.
  AdvanceExpertMoves();
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
      bool only_moves = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] {
          return stop_ || !inbox_.empty() || !cancels_.empty() || stats_.running > 0 ||
                 stats_.waiting > 0 || expert_moves_wanted_;
        });
        const bool idle = inbox_.empty() && stats_.running == 0 && stats_.waiting == 0;
        if (stop_ && (!drain_ || idle)) break;
        only_moves = idle && cancels_.empty() && !stop_;
      }
      // Idle but for expert moves: they go on between (empty) steps, not counted as steps.
      if (only_moves) {
        AdvanceExpertMoves();
      } else {
        Step();
      }
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
