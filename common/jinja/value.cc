#include "common/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/unicode.h"
#include "unicode/uchar.h"

namespace deltaserve::common::jinja {
namespace {

using Data =
    std::variant<int64_t, double, std::string, ListPtr, DictPtr, CallablePtr, NamespaceData*>;

const std::vector<ByteRange>& NoRanges() {
  static const auto* none = new std::vector<ByteRange>();
  return *none;
}

// Python's str.isprintable() for one code point: everything but the categories Cc, Cf, Cs, Co,
// Cn, Zl, Zp and Zs (the ASCII space excepted).
bool IsPyPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

std::string StringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : DecodeCodepoints(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c < 0x80 || IsPyPrintable(c)) {
      AppendUtf8(c, out);
    } else {
      char buf[16];
      if (c <= 0xff) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      } else if (c <= 0xffff) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    }
  }
  out += quote;
  return out;
}

}  // namespace

const Value* DictData::Find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (ValuesEqual(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictData::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

const Value* CallArgs::Keyword(std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

DerivedFromContextScope::DerivedFromContextScope(bool active)
    : previous_(internal::derived_from_context) {
  internal::derived_from_context = active;
}

DerivedFromContextScope::~DerivedFromContextScope() { internal::derived_from_context = previous_; }

bool ArgsHoldContext(const CallArgs& args) {
  for (const Value& v : args.positional) {
    if (v.HoldsContext()) return true;
  }
  for (const auto& [name, v] : args.keyword) {
    if (v.HoldsContext()) return true;
  }
  return false;
}

Value Value::FromContext(std::string s) {
  Value v(std::move(s));
  v.origin_ = Origin::kContext;
  return v;
}

Value Value::Marked(std::string s, const std::vector<ByteRange>& context_ranges) {
  Value v(std::move(s));
  const size_t size = v.as_string().size();
  if (context_ranges.empty() || size == 0) {
    v.origin_ = Origin::kTemplate;
  } else if (context_ranges.size() == 1 && context_ranges[0].begin == 0 &&
             context_ranges[0].end >= size) {
    v.origin_ = Origin::kContext;
  } else {
    v.origin_ = Origin::kMixed;
    v.context_ranges_ = std::make_shared<const std::vector<ByteRange>>(context_ranges);
  }
  return v;
}

const std::vector<ByteRange>& Value::context_ranges() const {
  return origin_ == Origin::kMixed ? *context_ranges_ : NoRanges();
}

bool Value::HoldsContext() const {
  switch (type_) {
    case Type::kString:
      return origin_ != Origin::kTemplate;
    case Type::kList:
      return as_list().holds_context;
    case Type::kDict:
      return as_dict().holds_context;
    case Type::kCallable:
      return as_callable().holds_context;
    case Type::kNamespace:
      // Attributes change while rendering, so look now; a namespace inside one counts as
      // context rather than being walked (it may hold itself).
      for (const auto& [name, v] : as_namespace()->attrs) {
        if (v.is_namespace() || v.HoldsContext()) return true;
      }
      return false;
    default:
      return false;
  }
}

void Value::AppendTo(MarkedText& out) const {
  if (type_ != Type::kString) {
    if (HoldsContext()) {
      out.AppendUntrusted(Str());
    } else {
      out.AppendTrusted(Str());
    }
    return;
  }
  const std::string& s = as_string();
  switch (origin_) {
    case Origin::kTemplate:
      out.AppendTrusted(s);
      break;
    case Origin::kContext:
      out.AppendUntrusted(s);
      break;
    case Origin::kMixed:
      out.Append(s, *context_ranges_);
      break;
  }
}

Value Value::Undefined(std::string hint) { return Value(Type::kUndefined, Data(std::move(hint))); }
Value Value::None() { return Value(Type::kNone, Data(int64_t{0})); }

Value Value::List(std::vector<Value> items, bool is_tuple) {
  auto data = std::make_shared<ListData>();
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  for (const Value& item : data->items) data->holds_context |= item.HoldsContext();
  return Value(Type::kList, Data(ListPtr(std::move(data))));
}

Value Value::Generator(std::vector<Value> items) {
  auto data = std::make_shared<ListData>();
  data->items = std::move(items);
  data->is_generator = true;
  for (const Value& item : data->items) data->holds_context |= item.HoldsContext();
  return Value(Type::kList, Data(ListPtr(std::move(data))));
}

Value Value::Dict(std::vector<std::pair<Value, Value>> items) {
  auto data = std::make_shared<DictData>();
  data->items = std::move(items);
  for (const auto& [k, v] : data->items)
    data->holds_context |= k.HoldsContext() || v.HoldsContext();
  return Value(Type::kDict, Data(DictPtr(std::move(data))));
}

Value Value::Function(std::string name,
                      std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)> fn,
                      bool is_template_code, bool holds_context) {
  auto data = std::make_shared<Callable>();
  data->name = std::move(name);
  data->fn = std::move(fn);
  data->is_template_code = is_template_code;
  data->holds_context = holds_context;
  return Value(Type::kCallable, Data(CallablePtr(std::move(data))));
}

Value Value::Namespace(NamespaceData* ns) { return Value(Type::kNamespace, Data(ns)); }

absl::StatusOr<Value> Value::FromJson(const nlohmann::ordered_json& json, bool from_context,
                                      int depth) {
  if (depth > kMaxJsonDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("template context nests deeper than ", kMaxJsonDepth, " levels"));
  }
  using J = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case J::null:
    case J::discarded:
      return None();
    case J::boolean:
      return Value(json.get<bool>());
    case J::number_integer:
      return Value(json.get<int64_t>());
    case J::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value(static_cast<int64_t>(u));
      }
      return Value(static_cast<double>(u));
    }
    case J::number_float:
      return Value(json.get<double>());
    case J::string:
      return from_context ? FromContext(json.get<std::string>()) : Value(json.get<std::string>());
    case J::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) {
        DS_JINJA_ASSIGN_OR_RETURN(Value v, FromJson(item, from_context, depth + 1));
        items.push_back(std::move(v));
      }
      return List(std::move(items));
    }
    case J::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(json.size());
      for (const auto& [k, item] : json.items()) {
        DS_JINJA_ASSIGN_OR_RETURN(Value v, FromJson(item, from_context, depth + 1));
        items.emplace_back(from_context ? FromContext(k) : Value(k), std::move(v));
      }
      return Dict(std::move(items));
    }
    case J::binary:
      return absl::InvalidArgumentError("template context holds binary JSON data");
  }
  return None();
}

