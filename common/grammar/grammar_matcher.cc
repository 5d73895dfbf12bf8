// The pushdown automaton behind GrammarMatcher, determinised lazily (see grammar_matcher.h).
//
// The grammar is flattened into one array of symbols, each alternative followed by an end mark,
// so a position in a rule is one index. A stack node is (position, parent): the symbol to match
// next, and the node to continue at once this rule's alternative ends (kNoParent: the root ends).
// Nodes are interned, so a node id stands for a whole stack and equal stacks share one id. A
// state is the sorted set of node ids whose next symbol is a byte class, plus whether the root
// can end there; the closure that produces it expands rule references, empty alternatives and
// ends (pops), with a visited set so nullable rules terminate (Build refused left recursion, so
// the closure is finite).
//
// A reference that is the last symbol of its alternative continues directly at the parent (a tail
// call): so the loop rules of Star/Plus/Repeat keep their stacks flat, and a state inside a long
// string or array repeats instead of growing with every element — which is what makes the
// transition table and the token-mask cache hit.
#include "common/grammar/grammar_matcher.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"

namespace deltaserve::common::grammar {
namespace {

constexpr uint32_t kNoParent = UINT32_MAX;
// Flat symbol encoding: the kind in the top two bits, the index below.
constexpr uint32_t kKindShift = 30;
constexpr uint32_t kIndexMask = (1u << kKindShift) - 1;
constexpr uint32_t kBytesKind = 0, kRuleKind = 1, kEndKind = 2;

uint32_t Kind(uint32_t symbol) { return symbol >> kKindShift; }
uint32_t Index(uint32_t symbol) { return symbol & kIndexMask; }

// A state's key in the interning map: its node ids, then the accepting flag.
struct StateKeyHash {
  using is_transparent = void;
  size_t operator()(const std::vector<uint32_t>& v) const {
    return absl::HashOf(absl::MakeConstSpan(v));
  }
};

}  // namespace

struct CompiledGrammar::Impl {
  std::vector<uint32_t> flat;             // symbols, see kKindShift
  std::vector<uint32_t> alt_begin;        // rule r's alternatives start at alt_start[alt_begin[r]..
  std::vector<uint32_t> alt_start;        // flat positions of each alternative's first symbol
  std::vector<ByteClass> classes;         // the grammar's byte classes (by Symbol index)
  std::array<uint8_t, 256> class_rep{};   // a representative byte of each byte class
  CompiledGrammarLimits limits;

  struct Node {
    uint32_t pos;
    uint32_t parent;
  };
  std::vector<Node> nodes;
  absl::flat_hash_map<uint64_t, uint32_t> node_ids;  // pos << 32 | parent -> node id

  std::vector<uint32_t> state_begin{0};  // state s's nodes: state_nodes[state_begin[s]..[s+1])
  std::vector<uint32_t> state_nodes;
  std::vector<uint8_t> accepting;
  absl::flat_hash_map<std::vector<uint32_t>, StateId, StateKeyHash> state_ids;
  StateId initial = kDeadState;
  bool exhausted = false;

  // Closure scratch, reused across steps.
  std::vector<uint32_t> work, result;
  std::vector<uint32_t> visited;  // node id -> epoch it was last visited in
  uint32_t epoch = 0;

  // The expansion of a rule under a continuation node: the nodes at byte classes it reaches,
  // and whether it can end (derive the empty string) and so continue at `cont`. Nodes are
  // interned, so it is the same every time: computed once, it spares the closure re-interning
  // every alternative of every nested rule at each step (json_char's 17 alternatives under
  // each count of a long maxLength string were most of a step's time).
  struct Expansion {
    std::vector<uint32_t> tops;
    bool reaches_cont = false;
  };
  std::vector<Expansion> expansions;
  absl::flat_hash_map<uint64_t, uint32_t> expansion_ids;  // rule << 32 | cont
  std::vector<uint32_t> xwork;
  std::vector<uint32_t> xvisited;  // node id -> expansion epoch
  uint32_t xepoch = 0;

