#include "worker/sampling/token_mask.h"

#include <algorithm>
#include <bit>
#include <list>
#include <numeric>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"

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

void ComputeTokenMask(const TokenTrie& trie, const GrammarMatcher& matcher, TokenMask& out) {
  if (out.n_vocab() != trie.n_vocab()) out = TokenMask(trie.n_vocab());
  std::fill(out.mutable_words().begin(), out.mutable_words().end(), 0);
  CompiledGrammar& g = matcher.grammar();
  const StateId start = matcher.state();
  if (g.IsAccepting(start)) {
    for (int32_t t : trie.end_tokens()) out.Set(t);
  }
  if (!g.CanContinue(start)) return;

  // states[d] is the matcher state after the first d bytes of the current path.
  std::vector<StateId> states(trie.max_depth() + 1, kDeadState);
  states[0] = start;
  const std::vector<TokenTrie::Node>& nodes = trie.nodes();
  const size_t n = nodes.size();
  uint64_t* words = out.mutable_words().data();
  for (size_t i = 0; i < n;) {
    const TokenTrie::Node& node = nodes[i];
    const StateId from = states[node.depth - 1];
    StateId next = g.CachedStep(from, node.byte);
    if (next == CompiledGrammar::kUnknownState) next = g.Step(from, node.byte);
    if (next == kDeadState) {
      i = node.subtree_end;
      continue;
    }
    states[node.depth] = next;
    if (node.token >= 0) words[node.token >> 6] |= uint64_t{1} << (node.token & 63);
    ++i;
  }
  for (const auto& [token, same] : trie.duplicates()) {
    if (out.Has(same)) out.Set(token);
  }
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
};

TokenMaskCache::TokenMaskCache(std::shared_ptr<const TokenTrie> trie, size_t budget_bytes)
    : trie_(std::move(trie)), impl_(std::make_shared<Impl>()) {
  impl_->budget_bytes = budget_bytes;
  impl_->entry_bytes = sizeof(Impl::Entry) + (trie_->n_vocab() + 63) / 64 * sizeof(uint64_t) +
                       4 * sizeof(void*);  // list links and the index slot
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
  ComputeTokenMask(*trie_, matcher, mask);
  m.entries.push_front(
      Impl::Entry{key.first, matcher.shared_grammar(), key.second, std::move(mask)});
  m.index.emplace(key, m.entries.begin());
  return m.entries.front().mask;
}

}  // namespace deltaserve::worker
