// Python's str methods as templates call them (`content.split('</think>')[-1].lstrip('\n')`,
// `name.startswith(('a', 'b'))`), by code point, with Unicode whitespace and Python's full case
// mappings; and the helpers filters share (PyStrip, PyUpper, …).
#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/builtins.h"
#include "common/jinja/interpreter.h"
#include "common/unicode.h"
#include "unicode/uchar.h"
#include "unicode/ustring.h"

namespace deltaserve::common::jinja {
namespace {

absl::Status TypeError(std::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("TypeError: ", absl::string_view(message.data(), message.size())));
}

const Value* Arg(const CallArgs& args, size_t i, std::string_view name) {
  const Value* v = nullptr;
  if (i < args.positional.size()) {
    v = &args.positional[i];
  } else {
    v = args.Keyword(name);
  }
  if (v != nullptr && v->is_none()) return nullptr;
  return v;
}

absl::StatusOr<std::string> StringArg(const CallArgs& args, size_t i, std::string_view name,
                                      std::string_view method) {
  const Value* v = Arg(args, i, name);
  if (v == nullptr) {
    return TypeError(absl::StrCat(absl::string_view(method.data(), method.size()),
                                  "() missing required argument '",
                                  absl::string_view(name.data(), name.size()), "'"));
  }
  if (!v->is_string()) {
    return TypeError(absl::StrCat(absl::string_view(method.data(), method.size()),
                                  "() argument must be str, not ", v->TypeName()));
  }
  return v->as_string();
}

absl::StatusOr<int64_t> IntArg(const CallArgs& args, size_t i, std::string_view name,
                               int64_t fallback) {
  const Value* v = Arg(args, i, name);
  if (v == nullptr) return fallback;
  if (!v->is_int() && !v->is_bool()) {
    return TypeError(
        absl::StrCat("'", v->TypeName(), "' object cannot be interpreted as an integer"));
  }
  return v->as_int();
}

bool IsCased(UChar32 c) { return u_isULowercase(c) || u_isUUppercase(c) || u_istitle(c); }

enum class CaseMode { kUpper, kLower, kTitle };

// Python's str.upper()/lower() use the full Unicode case mappings (SpecialCasing: "ß" → "SS",
// "İ" → "i̇"), which ICU's root locale applies too; kTitle is meant for one code point.
std::string FullCaseMap(std::string_view s, CaseMode mode) {
  bool ascii = true;
  for (char c : s) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) {
    std::string out(s);
    for (size_t i = 0; i < out.size(); ++i) {
      char& c = out[i];
      const bool upper = mode == CaseMode::kUpper || (mode == CaseMode::kTitle && i == 0);
      if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
      if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    }
    return out;
  }
  UErrorCode err = U_ZERO_ERROR;
  int32_t n16 = 0;
  u_strFromUTF8WithSub(nullptr, 0, &n16, s.data(), static_cast<int32_t>(s.size()), 0xFFFD, nullptr,
                       &err);
  err = U_ZERO_ERROR;
  std::u16string in(static_cast<size_t>(n16), u'\0');
  u_strFromUTF8WithSub(reinterpret_cast<UChar*>(in.data()), n16, nullptr, s.data(),
                       static_cast<int32_t>(s.size()), 0xFFFD, nullptr, &err);
  if (U_FAILURE(err)) return std::string(s);
  std::u16string mapped(in.size() * 3 + 4, u'\0');
  err = U_ZERO_ERROR;
  UChar* dst = reinterpret_cast<UChar*>(mapped.data());
  const int32_t cap = static_cast<int32_t>(mapped.size());
  const UChar* src = reinterpret_cast<const UChar*>(in.data());
  const int32_t len = static_cast<int32_t>(in.size());
  int32_t m = 0;
  switch (mode) {
    case CaseMode::kUpper:
      m = u_strToUpper(dst, cap, src, len, "", &err);
      break;
    case CaseMode::kLower:
      m = u_strToLower(dst, cap, src, len, "", &err);
      break;
    case CaseMode::kTitle:
      m = u_strToTitle(dst, cap, src, len, nullptr, "", &err);
      break;
  }
  if (U_FAILURE(err)) return std::string(s);
  mapped.resize(static_cast<size_t>(m));
  std::string out;
  size_t i = 0;
  while (i < mapped.size()) {
    uint32_t c = mapped[i++];
    if (c >= 0xD800 && c < 0xDC00 && i < mapped.size() && mapped[i] >= 0xDC00 &&
        mapped[i] < 0xE000) {
      c = 0x10000 + ((c - 0xD800) << 10) + (mapped[i++] - 0xDC00);
    }
    AppendUtf8(c, out);
  }
  return out;
}

