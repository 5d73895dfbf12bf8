// Python's operators, iteration and len() over template values.
#include <cmath>
#include <limits>

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

absl::Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  return TypeError(absl::StrCat("unsupported operand type(s) for ",
                                absl::string_view(op.data(), op.size()), ": '", a.TypeName(),
                                "' and '", b.TypeName(), "'"));
}

bool IsIntLike(const Value& v) { return v.is_int() || v.is_bool(); }

absl::StatusOr<Value> Repeat(const Value& seq, int64_t count) {
  if (count <= 0) {
    return seq.is_string() ? Value(std::string()) : Value::List({}, seq.as_list().is_tuple);
  }
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() &&
        static_cast<uint64_t>(count) > static_cast<uint64_t>(kMaxOutputBytes) / s.size()) {
      return Interpreter::CheckStringSize(static_cast<size_t>(kMaxOutputBytes) + 1);
    }
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) out += s;
    return Value(std::move(out));
  }
  const ListData& l = seq.as_list();
  if (!l.items.empty() &&
      static_cast<uint64_t>(count) > static_cast<uint64_t>(kMaxLoopIterations) / l.items.size()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a list would exceed ", kMaxLoopIterations, " items"));
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < count; ++i) items.insert(items.end(), l.items.begin(), l.items.end());
  return Value::List(std::move(items), l.is_tuple);
}

absl::StatusOr<Value> IntPow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if ((exp & 1) != 0 && __builtin_mul_overflow(result, base, &result)) {
      return absl::InvalidArgumentError("OverflowError: integer result too large");
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) {
      return absl::InvalidArgumentError("OverflowError: integer result too large");
    }
  }
  return Value(result);
}

