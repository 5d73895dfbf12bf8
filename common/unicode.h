// Unicode helpers for the tokenizer: UTF-8 decoding that treats malformed bytes the way
// llama.cpp does (each becomes U+FFFD), and the character classes the pre-tokenizer regexes
// use (\p{L}, \p{N}, \p{M}, \s), taken from ICU's Unicode data rather than hand-typed tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deltaserve::common {

// U+FFFD REPLACEMENT CHARACTER, what malformed UTF-8 decodes to.
inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Character-class bits of a code point (see CodepointClass).
enum CodepointClassBits : uint8_t {
  kClassLetter = 1 << 0,      // \p{L}: Lu Ll Lt Lm Lo
  kClassNumber = 1 << 1,      // \p{N}: Nd Nl No
  kClassMark = 1 << 2,        // \p{M}: Mn Mc Me
  kClassWhitespace = 1 << 3,  // \s: the Unicode White_Space property
};

// Class bits of `cpt` (0 for code points above U+10FFFF). Thread-safe; the first call builds a
// table of all code points from ICU (a few milliseconds).
uint8_t CodepointClass(uint32_t cpt);

// Decodes the code point at s[pos] and advances `pos` past it. Structurally malformed input (a
// stray continuation byte, a truncated sequence, a code point above U+10FFFF, a surrogate)
// yields U+FFFD and advances one byte. Requires pos < s.size().
uint32_t DecodeUtf8(std::string_view s, size_t& pos);

// Appends the UTF-8 encoding of `cpt` (<= U+10FFFF) to `out`.
void AppendUtf8(uint32_t cpt, std::string& out);

// True when `s` is entirely well-formed UTF-8 (shortest form, no surrogates, <= U+10FFFF).
bool IsValidUtf8(std::string_view s);

// `s` with every malformed byte replaced by U+FFFD; valid input is returned unchanged.
std::string SanitizeUtf8(std::string_view s);

// Length of the UTF-8 sequence that starts at s[pos] if it is complete and valid; 0 if it is
// malformed; -1 if it is a valid but incomplete prefix cut by the end of `s`.
int Utf8SequenceLength(std::string_view s, size_t pos);

}  // namespace deltaserve::common
