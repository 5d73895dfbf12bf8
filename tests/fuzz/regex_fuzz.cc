// libFuzzer target for the regex compiler (common/grammar/regex.h): JSON Schema `pattern`s and
// plain-regex constraints are untrusted text. Each input is parsed; a parsed pattern is compiled
// three ways — a full match over raw UTF-8 (CompileRegex), a search inside JSON string content,
// and the same with a length bound taken from the input (the Glushkov construction) — and each
// grammar that builds is walked: the pattern's own bytes, then a greedy walk that always takes the
// smallest byte allowed. Every step must return: parse and compile answer a value or
// InvalidArgument (Build may also answer its own limit errors), never crash, hang or grow without
// bound. Seeds: tests/fuzz/seeds/regex/, copied at configure time.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/grammar/grammar_matcher.h"
#include "common/grammar/internal/code_points.h"
#include "common/grammar/internal/regex_rules.h"
#include "common/grammar/regex.h"
#include "tests/fuzz/fuzz_check.h"

namespace deltaserve::common::grammar {
namespace {

constexpr const char* kTarget = "regex_fuzz";

void Walk(Grammar grammar, std::string_view text) {
  auto compiled = std::make_shared<CompiledGrammar>(std::move(grammar));
  GrammarMatcher m(compiled);
  for (char c : text) {
    if (!m.AcceptByte(static_cast<uint8_t>(c))) break;
  }
  GrammarMatcher greedy(compiled);
  for (int step = 0; step < 48 && greedy.CanContinue(); ++step) {
    bool moved = false;
    for (int b = 0; b < 256 && !moved; ++b) moved = greedy.AcceptByte(static_cast<uint8_t>(b));
    // Build drops what can never match, so a state that can continue has an allowed byte
    // (unless the state table is full).
    fuzz::Check(moved || compiled->exhausted(), kTarget, "a state that can continue allows a byte");
    if (!moved) break;
  }
}

}  // namespace
}  // namespace deltaserve::common::grammar

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deltaserve::common::grammar;
  using deltaserve::fuzz::Check;
  const std::string_view pattern(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<RegexAst> ast = ParseRegex(pattern);
  if (!ast.ok()) {
    Check(ast.status().code() == absl::StatusCode::kInvalidArgument, kTarget,
          "ParseRegex fails with InvalidArgument");
    return 0;
  }
  absl::StatusOr<Grammar> full = CompileRegex(pattern);
  if (full.ok()) {
    Walk(*std::move(full), pattern);
  } else {
    Check(full.status().code() != absl::StatusCode::kOk, kTarget, "CompileRegex answers");
  }
  for (int bounded = 0; bounded < 2; ++bounded) {
    GrammarBuilder b;
    internal::CodePointSetRules sets(b, internal::CodePointSpelling::kJsonString, "p_");
    internal::RegexRuleOptions o;
    if (bounded) {
      o.min_length = size > 0 ? data[0] % 8 : 0;
      o.max_length = size > 1 ? o.min_length + data[1] % 64 : -1;
    }
    absl::StatusOr<RuleId> rule = internal::AddRegexRulesWith(sets, **ast, "pattern", o);
    if (!rule.ok()) {
      Check(rule.status().code() == absl::StatusCode::kInvalidArgument, kTarget,
            "AddRegexRulesWith fails with InvalidArgument");
      continue;
    }
    absl::StatusOr<Grammar> g = std::move(b).Build(*rule);
    if (g.ok()) Walk(*std::move(g), pattern);
  }
  return 0;
}
