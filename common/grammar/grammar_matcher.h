// Walks a Grammar byte by byte: the pushdown automaton of the grammar, run as a lazily built
// DFA. A matcher state is the set of parse stacks that are alive after the bytes seen so far
// (each stack a chain of rule positions, interned as nodes of a shared tree); a set is interned
// once as a StateId and its transitions (StateId, byte) -> StateId are filled in on first use.
// So a step is one table lookup once warm, rollback is restoring an older StateId, and the
// token masks of worker/sampling/token_mask.h can be cached per StateId.
//
//   auto compiled = std::make_shared<CompiledGrammar>(std::move(grammar));
//   GrammarMatcher m(compiled);
//   bool ok = m.AcceptBytes("{\"a\": 1}") && m.IsAccepting();
//
// Threading: a CompiledGrammar grows its state table as matchers walk it, so one
// CompiledGrammar and all its matchers are used from one thread at a time (the worker's
// scheduler thread; the CLI). Memory: the table is bounded by `max_states`; a step that would
// need a new state past it fails (the matcher reports it as rejected and `Exhausted()` says
// why), never grows without bound.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "common/grammar/grammar.h"

namespace deltaserve::common::grammar {

using StateId = uint32_t;
inline constexpr StateId kDeadState = 0;  // no stack alive: every further byte is rejected

struct CompiledGrammarLimits {
  size_t max_states = 1 << 18;       // interned stack sets
  size_t max_stack_nodes = 1 << 20;  // interned stack-tree nodes
  size_t max_stacks_per_state = 4096;  // a more ambiguous grammar is refused at that step
};

// A grammar plus its state table; see the file comment.
class CompiledGrammar {
 public:
  explicit CompiledGrammar(Grammar grammar, const CompiledGrammarLimits& limits = {});
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;
  ~CompiledGrammar();

  const Grammar& grammar() const { return grammar_; }
  StateId initial_state() const;
  // The state after `byte` in `state` (kDeadState when rejected or the table is full).
  StateId Step(StateId state, uint8_t byte) {
    const StateId next = transitions_[state * class_count_ + class_of_[byte]];
    return next != kUnknownState ? next : StepSlow(state, byte);
  }
  // The transition when it was computed before, else kUnknownState (then call Step): what the
  // token-mask walk uses to stay in its loop for transitions already in the table.
  static constexpr StateId kUnknownState = UINT32_MAX;
  StateId CachedStep(StateId state, uint8_t byte) const {
    return transitions_[state * class_count_ + class_of_[byte]];
  }
  // The raw table for hot loops (the token-mask walk): transition_table()[state * class_count() +
  // byte_class()[byte]] is CachedStep. The pointer changes when Step adds a state.
  const StateId* transition_table() const { return transitions_.data(); }
  const std::array<uint8_t, 256>& byte_class() const { return class_of_; }
  uint32_t class_count() const { return class_count_; }
  // Whether the root rule can end in `state` (the bytes so far are a complete sentence).
  bool IsAccepting(StateId state) const;
  // Whether any byte continues `state` (false at kDeadState, and where only the end is left).
  bool CanContinue(StateId state) const;
  // True once a step was refused because a limit was reached.
  bool exhausted() const;
  size_t state_count() const;
  // Bytes held by the state table (for metrics and the cache budget).
  size_t memory_bytes() const;
  // memory_bytes() as of the last state added, readable from any thread: the worker's
  // GrammarCache weighs its grammars on gRPC threads while the scheduler thread grows them.
  size_t published_memory_bytes() const {
    return published_memory_bytes_.load(std::memory_order_relaxed);
  }

 private:
  struct Impl;
  StateId StepSlow(StateId state, uint8_t byte);

  Grammar grammar_;
  std::unique_ptr<Impl> impl_;
  // Bytes that no byte class of the grammar tells apart share a class; the table holds
  // class_count_ transitions per state ([state][class], kUnknownState until computed).
  std::array<uint8_t, 256> class_of_{};
  uint32_t class_count_ = 1;
  std::vector<StateId> transitions_;
  std::atomic<size_t> published_memory_bytes_{0};
};

// One sequence's position in a CompiledGrammar. Cheap to copy (a StateId and a pointer).
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar);

  // Consumes `byte` if the grammar allows it; on rejection the state is unchanged and false.
  bool AcceptByte(uint8_t byte);
  // All of `bytes` or nothing: on rejection the state is unchanged and false.
  bool AcceptBytes(std::string_view bytes);
  bool IsAccepting() const { return grammar_->IsAccepting(state_); }
  bool CanContinue() const { return grammar_->CanContinue(state_); }

  StateId state() const { return state_; }
  void set_state(StateId state) { state_ = state; }  // rollback to a state this grammar gave
  CompiledGrammar& grammar() const { return *grammar_; }
  const std::shared_ptr<CompiledGrammar>& shared_grammar() const { return grammar_; }

 private:
  std::shared_ptr<CompiledGrammar> grammar_;
  StateId state_;
};

}  // namespace deltaserve::common::grammar
