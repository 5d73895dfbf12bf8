#include "worker/sampling/internal/token_mask_loops.h"

#include <algorithm>

namespace deltaserve::worker::internal {
namespace {

using common::grammar::kDeadState;
using Node = TokenTrie::Node;

// Where a UTF-8 decoder stands after a path of the trie.
struct Utf8Position {
  uint8_t need = 0;              // continuation bytes still expected
  uint8_t lo = 0x80, hi = 0xbf;  // range of the next continuation byte
  uint8_t len = 0;               // bytes of the current incomplete character
  std::array<uint8_t, 3> partial{};
  uint16_t chars = 0;  // complete characters so far
};

// Classifies the nodes [begin, end) (whole subtrees below depth `base`, where a character
// boundary is assumed) into tokens inside the shape — inside(token, characters), an incomplete
// last character counting as one — and exits. With max_chars > 0, starting character
// max_chars + 1 is an exit too.
template <typename Inside>
void ScanLoop(const TokenTrie& trie, const LoopKey& key, uint32_t begin, uint32_t end,
              uint16_t base, int max_chars, std::vector<Utf8Position>& at, Inside inside_token,
              std::vector<LoopIndex::Exit>& exits) {
  const std::vector<Node>& nodes = trie.nodes();
  at[base] = Utf8Position{};
  for (uint32_t i = begin; i < end;) {
    const Node& node = nodes[i];
    const Utf8Position& p = at[node.depth - 1];
    const uint8_t b = node.byte;
    Utf8Position q = p;
    bool inside = false;
    if (p.need == 0) {
      if (max_chars > 0 && p.chars >= max_chars) {
        inside = false;
      } else if (b < 0x80) {
        inside = key.HasAscii(b);
        ++q.chars;
      } else if (key.utf8 && b >= 0xc2 && b <= 0xf4) {
        inside = true;
        q.need = b < 0xe0 ? 1 : b < 0xf0 ? 2 : 3;
        q.lo = b == 0xe0 ? 0xa0 : b == 0xf0 ? 0x90 : 0x80;
        q.hi = b == 0xed ? 0x9f : b == 0xf4 ? 0x8f : 0xbf;
        q.len = 1;
        q.partial[0] = b;
      }
    } else if (b >= p.lo && b <= p.hi) {
      inside = true;
      q.lo = 0x80;
      q.hi = 0xbf;
      if (--q.need == 0) {
        q.len = 0;
        ++q.chars;
      } else {
        q.partial[q.len++] = b;
      }
    }
    if (!inside) {
      exits.push_back({i, p.chars, p.len, p.partial});
      i = node.subtree_end;
      continue;
    }
    at[node.depth] = q;
    if (node.token >= 0) inside_token(node.token, q.chars + (q.len > 0 ? 1 : 0));
    ++i;
  }
}

// Whether every well-formed multi-byte UTF-8 character leads from `s` to `target`. The grammar's
// byte classes make one byte per class and position enough; a grammar that splits the ranges
// into too many classes to check cheaply counts as "no".
bool AllCharactersLead(CompiledGrammar& g, StateId s, StateId target) {
  struct Shape {
    int n;
    uint8_t lo[4], hi[4];
  };
  static constexpr Shape kShapes[] = {
      {2, {0xc2, 0x80}, {0xdf, 0xbf}},
      {3, {0xe0, 0xa0, 0x80}, {0xe0, 0xbf, 0xbf}},
      {3, {0xe1, 0x80, 0x80}, {0xec, 0xbf, 0xbf}},
      {3, {0xed, 0x80, 0x80}, {0xed, 0x9f, 0xbf}},
      {3, {0xee, 0x80, 0x80}, {0xef, 0xbf, 0xbf}},
      {4, {0xf0, 0x90, 0x80, 0x80}, {0xf0, 0xbf, 0xbf, 0xbf}},
      {4, {0xf1, 0x80, 0x80, 0x80}, {0xf3, 0xbf, 0xbf, 0xbf}},
      {4, {0xf4, 0x80, 0x80, 0x80}, {0xf4, 0x8f, 0xbf, 0xbf}},
  };
  const std::array<uint8_t, 256>& cls = g.byte_class();
  for (const Shape& shape : kShapes) {
    std::vector<uint8_t> reps[4];  // one representative byte per class at each position
    size_t combinations = 1;
    for (int k = 0; k < shape.n; ++k) {
      std::array<bool, 256> seen{};
      for (int b = shape.lo[k]; b <= shape.hi[k]; ++b) {
        if (!seen[cls[b]]) {
          seen[cls[b]] = true;
          reps[k].push_back(static_cast<uint8_t>(b));
        }
      }
      combinations *= reps[k].size();
    }
    if (combinations > 512) return false;
    std::array<size_t, 4> digit{};  // an odometer over the combinations
    for (size_t c = 0; c < combinations; ++c) {
      StateId q = s;
      for (int k = 0; k < shape.n && q != kDeadState; ++k) q = g.Step(q, reps[k][digit[k]]);
      if (q != target) return false;
      for (int k = shape.n - 1; k >= 0; --k) {
        if (++digit[k] < reps[k].size()) break;
        digit[k] = 0;
      }
    }
  }
  return true;
}

}  // namespace

void WalkSubtrees(const TokenTrie& trie, CompiledGrammar& g, uint32_t begin, uint32_t end,
                  StateId from, StateId* states, uint64_t* words) {
  // The hot loop of every mask: raw table lookups, a call out only for a transition not
  // computed yet (the table may then move).
  const Node* nodes = trie.nodes().data();
  const uint8_t* byte_class = g.byte_class().data();
  const uint32_t classes = g.class_count();
  const StateId* table = g.transition_table();
  states[nodes[begin].depth - 1] = from;
  for (uint32_t i = begin; i < end;) {
    const Node& node = nodes[i];
    const StateId at = states[node.depth - 1];
    StateId next = table[at * classes + byte_class[node.byte]];
    if (next == CompiledGrammar::kUnknownState) {
      next = g.Step(at, node.byte);
      table = g.transition_table();
    }
    if (next == kDeadState) {
      i = node.subtree_end;
      continue;
    }
    states[node.depth] = next;
    if (node.token >= 0) words[node.token >> 6] |= uint64_t{1} << (node.token & 63);
    ++i;
  }
}

void BuildRootIndex(const TokenTrie& trie, const LoopKey& key, LoopIndex& index) {
  if (index.root_built) return;
  index.within.assign((trie.n_vocab() + 63) / 64, 0);
  std::vector<Utf8Position> at(trie.max_depth() + 1);
  ScanLoop(
      trie, key, 0, static_cast<uint32_t>(trie.nodes().size()), 0, 0, at,
      [&](int32_t t, int) { index.within[t >> 6] |= uint64_t{1} << (t & 63); }, index.exits);
  index.root_built = true;
}

void BuildFirstByteIndex(const TokenTrie& trie, const LoopKey& key, LoopIndex& index) {
  if (index.first_byte_built) return;
  std::vector<Utf8Position> at(trie.max_depth() + 1);
  const std::vector<Node>& nodes = trie.nodes();
  const uint32_t n = static_cast<uint32_t>(nodes.size());
  int byte = 0;
  for (uint32_t r = 0; r < n; r = nodes[r].subtree_end) {
    for (; byte <= nodes[r].byte; ++byte) {
      index.within1_begin[byte] = static_cast<uint32_t>(index.within1.size());
      index.exits1_begin[byte] = static_cast<uint32_t>(index.exits1.size());
    }
    ScanLoop(
        trie, key, r + 1, nodes[r].subtree_end, 1, 0, at,
        [&](int32_t t, int) { index.within1.push_back(t); }, index.exits1);
  }
  for (; byte <= 256; ++byte) {
    index.within1_begin[byte] = static_cast<uint32_t>(index.within1.size());
    index.exits1_begin[byte] = static_cast<uint32_t>(index.exits1.size());
  }
  index.first_byte_built = true;
}

void BuildChainIndex(const TokenTrie& trie, const LoopKey& key, LoopIndex& index) {
  if (index.chain_built) return;
  constexpr int kMax = LoopIndex::kChainChars;
  std::vector<std::vector<int32_t>> by_chars(kMax + 1);
  std::vector<Utf8Position> at(trie.max_depth() + 1);
  ScanLoop(
      trie, key, 0, static_cast<uint32_t>(trie.nodes().size()), 0, kMax, at,
      [&](int32_t t, int chars) { by_chars[chars].push_back(t); }, index.chain_exits);
  index.by_chars_begin[0] = 0;
  for (int c = 0; c <= kMax; ++c) {
    index.by_chars.insert(index.by_chars.end(), by_chars[c].begin(), by_chars[c].end());
    index.by_chars_begin[c + 1] = static_cast<uint32_t>(index.by_chars.size());
  }
  index.chain_built = true;
}

bool LoopShapeOf(CompiledGrammar& g, StateId s, LoopKey& key, StateId& next) {
  const std::array<uint8_t, 256>& cls = g.byte_class();
  std::array<StateId, 256> by_class;  // per class, where its ASCII bytes lead
  by_class.fill(CompiledGrammar::kUnknownState);
  std::array<StateId, 128> to{};
  for (int b = 0; b < 0x80; ++b) {
    StateId& t = by_class[cls[b]];
    if (t == CompiledGrammar::kUnknownState) t = g.Step(s, static_cast<uint8_t>(b));
    to[b] = t;
  }
  // The target most ASCII bytes share (a few distinct targets at most, so count by scanning).
  StateId best = kDeadState;
  int best_count = 0;
  for (int b = 0; b < 0x80; ++b) {
    if (to[b] == kDeadState || to[b] == best) continue;
    const int count = static_cast<int>(std::count(to.begin(), to.end(), to[b]));
    if (count > best_count) {
      best = to[b];
      best_count = count;
    }
  }
  if (best_count < 16) return false;
  for (int b = 0; b < 0x80; ++b) {
    if (to[b] == best) key.ascii[b >> 6] |= uint64_t{1} << (b & 63);
  }
  key.utf8 = AllCharactersLead(g, s, best);
  next = best;
  return true;
}

bool ShapeEndsAt(CompiledGrammar& g, StateId s, const LoopKey& key) {
  for (int b = 0; b < 0x80; ++b) {
    if (key.HasAscii(static_cast<uint8_t>(b)) && g.Step(s, static_cast<uint8_t>(b)) != kDeadState) {
      return false;
    }
  }
  if (key.utf8) {
    for (int b = 0xc2; b <= 0xf4; ++b) {
      if (g.Step(s, static_cast<uint8_t>(b)) != kDeadState) return false;
    }
  }
  return true;
}

}  // namespace deltaserve::worker::internal
