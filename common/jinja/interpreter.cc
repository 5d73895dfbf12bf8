#include "common/jinja/interpreter.h"

#include <algorithm>
#include <ctime>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/builtins.h"

namespace deltaserve::common::jinja {
namespace {

constexpr char kLocatedPayload[] = "type.deltaserve/jinja.located";

struct DepthGuard {
  explicit DepthGuard(int& d) : depth(d) { ++depth; }
  ~DepthGuard() { --depth; }
  int& depth;
};

// Whether `e` is made of literals only (jinja2's as_const succeeds on it).
bool IsConstant(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return true;
    case Expr::Kind::kList:
    case Expr::Kind::kTuple:
    case Expr::Kind::kDict:
    case Expr::Kind::kUnary:
    case Expr::Kind::kBinary:
    case Expr::Kind::kSlice:
      for (const ExprPtr& arg : e.args) {
        if (arg != nullptr && !IsConstant(*arg)) return false;
      }
      return true;
    default:
      return false;
  }
}

int64_t SizeCost(const Value& v) {
  if (v.is_string()) {
    return static_cast<int64_t>(v.as_string().size() / 64 + v.context_ranges().size() / 4);
  }
  if (v.is_list()) return static_cast<int64_t>(v.as_list().items.size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().items.size());
  return 0;
}

// a ~ b, and a + b on two strings: the bytes of both with their marks.
absl::StatusOr<Value> Concat(const Value& a, const Value& b) {
  MarkedText out;
  a.AppendTo(out);
  b.AppendTo(out);
  DS_JINJA_RETURN_IF_ERROR(Interpreter::CheckStringSize(out.text.size()));
  return Value::Marked(std::move(out));
}

}  // namespace

absl::Status AtLine(int line, const absl::Status& status) {
  if (status.ok() || status.GetPayload(kRaiseExceptionPayload).has_value() ||
      status.GetPayload(kLocatedPayload).has_value()) {
    return status;
  }
  absl::Status located(status.code(),
                       absl::StrCat("chat template line ", line, ": ", status.message()));
  located.SetPayload(kLocatedPayload, absl::Cord("1"));
  return located;
}

