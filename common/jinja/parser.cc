#include "common/jinja/parser.h"

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/builtins.h"
#include "common/jinja/lexer.h"

namespace deltaserve::common::jinja {
namespace {

std::string Describe(const Token& t) {
  switch (t.type) {
    case Token::Type::kData:
      return "template data";
    case Token::Type::kVarBegin:
      return "'{{'";
    case Token::Type::kVarEnd:
      return "end of print statement";
    case Token::Type::kBlockBegin:
      return "'{%'";
    case Token::Type::kBlockEnd:
      return "end of statement block";
    case Token::Type::kName:
      return absl::StrCat("'", t.value, "'");
    case Token::Type::kString:
      return "string";
    case Token::Type::kInt:
      return "integer";
    case Token::Type::kFloat:
      return "float";
    case Token::Type::kOperator:
      return absl::StrCat("'", t.value, "'");
    case Token::Type::kEnd:
      return "end of template";
  }
  return "token";
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  absl::StatusOr<std::unique_ptr<Template>> Run() {
    auto tmpl = std::make_unique<Template>();
    DS_JINJA_ASSIGN_OR_RETURN(tmpl->body, ParseBody({}));
    return tmpl;
  }

 private:
  const Token& Cur() const { return t_[i_]; }
  const Token& Peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void Next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool IsOp(std::string_view op, size_t k = 0) const {
    const Token& t = Peek(k);
    return t.type == Token::Type::kOperator && t.value == op;
  }
  bool IsName(std::string_view name, size_t k = 0) const {
    const Token& t = Peek(k);
    return t.type == Token::Type::kName && t.value == name;
  }
  absl::Status Error(const Token& at, std::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(
        LocationPrefix(at.line, at.column), absl::string_view(message.data(), message.size())));
  }
  absl::Status Unexpected() const {
    return Error(Cur(), absl::StrCat("unexpected ", Describe(Cur())));
  }
  absl::Status ExpectOp(std::string_view op) {
    if (!IsOp(op)) {
      return Error(Cur(), absl::StrCat("expected '", absl::string_view(op.data(), op.size()),
                                       "', got ", Describe(Cur())));
    }
    Next();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().type != Token::Type::kBlockEnd) {
      return Error(Cur(), absl::StrCat("expected end of statement block, got ", Describe(Cur())));
    }
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().type != Token::Type::kName) {
      return Error(Cur(), absl::StrCat("expected a name, got ", Describe(Cur())));
    }
    std::string name = Cur().value;
    Next();
    return name;
  }
  ExprPtr MakeExpr(Expr::Kind kind, const Token& at) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  // Guards recursion: every nested statement or unary expression goes through here.
  struct DepthGuard {
    explicit DepthGuard(int& d) : depth(d) { ++depth; }
    ~DepthGuard() { --depth; }
    int& depth;
  };
  absl::Status CheckDepth() const {
    if (depth_ > kMaxParseDepth) {
      return Error(Cur(), absl::StrCat("template nests deeper than ", kMaxParseDepth, " levels"));
    }
    return absl::OkStatus();
  }

  // Statements until `{% <one of end_tags>`; leaves the end tag's name as the current token.
  absl::StatusOr<Body> ParseBody(std::initializer_list<std::string_view> end_tags) {
    Body body;
    while (true) {
      const Token& tok = Cur();
      if (tok.type == Token::Type::kEnd) {
        if (end_tags.size() == 0) return body;
        std::string wanted;
        for (std::string_view tag : end_tags) {
          absl::StrAppend(&wanted, wanted.empty() ? "" : " or ", "'",
                          absl::string_view(tag.data(), tag.size()), "'");
        }
        return Error(tok, absl::StrCat("unexpected end of template, expected ", wanted));
      }
      if (tok.type == Token::Type::kData) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kText;
        node->line = tok.line;
        node->text = tok.value;
        body.push_back(std::move(node));
        Next();
        continue;
      }
      if (tok.type == Token::Type::kVarBegin) {
        Next();
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kOutput;
        node->line = tok.line;
        node->column = tok.column;
        DS_JINJA_ASSIGN_OR_RETURN(node->expr, ParseTuple(true));
        if (Cur().type != Token::Type::kVarEnd) {
          return Error(Cur(),
                       absl::StrCat("expected end of print statement, got ", Describe(Cur())));
        }
        Next();
        body.push_back(std::move(node));
        continue;
      }
      if (tok.type != Token::Type::kBlockBegin) return Unexpected();
      const Token& name = Peek();
      if (name.type != Token::Type::kName) {
        return Error(name, absl::StrCat("expected a tag name, got ", Describe(name)));
      }
      for (std::string_view tag : end_tags) {
        if (name.value == tag) {
          Next();  // the current token is now the end tag's name
          return body;
        }
      }
      Next();
      DS_JINJA_ASSIGN_OR_RETURN(NodePtr node, ParseStatement());
      body.push_back(std::move(node));
    }
  }

  absl::StatusOr<NodePtr> ParseStatement() {
    DepthGuard guard(depth_);
    DS_JINJA_RETURN_IF_ERROR(CheckDepth());
    const Token tag = Cur();
    auto node = std::make_unique<Node>();
    node->line = tag.line;
    node->column = tag.column;
    Next();
    const std::string& kw = tag.value;
    if (kw == "if") {
      node->kind = Node::Kind::kIf;
      while (true) {
        DS_JINJA_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false));
        DS_JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
        DS_JINJA_ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}));
        node->branches.emplace_back(std::move(cond), std::move(body));
        const std::string end = Cur().value;
        Next();
        if (end == "elif") continue;
        if (end == "else") {
          DS_JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
          DS_JINJA_ASSIGN_OR_RETURN(node->else_body, ParseBody({"endif"}));
          Next();
        }
        break;
      }
    } else if (kw == "for") {
      node->kind = Node::Kind::kFor;
      DS_JINJA_ASSIGN_OR_RETURN(node->target, ParseAssignTarget(false));
      if (!IsName("in")) return Error(Cur(), absl::StrCat("expected 'in', got ", Describe(Cur())));
      Next();
      DS_JINJA_ASSIGN_OR_RETURN(node->expr, ParseTuple(false));
      if (IsName("if")) {
        Next();
        DS_JINJA_ASSIGN_OR_RETURN(node->filter, ParseExpression(true));
      }
      if (IsName("recursive")) return Error(Cur(), "recursive for loops are not supported");
      DS_JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
      ++loop_depth_;
      auto body = ParseBody({"endfor", "else"});
      --loop_depth_;
      if (!body.ok()) return body.status();
      node->body = std::move(*body);
      const std::string end = Cur().value;
      Next();
      if (end == "else") {
        DS_JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
        DS_JINJA_ASSIGN_OR_RETURN(node->else_body, ParseBody({"endfor"}));
        Next();
      }
    } else if (kw == "set") {
      DS_JINJA_ASSIGN_OR_RETURN(node->target, ParseAssignTarget(true));
      if (IsOp("=")) {
        Next();
        node->kind = Node::Kind::kSet;
        DS_JINJA_ASSIGN_OR_RETURN(node->expr, ParseTuple(true));
      } else {
        node->kind = Node::Kind::kSetBlock;
        if (node->target->kind != Expr::Kind::kName) {
          return Error(tag, "a block set assigns one name");
        }
        if (IsOp("|")) {
          DS_JINJA_ASSIGN_OR_RETURN(node->filter, ParseFilterChain(nullptr));
        }
        DS_JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
        DS_JINJA_ASSIGN_OR_RETURN(node->body, ParseBody({"endset"}));
        Next();
      }
    } else if (kw == "macro") {
      node->kind = Node::Kind::kMacro;
      DS_JINJA_ASSIGN_OR_RETURN(node->name, ExpectName());
      DS_JINJA_RETURN_IF_ERROR(ParseParams(*node));
      DS_JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
      DS_JINJA_ASSIGN_OR_RETURN(node->body, ParseInnerScope({"endmacro"}));
      Next();
    } else if (kw == "call") {
      node->kind = Node::Kind::kCallBlock;
      if (IsOp("(")) DS_JINJA_RETURN_IF_ERROR(ParseParams(*node));
      DS_JINJA_ASSIGN_OR_RETURN(node->expr, ParseExpression(true));
      if (node->expr->kind != Expr::Kind::kCall) return Error(tag, "expected a call after 'call'");
      DS_JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
      DS_JINJA_ASSIGN_OR_RETURN(node->body, ParseInnerScope({"endcall"}));
      Next();
    } else if (kw == "filter") {
      node->kind = Node::Kind::kFilterBlock;
      DS_JINJA_ASSIGN_OR_RETURN(node->filter, ParseFilterChain(nullptr, /*leading_bar=*/false));
      DS_JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
      DS_JINJA_ASSIGN_OR_RETURN(node->body, ParseBody({"endfilter"}));
      Next();
    } else if (kw == "with") {
      node->kind = Node::Kind::kWith;
      while (Cur().type != Token::Type::kBlockEnd) {
        if (!node->params.empty()) DS_JINJA_RETURN_IF_ERROR(ExpectOp(","));
        DS_JINJA_ASSIGN_OR_RETURN(std::string name, ExpectName());
        DS_JINJA_RETURN_IF_ERROR(ExpectOp("="));
        DS_JINJA_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        node->params.push_back(std::move(name));
        node->defaults.push_back(std::move(value));
      }
      DS_JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
      DS_JINJA_ASSIGN_OR_RETURN(node->body, ParseBody({"endwith"}));
      Next();
    } else if (kw == "generation") {
      node->kind = Node::Kind::kScope;
      DS_JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
      DS_JINJA_ASSIGN_OR_RETURN(node->body, ParseBody({"endgeneration"}));
      Next();
    } else if (kw == "break" || kw == "continue") {
      if (loop_depth_ == 0) {
        return Error(tag, absl::StrCat("'", kw, "' outside of a loop"));
      }
      node->kind = kw == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
    } else {
      return Error(tag, absl::StrCat("Encountered unknown tag '", kw, "'."));
    }
    DS_JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  // A macro or call body: loop controls do not reach through it.
  absl::StatusOr<Body> ParseInnerScope(std::initializer_list<std::string_view> end_tags) {
    const int saved = loop_depth_;
    loop_depth_ = 0;
    auto body = ParseBody(end_tags);
    loop_depth_ = saved;
    return body;
  }

  absl::Status ParseParams(Node& node) {
    DS_JINJA_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!node.params.empty()) DS_JINJA_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      DS_JINJA_ASSIGN_OR_RETURN(std::string name, ExpectName());
      ExprPtr def;
      if (IsOp("=")) {
        Next();
        DS_JINJA_ASSIGN_OR_RETURN(def, ParseExpression(true));
      } else {
        for (const ExprPtr& d : node.defaults) {
          if (d != nullptr) return Error(Cur(), "non-default argument follows default argument");
        }
      }
      node.params.push_back(std::move(name));
      node.defaults.push_back(std::move(def));
    }
    Next();
    return absl::OkStatus();
  }

  // A name, a tuple of names (optionally in parentheses) or, for set, name.attr.
  absl::StatusOr<ExprPtr> ParseAssignTarget(bool allow_namespace) {
    const Token start = Cur();
    if (allow_namespace && start.type == Token::Type::kName && IsOp(".", 1)) {
      auto e = MakeExpr(Expr::Kind::kAttr, start);
      auto base = MakeExpr(Expr::Kind::kName, start);
      base->name = start.value;
      Next();
      Next();
      DS_JINJA_ASSIGN_OR_RETURN(e->name, ExpectName());
      e->args.push_back(std::move(base));
      return e;
    }
    const bool paren = IsOp("(");
    if (paren) Next();
    auto tuple = MakeExpr(Expr::Kind::kTuple, start);
    while (true) {
      const Token& t = Cur();
      if (t.type != Token::Type::kName) {
        return Error(t, absl::StrCat("can't assign to ", Describe(t)));
      }
      auto name = MakeExpr(Expr::Kind::kName, t);
      name->name = t.value;
      tuple->args.push_back(std::move(name));
      Next();
      if (!IsOp(",")) break;
      Next();
      if (paren && IsOp(")")) break;
    }
    if (paren) DS_JINJA_RETURN_IF_ERROR(ExpectOp(")"));
    if (tuple->args.size() == 1 && !paren) return std::move(tuple->args[0]);
    return tuple;
  }

  // expression (',' expression)* — a tuple when there is a comma.
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr, bool explicit_parens = false) {
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

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
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

  absl::StatusOr<ExprPtr> Binary(std::string op, ExprPtr a, ExprPtr b, const Token& at) {
    auto e = MakeExpr(Expr::Kind::kBinary, at);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    DS_JINJA_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const Token at = Cur();
      Next();
      DS_JINJA_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      DS_JINJA_ASSIGN_OR_RETURN(left, Binary("or", std::move(left), std::move(right), at));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    DS_JINJA_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const Token at = Cur();
      Next();
      DS_JINJA_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      DS_JINJA_ASSIGN_OR_RETURN(left, Binary("and", std::move(left), std::move(right), at));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
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

  absl::StatusOr<ExprPtr> ParseCompare() {
    const Token start = Cur();
    DS_JINJA_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    auto cmp = MakeExpr(Expr::Kind::kCompare, start);
    cmp->args.push_back(std::move(first));
    while (true) {
      std::string op;
      if (Cur().type == Token::Type::kOperator &&
          (Cur().value == "==" || Cur().value == "!=" || Cur().value == "<" ||
           Cur().value == "<=" || Cur().value == ">" || Cur().value == ">=")) {
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
  absl::StatusOr<ExprPtr> ParseLeftAssoc(std::initializer_list<std::string_view> ops,
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

  absl::StatusOr<ExprPtr> ParseMath1() {
    return ParseLeftAssoc({"+", "-"}, [this] { return ParseConcat(); });
  }
  absl::StatusOr<ExprPtr> ParseConcat() {
    return ParseLeftAssoc({"~"}, [this] { return ParseMath2(); });
  }
  absl::StatusOr<ExprPtr> ParseMath2() {
    return ParseLeftAssoc({"*", "/", "//", "%"}, [this] { return ParsePow(); });
  }
  absl::StatusOr<ExprPtr> ParsePow() {
    return ParseLeftAssoc({"**"}, [this] { return ParseUnary(true); });
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
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

  absl::StatusOr<ExprPtr> ParsePrimary() {
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

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
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

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr target, const Token& at) {
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
  absl::Status ParseCallArgs(Expr& call) {
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

  absl::StatusOr<std::string> ParseDottedName() {
    DS_JINJA_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (IsOp(".") && Peek().type == Token::Type::kName) {
      Next();
      absl::StrAppend(&name, ".", Cur().value);
      Next();
    }
    return name;
  }

  // `| name(args) | name …` applied to `value` (null inside filter blocks).
  absl::StatusOr<ExprPtr> ParseFilterChain(ExprPtr value, bool leading_bar = true) {
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

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr value) {
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

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Template>> ParseTemplate(std::string_view source) {
  DS_JINJA_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  Parser parser(std::move(tokens));
  DS_JINJA_ASSIGN_OR_RETURN(std::unique_ptr<Template> tmpl, parser.Run());
  AnalyzeScopes(*tmpl);
  return tmpl;
}

}  // namespace deltaserve::common::jinja
