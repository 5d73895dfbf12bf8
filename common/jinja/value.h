// The values a chat template computes with, modelled on the Python objects jinja2 hands around:
// undefined, None, bool, int, float, str, list/tuple, dict (insertion ordered), callables
// (macros, globals, bound methods) and namespaces. Lists and dicts are immutable once built (the
// ImmutableSandboxedEnvironment forbids mutating them) and shared by pointer; namespaces are the
// one mutable object and live in the render's arena (RenderArena), so no reference cycle can
// outlive a render.
//
// Printing follows Python: Str() is str(x) (floats as repr, True/False/None, containers as
// repr of their items), Repr() is repr(x), and ToJson() is json.dumps(x, ensure_ascii=False, ...).
//
// Provenance: every string knows which of its bytes came from the render context (the request:
// messages, tools, kwargs) rather than from the template's text (Origin). Concatenation (`~`,
// `+`, output next to literal text, join, captured blocks, macro output) and trimming keep the
// marks byte for byte; anything else a built-in computes from a value holding context text is
// marked as context text as a whole (DerivedFromContextScope). The renderer hands the marks to
// the tokenizer, which never turns context text into control tokens (docs/chat.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/marked_text.h"
#include "nlohmann/json.hpp"

namespace deltaserve::common::jinja {

// Early return of an error status; `lhs` receives the value of an absl::StatusOr expression.
#define DS_JINJA_CONCAT_INNER(a, b) a##b
#define DS_JINJA_CONCAT(a, b) DS_JINJA_CONCAT_INNER(a, b)
#define DS_JINJA_ASSIGN_OR_RETURN(lhs, expr)              \
  auto DS_JINJA_CONCAT(statusor_, __LINE__) = (expr);     \
  if (!DS_JINJA_CONCAT(statusor_, __LINE__).ok()) {       \
    return DS_JINJA_CONCAT(statusor_, __LINE__).status(); \
  }                                                       \
  lhs = std::move(*DS_JINJA_CONCAT(statusor_, __LINE__))
#define DS_JINJA_RETURN_IF_ERROR(expr) \
  do {                                 \
    absl::Status status_ = (expr);     \
    if (!status_.ok()) return status_; \
  } while (false)

class Value;
class Interpreter;

namespace internal {
// DerivedFromContextScope's state (one render runs on one thread); read by every string
// construction, so inline.
inline thread_local bool derived_from_context = false;
}  // namespace internal

// Deepest JSON nesting the context may have (and tojson writes).
inline constexpr int kMaxJsonDepth = 256;

// A list or a tuple (tuples print with parentheses; both index and iterate the same way).
struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  // What jinja2's lazy filters (select, map, items, unique, …) return: a Python generator,
  // which is always true, has no len() and cannot be indexed or serialized.
  bool is_generator = false;
  bool holds_context = false;  // some item does (Value::HoldsContext)
};

// A dict: key/value pairs in insertion order (lookups are linear: template dicts are small).
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  bool holds_context = false;  // some key or value does (Value::HoldsContext)
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
};

// jinja2's namespace(): the one object whose attributes `set ns.attr = …` may change.
struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
};

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword argument `name`, or nullptr.
  const Value* Keyword(std::string_view name) const;
};

// Anything callable from a template: a macro, a global function or a bound method.
struct Callable {
  std::string name;
  std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)> fn;
  // A macro or caller(): its output is template text whose marks the interpreter keeps exactly,
  // so no DerivedFromContextScope is opened around it.
  bool is_template_code = false;
  // A method bound to a receiver that holds context text.
  bool holds_context = false;
};

// Where a string's bytes came from (see the file comment).
enum class Origin : uint8_t {
  kTemplate,  // all from the template's text or computed from it alone
  kContext,   // all from the render context or computed from it
  kMixed,     // some of each: context_ranges() says which bytes are context
};

using ListPtr = std::shared_ptr<const ListData>;
using DictPtr = std::shared_ptr<const DictData>;
using CallablePtr = std::shared_ptr<const Callable>;

