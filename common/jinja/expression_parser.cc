// Expressions: jinja2's grammar and precedence (parser.h), each level a method of the parser.
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/builtins.h"
#include "common/jinja/parser_internal.h"

namespace deltaserve::common::jinja::internal {

// expression (',' expression)* — a tuple when there is a comma.
absl::StatusOr<ExprPtr> Parser::ParseTuple(bool with_condexpr, bool explicit_parens) {
  const Token start = Cur();
  std::vector<ExprPtr> items;
  bool comma = false;
  while (true) {
    if (!items.empty()) {
      if (!IsOp(",")) break;
      Next();
      comma = true;
    }
    if (Cur().type == Token::Type::kVarEnd || Cur().type == Token::Type::kBlockEnd || IsOp(")") ||
        (items.size() > 0 && (IsName("if") || IsName("recursive")))) {
      if (items.empty() && !explicit_parens) return Unexpected();
      break;
    }
    if (explicit_parens && items.empty() && IsOp(")")) break;
    DS_JINJA_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condexpr));
    items.push_back(std::move(e));
  }
  if (items.size() == 1 && !comma) return std::move(items[0]);
  auto tuple = MakeExpr(Expr::Kind::kTuple, start);
  tuple->args = std::move(items);
  return tuple;
}

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  if (!with_condexpr) return ParseOr();
  const Token start = Cur();
  DS_JINJA_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  while (IsName("if")) {
    Next();
    auto cond = MakeExpr(Expr::Kind::kCond, start);
    DS_JINJA_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr otherwise;
    if (IsName("else")) {
      Next();
      DS_JINJA_ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
    }
    cond->args.push_back(std::move(expr));
    cond->args.push_back(std::move(test));
    cond->args.push_back(std::move(otherwise));
    expr = std::move(cond);
  }
  return expr;
}

absl::StatusOr<ExprPtr> Parser::Binary(std::string op, ExprPtr a, ExprPtr b, const Token& at) {
  auto e = MakeExpr(Expr::Kind::kBinary, at);
  e->name = std::move(op);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  DS_JINJA_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    const Token at = Cur();
    Next();
    DS_JINJA_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    DS_JINJA_ASSIGN_OR_RETURN(left, Binary("or", std::move(left), std::move(right), at));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  DS_JINJA_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    const Token at = Cur();
    Next();
    DS_JINJA_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    DS_JINJA_ASSIGN_OR_RETURN(left, Binary("and", std::move(left), std::move(right), at));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (IsName("not")) {
    DepthGuard guard(depth_);
    DS_JINJA_RETURN_IF_ERROR(CheckDepth());
    auto e = MakeExpr(Expr::Kind::kUnary, Cur());
    e->name = "not";
    Next();
    DS_JINJA_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    e->args.push_back(std::move(operand));
    return e;
  }
  return ParseCompare();
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  const Token start = Cur();
  DS_JINJA_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  auto cmp = MakeExpr(Expr::Kind::kCompare, start);
  cmp->args.push_back(std::move(first));
  while (true) {
    std::string op;
    if (Cur().type == Token::Type::kOperator &&
        (Cur().value == "==" || Cur().value == "!=" || Cur().value == "<" || Cur().value == "<=" ||
         Cur().value == ">" || Cur().value == ">=")) {
      op = Cur().value;
      Next();
    } else if (IsName("in")) {
      op = "in";
      Next();
    } else if (IsName("not") && IsName("in", 1)) {
      op = "notin";
      Next();
      Next();
    } else {
      break;
    }
    DS_JINJA_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    cmp->ops.push_back(std::move(op));
    cmp->args.push_back(std::move(operand));
  }
  if (cmp->ops.empty()) return std::move(cmp->args[0]);
  return cmp;
}

template <typename Operand>
absl::StatusOr<ExprPtr> Parser::ParseLeftAssoc(std::initializer_list<std::string_view> ops,
                                               Operand next) {
  DS_JINJA_ASSIGN_OR_RETURN(ExprPtr left, next());
  while (true) {
    bool matched = false;
    for (std::string_view op : ops) {
      if (IsOp(op)) {
        matched = true;
        break;
      }
    }
    if (!matched) return left;
    const Token at = Cur();
    Next();
    DS_JINJA_ASSIGN_OR_RETURN(ExprPtr right, next());
    DS_JINJA_ASSIGN_OR_RETURN(left, Binary(at.value, std::move(left), std::move(right), at));
  }
}

