// The syntax tree of a template and the parser that builds it from the lexer's tokens, with
// jinja2's grammar and operator precedence (lowest first): `a if b else c`, `or`, `and`, `not`,
// comparisons and `in` (chained like Python), `+ -`, `~`, `* / // %`, `**`, unary `- +`,
// then postfix `.attr`, `[index]`, `[a:b:c]`, `(call)`, `|filter` and `is test`.
//
// Statements: if/elif/else, for (tuple targets, `if` filter, else), set (names, tuples,
// namespace attributes, block set with filters), macro, call blocks, filter blocks, with,
// break/continue, generation. Anything else — including a filter or test the engine does not
// implement — is an InvalidArgument naming the line and column.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/jinja/value.h"

namespace deltaserve::common::jinja {

// Deepest nesting of expressions and blocks the parser accepts.
inline constexpr int kMaxParseDepth = 100;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // args: items
    kTuple,    // args: items
    kDict,     // args: key, value, key, value, …
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (absent parts are null)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs); args[0] null inside a filter block
    kTest,     // args[0] is [not] name(args[1..], kwargs)
    kUnary,    // name ("-", "+", "not") args[0]
    kBinary,   // args[0] name args[1] for + - * / // % ** ~ and or
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] …
    kCond,     // args[0] if args[1] else args[2] (args[2] null: undefined)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches (condition, body); else_body
    kFor,          // for target in expr [if filter]: body; else_body
    kSet,          // set target = expr
    kSetBlock,     // {% set name [| filters] %} body {% endset %}; filter: the chain or null
    kMacro,        // macro name(params = defaults): body
    kCallBlock,    // {% call(params) expr %} body — expr is the call, body becomes caller()
    kFilterBlock,  // {% filter chain %} body
    kWith,         // {% with name = expr, … %} body
    kScope,        // {% generation %} body: rendered in place
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  int line = 0;
  int column = 0;
  std::string text;
  std::string name;
  ExprPtr expr;
  ExprPtr target;  // kFor, kSet: a name, a tuple of names or (kSet) name.attr
  ExprPtr filter;  // kFor condition; kSetBlock / kFilterBlock filter chain
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> params;  // kMacro / kCallBlock parameters; kWith names
  std::vector<ExprPtr> defaults;    // per parameter, null without a default; kWith values
  // Names that start undefined in the scope this node opens (body) and in a for loop's else
  // scope, even when an outer scope or the context has them: jinja2's scoping (scopes.cc).
  std::vector<std::string> body_unset;
  std::vector<std::string> else_unset;
};

// A parsed template.
struct Template {
  Body body;
  std::vector<std::string> root_unset;  // as Node::body_unset, for the template's top level
};

// Parses a template; errors name the line and column.
absl::StatusOr<std::unique_ptr<Template>> ParseTemplate(std::string_view source);

// Fills body_unset / else_unset / root_unset (scopes.cc), as jinja2's compiler decides them: in
// each scope (the template, a loop iteration, a macro call, a block), a name whose first use is
// an assignment — in every branch, if inside `if` — and that no enclosing scope uses starts out
// undefined, so `{% for %}{{ x }}{% endfor %}{% set x = 1 %}` prints '' even when the context
// has x. Every other name reads through to the enclosing scopes and the context.
void AnalyzeScopes(Template& tmpl);

}  // namespace deltaserve::common::jinja