  // The node for (pos, parent), or kNoParent when the node limit is reached.
  uint32_t InternNode(uint32_t pos, uint32_t parent) {
    const uint64_t key = uint64_t{pos} << 32 | parent;
    auto it = node_ids.find(key);
    if (it != node_ids.end()) return it->second;
    if (nodes.size() >= limits.max_stack_nodes) {
      exhausted = true;
      return kNoParent;
    }
    const uint32_t id = static_cast<uint32_t>(nodes.size());
    nodes.push_back({pos, parent});
    visited.push_back(0);
    xvisited.push_back(0);
    node_ids.emplace(key, id);
    return id;
  }

  // Pushes the node continuing at flat position `pos` under `parent`: a position at an end mark
  // is the parent itself (or the root's end), so no node is made for it.
  bool PushContinuation(uint32_t pos, uint32_t parent, bool& accepts) {
    if (Kind(flat[pos]) == kEndKind) {
      if (parent == kNoParent) {
        accepts = true;
      } else {
        work.push_back(parent);
      }
      return true;
    }
    const uint32_t node = InternNode(pos, parent);
    if (node == kNoParent) return false;
    work.push_back(node);
    return true;
  }

  // The expansion of `rule` under `cont` (see Expansion); nullptr on a limit.
  const Expansion* Expand(uint32_t rule, uint32_t cont) {
    const uint64_t key = uint64_t{rule} << 32 | cont;
    if (auto it = expansion_ids.find(key); it != expansion_ids.end()) {
      return &expansions[it->second];
    }
    Expansion e;
    if (++xepoch == 0) {
      std::fill(xvisited.begin(), xvisited.end(), 0);
      xepoch = 1;
    }
    xwork.clear();
    // Pushes the node at `pos` under `parent`; an end mark pops to the parent at once (a parent
    // is never at an end mark: see PushContinuation), and reaching `cont` is the rule's end.
    auto push = [&](uint32_t pos, uint32_t parent) {
      if (Kind(flat[pos]) == kEndKind) {
        if (parent == cont) {
          e.reaches_cont = true;
        } else {
          xwork.push_back(parent);
        }
        return true;
      }
      const uint32_t node = InternNode(pos, parent);
      if (node == kNoParent) return false;
      xwork.push_back(node);
      return true;
    };
    for (uint32_t a = alt_begin[rule]; a < alt_begin[rule + 1]; ++a) {
      if (!push(alt_start[a], cont)) return nullptr;
    }
    while (!xwork.empty()) {
      const uint32_t id = xwork.back();
      xwork.pop_back();
      if (xvisited[id] == xepoch) continue;
      xvisited[id] = xepoch;
      const Node node = nodes[id];
      const uint32_t symbol = flat[node.pos];
      if (Kind(symbol) == kBytesKind) {
        e.tops.push_back(id);
        continue;
      }
      uint32_t inner = node.parent;
      if (Kind(flat[node.pos + 1]) != kEndKind) {
        inner = InternNode(node.pos + 1, node.parent);
        if (inner == kNoParent) return nullptr;
      }
      const uint32_t r = Index(symbol);
      for (uint32_t a = alt_begin[r]; a < alt_begin[r + 1]; ++a) {
        if (!push(alt_start[a], inner)) return nullptr;
      }
    }
    expansion_ids.emplace(key, static_cast<uint32_t>(expansions.size()));
    expansions.push_back(std::move(e));
    return &expansions.back();
  }