// s[start:end] in code points, for the optional start/end arguments of find, startswith, ….
absl::StatusOr<std::string> SliceArgs(const std::string& s, const CallArgs& args, size_t first) {
  const Value* start = Arg(args, first, "start");
  const Value* end = Arg(args, first + 1, "end");
  if (start == nullptr && end == nullptr) return s;
  DS_JINJA_ASSIGN_OR_RETURN(Value sliced, GetSlice(Value(s), start, end, nullptr));
  if (!sliced.is_string()) return TypeError("slice indices must be integers or None");
  return sliced.as_string();
}

Value StringList(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (std::string& p : parts) items.emplace_back(std::move(p));
  return Value::List(std::move(items));
}

std::vector<std::string> SplitWhitespace(const std::string& s, int64_t maxsplit, bool from_right) {
  const std::u32string u = DecodeCodepoints(s);
  const size_t n = u.size();
  std::vector<std::string> out;
  int64_t splits = 0;
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < n && IsPySpace(u[i])) ++i;
      if (i == n) break;
      if (maxsplit >= 0 && splits == maxsplit) {
        out.push_back(EncodeCodepoints(std::u32string_view(u).substr(i)));
        break;
      }
      size_t j = i;
      while (j < n && !IsPySpace(u[j])) ++j;
      out.push_back(EncodeCodepoints(std::u32string_view(u).substr(i, j - i)));
      ++splits;
      i = j;
    }
  } else {
    size_t j = n;
    while (true) {
      while (j > 0 && IsPySpace(u[j - 1])) --j;
      if (j == 0) break;
      if (maxsplit >= 0 && splits == maxsplit) {
        out.push_back(EncodeCodepoints(std::u32string_view(u).substr(0, j)));
        break;
      }
      size_t i = j;
      while (i > 0 && !IsPySpace(u[i - 1])) --i;
      out.push_back(EncodeCodepoints(std::u32string_view(u).substr(i, j - i)));
      ++splits;
      j = i;
    }
    std::reverse(out.begin(), out.end());
  }
  return out;
}

std::vector<std::string> SplitOn(const std::string& s, const std::string& sep, int64_t maxsplit,
                                 bool from_right) {
  std::vector<std::string> out;
  int64_t splits = 0;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || splits < maxsplit) {
      const size_t pos = s.find(sep, start);
      if (pos == std::string::npos) break;
      out.push_back(s.substr(start, pos - start));
      start = pos + sep.size();
      ++splits;
    }
    out.push_back(s.substr(start));
  } else {
    size_t end = s.size();
    while (maxsplit < 0 || splits < maxsplit) {
      if (end < sep.size()) break;
      const size_t pos = s.rfind(sep, end - sep.size());
      if (pos == std::string::npos) break;
      out.push_back(s.substr(pos + sep.size(), end - pos - sep.size()));
      end = pos;
      ++splits;
    }
    out.push_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
  }
  return out;
}

std::string Replace(const std::string& s, const std::string& old, const std::string& repl,
                    int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {
    const std::u32string u = DecodeCodepoints(s);
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < u.size()) AppendUtf8(static_cast<uint32_t>(u[i]), out);
    }
    return out;
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    const size_t pos = s.find(old, start);
    if (pos == std::string::npos) break;
    out.append(s, start, pos - start);
    out += repl;
    start = pos + old.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

