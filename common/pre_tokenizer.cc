#include "common/pre_tokenizer.h"

#include <cstdint>

#include "common/unicode.h"

namespace deltaserve::common {
namespace {

// A decoded code point with its class bits and byte offset.
struct Cpt {
  uint32_t cpt;
  uint8_t cls;
  uint32_t offset;
};

constexpr uint32_t kEnd = 0xFFFFFFFF;  // "past the end" sentinel code point

bool IsCrLf(uint32_t c) { return c == '\r' || c == '\n'; }

uint32_t AsciiLower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

}  // namespace

std::optional<PreTokenizerKind> PreTokenizerKindFromName(std::string_view name) {
  if (name == "qwen2") return PreTokenizerKind::kQwen2;
  if (name == "qwen35") return PreTokenizerKind::kQwen35;
  return std::nullopt;
}

void PreTokenize(PreTokenizerKind kind, std::string_view text,
                 std::vector<std::string_view>& pieces) {
  if (text.empty()) return;
  // Decode once; reuse the buffer across calls on this thread.
  thread_local std::vector<Cpt> cpts;
  cpts.clear();
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t offset = static_cast<uint32_t>(pos);
    const uint32_t c = DecodeUtf8(text, pos);
    cpts.push_back(Cpt{c, CodepointClass(c), offset});
  }
  const size_t n = cpts.size();
  // "Word" characters: \p{L}, plus \p{M} for qwen35.
  const uint8_t word_bits =
      kind == PreTokenizerKind::kQwen35 ? (kClassLetter | kClassMark) : kClassLetter;
  // The punctuation run excludes \s, \p{L}, \p{N} (and \p{M} for qwen35).
  const uint8_t not_punct_bits = word_bits | kClassNumber | kClassWhitespace;

  auto cpt_at = [&](size_t i) { return i < n ? cpts[i].cpt : kEnd; };
  auto cls_at = [&](size_t i) -> uint8_t { return i < n ? cpts[i].cls : 0; };
  auto is_word = [&](size_t i) { return i < n && (cpts[i].cls & word_bits) != 0; };
  auto is_punct = [&](size_t i) { return i < n && (cpts[i].cls & not_punct_bits) == 0; };

  size_t start = 0;
  auto emit = [&](size_t end) {
    const uint32_t b = cpts[start].offset;
    const uint32_t e = end < n ? cpts[end].offset : static_cast<uint32_t>(text.size());
    pieces.push_back(text.substr(b, e - b));
    start = end;
  };

  while (start < n) {
    const size_t pos = start;
    const uint32_t c = cpts[pos].cpt;
    const uint8_t cls = cpts[pos].cls;

    // '[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]
    if (c == '\'' && pos + 1 < n) {
      const uint32_t c1 = AsciiLower(cpt_at(pos + 1));
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        emit(pos + 2);
        continue;
      }
      const uint32_t c2 = AsciiLower(cpt_at(pos + 2));
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
        emit(pos + 3);
        continue;
      }
    }
    // [^\r\n\p{L}\p{N}]?<word>+ : an optional non-letter, non-digit lead, then a word run.
    if (!IsCrLf(c) && (cls & kClassNumber) == 0 && (is_word(pos) || is_word(pos + 1))) {
      size_t end = pos + 1;
      while (is_word(end)) ++end;
      emit(end);
      continue;
    }
    // \p{N}: one digit per piece.
    if (cls & kClassNumber) {
      emit(pos + 1);
      continue;
    }
    // " ?<punct>+[\r\n]*"
    const size_t punct_from = (c == ' ') ? pos + 1 : pos;
    if (is_punct(punct_from)) {
      size_t end = punct_from;
      while (is_punct(end)) ++end;
      while (IsCrLf(cpt_at(end))) ++end;
      emit(end);
      continue;
    }
    // Whitespace alternatives.
    size_t ws_end = pos;
    size_t last_crlf_end = 0;
    while (cls_at(ws_end) & kClassWhitespace) {
      if (IsCrLf(cpts[ws_end].cpt)) last_crlf_end = ws_end + 1;
      ++ws_end;
    }
    const size_t n_ws = ws_end - pos;
    if (last_crlf_end > 0) {  // \s*[\r\n]+
      emit(last_crlf_end);
      continue;
    }
    if (n_ws > 1 && ws_end < n) {  // \s+(?!\S): leave the last blank to the next piece
      emit(ws_end - 1);
      continue;
    }
    if (n_ws > 0) {  // \s+
      emit(ws_end);
      continue;
    }
    emit(pos + 1);  // matches no alternative
  }
}

}  // namespace deltaserve::common