// -1, 0 or 1 as Python orders a and b; a TypeError for unorderable pairs.
absl::StatusOr<int> Order(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double();
      const double y = b.as_double();
      return x < y ? -1 : (y < x ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (b.as_int() < a.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order = code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple &&
      !a.is_generator() && !b.is_generator()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (ValuesEqual(x[i], y[i])) continue;
      return Order(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return TypeError(absl::StrCat("'", absl::string_view(op.data(), op.size()),
                                "' not supported between instances of '", a.TypeName(), "' and '",
                                b.TypeName(), "'"));
}

}  // namespace

absl::Status UndefinedError(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  return absl::InvalidArgumentError(
      absl::StrCat("UndefinedError: ", hint.empty() ? "value is undefined" : hint));
}

int64_t CodepointCount(std::string_view s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return std::vector<Value>();
    case Value::Type::kList:
      return v.as_list().items;
    case Value::Type::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, val] : v.as_dict().items) keys.push_back(k);
      return keys;
    }
    case Value::Type::kString: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      size_t i = 0;
      while (i < s.size()) {
        size_t j = i + 1;
        while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
        // A character of context text is context text, as whatever is built from it.
        chars.push_back(v.HoldsContext() ? Value::FromContext(s.substr(i, j - i))
                                         : Value(s.substr(i, j - i)));
        i = j;
      }
      return chars;
    }
    default:
      return TypeError(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return 0;
    case Value::Type::kString:
      return CodepointCount(v.as_string());
    case Value::Type::kList:
      if (v.is_generator()) return TypeError("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.as_list().items.size());
    case Value::Type::kDict:
      return static_cast<int64_t>(v.as_dict().items.size());
    case Value::Type::kNamespace:
      return static_cast<int64_t>(v.as_namespace()->attrs.size());
    default:
      return TypeError(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

absl::StatusOr<bool> LessThan(const Value& a, const Value& b) {
  DS_JINJA_ASSIGN_OR_RETURN(int order, Order(a, b, "<"));
  return order < 0;
}

absl::StatusOr<bool> Compare(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return ValuesEqual(a, b);
  if (op == "!=") return !ValuesEqual(a, b);
  if (op == "in" || op == "notin") {
    const bool negate = op == "notin";
    switch (b.type()) {
      case Value::Type::kUndefined:
        return negate;
      case Value::Type::kString:
        if (!a.is_string()) {
          return TypeError(
              absl::StrCat("'in <string>' requires string as left operand, not ", a.TypeName()));
        }
        return (b.as_string().find(a.as_string()) != std::string::npos) != negate;
      case Value::Type::kList:
        for (const Value& item : b.as_list().items) {
          if (ValuesEqual(item, a)) return !negate;
        }
        return negate;
      case Value::Type::kDict:
        return (b.as_dict().Find(a) != nullptr) != negate;
      default:
        return TypeError(absl::StrCat("argument of type '", b.TypeName(), "' is not iterable"));
    }
  }
  DS_JINJA_ASSIGN_OR_RETURN(int order, Order(a, b, op));
  if (op == "<") return order < 0;
  if (op == "<=") return order <= 0;
  if (op == ">") return order > 0;
  if (op == ">=") return order >= 0;
  return absl::InternalError(
      absl::StrCat("unknown comparison ", absl::string_view(op.data(), op.size())));
}

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (numbers) {
      if (floats) return Value(a.as_double() + b.as_double());
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) {
        return absl::InvalidArgumentError("OverflowError: integer result too large");
      }
      return Value(r);
    }
    if (a.is_string() && b.is_string()) {
      DS_JINJA_RETURN_IF_ERROR(
          Interpreter::CheckStringSize(a.as_string().size() + b.as_string().size()));
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple &&
        !a.is_generator() && !b.is_generator()) {
      if (a.as_list().items.size() + b.as_list().items.size() >
          static_cast<size_t>(kMaxLoopIterations)) {
        return absl::ResourceExhaustedError(
            absl::StrCat("a list would exceed ", kMaxLoopIterations, " items"));
      }
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::List(std::move(items), a.as_list().is_tuple);
    }
    if (a.is_string() || a.is_list()) {
      return TypeError(absl::StrCat("can only concatenate ", a.TypeName(), " (not \"", b.TypeName(),
                                    "\") to ", a.TypeName()));
    }
    return Unsupported("+", a, b);
  }
  if (op == "-") {
    if (!numbers) return Unsupported("-", a, b);
    if (floats) return Value(a.as_double() - b.as_double());
    int64_t r;
    if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) {
      return absl::InvalidArgumentError("OverflowError: integer result too large");
    }
    return Value(r);
  }
  if (op == "*") {
    if (numbers) {
      if (floats) return Value(a.as_double() * b.as_double());
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) {
        return absl::InvalidArgumentError("OverflowError: integer result too large");
      }
      return Value(r);
    }
    if ((a.is_string() || (a.is_list() && !a.is_generator())) && IsIntLike(b)) {
      return Repeat(a, b.as_int());
    }
    if ((b.is_string() || (b.is_list() && !b.is_generator())) && IsIntLike(a)) {
      return Repeat(b, a.as_int());
    }
    return TypeError(absl::StrCat("can't multiply sequence by non-int of type '",
                                  (a.is_string() || a.is_list() ? b : a).TypeName(), "'"));
  }
  if (op == "/") {
    if (!numbers) return Unsupported("/", a, b);
    if (b.as_double() == 0)
      return absl::InvalidArgumentError("ZeroDivisionError: division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (!numbers) {
      if (a.is_string() && op == "%") {
        return absl::InvalidArgumentError(
            "TypeError: printf-style string formatting is not supported");
      }
      return Unsupported(op, a, b);
    }
    if (b.as_double() == 0) {
      return absl::InvalidArgumentError(
          floats ? "ZeroDivisionError: float divmod()"
                 : "ZeroDivisionError: integer division or modulo by zero");
    }
    if (floats) {
      const double x = a.as_double();
      const double y = b.as_double();
      double mod = std::fmod(x, y);
      if (mod != 0 && ((mod < 0) != (y < 0))) mod += y;
      if (op == "%") return Value(mod);
      // CPython's float_divmod: floor of the exact quotient, nudged up past half.
      const double div = (x - mod) / y;
      double floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
      return Value(floordiv);
    }
    const int64_t x = a.as_int();
    const int64_t y = b.as_int();
    if (x == std::numeric_limits<int64_t>::min() && y == -1) {
      if (op == "%") return Value(int64_t{0});
      return absl::InvalidArgumentError("OverflowError: integer result too large");
    }
    int64_t q = x / y;
    int64_t r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      --q;
      r += y;
    }
    return Value(op == "%" ? r : q);
  }
  if (op == "**") {
    if (!numbers) return Unsupported("** or pow()", a, b);
    if (!floats && b.as_int() >= 0) return IntPow(a.as_int(), b.as_int());
    if (a.as_double() == 0 && b.as_double() < 0) {
      return absl::InvalidArgumentError(
          "ZeroDivisionError: 0.0 cannot be raised to a negative power");
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  return absl::InternalError(
      absl::StrCat("unknown operator ", absl::string_view(op.data(), op.size())));
}

}  // namespace deltaserve::common::jinja
