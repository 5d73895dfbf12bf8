// n > 1 choices in the scheduler (scheduler.h, docs/scheduler.md "Forking"): the prompt is
// prefilled once by choice 0; at its last prompt chunk the other choices are forked from it —
// the recurrent-state slot copied, the KV pages shared copy-on-write
// (PagedSequenceKv::Fork) — and each samples its first token from the same logits row with its
// own sampler, seeded `seed + i`. From there a fork is an ordinary sequence.
#include "worker/sched/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/sched/internal/scheduler_sequence.h"

namespace deltaserve::worker {

int64_t Scheduler::ReservedForkSlots() const {
  int64_t slots = 0;
  for (const auto& s : running_) {
    if (!s->finished && s->state != nullptr) slots += static_cast<int64_t>(s->fork_sinks.size());
  }
  return slots;
}

void Scheduler::CountPromptTokens(const Sequence& seq, int64_t fed_before) {
  const int64_t from = fed_before;
  const int64_t to = std::min(seq.prompt_len, from + seq.pending);
  if (to <= from) return;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.prompt_tokens_computed += to - from;
}

std::vector<std::unique_ptr<Scheduler::Sequence>> Scheduler::ForkChoices(
    Sequence& parent, absl::Span<const float> logits) {
  std::vector<std::unique_ptr<Sequence>> forks;
  std::vector<std::shared_ptr<GenerationSink>> sinks = std::move(parent.fork_sinks);
  parent.fork_sinks.clear();
  std::shared_ptr<common::grammar::CompiledGrammar> grammar = std::move(parent.fork_grammar);
  parent.fork_grammar.reset();
  const int64_t n_past = parent.n_past();
  for (size_t k = 0; k < sinks.size(); ++k) {
    const int choice = static_cast<int>(k) + 1;
    // Choice i's seed: the request's + i (mod 2^64), so it equals a one-choice request sent
    // with that seed (docs/scheduler.md).
    SamplingParams params = parent.sampler.params();
    params.seed = parent.sampler.seed() + static_cast<uint64_t>(choice);
    absl::StatusOr<Sampler> sampler = Sampler::Create(params, n_valid_);
    std::unique_ptr<RecurrentSlot> slot;
    absl::Status st = sampler.status();
    if (st.ok()) {
      absl::StatusOr<std::unique_ptr<RecurrentSlot>> acquired = RecurrentSlot::Acquire(slots_);
      st = acquired.status();
      if (st.ok()) {
        slot = std::move(*acquired);
        st = slot->CopyFrom(parent.slot());
      }
    }
    if (!st.ok()) {
      // Never expected (admission reserved the slot): the choice ends alone with the error.
      GenerationResult r = parent.result;
      r.reason = EndReason::kError;
      r.error = absl::InternalError(absl::StrCat("forking choice ", choice, ": ", st.message()));
      r.prompt_tokens = parent.prompt_len;
      r.completion_tokens = 0;
      sinks[k]->OnFinish(r);
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.completed;
      continue;
    }
    sampler->AcceptPrompt(absl::Span<const int32_t>(parent.tokens).first(parent.prompt_len));
    auto fork = std::make_unique<Sequence>(std::move(*sampler), parent.stop);
    fork->handle = parent.handle;
    fork->id = absl::StrCat(parent.id, "#", choice);
    fork->choice = choice;
    fork->sink = std::move(sinks[k]);
    fork->want_logprobs = parent.want_logprobs;
    fork->tokens.assign(parent.tokens.begin(), parent.tokens.begin() + parent.prompt_len);
    fork->prompt_len = parent.prompt_len;
    fork->state = std::make_unique<SequenceState>();
    fork->state->n_past = n_past;
    fork->state->kv = static_cast<const PagedSequenceKv&>(*parent.state->kv).Fork(n_past);
    fork->state->state = std::move(slot);
    fork->submitted = parent.submitted;
    fork->admitted = parent.admitted;
    fork->was_admitted = true;
    fork->result.cached_prompt_tokens = parent.result.cached_prompt_tokens;
    fork->result.cached_from = parent.result.cached_from;
    // The prompt's snapshots are the parent's to take (once); a fork takes those of its own
    // output and may restore the prompt's after a preemption.
    fork->lookup_positions = parent.lookup_positions;
    fork->lookup_keys = parent.lookup_keys;
    for (int64_t p : parent.capture_at) {
      if (p > parent.prompt_len) fork->capture_at.push_back(p);
    }
    fork->turn_end = parent.turn_end;
    fork->reasoning_budget = parent.reasoning_budget;
    fork->reasoning_start = parent.reasoning_start;
    fork->reasoning_end = parent.reasoning_end;
    fork->in_reasoning = parent.in_reasoning;
    fork->reasoning_used = parent.reasoning_used;
    if (grammar != nullptr) {
      // A grammar matcher of its own, at the start of the grammar like the parent's.
      fork->constraint =
          std::make_unique<SequenceConstraint>(grammar, parent.fork_constraint_options);
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.constrained_sequences;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.forked_sequences;
    }
    Consume(*fork, logits, /*n_rows=*/1, /*fed_before=*/n_past);
    forks.push_back(std::move(fork));
  }
  return forks;
}

}  // namespace deltaserve::worker
