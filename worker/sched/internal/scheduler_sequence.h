// The per-request state of the scheduler (Scheduler::Sequence) and the small helpers its files
// share: scheduler.cc (queue, admission, lifecycle), scheduler_batch.cc (one engine step and
// sampling), scheduler_snapshots.cc (session snapshots), scheduler_fork.cc (n > 1 choices).
// Private to worker/sched.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/sched/scheduler.h"

namespace deltaserve::worker {

using Clock = std::chrono::steady_clock;

inline double Ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
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
  // This step's state taps (BatchEntry::taps: snapshot positions inside the chunk) and the
  // host buffers they fill, which become the snapshots' state copies (CaptureTaps).
  std::vector<StateTap> taps;
  std::vector<std::unique_ptr<uint8_t[]>> tap_states;
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
  // Choices (n > 1, scheduler_fork.cc): this sequence's index among its request's choices; on
  // choice 0 until its prompt is prefilled, the sinks of choices 1..n-1 (forked then) and what
  // their output constraints are made from.
  int choice = 0;
  std::vector<std::shared_ptr<GenerationSink>> fork_sinks;
  std::shared_ptr<common::grammar::CompiledGrammar> fork_grammar;
  SequenceConstraintOptions fork_constraint_options;

  int64_t n_past() const { return state == nullptr ? 0 : state->n_past; }
  RecurrentSlot& slot() const { return static_cast<RecurrentSlot&>(*state->state); }
};

}  // namespace deltaserve::worker
