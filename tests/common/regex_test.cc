// The regex compiler (common/grammar/regex.h) walked by GrammarMatcher: full matches against
// Python's re.fullmatch (regex_cases.inc, written by grammar_cases.py), search semantics and the
// JSON string spelling of AddRegexRules, and the refusals (construct and offset named).
#include "common/grammar/regex.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/grammar/grammar_matcher.h"
#include "common/grammar/internal/code_points.h"
#include "common/grammar/internal/regex_rules.h"
#include "common/unicode.h"

namespace deltaserve::common::grammar {
namespace {

struct RegexCase {
  const char* pattern;
  const char* text;
  bool matches;  // Python's re.fullmatch
};

const RegexCase kCases[] = {
#include "tests/common/regex_cases.inc"
};

bool Matches(const Grammar& g, std::string_view text) {
  GrammarMatcher m(std::make_shared<CompiledGrammar>(g));
  return m.AcceptBytes(text) && m.IsAccepting();
}

TEST(RegexTest, FullMatchAgreesWithPythonRe) {
  for (const RegexCase& c : kCases) {
    absl::StatusOr<Grammar> g = CompileRegex(c.pattern);
    ASSERT_TRUE(g.ok()) << c.pattern << ": " << g.status();
    EXPECT_EQ(Matches(*g, c.text), c.matches) << "pattern " << c.pattern << " text " << c.text;
  }
}

// A JSON Schema `pattern`: a search inside the string content, spelled as JSON writes it.
Grammar PatternGrammar(std::string_view pattern, int64_t min_length = 0, int64_t max_length = -1) {
  absl::StatusOr<RegexAst> ast = ParseRegex(pattern);
  EXPECT_TRUE(ast.ok()) << ast.status();
  GrammarBuilder b;
  internal::CodePointSetRules sets(b, internal::CodePointSpelling::kJsonString, "p_");
  internal::RegexRuleOptions o;
  o.min_length = min_length;
  o.max_length = max_length;
  absl::StatusOr<RuleId> r = internal::AddRegexRulesWith(sets, **ast, "pattern", o);
  EXPECT_TRUE(r.ok()) << r.status();
  absl::StatusOr<Grammar> g = std::move(b).Build(*r);
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

TEST(RegexTest, UnanchoredPatternIsASearch) {
  // re.search semantics (what jsonschema uses): "b+" matches anywhere.
  Grammar g = PatternGrammar("b+");
  EXPECT_TRUE(Matches(g, "abba"));
  EXPECT_TRUE(Matches(g, "b"));
  EXPECT_FALSE(Matches(g, "aaa"));
  Grammar start = PatternGrammar("^ab");
  EXPECT_TRUE(Matches(start, "abzzz"));
  EXPECT_FALSE(Matches(start, "zab"));
  Grammar end = PatternGrammar("ab$");
  EXPECT_TRUE(Matches(end, "zzab"));
  EXPECT_FALSE(Matches(end, "abz"));
  Grammar alts = PatternGrammar("^a$|b");  // each top-level alternative anchored on its own
  EXPECT_TRUE(Matches(alts, "a"));
  EXPECT_TRUE(Matches(alts, "xbx"));
  EXPECT_FALSE(Matches(alts, "ax"));
}

TEST(RegexTest, JsonStringContentSpellsEscapes) {
  // A `"` in the pattern is `\"` (or \u0022) in the JSON text; a newline is \n; non-ASCII may be
  // raw UTF-8 or \uXXXX; `/` may be \/.
  Grammar g = PatternGrammar("^a\"b\\\\c\\n\u00e9/$");
  EXPECT_TRUE(Matches(g, "a\\\"b\\\\c\\n\u00e9/"));
  EXPECT_TRUE(Matches(g, "a\\u0022b\\u005cc\\u000a\\u00E9\\/"));
  EXPECT_FALSE(Matches(g, "a\"b\\\\c\\n\u00e9/"));      // raw quote
  EXPECT_FALSE(Matches(g, "a\\\"b\\\\c\n\u00e9/"));     // raw newline
  Grammar astral = PatternGrammar("^\\uD83D\\uDE00$");  // one code point, U+1F600
  EXPECT_TRUE(Matches(astral, "\U0001F600"));
  EXPECT_TRUE(Matches(astral, "\\ud83d\\ude00"));
  EXPECT_FALSE(Matches(astral, "\\ud83d"));
}

TEST(RegexTest, LengthBoundCountsCodePoints) {
  Grammar g = PatternGrammar("^[a-z\u00e9]+$", 2, 3);
  EXPECT_FALSE(Matches(g, "a"));
  EXPECT_TRUE(Matches(g, "ab"));
  EXPECT_TRUE(Matches(g, "\u00e9\u00e9\u00e9"));
  EXPECT_TRUE(Matches(g, "\\u00e9a"));  // one code point though six bytes
  EXPECT_FALSE(Matches(g, "abcd"));
  Grammar search = PatternGrammar("x", 0, 3);  // search: up to 3 characters containing x
  EXPECT_TRUE(Matches(search, "axb"));
  EXPECT_FALSE(Matches(search, "aaxb"));
  EXPECT_FALSE(Matches(search, "ab"));
}

TEST(RegexTest, RefusesUnsupportedConstructsNamingThem) {
  const std::pair<const char*, const char*> kRefused[] = {
      {"(a)\\1", "backreference"},
      {"a(?=b)", "lookahead"},
      {"a(?!b)", "lookahead"},
      {"(?<=a)b", "lookbehind"},
      {"(?<!a)b", "lookbehind"},
      {"\\p{L}", "unicode property"},
      {"\\k<x>", "named backreference"},
      {"a\\bc", "word boundary"},
      {"(?i)abc", "group syntax"},
      {"a**", "nothing to repeat"},
      {"*a", "nothing to repeat"},
      {"a{5,2}", "m < n"},
      {"a{,3}", "{,n}"},
      {"a{100000}", "over the limit"},
      {"(ab", "unterminated group"},
      {"ab)", "unmatched )"},
      {"[ab", "unterminated class"},
      {"[z-a]", "out of order"},
      {"[]", "empty class"},
      {"\\q", "unknown escape"},
      {"a\\", "backslash"},
  };
  for (const auto& [pattern, what] : kRefused) {
    absl::StatusOr<RegexAst> ast = ParseRegex(pattern);
    ASSERT_FALSE(ast.ok()) << pattern;
    EXPECT_EQ(ast.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ast.status().message().find(what), absl::string_view::npos)
        << pattern << ": " << ast.status();
    EXPECT_NE(ast.status().message().find("offset"), absl::string_view::npos) << ast.status();
  }
  // Anchors that are not at an end parse, but do not compile.
  absl::StatusOr<Grammar> mid = CompileRegex("a^b");
  ASSERT_FALSE(mid.ok());
  EXPECT_NE(mid.status().message().find("anchor"), absl::string_view::npos);
}

TEST(RegexTest, BoundsNestingAndLength) {
  std::string deep(100, '(');
  deep += "a";
  deep += std::string(100, ')');
  absl::StatusOr<RegexAst> ast = ParseRegex(deep);
  ASSERT_FALSE(ast.ok());
  EXPECT_NE(ast.status().message().find("nested deeper"), absl::string_view::npos);
  EXPECT_FALSE(ParseRegex(std::string(5000, 'a')).ok());
  // Nested counted repetitions share rules: a million matches, a small grammar.
  absl::StatusOr<Grammar> big = CompileRegex("((a{100}){100}){100}");
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_LT(big->rules().size(), 1000u);
  // Nullable bodies under unbounded repetition (left recursion if taken naively).
  for (const char* p : {"(a*)*", "(a?)+", "(a*b*)*c", "((a|)*)*", "(|a)+", "(a{0,3}){2,}"}) {
    EXPECT_TRUE(CompileRegex(p).ok()) << p;
  }
}

TEST(RegexTest, CodePointSetsSpellUtf8Exactly) {
  // Every code point of a few ranges, raw UTF-8: the sequences accept exactly the set (checked
  // code point by code point against the ranges).
  const internal::CodePointRanges ranges = {
      {0x41, 0x5A}, {0x7F, 0x801}, {0xD7F0, 0xE010}, {0xFFF0, 0x10010}, {0x10FFF0, 0x10FFFF}};
  GrammarBuilder b;
  internal::CodePointSetRules sets(b, internal::CodePointSpelling::kUtf8, "");
  const RuleId root = b.AddRule("root");
  b.AddAlternative(root, {sets.Set(ranges)});
  absl::StatusOr<Grammar> g = std::move(b).Build(root);
  ASSERT_TRUE(g.ok()) << g.status();
  auto compiled = std::make_shared<CompiledGrammar>(*std::move(g));
  auto in = [&](uint32_t cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;
    for (auto [lo, hi] : ranges) {
      if (cp >= lo && cp <= hi) return true;
    }
    return false;
  };
  for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x11000 || cp > 0x10FF00) ? 1 : 97) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string bytes;
    AppendUtf8(cp, bytes);
    GrammarMatcher m(compiled);
    EXPECT_EQ(m.AcceptBytes(bytes) && m.IsAccepting(), in(cp)) << std::hex << cp;
  }
}

}  // namespace
}  // namespace deltaserve::common::grammar
