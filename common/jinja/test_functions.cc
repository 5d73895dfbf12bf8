// jinja2's tests (`x is defined`, `x is mapping`, `x is divisibleby 3`, …) with Python's notion of
// each type: a bool is a number but not an integer, a string and an undefined value are
// iterable, a dict is a sequence.
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/builtins.h"

namespace deltaserve::common::jinja {
namespace {

using TestFn = absl::StatusOr<bool> (*)(const Value&, CallArgs&);

absl::StatusOr<Value> FirstArg(const CallArgs& args, std::string_view test) {
  if (args.positional.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TypeError: test '", absl::string_view(test.data(), test.size()), "' needs an argument"));
  }
  return args.positional[0];
}

template <const char* kOp>
absl::StatusOr<bool> CompareTest(const Value& v, CallArgs& args) {
  DS_JINJA_ASSIGN_OR_RETURN(Value other, FirstArg(args, kOp));
  return Compare(kOp, v, other);
}

constexpr char kEq[] = "==";
constexpr char kNe[] = "!=";
constexpr char kLt[] = "<";
constexpr char kLe[] = "<=";
constexpr char kGt[] = ">";
constexpr char kGe[] = ">=";

absl::StatusOr<bool> Modulo(const Value& v, const Value& divisor, int64_t want) {
  DS_JINJA_ASSIGN_OR_RETURN(Value r, BinaryOp("%", v, divisor));
  return ValuesEqual(r, Value(want));
}

const absl::flat_hash_map<std::string, TestFn>& Tests() {
  static const auto* tests = new absl::flat_hash_map<std::string, TestFn>{
      {"defined",
       [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return !v.is_undefined(); }},
      {"undefined",
       [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_undefined(); }},
      {"none", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_none(); }},
      {"string", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_string(); }},
      {"number", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_number(); }},
      {"integer", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_int(); }},
      {"float", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_float(); }},
      {"boolean", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_bool(); }},
      {"mapping", [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_dict(); }},
      // An undefined value has __call__ (that raises), so Python's callable() says yes.
      {"callable",
       [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_callable() || v.is_undefined();
       }},
      {"iterable",
       [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"sequence",
       [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"true",
       [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_bool() && v.as_bool();
       }},
      {"false",
       [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_bool() && !v.as_bool();
       }},
      {"escaped", [](const Value&, CallArgs&) -> absl::StatusOr<bool> { return false; }},
      {"lower",
       [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         const std::string s = v.Str();
         return PyLower(s) == s && PyUpper(s) != s;
       }},
      {"upper",
       [](const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         const std::string s = v.Str();
         return PyUpper(s) == s && PyLower(s) != s;
       }},
      {"odd",
       [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return Modulo(v, Value(2), 1); }},
      {"even",
       [](const Value& v, CallArgs&) -> absl::StatusOr<bool> { return Modulo(v, Value(2), 0); }},
      {"divisibleby",
       [](const Value& v, CallArgs& args) -> absl::StatusOr<bool> {
         DS_JINJA_ASSIGN_OR_RETURN(Value d, FirstArg(args, "divisibleby"));
         return Modulo(v, d, 0);
       }},
      {"in",
       [](const Value& v, CallArgs& args) -> absl::StatusOr<bool> {
         DS_JINJA_ASSIGN_OR_RETURN(Value seq, FirstArg(args, "in"));
         return Compare("in", v, seq);
       }},
      {"sameas",
       [](const Value& v, CallArgs& args) -> absl::StatusOr<bool> {
         DS_JINJA_ASSIGN_OR_RETURN(Value other, FirstArg(args, "sameas"));
         if (v.type() != other.type()) return false;
         if (v.is_list() || v.is_dict()) {
           return v.is_list() ? &v.as_list() == &other.as_list() : &v.as_dict() == &other.as_dict();
         }
         return ValuesEqual(v, other);
       }},
      {"eq", CompareTest<kEq>},
      {"equalto", CompareTest<kEq>},
      {"==", CompareTest<kEq>},
      {"ne", CompareTest<kNe>},
      {"!=", CompareTest<kNe>},
      {"lt", CompareTest<kLt>},
      {"lessthan", CompareTest<kLt>},
      {"<", CompareTest<kLt>},
      {"le", CompareTest<kLe>},
      {"<=", CompareTest<kLe>},
      {"gt", CompareTest<kGt>},
      {"greaterthan", CompareTest<kGt>},
      {">", CompareTest<kGt>},
      {"ge", CompareTest<kGe>},
      {">=", CompareTest<kGe>},
  };
  return *tests;
}

}  // namespace

bool HasTest(std::string_view name) {
  return Tests().contains(absl::string_view(name.data(), name.size()));
}

absl::StatusOr<bool> ApplyTest(Interpreter&, std::string_view name, const Value& value,
                               CallArgs& args) {
  auto it = Tests().find(absl::string_view(name.data(), name.size()));
  if (it == Tests().end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("No test named '", absl::string_view(name.data(), name.size()), "'."));
  }
  return it->second(value, args);
}

}  // namespace deltaserve::common::jinja