double Value::as_double() const {
  if (type_ == Type::kFloat) return std::get<double>(data_);
  return static_cast<double>(std::get<int64_t>(data_));
}

bool Value::Truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
    case Type::kInt:
      return as_int() != 0;
    case Type::kFloat:
      return as_double() != 0.0;
    case Type::kString:
      return !as_string().empty();
    case Type::kList:
      return as_list().is_generator || !as_list().items.empty();
    case Type::kDict:
      return !as_dict().items.empty();
    default:
      return true;
  }
}

std::string Value::Str() const {
  switch (type_) {
    case Type::kUndefined:
      return "";
    case Type::kString:
      return as_string();
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (type_) {
    case Type::kUndefined:
      return "Undefined";
    case Type::kNone:
      return "None";
    case Type::kBool:
      return as_bool() ? "True" : "False";
    case Type::kInt:
      return std::to_string(as_int());
    case Type::kFloat:
      return FloatRepr(as_double());
    case Type::kString:
      return StringRepr(as_string());
    case Type::kList: {
      const ListData& l = as_list();
      if (l.is_generator) return "<generator object>";
      std::string out = l.is_tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i > 0) out += ", ";
        out += l.items[i].Repr();
      }
      if (l.is_tuple && l.items.size() == 1) out += ",";
      out += l.is_tuple ? ")" : "]";
      return out;
    }
    case Type::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += k.Repr();
        out += ": ";
        out += v.Repr();
      }
      return out + "}";
    }
    case Type::kCallable:
      return absl::StrCat("<function ", as_callable().name, ">");
    case Type::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : as_namespace()->attrs) {
        if (!first) out += ", ";
        first = false;
        out += StringRepr(k) + ": " + v.Repr();
      }
      return out + "}>";
    }
  }
  return "";
}

std::string Value::TypeName() const {
  switch (type_) {
    case Type::kUndefined:
      return "Undefined";
    case Type::kNone:
      return "NoneType";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "str";
    case Type::kList:
      return as_list().is_generator ? "generator" : (as_list().is_tuple ? "tuple" : "list");
    case Type::kDict:
      return "dict";
    case Type::kCallable:
      return "function";
    case Type::kNamespace:
      return "Namespace";
  }
  return "object";
}

bool ValuesEqual(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return true;
    case Value::Type::kString:
      return a.as_string() == b.as_string();
    case Value::Type::kList: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.is_generator || y.is_generator) return &x == &y;
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!ValuesEqual(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Type::kDict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.Find(k);
        if (other == nullptr || !ValuesEqual(v, *other)) return false;
      }
      return true;
    }
    case Value::Type::kCallable:
      return &a.as_callable() == &b.as_callable();
    case Value::Type::kNamespace:
      return a.as_namespace() == b.as_namespace();
    default:
      return false;
  }
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form ("-1.5e-05"), then Python's layout rules
  // (float_repr_style 'short': fixed notation when -4 <= exponent < 16, with ".0" added).
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (!sci.empty() && sci[0] == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  const int exp = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      const size_t int_len = static_cast<size_t>(exp) + 1;
      std::string int_part = digits.substr(0, std::min(int_len, digits.size()));
      while (int_part.size() < int_len) int_part += '0';
      out += int_part;
      out += '.';
      if (digits.size() > int_len) {
        out.append(digits, int_len, std::string::npos);
      } else {
        out += '0';
      }
    } else {
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    }
  } else {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += ebuf;
  }
  return out;
}

std::u32string DecodeCodepoints(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) out += static_cast<char32_t>(DecodeUtf8(s, pos));
  return out;
}

std::string EncodeCodepoints(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(static_cast<uint32_t>(c), out);
  return out;
}

bool IsPySpace(char32_t c) {
  // CPython's _PyUnicode_IsWhitespace table (bidirectional WS/B/S or category Zs).
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2000:
    case 0x2001:
    case 0x2002:
    case 0x2003:
    case 0x2004:
    case 0x2005:
    case 0x2006:
    case 0x2007:
    case 0x2008:
    case 0x2009:
    case 0x200A:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return false;
  }
}

}  // namespace deltaserve::common::jinja
