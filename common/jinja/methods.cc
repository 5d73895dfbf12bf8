// Attribute, item and slice access as jinja2's ImmutableSandboxedEnvironment resolves them
// (methods of str, dict and list first, bound to their object; then keys), and the dict and list
// methods templates call (`message.get('x')`, `args.items()`). Methods that would mutate a list
// or dict are refused, as the immutable sandbox refuses them. str methods: string_methods.cc.
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

std::string ObjectRepr(const Value& v) {
  if (v.is_none()) return "None";
  return absl::StrCat(v.TypeName(), " object");
}

Value Missing(const Value& obj, const std::string& name) {
  return Value::Undefined(absl::StrCat("'", ObjectRepr(obj), "' has no attribute '", name, "'"));
}

// Argument i (positional) or `name` (keyword); null when absent or None.

absl::StatusOr<Value> CallDictMethod(const Value& dict, const std::string& name, CallArgs& args) {
  const DictData& d = dict.as_dict();
  if (name == "items") {
    std::vector<Value> items;
    for (const auto& [k, v] : d.items) items.push_back(Value::List({k, v}, /*is_tuple=*/true));
    return Value::List(std::move(items));
  }
  if (name == "keys" || name == "values") {
    std::vector<Value> items;
    for (const auto& [k, v] : d.items) items.push_back(name == "keys" ? k : v);
    return Value::List(std::move(items));
  }
  if (name == "get") {
    if (args.positional.empty()) return TypeError("get expected at least 1 argument, got 0");
    const Value* v = d.Find(args.positional[0]);
    if (v != nullptr) return *v;
    return args.positional.size() > 1 ? args.positional[1] : Value::None();
  }
  if (name == "copy") return dict;
  return absl::InvalidArgumentError(
      absl::StrCat("SecurityError: access to attribute '", name, "' of 'dict' object is unsafe."));
}

absl::StatusOr<Value> CallListMethod(const Value& list, const std::string& name, CallArgs& args) {
  const ListData& l = list.as_list();
  if (name == "index" || name == "count") {
    if (args.positional.empty())
      return TypeError(absl::StrCat(name, "() takes at least 1 argument"));
    int64_t n = 0;
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (ValuesEqual(l.items[i], args.positional[0])) {
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
    }
    if (name == "index") return absl::InvalidArgumentError("ValueError: value is not in list");
    return Value(n);
  }
  if (name == "copy") return list;
  return absl::InvalidArgumentError(absl::StrCat("SecurityError: access to attribute '", name,
                                                 "' of '", list.TypeName(), "' object is unsafe."));
}

Value BoundMethod(const Value& receiver, const std::string& name) {
  return Value::Function(
      name,
      [receiver, name](Interpreter&, CallArgs& args) -> absl::StatusOr<Value> {
        if (receiver.is_string()) return CallStrMethod(receiver, name, args);
        if (receiver.is_dict()) return CallDictMethod(receiver, name, args);
        return CallListMethod(receiver, name, args);
      },
      /*is_template_code=*/false, /*holds_context=*/receiver.HoldsContext());
}

bool IsDictMethod(const std::string& name) {
  return name == "items" || name == "keys" || name == "values" || name == "get" || name == "copy" ||
         name == "pop" || name == "popitem" || name == "setdefault" || name == "update" ||
         name == "clear";
}

bool IsListMethod(const std::string& name, bool is_tuple) {
  if (name == "index" || name == "count") return true;
  return !is_tuple && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                       name == "remove" || name == "reverse" || name == "sort" || name == "clear" ||
                       name == "copy");
}

int64_t ClampIndex(int64_t i, int64_t len, int64_t lower, int64_t upper) {
  if (i < 0) {
    i += len;
    if (i < lower) i = lower;
  } else if (i > upper) {
    i = upper;
  }
  return i;
}

}  // namespace

