// The parser's internals, shared by parser.cc (statements) and expression_parser.cc
// (expressions): a recursive-descent parser over the lexer's tokens. Not a public interface.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/lexer.h"
#include "common/jinja/parser.h"

namespace deltaserve::common::jinja::internal {

// How a token reads in an error message ("'}'", "end of print statement", …).
inline std::string Describe(const Token& t) {
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

 private:
  // Statements (parser.cc).
  // Statements until `{% <one of end_tags>`; leaves the end tag's name as the current token.
  absl::StatusOr<Body> ParseBody(std::initializer_list<std::string_view> end_tags);
  absl::StatusOr<NodePtr> ParseStatement();
  // A macro or call body: loop controls do not reach through it.
  absl::StatusOr<Body> ParseInnerScope(std::initializer_list<std::string_view> end_tags);
  absl::Status ParseParams(Node& node);
  // A name, a tuple of names (optionally in parentheses) or, for set, name.attr.
  absl::StatusOr<ExprPtr> ParseAssignTarget(bool allow_namespace);

  // Expressions (expression_parser.cc).
  // expression (',' expression)* — a tuple when there is a comma.
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr, bool explicit_parens = false);
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr);
  absl::StatusOr<ExprPtr> Binary(std::string op, ExprPtr a, ExprPtr b, const Token& at);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  template <typename Operand>
  absl::StatusOr<ExprPtr> ParseLeftAssoc(std::initializer_list<std::string_view> ops, Operand next);
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr target, const Token& at);
  // (positional…, name=value…) after the callee (args[0]) or the filtered value.
  absl::Status ParseCallArgs(Expr& call);
  absl::StatusOr<std::string> ParseDottedName();
  // `| name(args) | name …` applied to `value` (null inside filter blocks).
  absl::StatusOr<ExprPtr> ParseFilterChain(ExprPtr value, bool leading_bar = true);
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr value);

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace deltaserve::common::jinja::internal