absl::StatusOr<ExprPtr> Parser::ParseMath1() {
  return ParseLeftAssoc({"+", "-"}, [this] { return ParseConcat(); });
}

absl::StatusOr<ExprPtr> Parser::ParseConcat() {
  return ParseLeftAssoc({"~"}, [this] { return ParseMath2(); });
}

absl::StatusOr<ExprPtr> Parser::ParseMath2() {
  return ParseLeftAssoc({"*", "/", "//", "%"}, [this] { return ParsePow(); });
}

absl::StatusOr<ExprPtr> Parser::ParsePow() {
  return ParseLeftAssoc({"**"}, [this] { return ParseUnary(true); });
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(depth_);
  DS_JINJA_RETURN_IF_ERROR(CheckDepth());
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    node = MakeExpr(Expr::Kind::kUnary, Cur());
    node->name = Cur().value;
    Next();
    DS_JINJA_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    node->args.push_back(std::move(operand));
  } else {
    DS_JINJA_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  DS_JINJA_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    while (true) {
      if (IsOp("|")) {
        DS_JINJA_ASSIGN_OR_RETURN(node, ParseFilterChain(std::move(node)));
      } else if (IsName("is")) {
        DS_JINJA_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else {
        break;
      }
    }
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Cur();
  switch (t.type) {
    case Token::Type::kName: {
      auto e = MakeExpr(Expr::Kind::kLiteral, t);
      if (t.value == "true" || t.value == "True") {
        e->literal = Value(true);
      } else if (t.value == "false" || t.value == "False") {
        e->literal = Value(false);
      } else if (t.value == "none" || t.value == "None") {
        e->literal = Value::None();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = t.value;
      }
      Next();
      return e;
    }
    case Token::Type::kString: {
      auto e = MakeExpr(Expr::Kind::kLiteral, t);
      std::string s;
      while (Cur().type == Token::Type::kString) {
        s += Cur().value;
        Next();
      }
      e->literal = Value(std::move(s));
      return e;
    }
    case Token::Type::kInt:
    case Token::Type::kFloat: {
      auto e = MakeExpr(Expr::Kind::kLiteral, t);
      e->literal = t.type == Token::Type::kInt ? Value(t.int_value) : Value(t.float_value);
      Next();
      return e;
    }
    case Token::Type::kOperator:
      if (t.value == "(") {
        Next();
        DS_JINJA_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(true, /*explicit_parens=*/true));
        DS_JINJA_RETURN_IF_ERROR(ExpectOp(")"));
        return e;
      }
      if (t.value == "[" || t.value == "{") {
        const bool is_list = t.value == "[";
        auto e = MakeExpr(is_list ? Expr::Kind::kList : Expr::Kind::kDict, t);
        Next();
        const std::string_view close = is_list ? "]" : "}";
        while (!IsOp(close)) {
          if (!e->args.empty()) {
            DS_JINJA_RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp(close)) break;
          }
          DS_JINJA_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
          e->args.push_back(std::move(item));
          if (!is_list) {
            DS_JINJA_RETURN_IF_ERROR(ExpectOp(":"));
            DS_JINJA_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
            e->args.push_back(std::move(value));
          }
        }
        Next();
        return e;
      }
      break;
    default:
      break;
  }
  return Error(t, absl::StrCat("expected an expression, got ", Describe(t)));
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    const Token at = Cur();
    if (IsOp(".")) {
      Next();
      if (Cur().type == Token::Type::kName) {
        auto e = MakeExpr(Expr::Kind::kAttr, at);
        e->name = Cur().value;
        e->args.push_back(std::move(node));
        node = std::move(e);
      } else if (Cur().type == Token::Type::kInt) {
        auto e = MakeExpr(Expr::Kind::kItem, at);
        auto key = MakeExpr(Expr::Kind::kLiteral, Cur());
        key->literal = Value(Cur().int_value);
        e->args.push_back(std::move(node));
        e->args.push_back(std::move(key));
        node = std::move(e);
      } else {
        return Error(Cur(), absl::StrCat("expected an attribute name, got ", Describe(Cur())));
      }
      Next();
    } else if (IsOp("[")) {
      Next();
      DS_JINJA_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), at));
    } else if (IsOp("(")) {
      auto call = MakeExpr(Expr::Kind::kCall, at);
      call->args.push_back(std::move(node));
      DS_JINJA_RETURN_IF_ERROR(ParseCallArgs(*call));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr target, const Token& at) {
  ExprPtr parts[3];
  bool is_slice = false;
  if (!IsOp(":")) {
    DS_JINJA_ASSIGN_OR_RETURN(parts[0], ParseExpression(true));
  }
  if (IsOp(":")) {
    is_slice = true;
    Next();
    if (!IsOp("]") && !IsOp(":")) {
      DS_JINJA_ASSIGN_OR_RETURN(parts[1], ParseExpression(true));
    }
    if (IsOp(":")) {
      Next();
      if (!IsOp("]")) {
        DS_JINJA_ASSIGN_OR_RETURN(parts[2], ParseExpression(true));
      }
    }
  }
  DS_JINJA_RETURN_IF_ERROR(ExpectOp("]"));
  auto e = MakeExpr(is_slice ? Expr::Kind::kSlice : Expr::Kind::kItem, at);
  e->args.push_back(std::move(target));
  e->args.push_back(std::move(parts[0]));
  if (is_slice) {
    e->args.push_back(std::move(parts[1]));
    e->args.push_back(std::move(parts[2]));
  }
  return e;
}

