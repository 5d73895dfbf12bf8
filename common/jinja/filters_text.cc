// jinja2's filters on strings and numbers (tojson, indent, int, float, round, title, escape),
// registered with the others in filters.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/builtins.h"
#include "common/jinja/interpreter.h"

namespace deltaserve::common::jinja {
namespace {

absl::Status TypeError(std::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("TypeError: ", absl::string_view(message.data(), message.size())));
}

// Argument i (positional after the value) or keyword `name`; null when absent.
const Value* Arg(const CallArgs& args, size_t i, std::string_view name) {
  if (i < args.positional.size()) return &args.positional[i];
  return args.Keyword(name);
}

bool BoolArg(const CallArgs& args, size_t i, std::string_view name, bool fallback) {
  const Value* v = Arg(args, i, name);
  return v == nullptr ? fallback : v->Truthy();
}

// Python's round(x, ndigits): correctly rounded, ties to even on the exact binary value.
double PyRound(double x, int64_t ndigits) {
  if (!std::isfinite(x) || ndigits > 22) return x;
  if (ndigits >= 0) {
    const int n = std::snprintf(nullptr, 0, "%.*f", static_cast<int>(ndigits), x);
    std::string buf(static_cast<size_t>(n) + 1, '\0');
    std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf.c_str(), nullptr);
  }
  if (ndigits < -308) return 0.0 * x;
  const double p = std::pow(10.0, static_cast<double>(-ndigits));
  return std::nearbyint(x / p) * p;
}

}  // namespace