class Value {
 public:
  enum class Type : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kCallable,
    kNamespace,
  };

  // The undefined value; `hint` says what was missing, for error messages ("'x' is undefined").
  static Value Undefined(std::string hint = "");
  static Value None();
  Value() : Value(Undefined()) {}
  explicit Value(bool b) : type_(Type::kBool), data_(static_cast<int64_t>(b)) {}
  explicit Value(int64_t i) : type_(Type::kInt), data_(i) {}
  explicit Value(int i) : Value(static_cast<int64_t>(i)) {}
  explicit Value(double d) : type_(Type::kFloat), data_(d) {}
  // A string; marked kContext while a DerivedFromContextScope is active, else kTemplate.
  explicit Value(std::string s)
      : type_(Type::kString),
        origin_(internal::derived_from_context ? Origin::kContext : Origin::kTemplate),
        data_(std::move(s)) {}
  explicit Value(const char* s) : Value(std::string(s)) {}
  static Value List(std::vector<Value> items, bool is_tuple = false);
  static Value Generator(std::vector<Value> items);
  bool is_generator() const { return is_list() && as_list().is_generator; }
  static Value Dict(std::vector<std::pair<Value, Value>> items);
  static Value Function(std::string name,
                        std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)> fn,
                        bool is_template_code = false, bool holds_context = false);
  // A string whose bytes in `context_ranges` (sorted, disjoint, as MarkedText keeps them) came
  // from the render context; whatever scope is active.
  static Value Marked(std::string s, const std::vector<ByteRange>& context_ranges);
  static Value Marked(MarkedText text) { return Marked(std::move(text.text), text.untrusted); }
  // A string that came wholly from the render context.
  static Value FromContext(std::string s);
  static Value Namespace(NamespaceData* ns);
  // Converts JSON: objects become dicts (key order kept), numbers with a fraction or exponent
  // floats, other numbers ints (an unsigned beyond int64 becomes a float). Strings (keys too)
  // are marked as context text when `from_context`. Fails on nesting deeper than kMaxJsonDepth.
  static absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& json, bool from_context,
                                        int depth = 0);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_callable() const { return type_ == Type::kCallable; }
  bool is_namespace() const { return type_ == Type::kNamespace; }

  bool as_bool() const { return std::get<int64_t>(data_) != 0; }
  // The integer value of an int or bool.
  int64_t as_int() const { return std::get<int64_t>(data_); }
  // The value of any number as a double.
  double as_double() const;
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const ListData& as_list() const { return *std::get<ListPtr>(data_); }
  const DictData& as_dict() const { return *std::get<DictPtr>(data_); }
  const Callable& as_callable() const { return *std::get<CallablePtr>(data_); }
  NamespaceData* as_namespace() const { return std::get<NamespaceData*>(data_); }
  // What an undefined value stands for ("'x' is undefined"); empty when unknown.
  const std::string& undefined_hint() const { return std::get<std::string>(data_); }

  // Where a string's bytes came from (kTemplate for other types).
  Origin origin() const { return origin_; }
  // For a kMixed string: its context bytes (sorted, disjoint, non-adjacent); else empty.
  const std::vector<ByteRange>& context_ranges() const;
  // Whether anything in this value came from the render context: a string's bytes, a list's or
  // dict's items, a bound method's receiver, a namespace's attributes.
  bool HoldsContext() const;
  // Appends str(x) to `out` with its marks: a string's own, else all context when
  // HoldsContext() (the repr of a list holding a message prints that message's text).
  void AppendTo(MarkedText& out) const;

  // Python truthiness (undefined is false).
  bool Truthy() const;
  // str(x): undefined prints as ''.
  std::string Str() const;
  // repr(x).
  std::string Repr() const;
  // Python's type name for messages ("int", "str", "NoneType", "list", "dict", …).
  std::string TypeName() const;

 private:
  Value(Type type,
        std::variant<int64_t, double, std::string, ListPtr, DictPtr, CallablePtr, NamespaceData*>
            data)
      : type_(type), data_(std::move(data)) {}

  Type type_;
  Origin origin_ = Origin::kTemplate;
  std::variant<int64_t, double, std::string, ListPtr, DictPtr, CallablePtr, NamespaceData*> data_;
  // kMixed strings only; shared because values are copied wherever they go.
  std::shared_ptr<const std::vector<ByteRange>> context_ranges_;
};

// While an active scope lives on this thread, every string Value made from a std::string is
// marked kContext. The interpreter opens one around a built-in (filter, method, operator, slice,
// global function) whose inputs hold context text, so whatever the built-in computes from that
// text (tojson, upper, a split's pieces, a slice) stays marked, while the values it only passes
// through (`default`, `first`, dict lookups) keep their own marks. A scope sets the state for
// its lifetime and restores the previous one, so a macro called inside runs unmarked.
class DerivedFromContextScope {
 public:
  explicit DerivedFromContextScope(bool active);
  ~DerivedFromContextScope();
  DerivedFromContextScope(const DerivedFromContextScope&) = delete;
  DerivedFromContextScope& operator=(const DerivedFromContextScope&) = delete;

 private:
  bool previous_;
};

// Whether any argument of `args` holds context text (Value::HoldsContext).
bool ArgsHoldContext(const CallArgs& args);

// Python ==, as jinja2 compares (1 == 1.0 == True; undefined equals only undefined).
bool ValuesEqual(const Value& a, const Value& b);

// Python repr of a float: the shortest string that reads back to the same double, in fixed
// notation for exponents -4..15 and "1e+16" style otherwise ("-3.0", "0.75", "6.02e+23").
std::string FloatRepr(double d);

// Options of json.dumps as transformers' tojson filter passes them.
struct JsonDumpOptions {
  std::string indent;          // per level
  bool pretty = false;         // indent given (even ""): newlines between items
  std::string item_separator;  // default ", " (or "," when pretty)
  std::string key_separator;   // default ": "
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// json.dumps(value, ...): floats as repr, strings with only the escapes Python emits.
absl::StatusOr<std::string> ToJson(const Value& value, const JsonDumpOptions& options);

// Decodes UTF-8 into code points (malformed bytes become U+FFFD).
std::u32string DecodeCodepoints(std::string_view s);
std::string EncodeCodepoints(std::u32string_view s);
// Python's str.isspace() for one code point.
bool IsPySpace(char32_t c);

}  // namespace deltaserve::common::jinja