// str.format with {} / {0} / {name} fields and {{ }} escapes (no format specs).
absl::StatusOr<std::string> Format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      return absl::InvalidArgumentError("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError("ValueError: Single '{' encountered in format string");
    }
    std::string field = fmt.substr(i + 1, close - i - 1);
    bool repr = false;
    if (field.size() >= 2 && field[field.size() - 2] == '!') {
      repr = field.back() == 'r';
      field.resize(field.size() - 2);
    }
    if (field.find(':') != std::string::npos) {
      return absl::InvalidArgumentError("ValueError: format specs are not supported");
    }
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_index < args.positional.size()) v = &args.positional[auto_index];
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t idx = static_cast<size_t>(std::atoll(field.c_str()));
      if (idx < args.positional.size()) v = &args.positional[idx];
    } else {
      v = args.Keyword(field);
    }
    if (v == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("IndexError: format field '", field, "' has no value"));
    }
    out += repr ? v->Repr() : v->Str();
    DS_JINJA_RETURN_IF_ERROR(Interpreter::CheckStringSize(out.size()));
    i = close;
  }
  return out;
}

bool AllCodepoints(const std::string& s, bool (*pred)(UChar32)) {
  if (s.empty()) return false;
  for (char32_t c : DecodeCodepoints(s)) {
    if (!pred(static_cast<UChar32>(c))) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<Value> CallStrMethod(const Value& self, const std::string& name, CallArgs& args) {
  const std::string& s = self.as_string();
  if (name == "startswith" || name == "endswith") {
    const Value* arg = Arg(args, 0, "prefix");
    if (arg == nullptr) return TypeError(absl::StrCat(name, "() takes at least 1 argument"));
    DS_JINJA_ASSIGN_OR_RETURN(std::string hay, SliceArgs(s, args, 1));
    std::vector<Value> candidates;
    if (arg->is_list() && arg->as_list().is_tuple) {
      candidates = arg->as_list().items;
    } else {
      candidates.push_back(*arg);
    }
    for (const Value& c : candidates) {
      if (!c.is_string()) {
        return TypeError(
            absl::StrCat(name, " first arg must be str or a tuple of str, not ", c.TypeName()));
      }
      const std::string& p = c.as_string();
      if (p.size() > hay.size()) continue;
      if (name == "startswith" ? hay.compare(0, p.size(), p) == 0
                               : hay.compare(hay.size() - p.size(), p.size(), p) == 0) {
        return Value(true);
      }
    }
    return Value(false);
  }
  if (name == "split" || name == "rsplit") {
    const Value* sep = Arg(args, 0, "sep");
    DS_JINJA_ASSIGN_OR_RETURN(int64_t maxsplit, IntArg(args, 1, "maxsplit", -1));
    if (sep == nullptr) return StringList(SplitWhitespace(s, maxsplit, name == "rsplit"));
    if (!sep->is_string())
      return TypeError(absl::StrCat("must be str or None, not ", sep->TypeName()));
    if (sep->as_string().empty()) return absl::InvalidArgumentError("ValueError: empty separator");
    return StringList(SplitOn(s, sep->as_string(), maxsplit, name == "rsplit"));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = Arg(args, 0, "chars");
    std::u32string set;
    if (chars != nullptr) {
      if (!chars->is_string()) return TypeError(absl::StrCat(name, " arg must be None or str"));
      set = DecodeCodepoints(chars->as_string());
    }
    return StripValue(self, chars != nullptr ? &set : nullptr, name != "rstrip", name != "lstrip");
  }
  if (name == "replace") {
    DS_JINJA_ASSIGN_OR_RETURN(std::string old, StringArg(args, 0, "old", name));
    DS_JINJA_ASSIGN_OR_RETURN(std::string repl, StringArg(args, 1, "new", name));
    DS_JINJA_ASSIGN_OR_RETURN(int64_t count, IntArg(args, 2, "count", -1));
    const size_t estimate =
        s.size() + (repl.size() > old.size() ? (repl.size() - old.size()) * (s.size() + 1) : 0);
    if (estimate > static_cast<size_t>(kMaxOutputBytes)) {
      // A large replacement could blow up: check the real size.
      std::string r = Replace(s, old, repl, count);
      DS_JINJA_RETURN_IF_ERROR(Interpreter::CheckStringSize(r.size()));
      return Value(std::move(r));
    }
    return Value(Replace(s, old, repl, count));
  }
  if (name == "upper") return Value(PyUpper(s));
  if (name == "lower" || name == "casefold") return Value(PyLower(s));
  if (name == "title") return Value(PyTitle(s));
  if (name == "capitalize") return Value(PyCapitalize(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    DS_JINJA_ASSIGN_OR_RETURN(std::string sub, StringArg(args, 0, "sub", name));
    DS_JINJA_ASSIGN_OR_RETURN(std::string hay, SliceArgs(s, args, 1));
    int64_t offset = 0;
    if (const Value* start = Arg(args, 1, "start");
        start != nullptr && (start->is_int() || start->is_bool())) {
      const int64_t len = CodepointCount(s);
      offset = start->as_int() < 0 ? std::max<int64_t>(0, start->as_int() + len)
                                   : std::min(start->as_int(), len);
    }
    if (name == "count") {
      if (sub.empty()) return Value(CodepointCount(hay) + 1);
      int64_t n = 0;
      for (size_t pos = hay.find(sub); pos != std::string::npos;
           pos = hay.find(sub, pos + sub.size()))
        ++n;
      return Value(n);
    }
    const size_t pos = (name == "find" || name == "index") ? hay.find(sub) : hay.rfind(sub);
    if (pos == std::string::npos) {
      if (name == "index" || name == "rindex") {
        return absl::InvalidArgumentError("ValueError: substring not found");
      }
      return Value(int64_t{-1});
    }
    return Value(offset + CodepointCount(std::string_view(hay).substr(0, pos)));
  }
  if (name == "join") {
    const Value* seq = Arg(args, 0, "iterable");
    if (seq == nullptr) return TypeError("join() takes exactly one argument");
    DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(*seq));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return TypeError(absl::StrCat("sequence item ", i, ": expected str instance, ",
                                      items[i].TypeName(), " found"));
      }
      if (i > 0) out += s;
      out += items[i].as_string();
      DS_JINJA_RETURN_IF_ERROR(Interpreter::CheckStringSize(out.size()));
    }
    return Value(std::move(out));
  }
  if (name == "format") {
    DS_JINJA_ASSIGN_OR_RETURN(std::string out, Format(s, args));
    return Value(std::move(out));
  }
  if (name == "splitlines") return StringList(PySplitLines(s));
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") {
    return Value(AllCodepoints(s, [](UChar32 c) -> bool { return u_isdigit(c); }));
  }
  if (name == "isalpha")
    return Value(AllCodepoints(s, [](UChar32 c) -> bool { return u_isalpha(c); }));
  if (name == "isalnum")
    return Value(AllCodepoints(s, [](UChar32 c) -> bool { return u_isalnum(c); }));
  if (name == "isspace") {
    return Value(
        AllCodepoints(s, [](UChar32 c) -> bool { return IsPySpace(static_cast<char32_t>(c)); }));
  }
  if (name == "islower" || name == "isupper") {
    const bool want_lower = name == "islower";
    bool any_cased = false;
    for (char32_t c : DecodeCodepoints(s)) {
      const UChar32 u = static_cast<UChar32>(c);
      if (want_lower ? (u_isUUppercase(u) || u_istitle(u)) : (u_isULowercase(u) || u_istitle(u))) {
        return Value(false);
      }
      any_cased |=
          want_lower ? static_cast<bool>(u_isULowercase(u)) : static_cast<bool>(u_isUUppercase(u));
    }
    return Value(any_cased);
  }
  return TypeError(absl::StrCat("str method '", name, "' is not supported"));
}