// jinja2's do_title (not str.title): split before runs of whitespace, '-', '(', '{', '[', '<';
// each piece gets its first character upper-cased and the rest lower-cased.
std::string TitleFilter(const std::string& s) {
  auto is_sep = [](char32_t c) {
    return IsPySpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  const std::u32string u = DecodeCodepoints(s);
  std::string out;
  size_t i = 0;
  while (i < u.size()) {
    size_t j = i;
    const bool sep = is_sep(u[i]);
    while (j < u.size() && is_sep(u[j]) == sep) ++j;
    const std::string piece = EncodeCodepoints(std::u32string_view(u).substr(i, j - i));
    if (sep) {
      out += piece;
    } else {
      const std::u32string_view p = std::u32string_view(u).substr(i, j - i);
      out += PyUpper(EncodeCodepoints(p.substr(0, 1)));
      out += PyLower(EncodeCodepoints(p.substr(1)));
    }
    i = j;
  }
  return out;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

absl::StatusOr<Value> ToJsonFilter(Interpreter&, const Value& value, CallArgs& args) {
  JsonDumpOptions opt;
  opt.ensure_ascii = BoolArg(args, 0, "ensure_ascii", false);
  const Value* indent = Arg(args, 1, "indent");
  if (indent != nullptr && !indent->is_none()) {
    opt.pretty = true;
    if (indent->is_string()) {
      opt.indent = indent->as_string();
    } else if (indent->is_int() || indent->is_bool()) {
      opt.indent.assign(static_cast<size_t>(std::clamp<int64_t>(indent->as_int(), 0, 1024)), ' ');
    } else {
      return TypeError(
          absl::StrCat("tojson indent must be an int or a str, not ", indent->TypeName()));
    }
  }
  opt.item_separator = opt.pretty ? "," : ", ";
  opt.key_separator = ": ";
  const Value* separators = Arg(args, 2, "separators");
  if (separators != nullptr && !separators->is_none()) {
    if (!separators->is_list() || separators->as_list().items.size() != 2 ||
        !separators->as_list().items[0].is_string() ||
        !separators->as_list().items[1].is_string()) {
      return absl::InvalidArgumentError("ValueError: tojson separators must be two strings");
    }
    opt.item_separator = separators->as_list().items[0].as_string();
    opt.key_separator = separators->as_list().items[1].as_string();
  }
  opt.sort_keys = BoolArg(args, 3, "sort_keys", false);
  auto json = ToJson(value, opt);
  if (!json.ok()) return TypeError(std::string(json.status().message()));
  DS_JINJA_RETURN_IF_ERROR(Interpreter::CheckStringSize(json->size()));
  return Value(std::move(*json));
}

absl::StatusOr<Value> Indent(Interpreter&, const Value& value, CallArgs& args) {
  if (value.is_undefined()) return UndefinedError(value);
  if (!value.is_string()) {
    return TypeError(
        absl::StrCat("unsupported operand type(s) for +=: '", value.TypeName(), "' and 'str'"));
  }
  std::string indention;
  const Value* width = Arg(args, 0, "width");
  if (width == nullptr) {
    indention = "    ";
  } else if (width->is_string()) {
    indention = width->as_string();
  } else if (width->is_int() || width->is_bool()) {
    indention.assign(static_cast<size_t>(std::clamp<int64_t>(width->as_int(), 0, 1024)), ' ');
  } else {
    return TypeError("indent width must be an int or a str");
  }
  const bool first = BoolArg(args, 1, "first", false);
  const bool blank = BoolArg(args, 2, "blank", false);
  std::vector<std::string> lines = PySplitLines(value.Str() + "\n");
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (first) rv = indention + rv;
  DS_JINJA_RETURN_IF_ERROR(Interpreter::CheckStringSize(rv.size()));
  return Value(std::move(rv));
}

absl::StatusOr<Value> ToInt(Interpreter&, const Value& value, CallArgs& args) {
  if (value.is_undefined()) return UndefinedError(value);
  const Value* def = Arg(args, 0, "default");
  const Value fallback = def != nullptr ? *def : Value(int64_t{0});
  const Value* base_arg = Arg(args, 1, "base");
  const int base = base_arg != nullptr && base_arg->is_int()
                       ? static_cast<int>(std::clamp<int64_t>(base_arg->as_int(), 0, 36))
                       : 10;
  if (value.is_int() || value.is_bool()) return Value(value.as_int());
  if (value.is_float()) {
    const double d = std::trunc(value.as_double());
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value(static_cast<int64_t>(d));
  }
  if (value.is_string()) {
    std::string s = PyStrip(value.as_string(), nullptr, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (!s.empty()) {
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(s.c_str(), &end, base);
      if (errno == 0 && end == s.c_str() + s.size()) return Value(static_cast<int64_t>(v));
      const double d = std::strtod(s.c_str(), &end);
      if (end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18) {
        return Value(static_cast<int64_t>(std::trunc(d)));
      }
    }
  }
  return fallback;
}

absl::StatusOr<Value> ToFloat(Interpreter&, const Value& value, CallArgs& args) {
  if (value.is_undefined()) return UndefinedError(value);
  const Value* def = Arg(args, 0, "default");
  const Value fallback = def != nullptr ? *def : Value(0.0);
  if (value.is_number()) return Value(value.as_double());
  if (value.is_string()) {
    std::string s = PyStrip(value.as_string(), nullptr, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value(d);
  }
  return fallback;
}

absl::StatusOr<Value> Round(Interpreter&, const Value& value, CallArgs& args) {
  const Value* p = Arg(args, 0, "precision");
  const int64_t precision = p != nullptr && (p->is_int() || p->is_bool()) ? p->as_int() : 0;
  const Value* m = Arg(args, 1, "method");
  const std::string method = m != nullptr ? m->Str() : "common";
  if (!value.is_number()) {
    return TypeError(absl::StrCat("type ", value.TypeName(), " doesn't define __round__ method"));
  }
  if (method == "common") {
    if (!value.is_float()) return Value(value.as_int());
    return Value(PyRound(value.as_double(), precision));
  }
  if (method != "ceil" && method != "floor") {
    return absl::InvalidArgumentError("FilterArgumentError: method must be common, ceil or floor");
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = value.as_double() * scale;
  return Value((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

}  // namespace deltaserve::common::jinja
