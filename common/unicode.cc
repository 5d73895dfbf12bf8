#include "common/unicode.h"

#include <unicode/uchar.h>

#include <memory>

namespace deltaserve::common {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// One byte of class bits per code point, 1.1 MB, filled once from ICU.
const uint8_t* ClassTable() {
  static const std::unique_ptr<uint8_t[]> table = [] {
    auto t = std::make_unique<uint8_t[]>(kMaxCodepoint + 1);
    for (uint32_t c = 0; c <= kMaxCodepoint; ++c) {
      uint8_t bits = 0;
      switch (u_charType(static_cast<UChar32>(c))) {
        case U_UPPERCASE_LETTER:
        case U_LOWERCASE_LETTER:
        case U_TITLECASE_LETTER:
        case U_MODIFIER_LETTER:
        case U_OTHER_LETTER: bits |= kClassLetter; break;
        case U_DECIMAL_DIGIT_NUMBER:
        case U_LETTER_NUMBER:
        case U_OTHER_NUMBER: bits |= kClassNumber; break;
        case U_NON_SPACING_MARK:
        case U_COMBINING_SPACING_MARK:
        case U_ENCLOSING_MARK: bits |= kClassMark; break;
        default: break;
      }
      if (u_isUWhiteSpace(static_cast<UChar32>(c))) bits |= kClassWhitespace;
      t[c] = bits;
    }
    return t;
  }();
  return table.get();
}

inline bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

uint8_t CodepointClass(uint32_t cpt) {
  if (cpt > kMaxCodepoint) return 0;
  return ClassTable()[cpt];
}

int Utf8SequenceLength(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const uint8_t b0 = p[pos];
  if (b0 < 0x80) return 1;
  int len;
  // Valid range of the second byte depends on the lead (no overlongs, no surrogates,
  // nothing above U+10FFFF): Unicode 15, table 3-7.
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int i = 1; i < len; ++i) {
    if (pos + i >= n) return -1;
    const uint8_t b = p[pos + i];
    if (i == 1 ? (b < lo || b > hi) : !IsContinuation(b)) return 0;
  }
  return len;
}

uint32_t DecodeUtf8(std::string_view s, size_t& pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const uint8_t b0 = p[pos];
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const int len = Utf8SequenceLength(s, pos);
  if (len <= 0) {
    ++pos;
    return kReplacementChar;
  }
  uint32_t cpt = len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int i = 1; i < len; ++i) cpt = (cpt << 6) | (p[pos + i] & 0x3F);
  pos += len;
  return cpt;
}

void AppendUtf8(uint32_t cpt, std::string& out) {
  if (cpt < 0x80) {
    out += static_cast<char>(cpt);
  } else if (cpt < 0x800) {
    out += static_cast<char>(0xC0 | (cpt >> 6));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else if (cpt < 0x10000) {
    out += static_cast<char>(0xE0 | (cpt >> 12));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cpt >> 18));
    out += static_cast<char>(0x80 | ((cpt >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  }
}

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int len = Utf8SequenceLength(s, i);
    if (len <= 0) return false;
    i += len;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    const int len = Utf8SequenceLength(s, i);
    if (len > 0) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      AppendUtf8(kReplacementChar, out);
      ++i;
    }
  }
  return out;
}

}  // namespace deltaserve::common