absl::Status Interpreter::Charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > kMaxRenderSteps) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rendering took more than ", kMaxRenderSteps, " steps"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::CheckStringSize(size_t bytes) {
  if (bytes > static_cast<size_t>(kMaxOutputBytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a rendered string would exceed ", kMaxOutputBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::CountIterations(int64_t n) {
  iterations_ += n;
  if (iterations_ > kMaxLoopIterations) {
    return absl::ResourceExhaustedError(
        absl::StrCat("more than ", kMaxLoopIterations, " loop iterations"));
  }
  return absl::OkStatus();
}

NamespaceData* Interpreter::NewNamespace() {
  namespaces_.push_back(std::make_unique<NamespaceData>());
  return namespaces_.back().get();
}

Interpreter::Scope* Interpreter::NewScope(Scope* parent) {
  scopes_.push_back(std::make_unique<Scope>());
  scopes_.back()->parent = parent;
  return scopes_.back().get();
}

Interpreter::Scope* Interpreter::OpenScope(Scope* parent, const std::vector<std::string>& unset) {
  Scope* scope = NewScope(parent);
  for (const std::string& name : unset) {
    scope->vars[name] = Value::Undefined(absl::StrCat("'", name, "' is undefined"));
  }
  return scope;
}

Value Interpreter::Lookup(Scope* scope, const std::string& name) const {
  for (Scope* s = scope; s != nullptr; s = s->parent) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  return Value::Undefined(absl::StrCat("'", name, "' is undefined"));
}

absl::StatusOr<MarkedText> Interpreter::Render(const nlohmann::ordered_json& context,
                                               absl::Span<const std::string> trusted_keys) {
  if (!context.is_object()) {
    return absl::InvalidArgumentError("chat template context must be a JSON object");
  }
  Scope* globals = NewScope(nullptr);
  for (auto& [name, fn] : Globals()) globals->vars[name] = std::move(fn);
  Scope* context_scope = NewScope(globals);
  for (const auto& [key, json] : context.items()) {
    const bool trusted =
        std::find(trusted_keys.begin(), trusted_keys.end(), key) != trusted_keys.end();
    DS_JINJA_ASSIGN_OR_RETURN(Value v, Value::FromJson(json, /*from_context=*/!trusted));
    context_scope->vars[key] = std::move(v);
  }
  Scope* root = OpenScope(context_scope, tmpl_.root_unset);
  MarkedText out;
  DS_JINJA_ASSIGN_OR_RETURN(Flow flow, ExecBody(tmpl_.body, root, out));
  (void)flow;
  return out;
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecBody(const Body& body, Scope* scope,
                                                        MarkedText& out) {
  for (const NodePtr& node : body) {
    DS_JINJA_ASSIGN_OR_RETURN(Flow flow, Exec(*node, scope, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Interpreter::Flow> Interpreter::Exec(const Node& node, Scope* scope,
                                                    MarkedText& out) {
  DepthGuard guard(depth_);
  if (depth_ > kMaxRenderDepth) {
    return AtLine(node.line, absl::ResourceExhaustedError(absl::StrCat(
                                 "template nests deeper than ", kMaxRenderDepth, " levels")));
  }
  DS_JINJA_RETURN_IF_ERROR(AtLine(node.line, Charge(1)));
  switch (node.kind) {
    case Node::Kind::kText:
      out.AppendTrusted(node.text);
      break;
    case Node::Kind::kOutput: {
      DS_JINJA_ASSIGN_OR_RETURN(Value v, Eval(*node.expr, scope));
      v.AppendTo(out);
      break;
    }
    case Node::Kind::kIf: {
      for (const auto& [cond, body] : node.branches) {
        DS_JINJA_ASSIGN_OR_RETURN(Value c, Eval(*cond, scope));
        if (c.Truthy()) return ExecBody(body, scope, out);
      }
      return ExecBody(node.else_body, scope, out);
    }
    case Node::Kind::kFor:
      return ExecFor(node, scope, out);
    case Node::Kind::kSet: {
      DS_JINJA_ASSIGN_OR_RETURN(Value v, Eval(*node.expr, scope));
      DS_JINJA_RETURN_IF_ERROR(AtLine(node.line, Assign(*node.target, v, scope)));
      break;
    }
    case Node::Kind::kSetBlock: {
      MarkedText captured;
      DS_JINJA_ASSIGN_OR_RETURN(Flow flow,
                                ExecBody(node.body, OpenScope(scope, node.body_unset), captured));
      (void)flow;
      Value v = Value::Marked(std::move(captured));
      if (node.filter != nullptr) {
        DS_JINJA_ASSIGN_OR_RETURN(v, EvalFilter(*node.filter, scope, &v));
      }
      DS_JINJA_RETURN_IF_ERROR(AtLine(node.line, Assign(*node.target, v, scope)));
      break;
    }
    case Node::Kind::kMacro: {
      const Node* macro = &node;
      scope->vars[node.name] = Value::Function(
          node.name,
          [macro, scope](Interpreter& interp, CallArgs& args) {
            return interp.CallMacro(*macro, scope, args);
          },
          /*is_template_code=*/true);
      break;
    }
    case Node::Kind::kCallBlock: {
      const Expr& call = *node.expr;
      DS_JINJA_ASSIGN_OR_RETURN(Value callee, Eval(*call.args[0], scope));
      DS_JINJA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, 1, scope));
      const Node* block = &node;
      args.keyword.emplace_back("caller", Value::Function(
                                              "caller",
                                              [block, scope](Interpreter& interp, CallArgs& a) {
                                                return interp.CallMacro(*block, scope, a);
                                              },
                                              /*is_template_code=*/true));
      DS_JINJA_ASSIGN_OR_RETURN(Value v, Call(callee, args));
      v.AppendTo(out);
      break;
    }
    case Node::Kind::kFilterBlock: {
      MarkedText captured;
      DS_JINJA_ASSIGN_OR_RETURN(Flow flow,
                                ExecBody(node.body, OpenScope(scope, node.body_unset), captured));
      (void)flow;
      Value input = Value::Marked(std::move(captured));
      DS_JINJA_ASSIGN_OR_RETURN(Value v, EvalFilter(*node.filter, scope, &input));
      v.AppendTo(out);
      break;
    }
    case Node::Kind::kWith: {
      Scope* inner = OpenScope(scope, node.body_unset);
      for (size_t i = 0; i < node.params.size(); ++i) {
        DS_JINJA_ASSIGN_OR_RETURN(Value v, Eval(*node.defaults[i], scope));
        inner->vars[node.params[i]] = std::move(v);
      }
      return ExecBody(node.body, inner, out);
    }
    case Node::Kind::kScope:
      return ExecBody(node.body, OpenScope(scope, node.body_unset), out);
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
  }
  if (out.text.size() > static_cast<size_t>(kMaxOutputBytes)) {
    return AtLine(node.line, CheckStringSize(out.text.size()));
  }
  return Flow::kNormal;
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecFor(const Node& node, Scope* scope,
                                                       MarkedText& out) {
  DS_JINJA_ASSIGN_OR_RETURN(Value iterable, Eval(*node.expr, scope));
  auto items_or = Iterate(iterable);
  if (!items_or.ok()) return AtLine(node.line, items_or.status());
  std::vector<Value> items = std::move(*items_or);
  if (node.filter != nullptr) {
    std::vector<Value> kept;
    for (Value& item : items) {
      DS_JINJA_RETURN_IF_ERROR(AtLine(node.line, CountIterations(1)));
      Scope* test_scope = NewScope(scope);
      DS_JINJA_RETURN_IF_ERROR(AtLine(node.line, Assign(*node.target, item, test_scope)));
      DS_JINJA_ASSIGN_OR_RETURN(Value keep, Eval(*node.filter, test_scope));
      if (keep.Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  // jinja2 runs the else block unless some iteration reached the end of the body (an iteration
  // left by `continue` or `break` does not count).
  bool completed = false;
  for (int64_t i = 0; i < n; ++i) {
    DS_JINJA_RETURN_IF_ERROR(AtLine(node.line, CountIterations(1)));
    // Each iteration is a fresh scope: a `set` in one is not seen by the next.
    Scope* loop_scope = OpenScope(scope, node.body_unset);
    DS_JINJA_RETURN_IF_ERROR(AtLine(node.line, Assign(*node.target, items[i], loop_scope)));
    std::vector<std::pair<Value, Value>> loop;
    loop.reserve(12);
    loop.emplace_back(Value("index"), Value(i + 1));
    loop.emplace_back(Value("index0"), Value(i));
    loop.emplace_back(Value("revindex"), Value(n - i));
    loop.emplace_back(Value("revindex0"), Value(n - i - 1));
    loop.emplace_back(Value("first"), Value(i == 0));
    loop.emplace_back(Value("last"), Value(i == n - 1));
    loop.emplace_back(Value("length"), Value(n));
    loop.emplace_back(Value("depth"), Value(1));
    loop.emplace_back(Value("depth0"), Value(0));
    loop.emplace_back(Value("previtem"),
                      i > 0 ? items[i - 1] : Value::Undefined("there is no previous item"));
    loop.emplace_back(Value("nextitem"),
                      i + 1 < n ? items[i + 1] : Value::Undefined("there is no next item"));
    loop.emplace_back(
        Value("cycle"),
        Value::Function("cycle", [i](Interpreter&, CallArgs& args) -> absl::StatusOr<Value> {
          if (args.positional.empty()) {
            return absl::InvalidArgumentError("TypeError: no items for cycling given");
          }
          return args.positional[static_cast<size_t>(i) % args.positional.size()];
        }));
    loop_scope->vars["loop"] = Value::Dict(std::move(loop));
    DS_JINJA_ASSIGN_OR_RETURN(Flow flow, ExecBody(node.body, loop_scope, out));
    if (flow == Flow::kNormal) completed = true;
    if (flow == Flow::kBreak) break;
  }
  if (!completed) return ExecBody(node.else_body, OpenScope(scope, node.else_unset), out);
  return Flow::kNormal;
}

absl::Status Interpreter::Assign(const Expr& target, const Value& value, Scope* scope) {
  if (target.kind == Expr::Kind::kName) {
    scope->vars[target.name] = value;
    return absl::OkStatus();
  }
  if (target.kind == Expr::Kind::kAttr) {
    const Value ns = Lookup(scope, target.args[0]->name);
    if (!ns.is_namespace()) {
      return absl::InvalidArgumentError(
          "TemplateRuntimeError: cannot assign attribute on non-namespace object");
    }
    for (auto& [k, v] : ns.as_namespace()->attrs) {
      if (k == target.name) {
        v = value;
        return absl::OkStatus();
      }
    }
    ns.as_namespace()->attrs.emplace_back(target.name, value);
    return absl::OkStatus();
  }
  // A tuple of names: unpack like Python.
  DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  if (value.is_undefined()) return UndefinedError(value);
  if (items.size() != target.args.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ValueError: ", items.size() < target.args.size() ? "not enough" : "too many",
        " values to unpack (expected ", target.args.size(), ", got ", items.size(), ")"));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    scope->vars[target.args[i]->name] = items[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::CallMacro(const Node& macro, Scope* defined_in, CallArgs& args) {
  DepthGuard guard(depth_);
  if (depth_ > kMaxRenderDepth) {
    return absl::ResourceExhaustedError(
        absl::StrCat("macro calls nest deeper than ", kMaxRenderDepth, " levels"));
  }
  // A macro is template code even when called from inside a built-in.
  DerivedFromContextScope template_code(false);
  Scope* scope = OpenScope(defined_in, macro.body_unset);
  std::vector<Value> extra;
  for (size_t i = 0; i < macro.params.size(); ++i) {
    const std::string& param = macro.params[i];
    if (i < args.positional.size()) {
      scope->vars[param] = args.positional[i];
    } else if (const Value* kw = args.Keyword(param); kw != nullptr) {
      scope->vars[param] = *kw;
    } else if (macro.defaults[i] != nullptr) {
      DS_JINJA_ASSIGN_OR_RETURN(scope->vars[param], Eval(*macro.defaults[i], scope));
    } else {
      scope->vars[param] =
          Value::Undefined(absl::StrCat("parameter '", param, "' was not provided"));
    }
  }
  for (size_t i = macro.params.size(); i < args.positional.size(); ++i) {
    extra.push_back(args.positional[i]);
  }
  std::vector<std::pair<Value, Value>> extra_kw;
  for (const auto& [k, v] : args.keyword) {
    bool is_param = false;
    for (const std::string& p : macro.params) is_param |= p == k;
    if (k == "caller") {
      scope->vars["caller"] = v;
    } else if (!is_param) {
      extra_kw.emplace_back(Value(k), v);
    }
  }
  scope->vars["varargs"] = Value::List(std::move(extra), /*is_tuple=*/true);
  scope->vars["kwargs"] = Value::Dict(std::move(extra_kw));
  MarkedText out;
  DS_JINJA_ASSIGN_OR_RETURN(Flow flow, ExecBody(macro.body, scope, out));
  (void)flow;
  return Value::Marked(std::move(out));
}

absl::StatusOr<Value> Interpreter::Call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) return UndefinedError(callee);
  if (!callee.is_callable()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TypeError: '", callee.TypeName(), "' object is not callable"));
  }
  const Callable& callable = callee.as_callable();
  if (callable.is_template_code) return callable.fn(*this, args);
  DerivedFromContextScope derived(callable.holds_context || ArgsHoldContext(args));
  return callable.fn(*this, args);
}

absl::StatusOr<CallArgs> Interpreter::EvalArgs(const Expr& e, size_t first, Scope* scope) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) {
    DS_JINJA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i], scope));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [name, expr] : e.kwargs) {
    DS_JINJA_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
    args.keyword.emplace_back(name, std::move(v));
  }
  return args;
}

absl::StatusOr<Value> Interpreter::EvalFilter(const Expr& e, Scope* scope, const Value* input) {
  Value value;
  if (e.args[0] == nullptr) {
    value = *input;
  } else if (input != nullptr) {
    DS_JINJA_ASSIGN_OR_RETURN(value, EvalFilter(*e.args[0], scope, input));
  } else {
    DS_JINJA_ASSIGN_OR_RETURN(value, Eval(*e.args[0], scope));
  }
  DS_JINJA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
  DerivedFromContextScope derived(value.HoldsContext() || ArgsHoldContext(args));
  auto result = ApplyFilter(*this, e.name, value, args);
  if (!result.ok()) return AtLine(e.line, result.status());
  return result;
}

absl::StatusOr<Value> Interpreter::Eval(const Expr& e, Scope* scope) {
  DepthGuard guard(depth_);
  if (depth_ > kMaxRenderDepth) {
    return AtLine(e.line, absl::ResourceExhaustedError(absl::StrCat("template nests deeper than ",
                                                                    kMaxRenderDepth, " levels")));
  }
  auto result = EvalInner(e, scope);
  if (!result.ok()) return AtLine(e.line, result.status());
  if (result->is_string()) {
    DS_JINJA_RETURN_IF_ERROR(AtLine(e.line, CheckStringSize(result->as_string().size())));
  }
  // Strings are copied wherever they go, so every string result costs its size; a list or dict
  // is shared, so it costs its size only where an expression builds a new one.
  const bool builds = e.kind == Expr::Kind::kSlice || e.kind == Expr::Kind::kFilter ||
                      e.kind == Expr::Kind::kCall || e.kind == Expr::Kind::kBinary;
  const int64_t cost = result->is_string() || builds ? SizeCost(*result) : 0;
  DS_JINJA_RETURN_IF_ERROR(AtLine(e.line, Charge(1 + cost)));
  return result;
}

absl::StatusOr<Value> Interpreter::EvalInner(const Expr& e, Scope* scope) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return Lookup(scope, e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      for (const ExprPtr& item : e.args) {
        DS_JINJA_ASSIGN_OR_RETURN(Value v, Eval(*item, scope));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      std::vector<std::pair<Value, Value>> items;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        DS_JINJA_ASSIGN_OR_RETURN(Value k, Eval(*e.args[i], scope));
        DS_JINJA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1], scope));
        if (k.is_list() && !k.as_list().is_tuple) {
          return absl::InvalidArgumentError("TypeError: unhashable type: 'list'");
        }
        if (k.is_dict()) return absl::InvalidArgumentError("TypeError: unhashable type: 'dict'");
        bool replaced = false;
        for (auto& [old_k, old_v] : items) {
          if (ValuesEqual(old_k, k)) {
            old_v = v;
            replaced = true;
            break;
          }
        }
        if (!replaced) items.emplace_back(std::move(k), std::move(v));
      }
      return Value::Dict(std::move(items));
    }
    case Expr::Kind::kAttr: {
      DS_JINJA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
      return GetAttribute(obj, e.name);
    }
    case Expr::Kind::kItem: {
      DS_JINJA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
      DS_JINJA_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1], scope));
      DerivedFromContextScope derived(obj.HoldsContext());  // a character of a string
      return GetItem(obj, key);
    }
    case Expr::Kind::kSlice: {
      DS_JINJA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
      Value parts[3];
      for (int i = 0; i < 3; ++i) {
        if (e.args[static_cast<size_t>(i) + 1] != nullptr) {
          DS_JINJA_ASSIGN_OR_RETURN(parts[i], Eval(*e.args[static_cast<size_t>(i) + 1], scope));
        }
      }
      DerivedFromContextScope derived(obj.HoldsContext());
      auto sliced = GetSlice(obj, e.args[1] ? &parts[0] : nullptr, e.args[2] ? &parts[1] : nullptr,
                             e.args[3] ? &parts[2] : nullptr);
      // jinja2 folds a slice of constants at compile time through its lenient getitem, so a bad
      // one is undefined there, while a slice of a variable is a plain Python subscript.
      if (!sliced.ok() && IsConstant(e) && !obj.is_undefined()) {
        return Value::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no element"));
      }
      return sliced;
    }
    case Expr::Kind::kCall: {
      DS_JINJA_ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0], scope));
      DS_JINJA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
      return Call(callee, args);
    }
    case Expr::Kind::kFilter:
      return EvalFilter(e, scope, nullptr);
    case Expr::Kind::kTest: {
      DS_JINJA_ASSIGN_OR_RETURN(Value value, Eval(*e.args[0], scope));
      DS_JINJA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
      DS_JINJA_ASSIGN_OR_RETURN(bool result, ApplyTest(*this, e.name, value, args));
      return Value(result != e.negated);
    }
    case Expr::Kind::kUnary: {
      DS_JINJA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
      if (e.name == "not") return Value(!v.Truthy());
      if (v.is_undefined()) return UndefinedError(v);
      if (v.is_float()) return Value(e.name == "-" ? -v.as_double() : v.as_double());
      if (v.is_int() || v.is_bool()) {
        if (e.name == "+") return Value(v.as_int());
        if (v.as_int() == INT64_MIN)
          return absl::InvalidArgumentError("OverflowError: integer overflow");
        return Value(-v.as_int());
      }
      return absl::InvalidArgumentError(
          absl::StrCat("TypeError: bad operand type for unary ", e.name, ": '", v.TypeName(), "'"));
    }
    case Expr::Kind::kBinary: {
      DS_JINJA_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0], scope));
      if (e.name == "and") {
        if (!a.Truthy()) return a;
        return Eval(*e.args[1], scope);
      }
      if (e.name == "or") {
        if (a.Truthy()) return a;
        return Eval(*e.args[1], scope);
      }
      DS_JINJA_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1], scope));
      if (e.name == "~" || (e.name == "+" && a.is_string() && b.is_string())) return Concat(a, b);
      DerivedFromContextScope derived(a.HoldsContext() || b.HoldsContext());
      return BinaryOp(e.name, a, b);
    }
    case Expr::Kind::kCompare: {
      DS_JINJA_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], scope));
      for (size_t i = 0; i < e.ops.size(); ++i) {
        DS_JINJA_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1], scope));
        DS_JINJA_ASSIGN_OR_RETURN(bool ok, Compare(e.ops[i], left, right));
        if (!ok) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case Expr::Kind::kCond: {
      DS_JINJA_ASSIGN_OR_RETURN(Value cond, Eval(*e.args[1], scope));
      if (cond.Truthy()) return Eval(*e.args[0], scope);
      if (e.args[2] == nullptr)
        return Value::Undefined(
            "the inline if-expression evaluated to false and no else section was defined");
      return Eval(*e.args[2], scope);
    }
  }
  return absl::InternalError("unknown expression");
}

}  // namespace deltaserve::common::jinja
