// Grammar-constrained decoding on the worker (docs/structured_outputs.md, docs/sampling.md):
// GrammarCache compiles each distinct output constraint once per model; SequenceConstraint is
// one sequence's position in its grammar, which the scheduler asks for the allowed-token mask
// before each sample (Sampler::Sample's `allowed`) and tells every token emitted after it.
//
//   auto grammar = cache.Get(spec);                        // gRPC thread, compiles on a miss
//   SequenceConstraint c(*grammar, options);               // per sequence
//   const TokenMask* allowed = c.Allowed(masks);           // scheduler thread, per step
//   int32_t t = sampler.Sample(row, nullptr, allowed);
//   switch (c.Accept(t, tokenizer.Piece(t), /*forced=*/false)) ...
//
// Reasoning: with `waiting_for_reasoning` the output starts inside a `<think>` block the prompt
// opened; the constraint starts after `reasoning_end` (`</think>`). With `reasoning_may_open`
// the model may also open such a block as its first token (Qwen3's templates leave that to it).
// Until then every token but the end tokens is allowed, so the model cannot stop before its answer.
// Once active, the reasoning markers are masked out (a JSON string must not reopen a think block)
// and the end tokens are allowed exactly where the grammar is complete. Tokens the worker writes
// itself (the reasoning budget's closing `</think>\n\n`) are `forced`: the matcher takes their
// bytes when it can and is not failed when it cannot.
//
// Threading: GrammarCache is thread-safe; a CompiledGrammar it hands out, and every
// SequenceConstraint over it, are used from the model's scheduler thread only
// (grammar_matcher.h).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/grammar/grammar_matcher.h"
#include "common/grammar/output_constraint.h"
#include "worker/sampling/token_mask.h"

namespace deltaserve::worker {

// Compiled grammars by OutputConstraintSpec::CacheKey, the least recently used dropped past
// `max_entries` or past `budget_bytes` of state tables in all (a sequence still holding one keeps
// it alive). The budget bounds what cached grammars hold between requests: one grammar's table
// grows as sequences walk it (up to CompiledGrammarLimits, a few hundred MB for a long
// maxLength string), so 64 of them could otherwise keep gigabytes.
class GrammarCache {
 public:
  static constexpr size_t kDefaultBudgetBytes = size_t{1} << 30;
  explicit GrammarCache(size_t max_entries = 64, size_t budget_bytes = kDefaultBudgetBytes)
      : max_entries_(max_entries), budget_bytes_(budget_bytes) {}

  // The compiled grammar of `spec`; InvalidArgument (the compiler's message) when it cannot be
  // compiled. Failures are not cached (a refused constraint costs its compile each time).
  absl::StatusOr<std::shared_ptr<common::grammar::CompiledGrammar>> Get(
      const common::grammar::OutputConstraintSpec& spec);

  size_t hits() const;
  size_t misses() const;   // compiles, refused ones included
  size_t refused() const;  // constraints that did not compile
  // Grammars dropped because the cached ones held more than the budget (logged each time).
  size_t evicted_for_memory() const;
  // State-table bytes of the cached grammars (CompiledGrammar::published_memory_bytes).
  size_t cached_bytes() const;

 private:
  using Key = std::array<uint8_t, 32>;
  struct Entry {
    Key key;
    std::shared_ptr<common::grammar::CompiledGrammar> grammar;
  };
  size_t CachedBytesLocked() const;  // mu_ held

  const size_t max_entries_;
  const size_t budget_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  absl::flat_hash_map<Key, std::list<Entry>::iterator> index_;
  size_t hits_ = 0, misses_ = 0, refused_ = 0, evicted_for_memory_ = 0;
};

struct SequenceConstraintOptions {
  int32_t n_vocab = 0;                 // the token trie's (TokenMask size)
  bool waiting_for_reasoning = false;  // see the file comment
  // Not waiting, but the model may open a reasoning block as its first token (`reasoning_start`
  // is allowed then); once opened, the constraint waits for `reasoning_end` as above.
  bool reasoning_may_open = false;
  int32_t reasoning_start = -1;  // `<think>`, masked out once active (-1: none)
  int32_t reasoning_end = -1;    // `</think>`
  // Tokens that end the sequence (end-of-generation and stop ids): allowed only where the
  // grammar is complete (and never while waiting for the reasoning to close).
  std::vector<int32_t> end_tokens;
};

// One sequence's constraint; see the file comment.
class SequenceConstraint {
 public:
  SequenceConstraint(std::shared_ptr<common::grammar::CompiledGrammar> grammar,
                     SequenceConstraintOptions options);

  // The tokens allowed next ([n_vocab] bits of the trie's vocabulary); valid until the next
  // call. Count() == 0 means the grammar cannot go on (a state-table limit was reached).
  const TokenMask& Allowed(TokenMaskCache& masks);

  enum class Step {
    kContinue,  // go on
    kComplete,  // the grammar is complete and nothing can follow: end the sequence ("stop")
    kRejected,  // the token's bytes do not continue the grammar (never for a masked sample)
  };
  // Advances past `token` (its bytes `piece`), which was emitted.
  Step Accept(int32_t token, std::string_view piece, bool forced);

  // How many leading tokens of `draft` the grammar allows (speculation drafts are cut there
  // before they are fed); `piece` gives a token's bytes. Does not advance this sequence.
  size_t AllowedPrefix(absl::Span<const int32_t> draft,
                       const std::function<std::string_view(int32_t)>& piece) const;

  bool waiting_for_reasoning() const { return waiting_; }
  const common::grammar::GrammarMatcher& matcher() const { return matcher_; }

 private:
  bool IsEnd(int32_t token) const;

  common::grammar::GrammarMatcher matcher_;
  SequenceConstraintOptions options_;
  bool waiting_;
  bool first_token_ = true;  // nothing accepted yet
  bool waiting_mask_ready_ = false;
  TokenMask mask_;  // this sequence's adjusted copy of the cached mask
};

}  // namespace deltaserve::worker
