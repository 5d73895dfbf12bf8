// Allowed-token masks for grammar-constrained decoding: which of the model's tokens continue
// the text a GrammarMatcher has accepted so far. A token is allowed when all its bytes step the
// matcher to a live state; the end-of-generation tokens are allowed exactly where the grammar
// is in an accepting state; other special (control) tokens never.
//
//   auto trie = TokenTrie::Build(tokenizer);            // once per model, shared by requests
//   TokenMaskCache masks(trie, /*budget_bytes=*/64 << 20);
//   const TokenMask& allowed = masks.Get(matcher);      // per step
//   if (!allowed.Has(token)) ...
//
// The trie holds every token's bytes (Tokenizer::Piece) in depth-first order, so a mask is one
// walk that skips a whole subtree as soon as its prefix is rejected; the walk steps the
// CompiledGrammar's DFA (grammar_matcher.h), whose transitions are table lookups once warm.
// Masks are cached per (grammar, StateId) under a byte budget (LRU), so a state the sequence or
// another request with the same schema met before costs a lookup. A miss inside a string, a key,
// a pattern loop or a maxLength counter, where a walk would visit most of the trie, is computed
// from a loop index instead (internal/token_mask_loops.h): the tokens such a state allows are
// known from the shape of its loop alone, so only the tokens that leave it are walked. Loop
// indexes are built once per shape and cache (~1 ms each on 151K tokens; at most 64, outside the
// byte budget, ~0.5 MB each).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "common/grammar/grammar_matcher.h"
#include "common/tokenizer.h"

namespace deltaserve::worker {

// A bit per token id, [n_vocab] bits.
class TokenMask {
 public:
  explicit TokenMask(int32_t n_vocab = 0) : bits_((n_vocab + 63) / 64, 0), n_vocab_(n_vocab) {}
  bool Has(int32_t token) const { return (bits_[token >> 6] >> (token & 63)) & 1; }
  void Set(int32_t token) { bits_[token >> 6] |= uint64_t{1} << (token & 63); }
  void Clear(int32_t token) { bits_[token >> 6] &= ~(uint64_t{1} << (token & 63)); }
  int32_t Count() const;
  int32_t n_vocab() const { return n_vocab_; }
  absl::Span<const uint64_t> words() const { return bits_; }
  absl::Span<uint64_t> mutable_words() { return absl::MakeSpan(bits_); }

 private:
  std::vector<uint64_t> bits_;
  int32_t n_vocab_;
};

// The model's tokens as a byte trie; see the file comment. Immutable after Build.
class TokenTrie {
 public:
  static std::shared_ptr<const TokenTrie> Build(const common::Tokenizer& tokenizer);

  int32_t n_vocab() const { return n_vocab_; }
  // Tokens that end generation (allowed only in an accepting state).
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }

  // One node per (prefix, byte), in depth-first order: node i's subtree is [i, subtree_end[i]).
  struct Node {
    uint8_t byte;
    uint16_t depth;        // 1 for the first byte of a token
    uint32_t subtree_end;  // one past the last node of this subtree
    int32_t token;         // the token whose bytes end here, -1 if none
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  // Tokens that share their bytes with an earlier id (several ids, one byte string).
  const std::vector<std::pair<int32_t, int32_t>>& duplicates() const { return duplicates_; }
  // The longest token, bytes (the deepest node's depth).
  size_t max_depth() const { return max_depth_; }

 private:
  int32_t n_vocab_ = 0;
  std::vector<Node> nodes_;
  std::vector<int32_t> end_tokens_;
  std::vector<std::pair<int32_t, int32_t>> duplicates_;  // (token, same bytes as this token)
  size_t max_depth_ = 0;
};

// Computes `matcher`'s allowed tokens into `out` (sized to the trie's n_vocab), uncached.
void ComputeTokenMask(const TokenTrie& trie, const common::grammar::GrammarMatcher& matcher,
                      TokenMask& out);

// Masks per (CompiledGrammar, StateId), least recently used dropped past the budget.
// Not thread-safe (one per scheduler thread, like the CompiledGrammars it reads).
class TokenMaskCache {
 public:
  TokenMaskCache(std::shared_ptr<const TokenTrie> trie, size_t budget_bytes);
  // The mask for the matcher's current state; valid until the next Get.
  const TokenMask& Get(const common::grammar::GrammarMatcher& matcher);
  // The mask computed as a miss computes it (loop indexes and all), neither looked up nor kept:
  // what one computed mask costs, for benchmarks.
  void ComputeUncached(const common::grammar::GrammarMatcher& matcher, TokenMask& out);
  size_t hits() const { return hits_; }
  size_t misses() const { return misses_; }
  // How the misses were computed (internal/token_mask_loops.h): through a loop index, a chain
  // (counter) index, or first byte by first byte (a walk, with loop indexes below).
  struct MissKinds {
    size_t loop = 0, chain = 0, by_first_byte = 0;
    size_t indexes_built = 0;  // parts of loop indexes built (a full scan of the trie each)
  };
  const MissKinds& miss_kinds() const { return miss_kinds_; }

 private:
  struct Impl;
  std::shared_ptr<const TokenTrie> trie_;
  std::shared_ptr<Impl> impl_;
  size_t hits_ = 0, misses_ = 0;
  MissKinds miss_kinds_;
};

}  // namespace deltaserve::worker
