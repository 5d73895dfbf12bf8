#include "common/jinja/lexer.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/value.h"
#include "common/unicode.h"

namespace deltaserve::common::jinja {
namespace {

// Length in bytes of the Python-whitespace code point at s[pos], or 0.
size_t SpaceAt(std::string_view s, size_t pos) {
  size_t next = pos;
  const uint32_t c = DecodeUtf8(s, next);
  return IsPySpace(static_cast<char32_t>(c)) ? next - pos : 0;
}

size_t SkipSpaces(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    const size_t n = SpaceAt(s, pos);
    if (n == 0) break;
    pos += n;
  }
  return pos;
}

// Python str.rstrip(): the length of `s` without its trailing whitespace.
size_t RStripLength(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
      --start;
    }
    if (SpaceAt(s.substr(0, end), start) != end - start) break;
    end = start;
  }
  return end;
}

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      // The next tag start: {{, {% or {#.
      size_t tag = pos;
      while (true) {
        tag = src_.find('{', tag);
        if (tag == std::string::npos || tag + 1 >= src_.size()) {
          tag = std::string::npos;
          break;
        }
        const char k = src_[tag + 1];
        if (k == '{' || k == '%' || k == '#') break;
        ++tag;
      }
      if (tag == std::string::npos) {
        Emit(Token::Type::kData, src_.substr(pos), pos);
        break;
      }
      const char kind = src_[tag + 1];
      size_t after = tag + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      std::string_view text(src_.data() + pos, tag - pos);
      const bool is_raw = kind == '%' && IsRawTag(after);
      if (sign == '-') {
        text = text.substr(0, RStripLength(text));
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop the spaces between the line start and a block or comment tag.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            SkipSpaces(text, l_pos) == text.size()) {
          text = text.substr(0, l_pos);
        }
      }
      if (!text.empty()) Emit(Token::Type::kData, std::string(text), pos);
      if (is_raw) {
        DS_JINJA_ASSIGN_OR_RETURN(pos, LexRaw(tag, after, line_starting));
      } else if (kind == '#') {
        DS_JINJA_ASSIGN_OR_RETURN(pos, LexComment(tag, after, line_starting));
      } else {
        DS_JINJA_ASSIGN_OR_RETURN(pos, LexTag(tag, after, kind == '%', line_starting));
      }
    }
    Emit(Token::Type::kEnd, "", src_.size());
    return std::move(tokens_);
  }

 private:
  void Emit(Token::Type type, std::string value, size_t offset) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    Locate(offset, t.line, t.column);
    tokens_.push_back(std::move(t));
  }

  void Locate(size_t offset, int& line, int& column) {
    if (offset < located_offset_) {
      located_offset_ = 0;
      located_line_start_ = 0;
      located_line_ = 1;
    }
    while (located_offset_ < offset && located_offset_ < src_.size()) {
      if (src_[located_offset_] == '\n') {
        ++located_line_;
        located_line_start_ = located_offset_ + 1;
      }
      ++located_offset_;
    }
    line = located_line_;
    column = static_cast<int>(offset - located_line_start_) + 1;
  }

  absl::Status Error(size_t offset, std::string_view message) {
    int line = 0;
    int column = 0;
    Locate(offset, line, column);
    return absl::InvalidArgumentError(absl::StrCat(LocationPrefix(line, column), Sv(message)));
  }
  static absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

  bool IsRawTag(size_t after) const {
    size_t p = after;
    while (p < src_.size() && IsAsciiSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    size_t q = p;
    while (q < src_.size() && IsAsciiSpace(src_[q])) ++q;
    if (q < src_.size() && src_[q] == '-') ++q;
    return src_.compare(q, 2, "%}") == 0;
  }

  // After `{%` (and sign) of a raw tag: emits the raw body as data, returns the offset after
  // `{% endraw %}`.
  absl::StatusOr<size_t> LexRaw(size_t tag, size_t after, bool& line_starting) {
    size_t p = src_.find("%}", after);
    const bool strip_after = p > 0 && src_[p - 1] == '-';
    p += 2;
    if (strip_after) p = SkipSpaces(src_, p);
    const size_t body_start = p;
    size_t search = body_start;
    while (true) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) return Error(tag, "Missing end of raw directive");
      size_t q = open + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      while (q < src_.size() && IsAsciiSpace(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      q += 6;
      while (q < src_.size() && IsAsciiSpace(src_[q])) ++q;
      size_t end;
      if (src_.compare(q, 3, "+%}") == 0) {
        end = q + 3;
      } else if (src_.compare(q, 3, "-%}") == 0) {
        end = SkipSpaces(src_, q + 3);
      } else if (src_.compare(q, 2, "%}") == 0) {
        end = q + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        search = open + 2;
        continue;
      }
      std::string_view body(src_.data() + body_start, open - body_start);
      if (sign == '-') {
        body = body.substr(0, RStripLength(body));
      } else if (sign != '+') {
        const size_t nl = body.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if (l_pos > 0 && l_pos < body.size() && SkipSpaces(body, l_pos) == body.size()) {
          body = body.substr(0, l_pos);
        }
      }
      if (!body.empty()) Emit(Token::Type::kData, std::string(body), body_start);
      line_starting = src_[end - 1] == '\n';
      return end;
    }
  }

  absl::StatusOr<size_t> LexComment(size_t tag, size_t after, bool& line_starting) {
    const size_t close = src_.find("#}", after);
    if (close == std::string::npos) return Error(tag, "Missing end of comment tag");
    size_t end = close + 2;
    const char sign = close > after ? src_[close - 1] : 0;
    if (sign == '-') {
      end = SkipSpaces(src_, end);
    } else if (sign != '+' && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    line_starting = src_[end - 1] == '\n';
    return end;
  }

  absl::StatusOr<size_t> LexTag(size_t tag, size_t pos, bool block, bool& line_starting) {
    Emit(block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", tag);
    std::string open_brackets;  // the closing bracket each open one expects
    while (true) {
      if (pos >= src_.size()) {
        return Error(tag, block ? "unexpected end of template, expected '%}'"
                                : "unexpected end of template, expected '}}'");
      }
      if (open_brackets.empty()) {
        const std::string_view close = block ? "%}" : "}}";
        size_t end = std::string::npos;
        if (src_.compare(pos, 1, "-") == 0 && src_.compare(pos + 1, 2, close) == 0) {
          end = SkipSpaces(src_, pos + 3);
        } else if (block && src_.compare(pos, 1, "+") == 0 &&
                   src_.compare(pos + 1, 2, close) == 0) {
          end = pos + 3;
        } else if (src_.compare(pos, 2, close) == 0) {
          end = pos + 2;
          if (block && end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
        }
        if (end != std::string::npos) {
          Emit(block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", pos);
          line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      const char c = src_[pos];
      if (const size_t n = SpaceAt(src_, pos); n > 0) {
        pos += n;
        continue;
      }
      if (IsDigit(c)) {
        DS_JINJA_ASSIGN_OR_RETURN(pos, LexNumber(pos));
        continue;
      }
      if (IsNameStart(c)) {
        size_t e = pos;
        while (e < src_.size() && IsNameChar(src_[e])) ++e;
        Emit(Token::Type::kName, src_.substr(pos, e - pos), pos);
        pos = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        DS_JINJA_ASSIGN_OR_RETURN(pos, LexString(pos));
        continue;
      }
      static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
      bool matched = false;
      for (std::string_view op : kTwo) {
        if (src_.compare(pos, 2, op) == 0) {
          Emit(Token::Type::kOperator, std::string(op), pos);
          pos += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
        return Error(pos, absl::StrCat("unexpected char '", std::string(1, c), "'"));
      }
      if (c == '(' || c == '[' || c == '{') {
        open_brackets.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
      }
      if (c == ')' || c == ']' || c == '}') {
        if (open_brackets.empty()) {
          return Error(pos, absl::StrCat("unexpected '", std::string(1, c), "'"));
        }
        if (open_brackets.back() != c) {
          return Error(pos, absl::StrCat("unexpected '", std::string(1, c), "', expected '",
                                         std::string(1, open_brackets.back()), "'"));
        }
        open_brackets.pop_back();
      }
      Emit(Token::Type::kOperator, std::string(1, c), pos);
      ++pos;
    }
  }

  absl::StatusOr<size_t> LexNumber(size_t pos) {
    // Digits with single underscores between them (Python's 1_000).
    auto digits = [&](size_t p) {
      if (p >= src_.size() || !IsDigit(src_[p])) return p;
      ++p;
      while (p < src_.size()) {
        if (IsDigit(src_[p])) {
          ++p;
        } else if (src_[p] == '_' && p + 1 < src_.size() && IsDigit(src_[p + 1])) {
          p += 2;
        } else {
          break;
        }
      }
      return p;
    };
    const size_t start = pos;
    size_t p = digits(pos);
    bool is_float = false;
    const bool after_dot = start > 0 && src_[start - 1] == '.';
    if (!after_dot) {
      if (p + 1 < src_.size() && src_[p] == '.' && IsDigit(src_[p + 1])) {
        p = digits(p + 1);
        is_float = true;
      }
      if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
        size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        if (q < src_.size() && IsDigit(src_[q])) {
          p = digits(q);
          is_float = true;
        }
      }
    }
    std::string text;
    for (size_t i = start; i < p; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token t;
    Locate(start, t.line, t.column);
    if (is_float) {
      t.type = Token::Type::kFloat;
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.type = Token::Type::kInt;
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return Error(start, "integer literal out of range");
    }
    tokens_.push_back(std::move(t));
    return p;
  }

  absl::StatusOr<size_t> LexString(size_t pos) {
    const char quote = src_[pos];
    std::string value;
    size_t p = pos + 1;
    while (true) {
      if (p >= src_.size()) return Error(pos, "unterminated string");
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) return Error(pos, "unterminated string");
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case '\n':
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'v':
          value += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          uint32_t cp = 0;
          for (int i = 0; i < n; ++i) {
            const int h = p < src_.size() ? HexValue(src_[p]) : -1;
            if (h < 0)
              return Error(pos, absl::StrCat("truncated \\", std::string(1, e), " escape"));
            cp = cp * 16 + static_cast<uint32_t>(h);
            ++p;
          }
          if (cp > 0x10FFFF) return Error(pos, "illegal Unicode character in escape");
          AppendUtf8(cp, value);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i) {
              cp = cp * 8 + static_cast<uint32_t>(src_[p++] - '0');
            }
            AppendUtf8(cp, value);
          } else if (e == 'N') {
            return Error(pos, "\\N{...} escapes are not supported");
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    Emit(Token::Type::kString, std::move(value), pos);
    return p + 1;
  }

  std::string src_;
  std::vector<Token> tokens_;
  size_t located_offset_ = 0;
  size_t located_line_start_ = 0;
  int located_line_ = 1;
};

// Newlines normalized to "\n", and one trailing newline dropped (keep_trailing_newline=False).
std::string NormalizeSource(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::string LocationPrefix(int line, int column) {
  return absl::StrCat("chat template line ", line, ", column ", column, ": ");
}

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) {
  Lexer lexer(NormalizeSource(source));
  return lexer.Run();
}

}  // namespace deltaserve::common::jinja
