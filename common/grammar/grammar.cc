#include "common/grammar/grammar.h"

#include <algorithm>
#include <bit>
#include <deque>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace deltaserve::common::grammar {
namespace {

// One byte as it appears inside a quoted literal or a bracket class.
void AppendEscapedByte(uint8_t byte, bool in_class, std::string& out) {
  switch (byte) {
    case '\\': out += "\\\\"; return;
    case '\n': out += "\\n"; return;
    case '\r': out += "\\r"; return;
    case '\t': out += "\\t"; return;
    default: break;
  }
  if ((!in_class && byte == '"') || (in_class && (byte == ']' || byte == '-' || byte == '^'))) {
    out += '\\';
    out += static_cast<char>(byte);
  } else if (byte < 0x20 || byte >= 0x7f) {
    absl::StrAppendFormat(&out, "\\x%02x", byte);
  } else {
    out += static_cast<char>(byte);
  }
}

// `[ranges]` of the bytes in `c`.
std::string BracketRanges(const ByteClass& c) {
  std::string out;
  for (int b = 0; b < 256;) {
    if (!c.Has(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && c.Has(static_cast<uint8_t>(e + 1))) ++e;
    AppendEscapedByte(static_cast<uint8_t>(b), /*in_class=*/true, out);
    if (e > b) {
      if (e > b + 1) out += '-';
      AppendEscapedByte(static_cast<uint8_t>(e), /*in_class=*/true, out);
    }
    b = e + 1;
  }
  return out;
}

}  // namespace

ByteClass ByteClass::Of(uint8_t byte) {
  ByteClass c;
  c.Add(byte);
  return c;
}

ByteClass ByteClass::Range(uint8_t lo, uint8_t hi) {
  ByteClass c;
  c.AddRange(lo, hi);
  return c;
}

ByteClass ByteClass::Any() { return Range(0, 255); }

void ByteClass::AddRange(uint8_t lo, uint8_t hi) {
  for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
}

void ByteClass::AddClass(const ByteClass& other) {
  for (int i = 0; i < 4; ++i) bits_[i] |= other.bits_[i];
}

ByteClass ByteClass::Complement() const {
  ByteClass c;
  for (int i = 0; i < 4; ++i) c.bits_[i] = ~bits_[i];
  return c;
}

int ByteClass::Count() const {
  int n = 0;
  for (uint64_t w : bits_) n += std::popcount(w);
  return n;
}

std::string ByteClass::ToString() const {
  const int n = Count();
  if (n == 1) {
    std::string out = "\"";
    for (int b = 0; b < 256; ++b) {
      if (Has(static_cast<uint8_t>(b))) AppendEscapedByte(static_cast<uint8_t>(b), false, out);
    }
    return out + "\"";
  }
  if (n == 256) return "[\\x00-\\xff]";
  if (n > 128) return absl::StrCat("[^", BracketRanges(Complement()), "]");
  return absl::StrCat("[", BracketRanges(*this), "]");
}

size_t Grammar::symbol_count() const {
  size_t n = 0;
  for (const Rule& r : rules_) {
    for (const Alternative& a : r.alternatives) n += a.size();
  }
  return n;
}

std::string Grammar::ToString() const {
  // Rules in breadth-first order from the root, then any the root does not reach.
  std::vector<RuleId> order;
  std::vector<bool> listed(rules_.size(), false);
  auto visit_from = [&](RuleId start) {
    if (listed[start]) return;
    std::deque<RuleId> queue{start};
    listed[start] = true;
    while (!queue.empty()) {
      const RuleId r = queue.front();
      queue.pop_front();
      order.push_back(r);
      for (const Alternative& a : rules_[r].alternatives) {
        for (const Symbol& s : a) {
          if (s.kind == Symbol::Kind::kRule && !listed[s.index]) {
            listed[s.index] = true;
            queue.push_back(s.index);
          }
        }
      }
    }
  };
  if (root_ < rules_.size()) visit_from(root_);
  for (RuleId r = 0; r < rules_.size(); ++r) visit_from(r);

  std::string out;
  for (RuleId r : order) {
    absl::StrAppend(&out, rules_[r].name, " ::=");
    const auto& alts = rules_[r].alternatives;
    if (alts.empty()) out += " []";  // matches nothing
    for (size_t i = 0; i < alts.size(); ++i) {
      if (i > 0) out += " |";
      if (alts[i].empty()) out += " \"\"";
      std::string literal;  // a pending run of single-byte symbols
      auto flush = [&] {
        if (!literal.empty()) absl::StrAppend(&out, " \"", literal, "\"");
        literal.clear();
      };
      for (const Symbol& s : alts[i]) {
        if (s.kind == Symbol::Kind::kRule) {
          flush();
          absl::StrAppend(&out, " ", rules_[s.index].name);
          continue;
        }
        const ByteClass& c = byte_classes_[s.index];
        if (c.Count() == 1) {
          for (int b = 0; b < 256; ++b) {
            if (c.Has(static_cast<uint8_t>(b))) {
              AppendEscapedByte(static_cast<uint8_t>(b), false, literal);
            }
          }
        } else {
          flush();
          absl::StrAppend(&out, " ", c.ToString());
        }
      }
      flush();
    }
    out += "\n";
  }
  return out;
}

RuleId GrammarBuilder::AddRule(std::string_view name) {
  const std::string base(name.empty() ? "rule" : name);
  std::string unique = base;
  for (int suffix = 2; rule_by_name_.contains(unique); ++suffix) {
    unique = absl::StrCat(base, "_", suffix);
  }
  const RuleId id = static_cast<RuleId>(grammar_.rules_.size());
  rule_by_name_.emplace(unique, id);
  grammar_.rules_.push_back(Rule{std::move(unique), {}});
  return id;
}

void GrammarBuilder::AddAlternative(RuleId rule, Alternative alternative) {
  // An out-of-range rule is kept as a dangling reference for Build to report, never UB here.
  if (rule >= grammar_.rules_.size()) {
    invalid_rule_ = rule;
    return;
  }
  grammar_.rules_[rule].alternatives.push_back(std::move(alternative));
}

Symbol GrammarBuilder::Bytes(const ByteClass& c) {
  auto [it, inserted] =
      class_index_.try_emplace(c, static_cast<uint32_t>(grammar_.byte_classes_.size()));
  if (inserted) grammar_.byte_classes_.push_back(c);
  return Symbol{Symbol::Kind::kBytes, it->second};
}

Alternative GrammarBuilder::Literal(std::string_view text) {
  Alternative out;
  out.reserve(text.size());
  for (char ch : text) out.push_back(Bytes(ByteClass::Of(static_cast<uint8_t>(ch))));
  return out;
}

RuleId GrammarBuilder::Optional(std::string_view name, Alternative body) {
  const RuleId r = AddRule(name);
  AddAlternative(r, std::move(body));
  AddAlternative(r, {});
  return r;
}

RuleId GrammarBuilder::Star(std::string_view name, Alternative body) {
  const RuleId r = AddRule(name);
  body.push_back(Symbol::Rule(r));
  AddAlternative(r, std::move(body));
  AddAlternative(r, {});
  return r;
}

RuleId GrammarBuilder::Plus(std::string_view name, Alternative body) {
  const RuleId r = AddRule(name);
  const RuleId rest = Star(absl::StrCat(grammar_.rules_[r].name, "_rest"), body);
  body.push_back(Symbol::Rule(rest));
  AddAlternative(r, std::move(body));
  return r;
}

RuleId GrammarBuilder::Repeat(std::string_view name, Alternative body, int min, int max) {
  min = std::max(min, 0);
  const RuleId r = AddRule(name);
  if (max >= 0 && min > max) return r;  // no alternatives: matches nothing
  Alternative seq;
  seq.reserve(body.size() * min + 1);
  for (int i = 0; i < min; ++i) seq.insert(seq.end(), body.begin(), body.end());
  const std::string base = grammar_.rules_[r].name;  // a copy: AddRule below grows rules_
  if (max < 0) {
    seq.push_back(Symbol::Rule(Star(absl::StrCat(base, "_more"), body)));
  } else if (max > min) {
    // opt_k ::= body opt_{k-1} | "" — at most max - min more, one rule per remaining count, so
    // that a state knows exactly how many are left.
    const std::string prefix = absl::StrCat(base, "_upto");
    RuleId tail = AddRule(absl::StrCat(prefix, 1));
    AddAlternative(tail, body);
    AddAlternative(tail, {});
    for (int k = 2; k <= max - min; ++k) {
      const RuleId next = AddRule(absl::StrCat(prefix, k));
      Alternative alt = body;
      alt.push_back(Symbol::Rule(tail));
      AddAlternative(next, std::move(alt));
      AddAlternative(next, {});
      tail = next;
    }
    seq.push_back(Symbol::Rule(tail));
  }
  AddAlternative(r, std::move(seq));
  return r;
}

RuleId GrammarBuilder::Choice(std::string_view name, std::vector<Alternative> choices) {
  const RuleId r = AddRule(name);
  for (Alternative& a : choices) AddAlternative(r, std::move(a));
  return r;
}

size_t GrammarBuilder::symbol_count() const { return grammar_.symbol_count(); }

}  // namespace deltaserve::common::grammar