// (positional…, name=value…) after the callee (args[0]) or the filtered value.
absl::Status Parser::ParseCallArgs(Expr& call) {
  DS_JINJA_RETURN_IF_ERROR(ExpectOp("("));
  bool first = true;
  while (!IsOp(")")) {
    if (!first) {
      DS_JINJA_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
    }
    first = false;
    if (IsOp("*") || IsOp("**")) return Error(Cur(), "*args and **kwargs are not supported");
    if (Cur().type == Token::Type::kName && IsOp("=", 1)) {
      std::string name = Cur().value;
      Next();
      Next();
      DS_JINJA_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      call.kwargs.emplace_back(std::move(name), std::move(value));
    } else {
      if (!call.kwargs.empty()) return Error(Cur(), "positional argument after keyword argument");
      DS_JINJA_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      call.args.push_back(std::move(value));
    }
  }
  Next();
  return absl::OkStatus();
}

absl::StatusOr<std::string> Parser::ParseDottedName() {
  DS_JINJA_ASSIGN_OR_RETURN(std::string name, ExpectName());
  while (IsOp(".") && Peek().type == Token::Type::kName) {
    Next();
    absl::StrAppend(&name, ".", Cur().value);
    Next();
  }
  return name;
}

// `| name(args) | name …` applied to `value` (null inside filter blocks).
absl::StatusOr<ExprPtr> Parser::ParseFilterChain(ExprPtr value, bool leading_bar) {
  bool first = true;
  while (first || IsOp("|")) {
    if (!first || leading_bar) DS_JINJA_RETURN_IF_ERROR(ExpectOp("|"));
    first = false;
    const Token at = Cur();
    DS_JINJA_ASSIGN_OR_RETURN(std::string name, ParseDottedName());
    if (!HasFilter(name)) return Error(at, absl::StrCat("No filter named '", name, "'."));
    auto e = MakeExpr(Expr::Kind::kFilter, at);
    e->name = std::move(name);
    e->args.push_back(std::move(value));
    if (IsOp("(")) DS_JINJA_RETURN_IF_ERROR(ParseCallArgs(*e));
    value = std::move(e);
    if (!leading_bar) leading_bar = true;
  }
  return value;
}

absl::StatusOr<ExprPtr> Parser::ParseTest(ExprPtr value) {
  const Token at = Cur();
  Next();  // is
  auto e = MakeExpr(Expr::Kind::kTest, at);
  if (IsName("not")) {
    e->negated = true;
    Next();
  }
  const Token name_tok = Cur();
  DS_JINJA_ASSIGN_OR_RETURN(e->name, ParseDottedName());
  if (!HasTest(e->name)) return Error(name_tok, absl::StrCat("No test named '", e->name, "'."));
  e->args.push_back(std::move(value));
  if (IsOp("(")) {
    DS_JINJA_RETURN_IF_ERROR(ParseCallArgs(*e));
  } else {
    const Token& t = Cur();
    const bool starts_arg = t.type == Token::Type::kName || t.type == Token::Type::kString ||
                            t.type == Token::Type::kInt || t.type == Token::Type::kFloat ||
                            IsOp("[") || IsOp("{");
    // As jinja2: any name but else/or/and starts an argument (so `x is odd if y` is an error).
    if (starts_arg && !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) return Error(t, "You cannot chain multiple tests with is");
      DS_JINJA_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      DS_JINJA_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      e->args.push_back(std::move(arg));
    }
  }
  return e;
}

}  // namespace deltaserve::common::jinja::internal
