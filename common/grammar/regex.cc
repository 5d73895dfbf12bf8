// The regex parser: ECMA-262 pattern syntax without the `u` flag (what JSON Schema's `pattern`
// uses), the subset listed in docs/structured_outputs.md ("Regular expressions"). Recursive
// descent whose recursion is bounded by RegexLimits::max_nesting (each level is one group).
#include "common/grammar/regex.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grammar/internal/code_points.h"
#include "common/str_util.h"
#include "common/unicode.h"

namespace deltaserve::common::grammar {
namespace {

using internal::CodePointRanges;

RegexAst MakeNode(RegexNode::Kind kind) {
  auto n = std::make_unique<RegexNode>();
  n->kind = kind;
  return n;
}

RegexAst MakeSet(CodePointRanges ranges) {
  RegexAst n = MakeNode(RegexNode::Kind::kCodePointSet);
  n->ranges = internal::NormalizeRanges(std::move(ranges));
  return n;
}

const CodePointRanges& DigitRanges() {
  static const CodePointRanges r = {{'0', '9'}};
  return r;
}
const CodePointRanges& WordRanges() {
  static const CodePointRanges r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return r;
}
// ECMA-262 WhiteSpace and LineTerminator (what \s matches).
const CodePointRanges& SpaceRanges() {
  static const CodePointRanges r = internal::NormalizeRanges({{0x09, 0x0D},
                                                              {0x20, 0x20},
                                                              {0xA0, 0xA0},
                                                              {0x1680, 0x1680},
                                                              {0x2000, 0x200A},
                                                              {0x2028, 0x2029},
                                                              {0x202F, 0x202F},
                                                              {0x205F, 0x205F},
                                                              {0x3000, 0x3000},
                                                              {0xFEFF, 0xFEFF}});
  return r;
}

class Parser {
 public:
  Parser(std::string_view pattern, const RegexLimits& limits)
      : pattern_(pattern), limits_(limits) {}

  absl::StatusOr<RegexAst> Parse() {
    if (pattern_.size() > limits_.max_pattern_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("regex: pattern of ", pattern_.size(),
                                                     " bytes is over the limit of ",
                                                     limits_.max_pattern_bytes));
    }
    if (!IsValidUtf8(pattern_)) return absl::InvalidArgumentError("regex: pattern is not UTF-8");
    absl::StatusOr<RegexAst> ast = ParseAlternation();
    if (!ast.ok()) return ast.status();
    if (pos_ < pattern_.size()) return Error("unmatched )");
    return ast;
  }

 private:
  absl::Status Error(std::string_view what) const { return ErrorAt(pos_, what); }
  absl::Status ErrorAt(size_t offset, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("regex: ", Sv(what), " at offset ", offset, " of pattern"));
  }
  bool AtEnd() const { return pos_ >= pattern_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < pattern_.size() ? pattern_[pos_ + ahead] : '\0';
  }
  uint32_t NextCodePoint() { return DecodeUtf8(pattern_, pos_); }

  absl::StatusOr<RegexAst> ParseAlternation() {
    std::vector<RegexAst> alts;
    while (true) {
      absl::StatusOr<RegexAst> concat = ParseConcat();
      if (!concat.ok()) return concat.status();
      alts.push_back(*std::move(concat));
      if (Peek() != '|') break;
      ++pos_;
    }
    if (alts.size() == 1) return std::move(alts[0]);
    RegexAst n = MakeNode(RegexNode::Kind::kAlternation);
    n->children = std::move(alts);
    return n;
  }

