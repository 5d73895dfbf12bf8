// Regex AST -> grammar rules (internal/regex_rules.h), and the public AddRegexRules and
// CompileRegex of regex.h built on it.
#include "common/grammar/internal/regex_rules.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grammar/regex.h"
#include "common/str_util.h"

namespace deltaserve::common::grammar::internal {
namespace {

constexpr int64_t kLengthCap = int64_t{1} << 40;

bool IsAnchor(const RegexNode& n) {
  return n.kind == RegexNode::Kind::kStartAnchor || n.kind == RegexNode::Kind::kEndAnchor;
}

bool ContainsAnchor(const RegexNode& n) {
  if (IsAnchor(n)) return true;
  for (const auto& c : n.children) {
    if (ContainsAnchor(*c)) return true;
  }
  return false;
}

// One top-level alternative with its end anchors taken off.
struct AnchoredItems {
  std::vector<const RegexNode*> items;  // concatenated
  bool start_anchored = false;
  bool end_anchored = false;
};

absl::StatusOr<std::vector<AnchoredItems>> SplitTopLevel(const RegexNode& ast) {
  std::vector<const RegexNode*> alts;
  if (ast.kind == RegexNode::Kind::kAlternation) {
    for (const auto& c : ast.children) alts.push_back(c.get());
  } else {
    alts.push_back(&ast);
  }
  std::vector<AnchoredItems> out;
  for (const RegexNode* alt : alts) {
    AnchoredItems a;
    if (alt->kind == RegexNode::Kind::kConcat) {
      for (const auto& c : alt->children) a.items.push_back(c.get());
    } else {
      a.items.push_back(alt);
    }
    size_t begin = 0, end = a.items.size();
    while (begin < end && a.items[begin]->kind == RegexNode::Kind::kStartAnchor) {
      a.start_anchored = true;
      ++begin;
    }
    while (end > begin && a.items[end - 1]->kind == RegexNode::Kind::kEndAnchor) {
      a.end_anchored = true;
      --end;
    }
    a.items = std::vector<const RegexNode*>(a.items.begin() + static_cast<std::ptrdiff_t>(begin),
                                            a.items.begin() + static_cast<std::ptrdiff_t>(end));
    for (const RegexNode* n : a.items) {
      if (ContainsAnchor(*n)) {
        return absl::InvalidArgumentError(
            "regex: an anchor ^ or $ that is not at the start or end of the pattern (or of a "
            "top-level alternative) is not supported");
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

const RegexNode& AnyCodePointStar() {
  static const RegexNode* node = [] {
    auto set = std::make_unique<RegexNode>();
    set->kind = RegexNode::Kind::kCodePointSet;
    set->ranges = {{0, kMaxCodePoint}};
    auto* rep = new RegexNode();
    rep->kind = RegexNode::Kind::kRepeat;
    rep->min = 0;
    rep->max = -1;
    rep->children.push_back(std::move(set));
    return rep;
  }();
  return *node;
}

// The rules that follow the AST (see the header).
class StructuralEmitter {
 public:
  StructuralEmitter(CodePointSetRules& sets, std::string_view name) : sets_(sets), name_(name) {}

  // Memoized per node: the rules of a sub-pattern are built once however often it is referenced
  // (EmitNonNullable refers back to Emit; without the memo nested stars cost 2^depth).
  Alternative Emit(const RegexNode& n) {
    auto it = emitted_.find(&n);
    if (it != emitted_.end()) return it->second;
    Alternative a = EmitUncached(n);
    emitted_.emplace(&n, a);
    return a;
  }

  std::optional<Alternative> EmitNonNullable(const RegexNode& n) {
    auto it = non_nullable_.find(&n);
    if (it != non_nullable_.end()) return it->second;
    std::optional<Alternative> a = EmitNonNullableUncached(n);
    non_nullable_.emplace(&n, a);
    return a;
  }

 private:
  Alternative EmitUncached(const RegexNode& n) {
    GrammarBuilder& b = sets_.builder();
    switch (n.kind) {
      case RegexNode::Kind::kEmpty:
      case RegexNode::Kind::kStartAnchor:
      case RegexNode::Kind::kEndAnchor:
        return {};
      case RegexNode::Kind::kCodePointSet:
        return {sets_.Set(n.ranges)};
      case RegexNode::Kind::kConcat: {
        Alternative out;
        for (const auto& c : n.children) Append(out, Emit(*c));
        return out;
      }
      case RegexNode::Kind::kAlternation: {
        RuleId r = b.AddRule(Unique("_alt"));
        for (const auto& c : n.children) b.AddAlternative(r, Emit(*c));
        return {Symbol::Rule(r)};
      }
      case RegexNode::Kind::kRepeat:
        return EmitRepeat(*n.children[0], n.min, n.max);
    }
    return {};
  }

  // X{min,max}; a nullable X is never the body of an unbounded rule (that would be left
  // recursion): X{m,} = X{m} (X minus the empty string)*.
  Alternative EmitRepeat(const RegexNode& child, int min, int max) {
    GrammarBuilder& b = sets_.builder();
    if (max == 0) return {};
    Alternative body = Emit(child);
    if (max == 1 && min == 1) return body;
    if (max == 1) return {Symbol::Rule(b.Optional(Unique("_opt"), body))};
    if (max > 0) {
      return {Symbol::Rule(b.Repeat(Unique("_rep"), body, min, max))};
    }
    if (!RegexNullable(child)) {
      if (min == 0) return {Symbol::Rule(b.Star(Unique("_star"), body))};
      if (min == 1) return {Symbol::Rule(b.Plus(Unique("_plus"), body))};
      return {Symbol::Rule(b.Repeat(Unique("_rep"), body, min, -1))};
    }
    Alternative out;
    if (min > 0) out = {Symbol::Rule(b.Repeat(Unique("_rep"), body, min, min))};
    std::optional<Alternative> nn = EmitNonNullable(child);
    if (nn) out.push_back(Symbol::Rule(b.Star(Unique("_star"), *nn)));
    return out;
  }

  // The language of `n` without the empty string; nullopt when that is empty.
  std::optional<Alternative> EmitNonNullableUncached(const RegexNode& n) {
    GrammarBuilder& b = sets_.builder();
    if (!RegexNullable(n)) return Emit(n);
    switch (n.kind) {
      case RegexNode::Kind::kEmpty:
      case RegexNode::Kind::kStartAnchor:
      case RegexNode::Kind::kEndAnchor:
      case RegexNode::Kind::kCodePointSet:
        return std::nullopt;
      case RegexNode::Kind::kAlternation: {
        std::vector<Alternative> alts;
        for (const auto& c : n.children) {
          if (std::optional<Alternative> a = EmitNonNullable(*c)) alts.push_back(*std::move(a));
        }
        if (alts.empty()) return std::nullopt;
        return Alternative{Symbol::Rule(b.Choice(Unique("_alt"), std::move(alts)))};
      }
      case RegexNode::Kind::kConcat: {
        // Every child is nullable here: (c0 c1 ... ck) minus "" = nn(c0) c1..ck | nn(c1) c2..ck
        // | ...; the suffixes c_j..ck are rules of their own so that this stays linear.
        const size_t k = n.children.size();
        std::vector<Alternative> suffix(k + 1);  // suffix[j]: symbols matching c_j..c_{k-1}
        for (size_t j = k; j-- > 0;) {
          Alternative seq = Emit(*n.children[j]);
          Append(seq, suffix[j + 1]);
          if (seq.size() <= 1) {
            suffix[j] = std::move(seq);
          } else {
            const RuleId r = b.AddRule(Unique("_suffix"));
            b.AddAlternative(r, std::move(seq));
            suffix[j] = {Symbol::Rule(r)};
          }
        }
        std::vector<Alternative> alts;
        for (size_t i = 0; i < k; ++i) {
          std::optional<Alternative> head = EmitNonNullable(*n.children[i]);
          if (!head) continue;
          Append(*head, suffix[i + 1]);
          alts.push_back(*std::move(head));
        }
        if (alts.empty()) return std::nullopt;
        return Alternative{Symbol::Rule(b.Choice(Unique("_seq"), std::move(alts)))};
      }
      case RegexNode::Kind::kRepeat: {
        const RegexNode& child = *n.children[0];
        if (n.max == 0) return std::nullopt;
        std::optional<Alternative> first = EmitNonNullable(child);
        if (!first) return std::nullopt;
        Append(*first, EmitRepeat(child, std::max(n.min - 1, 0), n.max < 0 ? -1 : n.max - 1));
        return first;
      }
    }
    return std::nullopt;
  }

  static void Append(Alternative& a, const Alternative& b) {
    a.insert(a.end(), b.begin(), b.end());
  }
  // A name no other rule has (AddRule would otherwise probe suffixes, quadratic in repeats).
  std::string Unique(const char* what) { return absl::StrCat(name_, what, "_", next_name_++); }

  CodePointSetRules& sets_;
  std::string name_;
  uint64_t next_name_ = 0;
  std::map<const RegexNode*, Alternative> emitted_;
  std::map<const RegexNode*, std::optional<Alternative>> non_nullable_;
};

// The Glushkov construction crossed with a code point counter (see the header).
class LengthBoundedEmitter {
 public:
  LengthBoundedEmitter(CodePointSetRules& sets, std::string_view name,
                       const RegexRuleOptions& options)
      : sets_(sets), name_(name), options_(options) {}

  struct Frag {
    bool nullable = true;
    std::vector<int> first, last;
  };

  absl::StatusOr<RuleId> Build(const std::vector<AnchoredItems>& alts) {
    Frag all;
    all.nullable = false;
    for (const AnchoredItems& a : alts) {
      Frag f;  // empty: nullable, no positions
      const RegexNode& any = AnyCodePointStar();
      if (options_.search && !a.start_anchored) f = Concat(std::move(f), Linearize(any));
      for (const RegexNode* item : a.items) f = Concat(std::move(f), Linearize(*item));
      if (options_.search && !a.end_anchored) f = Concat(std::move(f), Linearize(any));
      if (!budget_ok_) break;
      all.nullable = all.nullable || f.nullable;
      Union(all.first, f.first);
      Union(all.last, f.last);
    }
    if (!budget_ok_) return TooLarge();
    is_last_.assign(positions_.size(), false);
    for (int p : all.last) is_last_[static_cast<size_t>(p)] = true;
    for (auto& f : follow_) {
      std::sort(f.begin(), f.end());
      f.erase(std::unique(f.begin(), f.end()), f.end());
    }
    GrammarBuilder& b = sets_.builder();
    const RuleId start = b.AddRule(name_);
    bool any = false;
    if (all.nullable && options_.min_length == 0) {
      b.AddAlternative(start, {});
      any = true;
    }
    if (options_.max_length != 0) {
      for (int q : all.first) {
        absl::StatusOr<RuleId> r = PositionRule(q, 1);
        if (!r.ok()) return r.status();
        b.AddAlternative(start, {Symbol::Rule(*r)});
        any = true;
      }
    }
    if (!any) b.AddAlternative(start, {b.Bytes(ByteClass())});
    // Fill the (position, count) rules breadth-first, so the recursion depth stays flat.
    while (!pending_.empty()) {
      auto [p, count, rule] = pending_.back();
      pending_.pop_back();
      const size_t pi = static_cast<size_t>(p);
      const Symbol set = sets_.Set(*positions_[pi]);
      if (is_last_[pi] && count >= options_.min_length) b.AddAlternative(rule, {set});
      const int64_t next = NextCount(count);
      if (next < 0) continue;
      alternatives_ += follow_[pi].size();
      if (alternatives_ > options_.max_length_rules * 16) return TooLarge();
      for (int q : follow_[pi]) {
        absl::StatusOr<RuleId> r = PositionRule(q, next);
        if (!r.ok()) return r.status();
        b.AddAlternative(rule, {set, Symbol::Rule(*r)});
      }
    }
    return start;
  }

 private:
  absl::Status TooLarge() const {
    return absl::InvalidArgumentError(absl::StrCat(
        "regex: the pattern with a length bound (minLength/maxLength) needs more than ",
        options_.max_length_rules, " rules"));
  }

  // The count after one more code point, or -1 past max_length. Without a max, counts saturate
  // at min_length (all that matters beyond it is "at least min_length").
  int64_t NextCount(int64_t count) const {
    if (options_.max_length < 0)
      return std::min(count + 1, std::max<int64_t>(options_.min_length, 1));
    return count + 1 <= options_.max_length ? count + 1 : -1;
  }

  absl::StatusOr<RuleId> PositionRule(int p, int64_t count) {
    auto key = std::make_pair(p, count);
    auto it = rules_.find(key);
    if (it != rules_.end()) return it->second;
    if (rules_.size() >= options_.max_length_rules) return TooLarge();
    const RuleId r = sets_.builder().AddRule(absl::StrCat(name_, "_p", p, "_", count));
    rules_.emplace(key, r);
    pending_.push_back({p, count, r});
    return r;
  }

  static void Union(std::vector<int>& into, const std::vector<int>& from) {
    into.insert(into.end(), from.begin(), from.end());
  }

  Frag Concat(Frag a, Frag b) {
    for (int x : a.last) {
      for (int y : b.first) AddFollow(x, y);
    }
    Frag f;
    f.nullable = a.nullable && b.nullable;
    f.first = a.first;
    if (a.nullable) Union(f.first, b.first);
    f.last = b.last;
    if (b.nullable) Union(f.last, a.last);
    return f;
  }

  void AddFollow(int x, int y) {
    if (++edges_ > options_.max_length_rules * 16) budget_ok_ = false;
    if (budget_ok_) follow_[static_cast<size_t>(x)].push_back(y);
  }

  Frag Star(Frag f) {
    for (int x : f.last) {
      for (int y : f.first) AddFollow(x, y);
    }
    f.nullable = true;
    return f;
  }

  Frag Linearize(const RegexNode& n) {
    if (!budget_ok_) return Frag{};
    switch (n.kind) {
      case RegexNode::Kind::kEmpty:
      case RegexNode::Kind::kStartAnchor:
      case RegexNode::Kind::kEndAnchor:
        return Frag{};
      case RegexNode::Kind::kCodePointSet: {
        if (positions_.size() >= options_.max_length_rules) {
          budget_ok_ = false;
          return Frag{};
        }
        const int p = static_cast<int>(positions_.size());
        positions_.push_back(&n.ranges);
        follow_.emplace_back();
        return Frag{false, {p}, {p}};
      }
      case RegexNode::Kind::kConcat: {
        Frag f;
        for (const auto& c : n.children) f = Concat(std::move(f), Linearize(*c));
        return f;
      }
      case RegexNode::Kind::kAlternation: {
        Frag f;
        f.nullable = false;
        for (const auto& c : n.children) {
          Frag g = Linearize(*c);
          f.nullable = f.nullable || g.nullable;
          Union(f.first, g.first);
          Union(f.last, g.last);
        }
        return f;
      }
      case RegexNode::Kind::kRepeat: {
        const RegexNode& child = *n.children[0];
        Frag f;
        for (int i = 0; i < n.min && budget_ok_; ++i) f = Concat(std::move(f), Linearize(child));
        if (n.max < 0) return Concat(std::move(f), Star(Linearize(child)));
        // X{0,k} as nested optionals (X (X (...)?)?)?, so that follow sets stay small.
        std::vector<Frag> copies;
        for (int i = n.min; i < n.max && budget_ok_; ++i) copies.push_back(Linearize(child));
        Frag tail;
        for (auto it = copies.rbegin(); it != copies.rend(); ++it) {
          tail = Concat(std::move(*it), std::move(tail));
          tail.nullable = true;
        }
        return Concat(std::move(f), std::move(tail));
      }
    }
    return Frag{};
  }

  struct Pending {
    int p;
    int64_t count;
    RuleId rule;
  };

  CodePointSetRules& sets_;
  std::string name_;
  const RegexRuleOptions& options_;
  std::vector<const CodePointRanges*> positions_;
  std::vector<std::vector<int>> follow_;
  std::vector<bool> is_last_;
  std::map<std::pair<int, int64_t>, RuleId> rules_;
  std::vector<Pending> pending_;
  size_t edges_ = 0;
  size_t alternatives_ = 0;
  bool budget_ok_ = true;
};

}  // namespace

bool RegexNullable(const RegexNode& n) {
  switch (n.kind) {
    case RegexNode::Kind::kCodePointSet:
      return false;
    case RegexNode::Kind::kConcat:
      return std::all_of(n.children.begin(), n.children.end(),
                         [](const auto& c) { return RegexNullable(*c); });
    case RegexNode::Kind::kAlternation:
      return std::any_of(n.children.begin(), n.children.end(),
                         [](const auto& c) { return RegexNullable(*c); });
    case RegexNode::Kind::kRepeat:
      return n.min == 0 || RegexNullable(*n.children[0]);
    default:
      return true;
  }
}

RegexLength RegexLengthBounds(const RegexNode& n) {
  auto mul = [](int64_t a, int64_t b) {
    return a == 0 || b == 0 ? 0 : std::min(a * b, kLengthCap);
  };
  switch (n.kind) {
    case RegexNode::Kind::kCodePointSet:
      return {1, 1};
    case RegexNode::Kind::kConcat: {
      RegexLength l{0, 0};
      for (const auto& c : n.children) {
        RegexLength cl = RegexLengthBounds(*c);
        l.min = std::min(l.min + cl.min, kLengthCap);
        l.max = (l.max < 0 || cl.max < 0) ? -1 : std::min(l.max + cl.max, kLengthCap);
      }
      return l;
    }
    case RegexNode::Kind::kAlternation: {
      RegexLength l{kLengthCap, 0};
      for (const auto& c : n.children) {
        RegexLength cl = RegexLengthBounds(*c);
        l.min = std::min(l.min, cl.min);
        l.max = (l.max < 0 || cl.max < 0) ? -1 : std::max(l.max, cl.max);
      }
      return l;
    }
    case RegexNode::Kind::kRepeat: {
      RegexLength cl = RegexLengthBounds(*n.children[0]);
      RegexLength l;
      l.min = mul(cl.min, n.min);
      if (cl.max == 0 || n.max == 0) {
        l.max = 0;
      } else {
        l.max = (n.max < 0 || cl.max < 0) ? -1 : mul(cl.max, n.max);
      }
      return l;
    }
    default:
      return {0, 0};
  }
}

absl::StatusOr<RuleId> AddRegexRulesWith(CodePointSetRules& sets, const RegexNode& ast,
                                         std::string_view name, const RegexRuleOptions& options) {
  absl::StatusOr<std::vector<AnchoredItems>> alts = SplitTopLevel(ast);
  if (!alts.ok()) return alts.status();
  // Is the length bound implied by the pattern itself? Then the AST rules do.
  RegexLength len{kLengthCap, 0};
  for (const AnchoredItems& a : *alts) {
    RegexLength al{0, 0};
    for (const RegexNode* n : a.items) {
      RegexLength nl = RegexLengthBounds(*n);
      al.min = std::min(al.min + nl.min, kLengthCap);
      al.max = (al.max < 0 || nl.max < 0) ? -1 : std::min(al.max + nl.max, kLengthCap);
    }
    if (options.search && (!a.start_anchored || !a.end_anchored)) al.max = -1;
    len.min = std::min(len.min, al.min);
    len.max = (len.max < 0 || al.max < 0) ? -1 : std::max(len.max, al.max);
  }
  const bool implied = len.min >= options.min_length &&
                       (options.max_length < 0 || (len.max >= 0 && len.max <= options.max_length));
  if (!implied) return LengthBoundedEmitter(sets, name, options).Build(*alts);

  GrammarBuilder& b = sets.builder();
  StructuralEmitter emitter(sets, name);
  const RuleId root = b.AddRule(name);
  for (const AnchoredItems& a : *alts) {
    Alternative alt;
    auto append = [&](const Alternative& more) { alt.insert(alt.end(), more.begin(), more.end()); };
    if (options.search && !a.start_anchored) append(emitter.Emit(AnyCodePointStar()));
    for (const RegexNode* n : a.items) append(emitter.Emit(*n));
    if (options.search && !a.end_anchored) append(emitter.Emit(AnyCodePointStar()));
    b.AddAlternative(root, std::move(alt));
  }
  return root;
}

}  // namespace deltaserve::common::grammar::internal

namespace deltaserve::common::grammar {

absl::StatusOr<RuleId> AddRegexRules(GrammarBuilder& builder, const RegexNode& ast,
                                     std::string_view name, RegexTarget target) {
  internal::CodePointSetRules sets(builder,
                                   target == RegexTarget::kRawBytes
                                       ? internal::CodePointSpelling::kUtf8
                                       : internal::CodePointSpelling::kJsonString,
                                   absl::StrCat(Sv(name), "_"));
  return internal::AddRegexRulesWith(sets, ast, name, internal::RegexRuleOptions{});
}

absl::StatusOr<Grammar> CompileRegex(std::string_view pattern, const RegexLimits& limits) {
  absl::StatusOr<RegexAst> ast = ParseRegex(pattern, limits);
  if (!ast.ok()) return ast.status();
  GrammarBuilder builder;
  internal::CodePointSetRules sets(builder, internal::CodePointSpelling::kUtf8, "");
  internal::RegexRuleOptions options;
  options.search = false;
  absl::StatusOr<RuleId> root = internal::AddRegexRulesWith(sets, **ast, "root", options);
  if (!root.ok()) return root.status();
  return std::move(builder).Build(*root);
}

}  // namespace deltaserve::common::grammar