  // Expands `work` into `result` (nodes at byte classes) and `accepts`; false on a limit.
  bool Close(bool& accepts) {
    while (!work.empty()) {
      const uint32_t id = work.back();
      work.pop_back();
      if (visited[id] == epoch) continue;
      visited[id] = epoch;
      const Node node = nodes[id];
      const uint32_t symbol = flat[node.pos];
      if (Kind(symbol) == kBytesKind) {
        result.push_back(id);
        continue;
      }
      // A rule reference (Close never sees an end mark: PushContinuation skips them): its
      // expansion under the continuation, and the continuation itself where it can end.
      uint32_t cont = node.parent;
      if (Kind(flat[node.pos + 1]) != kEndKind) {
        cont = InternNode(node.pos + 1, node.parent);
        if (cont == kNoParent) return false;
      }
      const Expansion* e = Expand(Index(symbol), cont);
      if (e == nullptr) return false;
      for (uint32_t top : e->tops) {
        if (visited[top] != epoch) {
          visited[top] = epoch;
          result.push_back(top);
        }
      }
      if (e->reaches_cont) {
        if (cont == kNoParent) {
          accepts = true;
        } else {
          work.push_back(cont);
        }
      }
    }
    if (result.size() > limits.max_stacks_per_state) {
      exhausted = true;
      return false;
    }
    return true;
  }

  void BeginClosure() {
    work.clear();
    result.clear();
    if (++epoch == 0) {  // wrapped: forget every mark
      std::fill(visited.begin(), visited.end(), 0);
      epoch = 1;
    }
  }

  // Interns the state (result, accepts); kDeadState for the empty non-accepting set, and on the
  // state limit.
  StateId InternState(bool accepts, size_t class_count, std::vector<StateId>& transitions) {
    std::sort(result.begin(), result.end());
    result.push_back(accepts ? 1 : 0);
    auto it = state_ids.find(result);
    if (it != state_ids.end()) return it->second;
    if (accepting.size() >= limits.max_states) {
      exhausted = true;
      return kDeadState;
    }
    const StateId id = static_cast<StateId>(accepting.size());
    state_nodes.insert(state_nodes.end(), result.begin(), result.end() - 1);
    state_begin.push_back(static_cast<uint32_t>(state_nodes.size()));
    accepting.push_back(accepts ? 1 : 0);
    transitions.resize(transitions.size() + class_count, kUnknownState);
    state_ids.emplace(result, id);
    return id;
  }
};

CompiledGrammar::CompiledGrammar(Grammar grammar, const CompiledGrammarLimits& limits)
    : grammar_(std::move(grammar)), impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.limits = limits;
  m.classes = grammar_.byte_classes();
  const std::vector<Rule>& rules = grammar_.rules();
  m.alt_begin.reserve(rules.size() + 1);
  for (const Rule& rule : rules) {
    m.alt_begin.push_back(static_cast<uint32_t>(m.alt_start.size()));
    for (const Alternative& alt : rule.alternatives) {
      m.alt_start.push_back(static_cast<uint32_t>(m.flat.size()));
      for (const Symbol& s : alt) {
        m.flat.push_back((s.kind == Symbol::Kind::kRule ? kRuleKind : kBytesKind) << kKindShift |
                         s.index);
      }
      m.flat.push_back(kEndKind << kKindShift);
    }
  }
  m.alt_begin.push_back(static_cast<uint32_t>(m.alt_start.size()));

  // Byte equivalence classes: refine the partition of 0..255 by each byte class in turn.
  class_of_.fill(0);
  class_count_ = 1;
  for (const ByteClass& c : m.classes) {
    std::array<int16_t, 512> split;
    split.fill(-1);
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      int16_t& to = split[class_of_[b] * 2 + (c.Has(static_cast<uint8_t>(b)) ? 1 : 0)];
      if (to < 0) to = static_cast<int16_t>(n++);
      class_of_[b] = static_cast<uint8_t>(to);
    }
    class_count_ = n;
  }
  for (int b = 255; b >= 0; --b) m.class_rep[class_of_[b]] = static_cast<uint8_t>(b);

  // State 0 is the dead state; all its transitions lead back to it.
  m.state_ids.emplace(std::vector<uint32_t>{0}, kDeadState);
  m.state_begin.push_back(0);
  m.accepting.push_back(0);
  transitions_.assign(class_count_, kDeadState);

  m.BeginClosure();
  bool accepts = false;
  bool ok = true;
  if (grammar_.root() < rules.size()) {
    const uint32_t root = grammar_.root();
    for (uint32_t a = m.alt_begin[root]; ok && a < m.alt_begin[root + 1]; ++a) {
      ok = m.PushContinuation(m.alt_start[a], kNoParent, accepts);
    }
  }
  if (ok && m.Close(accepts)) m.initial = m.InternState(accepts, class_count_, transitions_);
  published_memory_bytes_.store(memory_bytes(), std::memory_order_relaxed);
}

