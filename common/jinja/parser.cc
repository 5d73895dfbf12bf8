#include "common/jinja/parser.h"

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/lexer.h"
#include "common/jinja/parser_internal.h"

namespace deltaserve::common::jinja {
namespace internal {

// Statements until `{% <one of end_tags>`; leaves the end tag's name as the current token.
absl::StatusOr<Body> Parser::ParseBody(std::initializer_list<std::string_view> end_tags) {
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
        return Error(Cur(), absl::StrCat("expected end of print statement, got ", Describe(Cur())));
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

absl::StatusOr<NodePtr> Parser::ParseStatement() {
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
absl::StatusOr<Body> Parser::ParseInnerScope(std::initializer_list<std::string_view> end_tags) {
  const int saved = loop_depth_;
  loop_depth_ = 0;
  auto body = ParseBody(end_tags);
  loop_depth_ = saved;
  return body;
}

absl::Status Parser::ParseParams(Node& node) {
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
absl::StatusOr<ExprPtr> Parser::ParseAssignTarget(bool allow_namespace) {
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

}  // namespace internal

absl::StatusOr<std::unique_ptr<Template>> ParseTemplate(std::string_view source) {
  DS_JINJA_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  internal::Parser parser(std::move(tokens));
  DS_JINJA_ASSIGN_OR_RETURN(std::unique_ptr<Template> tmpl, parser.Run());
  AnalyzeScopes(*tmpl);
  return tmpl;
}

}  // namespace deltaserve::common::jinja
