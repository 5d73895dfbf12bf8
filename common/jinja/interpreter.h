// Runs a parsed template (parser.h) over a context, the way jinja2 renders it: scopes (a for loop
// and a macro call get their own, `if` does not, so `set` inside a loop does not leak out),
// jinja2's default Undefined, loop variables, macros with defaults and caller(), namespaces, and
// the globals transformers installs (raise_exception, strftime_now) plus namespace, range, dict.
//
// Every render is bounded so that no template — however hostile — runs away:
//   kMaxOutputBytes     the output and any single string built while rendering
//   kMaxLoopIterations  for-loop iterations summed over the whole render (and range() length)
//   kMaxRenderDepth     nesting of evaluation: expressions, blocks and macro calls together
//   kMaxRenderSteps     total work: one step per expression and statement, plus one per 64 bytes
//                       of every string produced (and per 4 context ranges it carries) and one
//                       per item of every list or dict built
// Going past one is a ResourceExhausted error naming the line.
//
// The output is marked: the bytes that came from the context (value.h, "Provenance") are listed
// beside the text, so the tokenizer can keep request text from becoming special tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/jinja/parser.h"
#include "common/jinja/value.h"
#include "common/marked_text.h"
#include "nlohmann/json.hpp"

namespace deltaserve::common::jinja {

inline constexpr int64_t kMaxOutputBytes = int64_t{64} << 20;
inline constexpr int64_t kMaxLoopIterations = 1'000'000;
inline constexpr int kMaxRenderDepth = 400;
inline constexpr int64_t kMaxRenderSteps = 20'000'000;

// The status payload (type URL) that marks a raise_exception() from the template itself; its
// value is the message. Such a status is InvalidArgument with exactly the template's message.
inline constexpr char kRaiseExceptionPayload[] = "type.deltaserve/jinja.raise_exception";

class Interpreter {
 public:
  explicit Interpreter(const Template& tmpl) : tmpl_(tmpl) {}

  // Renders with the context's top-level keys as variables. Every string in `context` is
  // context text except those under the top-level keys named in `trusted_keys`.
  absl::StatusOr<MarkedText> Render(const nlohmann::ordered_json& context,
                                    absl::Span<const std::string> trusted_keys = {});

  // Calls a callable value (filters such as map use it).
  absl::StatusOr<Value> Call(const Value& callee, CallArgs& args);
  // A new namespace object owned by this render.
  NamespaceData* NewNamespace();
  // Adds `steps` of work; fails once the render's budget is spent.
  absl::Status Charge(int64_t steps);
  // Fails when a string of `bytes` would exceed kMaxOutputBytes.
  static absl::Status CheckStringSize(size_t bytes);
  // Counts `n` loop iterations against kMaxLoopIterations.
  absl::Status CountIterations(int64_t n);

 private:
  struct Scope {
    absl::flat_hash_map<std::string, Value> vars;
    Scope* parent = nullptr;
  };
  enum class Flow { kNormal, kBreak, kContinue };

  Scope* NewScope(Scope* parent);
  // A new scope with `unset` bound to undefined (Node::body_unset).
  Scope* OpenScope(Scope* parent, const std::vector<std::string>& unset);
  Value Lookup(Scope* scope, const std::string& name) const;

  absl::StatusOr<Flow> ExecBody(const Body& body, Scope* scope, MarkedText& out);
  absl::StatusOr<Flow> Exec(const Node& node, Scope* scope, MarkedText& out);
  absl::StatusOr<Flow> ExecFor(const Node& node, Scope* scope, MarkedText& out);
  absl::Status Assign(const Expr& target, const Value& value, Scope* scope);
  absl::StatusOr<Value> CallMacro(const Node& macro, Scope* defined_in, CallArgs& args);

  absl::StatusOr<Value> Eval(const Expr& e, Scope* scope);
  absl::StatusOr<Value> EvalInner(const Expr& e, Scope* scope);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first, Scope* scope);
  // A filter node (or chain, for filter blocks whose innermost value is `input`).
  absl::StatusOr<Value> EvalFilter(const Expr& e, Scope* scope, const Value* input);

  const Template& tmpl_;
  std::vector<std::unique_ptr<Scope>> scopes_;
  std::vector<std::unique_ptr<NamespaceData>> namespaces_;
  int64_t steps_ = 0;
  int64_t iterations_ = 0;
  int depth_ = 0;
};

// The error for a failure at `line` of the template: "chat template line L: <message>", unless
// `status` already names its place or is a raise_exception().
absl::Status AtLine(int line, const absl::Status& status);

}  // namespace deltaserve::common::jinja