CompiledGrammar::~CompiledGrammar() = default;

StateId CompiledGrammar::initial_state() const { return impl_->initial; }

StateId CompiledGrammar::StepSlow(StateId state, uint8_t byte) {
  Impl& m = *impl_;
  if (state == kDeadState || state + 1 >= m.state_begin.size()) return kDeadState;
  const uint32_t cls = class_of_[byte];
  const uint8_t rep = m.class_rep[cls];
  m.BeginClosure();
  bool accepts = false;
  for (uint32_t i = m.state_begin[state]; i < m.state_begin[state + 1]; ++i) {
    const Impl::Node node = m.nodes[m.state_nodes[i]];
    if (!m.classes[Index(m.flat[node.pos])].Has(rep)) continue;
    if (!m.PushContinuation(node.pos + 1, node.parent, accepts)) return kDeadState;
  }
  if (!m.Close(accepts)) return kDeadState;  // a limit: not cached, exhausted() says why
  const bool empty = m.result.empty() && !accepts;
  const size_t states_before = m.accepting.size();
  const StateId next = m.InternState(accepts, class_count_, transitions_);
  if (next == kDeadState && !empty) return next;  // the state limit: not cached
  transitions_[state * class_count_ + cls] = next;
  if (m.accepting.size() != states_before) {
    published_memory_bytes_.store(memory_bytes(), std::memory_order_relaxed);
  }
  return next;
}

bool CompiledGrammar::IsAccepting(StateId state) const {
  return state < impl_->accepting.size() && impl_->accepting[state] != 0;
}

bool CompiledGrammar::CanContinue(StateId state) const {
  const Impl& m = *impl_;
  return state != kDeadState && state + 1 < m.state_begin.size() &&
         m.state_begin[state + 1] > m.state_begin[state];
}

bool CompiledGrammar::exhausted() const { return impl_->exhausted; }

size_t CompiledGrammar::state_count() const { return impl_->accepting.size(); }

size_t CompiledGrammar::memory_bytes() const {
  const Impl& m = *impl_;
  // Hash maps: about one key/value slot per entry plus a control byte, at up to 7/8 load.
  const size_t node_map = m.node_ids.capacity() * (sizeof(uint64_t) + sizeof(uint32_t) + 1);
  const size_t state_map =
      m.state_ids.capacity() * (sizeof(std::vector<uint32_t>) + sizeof(StateId) + 1) +
      m.state_nodes.size() * sizeof(uint32_t);
  return transitions_.capacity() * sizeof(StateId) + m.nodes.capacity() * sizeof(Impl::Node) +
         m.visited.capacity() * sizeof(uint32_t) + m.state_nodes.capacity() * sizeof(uint32_t) +
         m.state_begin.capacity() * sizeof(uint32_t) + m.accepting.capacity() + node_map +
         state_map + m.flat.capacity() * sizeof(uint32_t);
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), state_(grammar_->initial_state()) {}

bool GrammarMatcher::AcceptByte(uint8_t byte) {
  const StateId next = grammar_->Step(state_, byte);
  if (next == kDeadState) return false;
  state_ = next;
  return true;
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  StateId s = state_;
  for (char ch : bytes) {
    s = grammar_->Step(s, static_cast<uint8_t>(ch));
    if (s == kDeadState) return false;
  }
  state_ = s;
  return true;
}

}  // namespace deltaserve::common::grammar
