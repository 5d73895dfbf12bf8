// One engine step of the scheduler (scheduler.h): the batch under the token budget, pages
// and preemption, the forward pass, and sampling each sequence's rows (speculation, output
// constraints, the reasoning budget).
#include "worker/sched/scheduler.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/sched/internal/scheduler_sequence.h"

namespace deltaserve::worker {

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
  uint64_t step_tap_bytes = 0;
  std::vector<Sequence*> batch;
  const int64_t small = 1 + options_.ngram.draft_max;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& sp : running_) {
      Sequence& s = *sp;
      if (s.finished || s.state == nullptr || budget <= 0) continue;
      if (s.closing) continue;
      const int64_t pending = static_cast<int64_t>(s.tokens.size()) - s.n_past();
      if ((pending <= small) != (pass == 0)) continue;
      int64_t next_capture = 0;
      const int64_t take = PlanChunk(s, std::min(pending, budget), next_capture, step_tap_bytes);
      s.pending = take;
      s.feed.assign(s.tokens.begin() + s.n_past(), s.tokens.begin() + s.n_past() + take);
      s.draft.clear();
      // No drafts on the prompt's last chunk while choices wait to be forked from its row.
      if (options_.speculation && take == pending && s.fork_sinks.empty() &&
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
    if (s->finished || s->state == nullptr) {
      s->taps.clear();  // preempted: the chunk is planned again when it runs
      s->tap_states.clear();
      continue;
    }
    const bool last = s->pending == static_cast<int64_t>(s->tokens.size()) - s->n_past();
    BatchEntry e{s->state.get(), s->feed, /*all_logits=*/false};
    e.taps = s->taps;
    e.no_logits = !last;
    // The last real token and the drafts after it; the rows before are not sampled.
    e.last_logits = static_cast<int64_t>(s->draft.size()) + 1;
    entries.push_back(e);
    live.push_back(s);
  }
  std::vector<std::unique_ptr<Sequence>> forked;
  if (!entries.empty()) {
    std::vector<int64_t> fed_before;
    for (Sequence* s : live) fed_before.push_back(s->n_past());
    if (absl::Status st = model_->Forward(entries, logits_); !st.ok()) {
      for (Sequence* s : live) {
        s->taps.clear();
        s->tap_states.clear();
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
        if (!s.closing) CountPromptTokens(s, fed_before[i]);
        CaptureTaps(s, fed_before[i]);  // before Consume, which may finish the sequence
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
          if (!s.fork_sinks.empty()) {
            // The prompt is prefilled: the other choices fork here and sample from its row.
            std::vector<std::unique_ptr<Sequence>> forks =
                ForkChoices(s, absl::Span<const float>(logits_).subspan(row * n_vocab, n_vocab));
            for (auto& f : forks) forked.push_back(std::move(f));
          }
          Consume(s, absl::Span<const float>(logits_).subspan(row * n_vocab, rows * n_vocab),
                  rows, fed_before[i]);
        }
        row += rows;
        if (!s.finished && s.state != nullptr) CaptureIfDue(s);
      }
    }
  }
  // After every sequence of this step: forks are the most recently admitted.
  for (auto& f : forked) running_.push_back(std::move(f));
  return true;
}

}  // namespace deltaserve::worker
