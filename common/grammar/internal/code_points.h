// Code point sets -> byte-class sequences, the one place where characters become bytes for the
// grammar compilers (regex.h, json_schema_compiler.h). Two spellings: raw UTF-8, and a character
// inside a JSON string, where one code point has several spellings (raw UTF-8, `\"`-style short
// escapes, `\uXXXX` with hex digits in either case, a `\uD83D\uDE00` surrogate pair) and some
// must be escaped. docs/structured_outputs.md ("Strings") lists the rules.
//
//   CodePointSetRules sets(builder, CodePointSpelling::kJsonString);
//   Alternative digit = sets.Symbols({{'0', '9'}});
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "common/grammar/grammar.h"

namespace deltaserve::common::grammar::internal {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, disjoint, non-adjacent inclusive ranges of code points.
using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

// Sorts and merges `ranges` (overlapping or adjacent ones become one), clamped to U+10FFFF.
CodePointRanges NormalizeRanges(CodePointRanges ranges);
// Every code point up to U+10FFFF that is not in `ranges` (normalized).
CodePointRanges ComplementRanges(const CodePointRanges& ranges);
CodePointRanges IntersectRanges(const CodePointRanges& a, const CodePointRanges& b);
// Without the surrogates U+D800..U+DFFF, which UTF-8 and JSON text cannot carry on their own.
CodePointRanges WithoutSurrogates(const CodePointRanges& ranges);

// A byte string pattern: one byte class per byte.
using ByteSequence = std::vector<ByteClass>;

// The UTF-8 encodings of the code points of `ranges` (surrogates skipped), as few sequences as
// the encoding's structure allows (at most a handful per range).
std::vector<ByteSequence> Utf8Sequences(const CodePointRanges& ranges);

// The spellings of the code points of `ranges` inside a JSON string (surrogates skipped):
//  - printable ASCII but `"` and `\`: the byte itself (JSON writers never escape these; `/` may
//    also be `\/`);
//  - `"`, `\`, control characters U+0000..U+001F: an escape, `\"` `\\` `\b` `\f` `\n` `\r` `\t`
//    or `\u00XX`, never raw (JSON forbids raw control characters);
//  - U+007F and everything above ASCII: raw UTF-8, or `\uXXXX` (a surrogate pair above U+FFFF)
//    as `json.dumps` writes with its default ensure_ascii=True.
std::vector<ByteSequence> JsonStringSequences(const CodePointRanges& ranges);

enum class CodePointSpelling { kUtf8, kJsonString };

// Builds (once per distinct set) the rule for "one code point of the set, spelled as `spelling`"
// and hands out the symbols for it; a set spelled by one byte class is that class, no rule.
class CodePointSetRules {
 public:
  CodePointSetRules(GrammarBuilder& builder, CodePointSpelling spelling, std::string_view prefix)
      : builder_(builder), spelling_(spelling), prefix_(prefix) {}

  // One symbol matching one code point of `ranges` (normalized); an empty set (or only
  // surrogates) gives a symbol that matches nothing.
  Symbol Set(const CodePointRanges& ranges);
  // The spelling of `text` (UTF-8; must be valid) as a sequence of symbols.
  Alternative Literal(std::string_view text);
  CodePointSpelling spelling() const { return spelling_; }
  GrammarBuilder& builder() { return builder_; }

 private:
  GrammarBuilder& builder_;
  CodePointSpelling spelling_;
  std::string prefix_;
  std::map<CodePointRanges, Symbol> cache_;
  uint64_t next_name_ = 0;  // unique rule names (see SchemaCompiler::Name)
};

// Whether `cp` is spelled only by its own single byte in `spelling` (printable ASCII without `"`,
// `\` and `/` in a JSON string; any ASCII in UTF-8).
bool IsPlainByte(uint32_t cp, CodePointSpelling spelling);

}  // namespace deltaserve::common::grammar::internal
