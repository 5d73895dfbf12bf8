// What makes token masks cheap where most of the vocabulary is allowed (token_mask.h): inside a
// JSON string, a key, a `[...]*` pattern loop or a `maxLength` counter. A plain walk visits most
// of the trie there, for every such state. But those states are regular: every ASCII byte of a
// set A and, often, every well-formed UTF-8 character lead to one next state — the state itself
// (a loop), or the next count of a counter (a chain). So the tokens made only of such bytes and
// characters are allowed (a counter: those with few enough characters), whatever the grammar.
// That set depends on the shape (A, utf8) alone: a LoopIndex computes it once per shape, with
// the exits — the first node of each path that leaves it, with the incomplete character above —
// and a state's mask is that set plus walks of the exits' subtrees from the right state.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/grammar/grammar_matcher.h"
#include "worker/sampling/token_mask.h"

namespace deltaserve::worker::internal {

using common::grammar::CompiledGrammar;
using common::grammar::StateId;

// Walks the trie nodes [begin, end) — whole subtrees, the first at depth d — from `from`, the
// state after the d - 1 bytes above them, setting the bit of every token whose bytes the grammar
// accepts. `states` has room for the trie's depth + 1.
void WalkSubtrees(const TokenTrie& trie, CompiledGrammar& g, uint32_t begin, uint32_t end,
                  StateId from, StateId* states, uint64_t* words);

// A loop or chain shape: the ASCII bytes A and whether every multi-byte character goes along.
struct LoopKey {
  std::array<uint64_t, 2> ascii{};  // A, bytes 0..127
  bool utf8 = false;
  bool operator==(const LoopKey&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const LoopKey& k) {
    return H::combine(std::move(h), k.ascii, k.utf8);
  }
  bool HasAscii(uint8_t b) const { return (ascii[b >> 6] >> (b & 63)) & 1; }
  int AsciiCount() const { return std::popcount(ascii[0]) + std::popcount(ascii[1]); }
};

struct LoopIndex {
  struct Exit {
    uint32_t node;
    uint16_t chars;       // complete characters above the incomplete one (chains)
    uint8_t partial_len;  // bytes of an incomplete UTF-8 character just above `node`
    std::array<uint8_t, 3> partial;
  };
  // Each part is built on first use (a shape met only as a state's neighbour costs nothing).
  bool root_built = false, first_byte_built = false;
  // From the root: the mask words of the tokens inside, and the exits.
  std::vector<uint64_t> within;
  std::vector<Exit> exits;
  // From below each first byte b (b itself not checked): the tokens inside and the exits of the
  // subtree of b, at [begin[b], begin[b + 1]) — for a state whose first byte leads into a loop
  // (a key after its first letters, a string's first character).
  std::array<uint32_t, 257> within1_begin{}, exits1_begin{};
  std::vector<int32_t> within1;
  std::vector<Exit> exits1;
  // For chains, built on first use: the tokens inside with c characters (1..kChainChars) at
  // [by_chars_begin[c], by_chars_begin[c + 1]), and the exits, which include every path reaching
  // a character past kChainChars (so a chain is followed at most that far). 32 rather than 12:
  // a 248K vocabulary has many tokens of 13-32 characters inside a string, and each one past
  // the limit was walked byte by byte from the 12th count (synthetic 248K, Snowplow: computed
  // mask p99 0.9 -> 0.24 ms); the chain's count states are built either way.
  static constexpr int kChainChars = 32;
  bool chain_built = false;
  std::array<uint32_t, kChainChars + 2> by_chars_begin{};
  std::vector<int32_t> by_chars;
  std::vector<Exit> chain_exits;
};

// The parts of the index for `key`, each once (a full scan of the trie: ~1 ms on 151K tokens).
void BuildRootIndex(const TokenTrie& trie, const LoopKey& key, LoopIndex& index);
void BuildFirstByteIndex(const TokenTrie& trie, const LoopKey& key, LoopIndex& index);
void BuildChainIndex(const TokenTrie& trie, const LoopKey& key, LoopIndex& index);

// The shape of `s`: the next state most ASCII bytes lead to (`next`, s itself for a loop), with
// the bytes that lead there and whether every multi-byte character does; false when fewer than 16
// ASCII bytes do (then an index would not pay).
bool LoopShapeOf(CompiledGrammar& g, StateId s, LoopKey& key, StateId& next);

// Whether no byte of the shape (and, for utf8, no lead byte) continues `s`: the end of a chain.
bool ShapeEndsAt(CompiledGrammar& g, StateId s, const LoopKey& key);

}  // namespace deltaserve::worker::internal
