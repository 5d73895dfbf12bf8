// Regular expressions -> grammar rules: JSON Schema's `pattern` (ECMA-262 syntax, the subset in
// docs/structured_outputs.md), the `format` grammars, and plain-regex constraints. The parser
// reads untrusted text: it is bounded (length, nesting, repetition counts) and answers
// InvalidArgument with the offset and what is unsupported (backreferences, lookaround, ...).
//
//   ASSIGN_OR_RETURN(RegexAst ast, ParseRegex("^[a-z]{1,8}$"));
//   ASSIGN_OR_RETURN(RuleId r, AddRegexRules(builder, ast, "pattern", RegexTarget::kRawBytes));
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"

namespace deltaserve::common::grammar {

struct RegexLimits {
  size_t max_pattern_bytes = 4096;
  int max_nesting = 64;
  int max_repetition = 1024;  // {m,n} bounds above this are refused
};

// A parsed regex. Characters are Unicode code points (the pattern is UTF-8).
struct RegexNode {
  enum class Kind { kEmpty, kCodePointSet, kConcat, kAlternation, kRepeat, kStartAnchor, kEndAnchor };
  Kind kind = Kind::kEmpty;
  // kCodePointSet: sorted, disjoint inclusive ranges; `.` is every code point but \n.
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  std::vector<std::unique_ptr<RegexNode>> children;  // kConcat, kAlternation, kRepeat (one)
  int min = 0, max = -1;                             // kRepeat; max < 0: unbounded
};
using RegexAst = std::unique_ptr<RegexNode>;

absl::StatusOr<RegexAst> ParseRegex(std::string_view pattern, const RegexLimits& limits = {});

// How the matched text appears in the bytes the grammar walks.
enum class RegexTarget {
  kRawBytes,          // the text itself, UTF-8 (plain-regex constraints)
  kJsonStringContent  // inside a JSON string: `"`, `\` and control characters as JSON escapes
};

// Adds rules matching the regex (JSON Schema semantics: unanchored unless it starts with ^ / ends
// with $, i.e. a search) and returns the rule. Anchors anywhere but the ends are refused.
absl::StatusOr<RuleId> AddRegexRules(GrammarBuilder& builder, const RegexNode& ast,
                                     std::string_view name, RegexTarget target);

// A grammar matching exactly the text of `pattern` (anchored at both ends: a plain-regex
// constraint), UTF-8.
absl::StatusOr<Grammar> CompileRegex(std::string_view pattern, const RegexLimits& limits = {});

}  // namespace deltaserve::common::grammar