bool IsStrMethod(const std::string& name) {
  static constexpr std::string_view kNames[] = {
      "startswith", "endswith", "split",      "rsplit",  "strip",     "lstrip",
      "rstrip",     "replace",  "upper",      "lower",   "casefold",  "title",
      "capitalize", "find",     "rfind",      "index",   "rindex",    "count",
      "join",       "format",   "splitlines", "isdigit", "isnumeric", "isdecimal",
      "isalpha",    "isalnum",  "isspace",    "islower", "isupper"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}
std::string PyStrip(std::string_view s, const std::u32string* chars, bool left, bool right) {
  const std::u32string u = DecodeCodepoints(s);
  auto strip = [chars](char32_t c) {
    return chars == nullptr ? IsPySpace(c) : chars->find(c) != std::u32string::npos;
  };
  size_t b = 0;
  size_t e = u.size();
  if (left) {
    while (b < e && strip(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip(u[e - 1])) --e;
  }
  return EncodeCodepoints(std::u32string_view(u).substr(b, e - b));
}

Value StripValue(const Value& v, const std::u32string* chars, bool left, bool right) {
  if (!v.is_string() || v.origin() != Origin::kMixed || !IsValidUtf8(v.as_string())) {
    return Value(PyStrip(v.Str(), chars, left, right));
  }
  // Valid UTF-8, so PyStrip's result is the bytes between the first and last kept code points.
  const std::string& s = v.as_string();
  auto strip = [chars](uint32_t c) {
    return chars == nullptr ? IsPySpace(static_cast<char32_t>(c))
                            : chars->find(static_cast<char32_t>(c)) != std::u32string::npos;
  };
  size_t begin = 0;
  size_t end = s.size();
  while (left && begin < end) {
    size_t next = begin;
    if (!strip(DecodeUtf8(s, next))) break;
    begin = next;
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t pos = start;
      if (!strip(DecodeUtf8(s, pos))) break;
      end = start;
    }
  }
  std::vector<ByteRange> ranges;
  for (const ByteRange& r : v.context_ranges()) {
    if (r.end <= begin || r.begin >= end) continue;
    AddByteRange(ranges, std::max(r.begin, begin) - begin, std::min(r.end, end) - begin);
  }
  return Value::Marked(s.substr(begin, end - begin), ranges);
}

std::string PyUpper(std::string_view s) { return FullCaseMap(s, CaseMode::kUpper); }

std::string PyLower(std::string_view s) { return FullCaseMap(s, CaseMode::kLower); }

std::string PyTitle(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  std::string one;
  for (char32_t c : DecodeCodepoints(s)) {
    const UChar32 u = static_cast<UChar32>(c);
    one.clear();
    AppendUtf8(static_cast<uint32_t>(c), one);
    out += FullCaseMap(one, previous_cased ? CaseMode::kLower : CaseMode::kTitle);
    previous_cased = IsCased(u);
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  const std::u32string u = DecodeCodepoints(s);
  if (u.empty()) return "";
  std::string first;
  AppendUtf8(static_cast<uint32_t>(u[0]), first);
  return FullCaseMap(first, CaseMode::kTitle) +
         FullCaseMap(EncodeCodepoints(std::u32string_view(u).substr(1)), CaseMode::kLower);
}

std::vector<std::string> PySplitLines(std::string_view s) {
  std::vector<std::string> out;
  const std::u32string u = DecodeCodepoints(s);
  size_t start = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    const bool br = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
                    c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!br) continue;
    out.push_back(EncodeCodepoints(std::u32string_view(u).substr(start, i - start)));
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < u.size()) out.push_back(EncodeCodepoints(std::u32string_view(u).substr(start)));
  return out;
}

}  // namespace deltaserve::common::jinja
