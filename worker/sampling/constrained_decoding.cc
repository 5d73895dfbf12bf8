#include "worker/sampling/constrained_decoding.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace deltaserve::worker {

using common::grammar::CompiledGrammar;
using common::grammar::GrammarMatcher;

absl::StatusOr<std::shared_ptr<CompiledGrammar>> GrammarCache::Get(
    const common::grammar::OutputConstraintSpec& spec) {
  const Key key = spec.CacheKey();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->grammar;
    }
    ++misses_;
  }
  // Compiled outside the lock: a large schema must not hold up requests whose grammar is cached.
  // Generation's whitespace (at most one space between JSON tokens): a model with flat logits
  // could otherwise spend max_tokens on the whitespace a checking grammar allows.
  absl::StatusOr<common::grammar::Grammar> grammar = common::grammar::CompileOutputConstraint(
      spec, common::grammar::JsonWhitespace::kGeneration);
  if (!grammar.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++refused_;
    return grammar.status();
  }
  auto compiled = std::make_shared<CompiledGrammar>(std::move(*grammar));
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->grammar;  // a racer won
  lru_.push_front(Entry{key, compiled});
  index_[key] = lru_.begin();
  while (lru_.size() > max_entries_) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  // The byte budget, over the tables as the scheduler has grown them so far; the newest grammar
  // always stays.
  size_t bytes = CachedBytesLocked();
  while (bytes > budget_bytes_ && lru_.size() > 1) {
    const size_t dropped = lru_.back().grammar->published_memory_bytes();
    std::fprintf(stderr, "grammar cache: %zu bytes cached, over its budget of %zu: dropping a "
                 "grammar of %zu bytes\n", bytes, budget_bytes_, dropped);
    bytes -= dropped;
    ++evicted_for_memory_;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::evicted_for_memory() const {
  std::lock_guard<std::mutex> lock(mu_);
  return evicted_for_memory_;
}

size_t GrammarCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return CachedBytesLocked();
}

size_t GrammarCache::CachedBytesLocked() const {
  size_t bytes = 0;
  for (const Entry& e : lru_) bytes += e.grammar->published_memory_bytes();
  return bytes;
}

size_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

size_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

size_t GrammarCache::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

SequenceConstraint::SequenceConstraint(std::shared_ptr<CompiledGrammar> grammar,
                                       SequenceConstraintOptions options)
    : matcher_(std::move(grammar)),
      options_(std::move(options)),
      waiting_(options_.waiting_for_reasoning && options_.reasoning_end >= 0) {
  std::sort(options_.end_tokens.begin(), options_.end_tokens.end());
}

bool SequenceConstraint::IsEnd(int32_t token) const {
  return std::binary_search(options_.end_tokens.begin(), options_.end_tokens.end(), token);
}

const TokenMask& SequenceConstraint::Allowed(TokenMaskCache& masks) {
  if (waiting_) {
    // Free reasoning, but no end before the answer. Built on the first call of this phase.
    if (!waiting_mask_ready_) {
      const int32_t n = options_.n_vocab;
      mask_ = TokenMask(n);
      for (int32_t t = 0; t < n; ++t) mask_.Set(t);
      for (int32_t t : options_.end_tokens) {
        if (t >= 0 && t < n) mask_.Clear(t);
      }
      waiting_mask_ready_ = true;
    }
    return mask_;
  }
  mask_ = masks.Get(matcher_);
  const int32_t n = mask_.n_vocab();
  for (int32_t t : {options_.reasoning_start, options_.reasoning_end}) {
    if (t >= 0 && t < n) mask_.Clear(t);
  }
  if (first_token_ && options_.reasoning_may_open && options_.reasoning_start >= 0 &&
      options_.reasoning_start < n && options_.reasoning_end >= 0) {
    mask_.Set(options_.reasoning_start);
  }
  const bool complete = matcher_.IsAccepting();
  for (int32_t t : options_.end_tokens) {
    if (t < 0 || t >= n) continue;
    if (complete) {
      mask_.Set(t);
    } else {
      mask_.Clear(t);
    }
  }
  return mask_;
}

SequenceConstraint::Step SequenceConstraint::Accept(int32_t token, std::string_view piece,
                                                    bool forced) {
  if (std::exchange(first_token_, false) && !waiting_ && options_.reasoning_may_open &&
      token == options_.reasoning_start && options_.reasoning_start >= 0 &&
      options_.reasoning_end >= 0) {
    waiting_ = true;  // the model opened a reasoning block: the constraint starts after it
    return Step::kContinue;
  }
  if (waiting_) {
    if (token == options_.reasoning_end) {
      waiting_ = false;
    }
    return Step::kContinue;
  }
  if (IsEnd(token)) return Step::kContinue;  // the stop check ends the sequence
  if (!matcher_.AcceptBytes(piece)) return forced ? Step::kContinue : Step::kRejected;
  if (matcher_.IsAccepting() && !matcher_.CanContinue()) return Step::kComplete;
  return Step::kContinue;
}

size_t SequenceConstraint::AllowedPrefix(
    absl::Span<const int32_t> draft, const std::function<std::string_view(int32_t)>& piece) const {
  GrammarMatcher m = matcher_;
  bool waiting = waiting_;
  for (size_t i = 0; i < draft.size(); ++i) {
    const int32_t t = draft[i];
    if (IsEnd(t)) return i;  // an end token is never worth drafting past
    if (i == 0 && first_token_ && !waiting && options_.reasoning_may_open &&
        t == options_.reasoning_start && options_.reasoning_end >= 0) {
      waiting = true;
      continue;
    }
    if (waiting) {
      if (t == options_.reasoning_end) waiting = false;
      continue;
    }
    if (t == options_.reasoning_start || t == options_.reasoning_end) return i;
    if (!m.AcceptBytes(piece(t))) return i;
    if (m.IsAccepting() && !m.CanContinue()) return i + 1;
  }
  return draft.size();
}

}  // namespace deltaserve::worker