absl::StatusOr<Value> GetAttribute(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Value::Type::kUndefined:
      return UndefinedError(obj);
    case Value::Type::kString:
      if (IsStrMethod(name)) return BoundMethod(obj, name);
      break;
    case Value::Type::kDict:
      if (IsDictMethod(name)) return BoundMethod(obj, name);
      if (const Value* v = obj.as_dict().Find(name); v != nullptr) return *v;
      break;
    case Value::Type::kList:
      if (!obj.is_generator() && IsListMethod(name, obj.as_list().is_tuple)) {
        return BoundMethod(obj, name);
      }
      break;
    case Value::Type::kNamespace:
      for (const auto& [k, v] : obj.as_namespace()->attrs) {
        if (k == name) return v;
      }
      break;
    default:
      break;
  }
  return Missing(obj, name);
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_generator()) {
    return key.is_string() ? GetAttribute(obj, key.as_string())
                           : Value::Undefined("'generator object' has no element");
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto& items = obj.as_list().items;
      const int64_t n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
    } else {
      const int64_t n = CodepointCount(obj.as_string());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        Value one(int64_t{1});
        Value start(i);
        Value stop(i + 1);
        return GetSlice(obj, &start, &stop, &one);
      }
    }
    return Value::Undefined(absl::StrCat("'", ObjectRepr(obj), "' has no element ", key.Repr()));
  }
  if (obj.is_dict() && !(key.is_list() && !key.as_list().is_tuple) && !key.is_dict()) {
    if (const Value* v = obj.as_dict().Find(key); v != nullptr) return *v;
  }
  if (key.is_string()) return GetAttribute(obj, key.as_string());
  return Value::Undefined(absl::StrCat("'", ObjectRepr(obj), "' has no element ", key.Repr()));
}

absl::StatusOr<Value> GetSlice(const Value& obj, const Value* start, const Value* stop,
                               const Value* step) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if ((!obj.is_list() && !obj.is_string()) || obj.is_generator()) {
    // jinja2 compiles a slice to a plain Python subscript, so these fail rather than undefined.
    if (obj.is_dict()) return TypeError("unhashable type: 'slice'");
    return TypeError(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  int64_t bounds[3] = {0, 0, 1};
  const Value* parts[3] = {start, stop, step};
  for (int i = 0; i < 3; ++i) {
    const Value* p = parts[i];
    if (p == nullptr || p->is_none()) continue;
    if (p->is_undefined()) return UndefinedError(*p);
    if (!p->is_int() && !p->is_bool()) {
      return TypeError("slice indices must be integers or None or have an __index__ method");
    }
    bounds[i] = p->as_int();
  }
  const int64_t st = bounds[2];
  if (st == 0) return absl::InvalidArgumentError("ValueError: slice step cannot be zero");
  std::u32string text;
  int64_t len;
  if (obj.is_string()) {
    text = DecodeCodepoints(obj.as_string());
    len = static_cast<int64_t>(text.size());
  } else {
    len = static_cast<int64_t>(obj.as_list().items.size());
  }
  const int64_t lower = st > 0 ? 0 : -1;
  const int64_t upper = st > 0 ? len : len - 1;
  const bool has_start = start != nullptr && !start->is_none();
  const bool has_stop = stop != nullptr && !stop->is_none();
  const int64_t b = has_start ? ClampIndex(bounds[0], len, lower, upper) : (st > 0 ? lower : upper);
  const int64_t e = has_stop ? ClampIndex(bounds[1], len, lower, upper) : (st > 0 ? upper : lower);
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i = b; st > 0 ? i < e : i > e;) {
      out += text[static_cast<size_t>(i)];
      if (__builtin_add_overflow(i, st, &i)) break;
    }
    return Value(EncodeCodepoints(out));
  }
  std::vector<Value> out;
  const auto& items = obj.as_list().items;
  for (int64_t i = b; st > 0 ? i < e : i > e;) {
    out.push_back(items[static_cast<size_t>(i)]);
    if (__builtin_add_overflow(i, st, &i)) break;
  }
  return Value::List(std::move(out), obj.as_list().is_tuple);
}

}  // namespace deltaserve::common::jinja