  absl::StatusOr<RegexAst> ParseConcat() {
    std::vector<RegexAst> items;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      absl::StatusOr<RegexAst> atom = ParseAtom();
      if (!atom.ok()) return atom.status();
      absl::StatusOr<RegexAst> quantified = ParseQuantifiers(*std::move(atom));
      if (!quantified.ok()) return quantified.status();
      items.push_back(*std::move(quantified));
    }
    if (items.empty()) return MakeNode(RegexNode::Kind::kEmpty);
    if (items.size() == 1) return std::move(items[0]);
    RegexAst n = MakeNode(RegexNode::Kind::kConcat);
    n->children = std::move(items);
    return n;
  }

  // Reads `{n}`, `{n,}` or `{n,m}` at pos_ into min/max and returns true; false (pos_ unchanged)
  // when the text there is not a quantifier (ECMA-262 Annex B: then `{` is a literal).
  absl::StatusOr<bool> ReadBraces(int& min, int& max) {
    size_t p = pos_ + 1;
    auto number = [&](int& out) -> absl::StatusOr<bool> {
      const size_t start = p;
      int64_t v = 0;
      while (p < pattern_.size() && pattern_[p] >= '0' && pattern_[p] <= '9') {
        v = std::min<int64_t>(v * 10 + (pattern_[p] - '0'), int64_t{1} << 40);
        ++p;
      }
      if (p == start) return false;
      if (v > limits_.max_repetition) {
        return ErrorAt(start, absl::StrCat("repetition count ", v, " is over the limit of ",
                                           limits_.max_repetition));
      }
      out = static_cast<int>(v);
      return true;
    };
    if (p < pattern_.size() && pattern_[p] == ',') {
      return ErrorAt(pos_, "quantifier {,n} (engines disagree on it; write {0,n})");
    }
    absl::StatusOr<bool> has_min = number(min);
    if (!has_min.ok() || !*has_min) return has_min;
    max = min;
    if (p < pattern_.size() && pattern_[p] == ',') {
      ++p;
      absl::StatusOr<bool> has_max = number(max);
      if (!has_max.ok()) return has_max;
      if (!*has_max) max = -1;
    }
    if (p >= pattern_.size() || pattern_[p] != '}') return false;
    if (max >= 0 && max < min) return ErrorAt(pos_, "quantifier {n,m} with m < n");
    pos_ = p + 1;
    return true;
  }

  absl::StatusOr<RegexAst> ParseQuantifiers(RegexAst atom) {
    bool quantified = false;
    while (!AtEnd()) {
      int min = 0, max = -1;
      const char c = Peek();
      const size_t at = pos_;
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        min = 1;
        ++pos_;
      } else if (c == '?') {
        max = 1;
        ++pos_;
      } else if (c == '{') {
        absl::StatusOr<bool> braces = ReadBraces(min, max);
        if (!braces.ok()) return braces.status();
        if (!*braces) break;
      } else {
        break;
      }
      if (quantified) return ErrorAt(at, "nothing to repeat (a quantifier after a quantifier)");
      if (atom->kind == RegexNode::Kind::kStartAnchor ||
          atom->kind == RegexNode::Kind::kEndAnchor) {
        return ErrorAt(at, "nothing to repeat (a quantifier after an anchor)");
      }
      if (Peek() == '?') ++pos_;  // lazy: the same language
      RegexAst rep = MakeNode(RegexNode::Kind::kRepeat);
      rep->min = min;
      rep->max = max;
      rep->children.push_back(std::move(atom));
      atom = std::move(rep);
      quantified = true;
    }
    return atom;
  }

  absl::StatusOr<RegexAst> ParseGroup() {
    const size_t open = pos_;
    ++pos_;  // (
    if (Peek() == '?') {
      const char k = Peek(1);
      if (k == ':') {
        pos_ += 2;
      } else if (k == '=' || k == '!') {
        return ErrorAt(open, "lookahead (?= / (?! is not supported");
      } else if (k == '<' && (Peek(2) == '=' || Peek(2) == '!')) {
        return ErrorAt(open, "lookbehind (?<= / (?<! is not supported");
      } else if (k == '<') {
        // A named group (ECMA-262 2018): captures like (...); its name has no meaning here.
        size_t p = pos_ + 2;
        while (p < pattern_.size() && pattern_[p] != '>' && pattern_[p] != ')') ++p;
        if (p >= pattern_.size() || pattern_[p] != '>' || p == pos_ + 2) {
          return ErrorAt(open, "malformed group name (?<name>");
        }
        pos_ = p + 1;
      } else {
        return ErrorAt(open,
                       "group syntax (? other than (?: and (?<name> (inline flags, "
                       "(?P...) and the like are not ECMA-262)");
      }
    }
    if (++depth_ > limits_.max_nesting) {
      return ErrorAt(open, absl::StrCat("groups nested deeper than ", limits_.max_nesting));
    }
    absl::StatusOr<RegexAst> inner = ParseAlternation();
    --depth_;
    if (!inner.ok()) return inner.status();
    if (Peek() != ')') return ErrorAt(open, "unterminated group (");
    ++pos_;
    return inner;
  }

  absl::StatusOr<RegexAst> ParseAtom() {
    const char c = Peek();
    switch (c) {
      case '(':
        return ParseGroup();
      case '[':
        return ParseClass();
      case '.':
        ++pos_;
        return MakeSet({{0, '\n' - 1}, {'\n' + 1, internal::kMaxCodePoint}});
      case '^':
        ++pos_;
        return MakeNode(RegexNode::Kind::kStartAnchor);
      case '$':
        ++pos_;
        return MakeNode(RegexNode::Kind::kEndAnchor);
      case '*':
      case '+':
      case '?':
        return Error("nothing to repeat");
      case '{': {
        int min = 0, max = 0;
        absl::StatusOr<bool> braces = ReadBraces(min, max);
        if (!braces.ok()) return braces.status();
        if (*braces) return Error("nothing to repeat");
        ++pos_;
        return MakeSet({{'{', '{'}});
      }
      case '\\': {
        CodePointRanges ranges;
        absl::Status s = ParseEscape(/*in_class=*/false, ranges);
        if (!s.ok()) return s;
        return MakeSet(std::move(ranges));
      }
      default: {
        const uint32_t cp = NextCodePoint();
        return MakeSet({{cp, cp}});
      }
    }
  }

  // Reads `count` hex digits at pos_ into `value`.
  bool ReadHex(int count, uint32_t& value) {
    value = 0;
    for (int i = 0; i < count; ++i) {
      const char h = Peek(static_cast<size_t>(i));
      int d;
      if (h >= '0' && h <= '9') {
        d = h - '0';
      } else if (h >= 'a' && h <= 'f') {
        d = h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        d = h - 'A' + 10;
      } else {
        return false;
      }
      value = value * 16 + static_cast<uint32_t>(d);
    }
    pos_ += static_cast<size_t>(count);
    return true;
  }

  // An escape at pos_ (the backslash) into `ranges`; `single` (when given) receives true when
  // the escape is one character (a class range may end at it).
  absl::Status ParseEscape(bool in_class, CodePointRanges& ranges, bool* single = nullptr) {
    const size_t at = pos_;
    ++pos_;  // backslash
    if (AtEnd()) return ErrorAt(at, "pattern ends in a backslash");
    const char c = Peek();
    auto one = [&](uint32_t cp) {
      ranges.emplace_back(cp, cp);
      if (single) *single = true;
      return absl::OkStatus();
    };
    auto add_class = [&](const CodePointRanges& r, bool negate) {
      const CodePointRanges add = negate ? internal::ComplementRanges(r) : r;
      ranges.insert(ranges.end(), add.begin(), add.end());
      ++pos_;
      if (single) *single = false;
      return absl::OkStatus();
    };
    switch (c) {
      case 'd':
        return add_class(DigitRanges(), false);
      case 'D':
        return add_class(DigitRanges(), true);
      case 'w':
        return add_class(WordRanges(), false);
      case 'W':
        return add_class(WordRanges(), true);
      case 's':
        return add_class(SpaceRanges(), false);
      case 'S':
        return add_class(SpaceRanges(), true);
      case 'n':
        ++pos_;
        return one('\n');
      case 'r':
        ++pos_;
        return one('\r');
      case 't':
        ++pos_;
        return one('\t');
      case 'v':
        ++pos_;
        return one('\v');
      case 'f':
        ++pos_;
        return one('\f');
      case 'b':
        if (in_class) {
          ++pos_;
          return one('\b');
        }
        return ErrorAt(at, "word boundary \\b is not supported");
      case 'B':
        return ErrorAt(at, "word boundary \\B is not supported");
      case '0':
        if (Peek(1) >= '0' && Peek(1) <= '9') return ErrorAt(at, "octal escape");
        ++pos_;
        return one(0);
      case 'c': {
        const char l = Peek(1);
        if ((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z')) {
          pos_ += 2;
          return one(static_cast<uint32_t>(l) % 32);
        }
        return ErrorAt(at, "malformed control escape \\c");
      }
      case 'x': {
        ++pos_;
        uint32_t v;
        if (!ReadHex(2, v)) return ErrorAt(at, "malformed \\x escape (needs two hex digits)");
        return one(v);
      }
      case 'u': {
        ++pos_;
        uint32_t v;
        if (Peek() == '{') {
          const size_t open = pos_;
          ++pos_;
          size_t digits = 0;
          v = 0;
          uint32_t d;
          while (digits < 7 && ReadHex(1, d)) {
            v = v * 16 + d;
            ++digits;
          }
          if (digits == 0 || Peek() != '}' || v > internal::kMaxCodePoint) {
            return ErrorAt(open, "malformed \\u{...} escape");
          }
          ++pos_;
          return one(v);
        }
        if (!ReadHex(4, v)) return ErrorAt(at, "malformed \\u escape (needs four hex digits)");
        if (v >= 0xD800 && v <= 0xDBFF && Peek() == '\\' && Peek(1) == 'u') {
          const size_t save = pos_;
          pos_ += 2;
          uint32_t lo;
          if (ReadHex(4, lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
            return one(0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00));
          }
          pos_ = save;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return ErrorAt(at, "lone surrogate escape");
        return one(v);
      }
      case 'p':
      case 'P':
        return ErrorAt(at, "unicode property escape \\p{...} is not supported");
      case 'k':
        return ErrorAt(at, "named backreference \\k<...> is not supported");
      default:
        break;
    }
    if (c >= '1' && c <= '9') return ErrorAt(at, "backreference \\1..\\9 is not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      // \a \e \z \Z \A ... mean different things (or nothing) across engines.
      return ErrorAt(at, absl::StrCat("unknown escape \\", std::string(1, c)));
    }
    // Identity escape: the character itself (\. \* \\ \/ \- ...).
    const uint32_t cp = NextCodePoint();
    return one(cp);
  }

  absl::StatusOr<RegexAst> ParseClass() {
    const size_t open = pos_;
    ++pos_;  // [
    bool negate = false;
    if (Peek() == '^') {
      negate = true;
      ++pos_;
    }
    if (Peek() == ']') {
      return ErrorAt(open, negate ? "class [^] (engines disagree on it)"
                                  : "empty class [] (engines disagree on it)");
    }
    CodePointRanges ranges;
    while (true) {
      if (AtEnd()) return ErrorAt(open, "unterminated class [");
      if (Peek() == ']') {
        ++pos_;
        break;
      }
      // One class atom: a character or an escape.
      uint32_t lo = 0;
      bool single = true;
      const size_t atom_at = pos_;
      if (Peek() == '\\') {
        CodePointRanges r;
        absl::Status s = ParseEscape(/*in_class=*/true, r, &single);
        if (!s.ok()) return s;
        if (!single) {
          ranges.insert(ranges.end(), r.begin(), r.end());
          if (Peek() == '-' && Peek(1) != ']') {
            return ErrorAt(atom_at, "class range from a class escape (\\d-x)");
          }
          continue;
        }
        lo = r[0].first;
      } else {
        lo = NextCodePoint();
      }
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < pattern_.size()) {
        ++pos_;  // -
        uint32_t hi = 0;
        if (Peek() == '\\') {
          CodePointRanges r;
          bool hi_single = true;
          absl::Status s = ParseEscape(/*in_class=*/true, r, &hi_single);
          if (!s.ok()) return s;
          if (!hi_single) return ErrorAt(atom_at, "class range to a class escape (x-\\d)");
          hi = r[0].first;
        } else {
          hi = NextCodePoint();
        }
        if (hi < lo) return ErrorAt(atom_at, "class range out of order");
        ranges.emplace_back(lo, hi);
      } else {
        ranges.emplace_back(lo, lo);
      }
    }
    ranges = internal::NormalizeRanges(std::move(ranges));
    if (negate) ranges = internal::ComplementRanges(ranges);
    return MakeSet(std::move(ranges));
  }

  std::string_view pattern_;
  const RegexLimits& limits_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<RegexAst> ParseRegex(std::string_view pattern, const RegexLimits& limits) {
  return Parser(pattern, limits).Parse();
}

}  // namespace deltaserve::common::grammar