namespace deltaserve::common::grammar {
namespace {

// (rule, alternative) pairs numbered densely, and for each rule where it is used.
struct AltIndex {
  std::vector<std::pair<RuleId, uint32_t>> alts;
  std::vector<std::vector<uint32_t>> uses;  // rule -> alt numbers, once per occurrence
};

AltIndex IndexAlternatives(const std::vector<Rule>& rules) {
  AltIndex index;
  index.uses.resize(rules.size());
  for (RuleId r = 0; r < rules.size(); ++r) {
    for (uint32_t a = 0; a < rules[r].alternatives.size(); ++a) {
      const uint32_t id = static_cast<uint32_t>(index.alts.size());
      index.alts.emplace_back(r, a);
      for (const Symbol& s : rules[r].alternatives[a]) {
        if (s.kind == Symbol::Kind::kRule) index.uses[s.index].push_back(id);
      }
    }
  }
  return index;
}

// The least fixpoint "rule r has an alternative whose symbols all satisfy `holds`", where a
// byte symbol satisfies it when `bytes_ok(class)` and a rule symbol when the rule is in the set.
// A worklist over the alternatives, linear in the grammar's size.
template <typename BytesOk>
std::vector<bool> RuleFixpoint(const std::vector<Rule>& rules,
                               const std::vector<ByteClass>& classes, const AltIndex& index,
                               BytesOk bytes_ok) {
  std::vector<bool> in_set(rules.size(), false);
  std::vector<int64_t> pending(index.alts.size(), 0);
  std::vector<RuleId> queue;
  auto add_rule = [&](RuleId r) {
    if (!in_set[r]) {
      in_set[r] = true;
      queue.push_back(r);
    }
  };
  for (uint32_t id = 0; id < index.alts.size(); ++id) {
    const auto [r, a] = index.alts[id];
    for (const Symbol& s : rules[r].alternatives[a]) {
      if (s.kind == Symbol::Kind::kRule) {
        ++pending[id];
      } else if (!bytes_ok(classes[s.index])) {
        pending[id] = -1;  // never
        break;
      }
    }
    if (pending[id] == 0) add_rule(r);
  }
  while (!queue.empty()) {
    const RuleId done = queue.back();
    queue.pop_back();
    for (uint32_t id : index.uses[done]) {
      if (pending[id] > 0 && --pending[id] == 0) add_rule(index.alts[id].first);
    }
  }
  return in_set;
}

}  // namespace

absl::StatusOr<Grammar> GrammarBuilder::Build(RuleId root, const GrammarLimits& limits) && {
  std::vector<Rule>& rules = grammar_.rules_;
  const std::vector<ByteClass>& classes = grammar_.byte_classes_;
  if (invalid_rule_ >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: an alternative was added to rule ", invalid_rule_,
                     ", which does not exist (", rules.size(), " rules)"));
  }
  if (root >= rules.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: root rule ", root, " does not exist (", rules.size(), " rules)"));
  }
  if (rules.size() > limits.max_rules) {
    return absl::InvalidArgumentError(absl::StrCat("grammar too large: ", rules.size(),
                                                   " rules (limit ", limits.max_rules, ")"));
  }
  const size_t symbols = grammar_.symbol_count();
  if (symbols > limits.max_symbols) {
    return absl::InvalidArgumentError(absl::StrCat("grammar too large: ", symbols,
                                                   " symbols (limit ", limits.max_symbols, ")"));
  }
  for (const Rule& rule : rules) {
    for (const Alternative& alt : rule.alternatives) {
      for (const Symbol& s : alt) {
        const size_t bound = s.kind == Symbol::Kind::kRule ? rules.size() : classes.size();
        if (s.index >= bound) {
          return absl::InvalidArgumentError(absl::StrCat(
              "grammar: rule ", rule.name, " refers to a missing ",
              s.kind == Symbol::Kind::kRule ? "rule " : "byte class ", s.index));
        }
      }
    }
  }

  // Drop what can never match, so that every live parse can still be completed.
  {
    const AltIndex index = IndexAlternatives(rules);
    const std::vector<bool> productive =
        RuleFixpoint(rules, classes, index, [](const ByteClass& c) { return !c.Empty(); });
    if (!productive[root]) {
      return absl::InvalidArgumentError(
          absl::StrCat("grammar: the root rule ", rules[root].name, " matches no string"));
    }
    for (Rule& rule : rules) {
      std::erase_if(rule.alternatives, [&](const Alternative& alt) {
        return std::any_of(alt.begin(), alt.end(), [&](const Symbol& s) {
          return s.kind == Symbol::Kind::kRule ? !productive[s.index] : classes[s.index].Empty();
        });
      });
    }
  }

  // Left recursion: an edge r -> s when s can be the first thing r expands into without a byte
  // consumed (after nullable rules); a cycle is refused. Iterative DFS: rule chains can be long.
  const AltIndex index = IndexAlternatives(rules);
  const std::vector<bool> nullable =
      RuleFixpoint(rules, classes, index, [](const ByteClass&) { return false; });
  std::vector<std::vector<RuleId>> edges(rules.size());
  for (RuleId r = 0; r < rules.size(); ++r) {
    for (const Alternative& alt : rules[r].alternatives) {
      for (const Symbol& s : alt) {
        if (s.kind != Symbol::Kind::kRule) break;
        edges[r].push_back(s.index);
        if (!nullable[s.index]) break;
      }
    }
  }
  enum : uint8_t { kWhite, kGrey, kBlack };
  std::vector<uint8_t> color(rules.size(), kWhite);
  std::vector<std::pair<RuleId, size_t>> stack;  // (rule, next edge)
  for (RuleId start = 0; start < rules.size(); ++start) {
    if (color[start] != kWhite) continue;
    stack.emplace_back(start, 0);
    color[start] = kGrey;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next == edges[r].size()) {
        color[r] = kBlack;
        stack.pop_back();
        continue;
      }
      const RuleId s = edges[r][next++];
      if (color[s] == kGrey) {
        std::vector<std::string> cycle;
        size_t i = stack.size();
        while (i > 0 && stack[i - 1].first != s) --i;
        for (size_t j = i - 1; j < stack.size(); ++j) cycle.push_back(rules[stack[j].first].name);
        cycle.push_back(rules[s].name);
        return absl::InvalidArgumentError(
            absl::StrCat("grammar: left recursion (a rule reaches itself without consuming a "
                         "byte): ",
                         absl::StrJoin(cycle, " -> ")));
      }
      if (color[s] == kWhite) {
        color[s] = kGrey;
        stack.emplace_back(s, 0);
      }
    }
  }
  grammar_.root_ = root;
  return std::move(grammar_);
}

}  // namespace deltaserve::common::grammar
