// Regex AST -> grammar rules, with the options the public AddRegexRules (regex.h) does not
// expose: a shared CodePointSetRules (so a schema's patterns and formats reuse one rule per
// character set), full-match vs search semantics, and a bound on the match's length in code
// points (JSON Schema's minLength/maxLength next to a pattern or format).
//
// Without a length bound the rules follow the AST (a rule per alternation and repetition, shared
// sub-rules, so `(a{100}){100}` stays small). With one, the pattern's Glushkov automaton (one
// position per character set, repetitions unrolled) is crossed with a counter of code points:
// a rule per (position, count) pair, refused past a size budget.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"
#include "common/grammar/internal/code_points.h"
#include "common/grammar/regex.h"

namespace deltaserve::common::grammar::internal {

// Whether the regex matches the empty string (anchors count as empty).
bool RegexNullable(const RegexNode& node);

// Fewest and most code points a match of `node` spans (max -1: unbounded); anchors span none.
struct RegexLength {
  int64_t min = 0;
  int64_t max = -1;
};
RegexLength RegexLengthBounds(const RegexNode& node);

struct RegexRuleOptions {
  // true: JSON Schema `pattern` semantics, an unanchored side matches any text there (a search);
  // false: the whole text must match (a plain-regex constraint; `^`/`$` at the ends are moot).
  bool search = true;
  // The match's length in code points, min_length..max_length (max_length < 0: unbounded).
  int64_t min_length = 0;
  int64_t max_length = -1;
  // Budget of the length-bounded construction: (position, count) rules.
  size_t max_length_rules = 1 << 15;
};

// The rule matching `ast` per `options`, characters spelled by `sets`. InvalidArgument for an
// anchor that is not at an end of a top-level alternative, or a length-bounded construction past
// its budget. A pattern that can match nothing (per its length bound) gets a rule that matches
// nothing.
absl::StatusOr<RuleId> AddRegexRulesWith(CodePointSetRules& sets, const RegexNode& ast,
                                         std::string_view name, const RegexRuleOptions& options);

}  // namespace deltaserve::common::grammar::internal
