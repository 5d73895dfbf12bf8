#include "worker/sampling/token_mask.h"

#include <algorithm>
#include <array>
#include <bit>
#include <list>
#include <numeric>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "worker/sampling/internal/token_mask_loops.h"

namespace deltaserve::worker {

using common::grammar::CompiledGrammar;
using common::grammar::GrammarMatcher;
using common::grammar::kDeadState;
using common::grammar::StateId;

int32_t TokenMask::Count() const {
  int32_t n = 0;
  for (uint64_t w : bits_) n += std::popcount(w);
  return n;
}

std::shared_ptr<const TokenTrie> TokenTrie::Build(const common::Tokenizer& tokenizer) {
  auto trie = std::make_shared<TokenTrie>();
  trie->n_vocab_ = tokenizer.vocab_size();
  std::vector<std::pair<std::string_view, int32_t>> pieces;
  pieces.reserve(trie->n_vocab_);
  for (int32_t id = 0; id < trie->n_vocab_; ++id) {
    if (tokenizer.IsEndOfGeneration(id)) {
      trie->end_tokens_.push_back(id);
      continue;
    }
    // Control tokens are markup the grammar never asks for; unused/unknown ones stand for no
    // text. User-defined tokens (<think>, <tool_call>) are text the tokenizer produces for their
    // bytes in any context, so they stay.
    const common::TokenType type = tokenizer.Type(id);
    if (type == common::TokenType::kControl || type == common::TokenType::kUnused ||
        type == common::TokenType::kUnknown) {
      continue;
    }
    const std::string_view piece = tokenizer.Piece(id);
    if (piece.empty() || piece.size() > UINT16_MAX) continue;
    pieces.emplace_back(piece, id);
  }
  // Byte order (char_traits<char> compares as unsigned char), ids in order among equal pieces.
  std::sort(pieces.begin(), pieces.end());

  // Depth-first nodes: for each piece, reuse the path shared with the previous one, close the
  // subtrees left behind, and open one node per new byte.
  std::vector<uint32_t> path;  // node index at each depth - 1
  std::string_view prev;
  auto close_to = [&](size_t depth) {
    while (path.size() > depth) {
      trie->nodes_[path.back()].subtree_end = static_cast<uint32_t>(trie->nodes_.size());
      path.pop_back();
    }
  };
  for (const auto& [piece, id] : pieces) {
    size_t common = 0;
    while (common < piece.size() && common < prev.size() && piece[common] == prev[common]) {
      ++common;
    }
    close_to(common);
    for (size_t d = common; d < piece.size(); ++d) {
      path.push_back(static_cast<uint32_t>(trie->nodes_.size()));
      trie->nodes_.push_back(
          Node{static_cast<uint8_t>(piece[d]), static_cast<uint16_t>(d + 1), 0, -1});
    }
    Node& last = trie->nodes_[path.back()];
    if (last.token < 0) {
      last.token = id;
    } else {
      trie->duplicates_.emplace_back(id, last.token);
    }
    trie->max_depth_ = std::max<size_t>(trie->max_depth_, piece.size());
    prev = piece;
  }
  close_to(0);
  return trie;
}

namespace {

using Node = TokenTrie::Node;
using internal::LoopIndex;
using internal::LoopKey;
using internal::WalkSubtrees;

void SetDuplicatesAndEnd(const TokenTrie& trie, const GrammarMatcher& matcher, TokenMask& out) {
  for (const auto& [token, same] : trie.duplicates()) {
    if (out.Has(same)) out.Set(token);
  }
  if (matcher.grammar().IsAccepting(matcher.state())) {
    for (int32_t t : trie.end_tokens()) out.Set(t);
  }
}

}  // namespace

void ComputeTokenMask(const TokenTrie& trie, const GrammarMatcher& matcher, TokenMask& out) {
  if (out.n_vocab() != trie.n_vocab()) out = TokenMask(trie.n_vocab());
  std::fill(out.mutable_words().begin(), out.mutable_words().end(), 0);
  CompiledGrammar& g = matcher.grammar();
  if (g.CanContinue(matcher.state()) && !trie.nodes().empty()) {
    std::vector<StateId> states(trie.max_depth() + 1, kDeadState);
    WalkSubtrees(trie, g, 0, static_cast<uint32_t>(trie.nodes().size()), matcher.state(),
                 states.data(), out.mutable_words().data());
  }
  SetDuplicatesAndEnd(trie, matcher, out);
}

// The LRU: entries in recency order (front = most recent), indexed by (grammar, state). An entry
// keeps a weak_ptr to its grammar: a CompiledGrammar freed and another allocated at the same
// address must not hit the old masks, and an expired entry is recognised and recomputed.
struct TokenMaskCache::Impl {
  struct Entry {
    const CompiledGrammar* grammar;
    std::weak_ptr<CompiledGrammar> owner;
    StateId state;
    TokenMask mask;
  };
  using Key = std::pair<const CompiledGrammar*, StateId>;
  std::list<Entry> entries;
  absl::flat_hash_map<Key, std::list<Entry>::iterator> index;
  size_t budget_bytes = 0;
  size_t entry_bytes = 0;
  // Loop indexes by shape, shared by every grammar; few shapes occur (JSON string content, a
  // pattern's character classes), so they are kept up to a count rather than by recency.
  static constexpr size_t kMaxLoopIndexes = 64;
  std::vector<std::unique_ptr<LoopIndex>> loops;
  std::vector<LoopKey> loop_keys;
  absl::flat_hash_map<LoopKey, int32_t> loop_ids;
  // Per grammar, each state's shape: its loop index (kNoLoop, or kUnknown until looked at) and
  // the state its shape leads to (itself for a loop, the next count for a chain).
  static constexpr int32_t kUnknown = -2, kNoLoop = -1;
  struct Shape {
    int32_t loop = kUnknown;
    StateId next = kDeadState;
  };
  struct Shapes {
    std::weak_ptr<CompiledGrammar> owner;
    std::vector<Shape> of_state;
  };
  absl::flat_hash_map<const CompiledGrammar*, Shapes> shapes;
  std::vector<StateId> states;  // the walk's per-depth states
  std::vector<StateId> chain;   // a chain's states by characters taken
  size_t indexes_built = 0;

  Shape ShapeOf(const TokenTrie& trie, CompiledGrammar& g, Shapes& sh, StateId s);
  Shapes& ShapesOf(const GrammarMatcher& matcher);
  // The chain from `s` (shape `shape`), into `chain`; false when it changes shape before its end
  // or kChainChars (then the state is walked).
  bool FollowChain(const TokenTrie& trie, CompiledGrammar& g, Shapes& sh, StateId s, Shape shape);
  void Compute(const TokenTrie& trie, const GrammarMatcher& matcher, TokenMask& out,
               MissKinds& kinds);
};

TokenMaskCache::Impl::Shapes& TokenMaskCache::Impl::ShapesOf(const GrammarMatcher& matcher) {
  if (shapes.size() > 1024) {  // drop the entries of freed grammars now and then
    for (auto it = shapes.begin(); it != shapes.end();) {
      if (it->second.owner.expired()) {
        shapes.erase(it++);
      } else {
        ++it;
      }
    }
  }
  Shapes& sh = shapes[&matcher.grammar()];
  if (sh.owner.owner_before(matcher.shared_grammar()) ||
      matcher.shared_grammar().owner_before(sh.owner)) {
    sh.owner = matcher.shared_grammar();  // new, or a freed grammar's entry at a reused address
    sh.of_state.clear();
  }
  return sh;
}

TokenMaskCache::Impl::Shape TokenMaskCache::Impl::ShapeOf(const TokenTrie& /*trie*/,
                                                          CompiledGrammar& g, Shapes& sh,
                                                          StateId s) {
  if (s < sh.of_state.size() && sh.of_state[s].loop != kUnknown) return sh.of_state[s];
  LoopKey key;
  Shape shape{kNoLoop, kDeadState};
  if (internal::LoopShapeOf(g, s, key, shape.next)) {
    auto it = loop_ids.find(key);
    if (it != loop_ids.end()) {
      shape.loop = it->second;
    } else if (loops.size() < kMaxLoopIndexes) {
      shape.loop = static_cast<int32_t>(loops.size());
      loops.push_back(std::make_unique<LoopIndex>());
      loop_keys.push_back(key);
      loop_ids.emplace(key, shape.loop);
    }
  }
  if (s >= sh.of_state.size()) sh.of_state.resize(g.state_count());
  sh.of_state[s] = shape;
  return shape;
}

bool TokenMaskCache::Impl::FollowChain(const TokenTrie& trie, CompiledGrammar& g, Shapes& sh,
                                       StateId s, Shape shape) {
  const int32_t loop = shape.loop;
  chain.assign(1, s);
  for (int i = 0; i < LoopIndex::kChainChars; ++i) {
    const StateId next = shape.next;
    chain.push_back(next);
    shape = ShapeOf(trie, g, sh, next);
    if (shape.loop != loop) {
      // The last count: nothing of the shape may continue it.
      return internal::ShapeEndsAt(g, next, loop_keys[loop]);
    }
    if (shape.next == next) {  // the counting ends in the loop itself
      chain.resize(LoopIndex::kChainChars + 1, next);
      return true;
    }
  }
  return true;
}

void TokenMaskCache::Impl::Compute(const TokenTrie& trie, const GrammarMatcher& matcher,
                                   TokenMask& out, MissKinds& kinds) {
  if (out.n_vocab() != trie.n_vocab()) out = TokenMask(trie.n_vocab());
  uint64_t* words = out.mutable_words().data();
  std::fill(words, words + out.words().size(), 0);
  CompiledGrammar& g = matcher.grammar();
  const StateId s = matcher.state();
  const std::vector<Node>& nodes = trie.nodes();
  states.resize(trie.max_depth() + 1);
  auto set_tokens = [&](const int32_t* begin, const int32_t* end) {
    for (const int32_t* t = begin; t != end; ++t) words[*t >> 6] |= uint64_t{1} << (*t & 63);
  };
  auto walk_exit = [&](const LoopIndex::Exit& e, StateId from) {
    for (uint8_t k = 0; k < e.partial_len && from != kDeadState; ++k) {
      from = g.Step(from, e.partial[k]);
    }
    if (from != kDeadState) {
      WalkSubtrees(trie, g, e.node, nodes[e.node].subtree_end, from, states.data(), words);
    }
  };
  if (g.CanContinue(s) && !nodes.empty()) {
    Shapes& sh = ShapesOf(matcher);
    const Shape shape = ShapeOf(trie, g, sh, s);
    if (shape.loop >= 0 && shape.next == s) {
      // A loop: the tokens inside at once, then the exits from the state itself.
      ++kinds.loop;
      LoopIndex& index = *loops[shape.loop];
      indexes_built += !index.root_built;
      internal::BuildRootIndex(trie, loop_keys[shape.loop], index);
      std::copy(index.within.begin(), index.within.end(), words);
      for (const LoopIndex::Exit& e : index.exits) walk_exit(e, s);
    } else if (shape.loop >= 0 && FollowChain(trie, g, sh, s, shape)) {
      // A counter: the tokens inside with at most as many characters as are left, then the
      // exits from the count they leave at.
      ++kinds.chain;
      LoopIndex& index = *loops[shape.loop];
      indexes_built += !index.chain_built;
      internal::BuildChainIndex(trie, loop_keys[shape.loop], index);
      const size_t left = chain.size() - 1;
      set_tokens(index.by_chars.data() + index.by_chars_begin[1],
                 index.by_chars.data() + index.by_chars_begin[left + 1]);
      for (const LoopIndex::Exit& e : index.chain_exits) {
        if (e.chars <= left) walk_exit(e, chain[e.chars]);
      }
    } else {
      // First byte by first byte: below a byte that leads into a loop, the loop's index from
      // there; elsewhere a walk.
      ++kinds.by_first_byte;
      for (uint32_t r = 0; r < nodes.size(); r = nodes[r].subtree_end) {
        const StateId t = g.Step(s, nodes[r].byte);
        if (t == kDeadState) continue;
        if (nodes[r].token >= 0) out.Set(nodes[r].token);
        if (nodes[r].subtree_end == r + 1) continue;
        const Shape sub = ShapeOf(trie, g, sh, t);
        if (sub.loop < 0 || sub.next != t) {
          WalkSubtrees(trie, g, r + 1, nodes[r].subtree_end, t, states.data(), words);
          continue;
        }
        LoopIndex& index = *loops[sub.loop];
        indexes_built += !index.first_byte_built;
        internal::BuildFirstByteIndex(trie, loop_keys[sub.loop], index);
        const uint8_t b = nodes[r].byte;
        set_tokens(index.within1.data() + index.within1_begin[b],
                   index.within1.data() + index.within1_begin[b + 1]);
        for (uint32_t k = index.exits1_begin[b]; k < index.exits1_begin[b + 1]; ++k) {
          walk_exit(index.exits1[k], t);
        }
      }
    }
  }
  SetDuplicatesAndEnd(trie, matcher, out);
}

TokenMaskCache::TokenMaskCache(std::shared_ptr<const TokenTrie> trie, size_t budget_bytes)
    : trie_(std::move(trie)), impl_(std::make_shared<Impl>()) {
  impl_->budget_bytes = budget_bytes;
  impl_->entry_bytes = sizeof(Impl::Entry) + (trie_->n_vocab() + 63) / 64 * sizeof(uint64_t) +
                       4 * sizeof(void*);  // list links and the index slot
}

void TokenMaskCache::ComputeUncached(const GrammarMatcher& matcher, TokenMask& out) {
  MissKinds kinds;
  impl_->Compute(*trie_, matcher, out, kinds);
}

const TokenMask& TokenMaskCache::Get(const GrammarMatcher& matcher) {
  Impl& m = *impl_;
  const Impl::Key key{&matcher.grammar(), matcher.state()};
  auto it = m.index.find(key);
  if (it != m.index.end()) {
    auto entry = it->second;
    if (!entry->owner.expired()) {
      ++hits_;
      m.entries.splice(m.entries.begin(), m.entries, entry);
      return entry->mask;
    }
    m.entries.erase(entry);  // a freed grammar's entry at a reused address
    m.index.erase(it);
  }
  ++misses_;
  // Always room for one entry, however small the budget; reuse the evicted mask's buffer.
  const size_t max_entries = std::max<size_t>(1, m.budget_bytes / m.entry_bytes);
  TokenMask mask;
  while (m.entries.size() >= max_entries) {
    Impl::Entry& last = m.entries.back();
    m.index.erase(Impl::Key{last.grammar, last.state});
    mask = std::move(last.mask);
    m.entries.pop_back();
  }
  m.Compute(*trie_, matcher, mask, miss_kinds_);
  miss_kinds_.indexes_built = m.indexes_built;
  m.entries.push_front(
      Impl::Entry{key.first, matcher.shared_grammar(), key.second, std::move(mask)});
  m.index.emplace(key, m.entries.begin());
  return m.entries.front().mask;
}

}  // namespace deltaserve::worker
