#include "common/grammar/output_constraint.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grammar/internal/xml_call_parameters.h"
#include "common/grammar/json_schema_compiler.h"
#include "common/grammar/regex.h"
#include "common/json_reader.h"
#include "common/sha256.h"
#include "common/str_util.h"

namespace deltaserve::common::grammar {
namespace {

using json = nlohmann::ordered_json;
using internal::AddXmlParameters;
using internal::RawText;

#define DS_ASSIGN_OR_RETURN_IMPL(var, lhs, expr) \
  auto var = (expr);                             \
  if (!var.ok()) return var.status();            \
  lhs = std::move(*var)
#define DS_CONCAT_INNER(a, b) a##b
#define DS_CONCAT(a, b) DS_CONCAT_INNER(a, b)
#define DS_ASSIGN_OR_RETURN(lhs, expr) \
  DS_ASSIGN_OR_RETURN_IMPL(DS_CONCAT(_status_or_, __LINE__), lhs, expr)

// A parameters schema is at most 1 MiB (the router's max_tool_schema_bytes); the worker reads it
// under the router's request limits too.
constexpr JsonReadLimits kSchemaLimits{.max_depth = 64,
                                       .max_object_keys = 10'000,
                                       .max_array_elements = 1 << 16,
                                       .max_containers = 1 << 18};

absl::StatusOr<RuleId> AddToolCall(GrammarBuilder& b, RawText& raw, const ToolFunctionSpec& f,
                                   ToolCallFormat format, JsonWhitespace whitespace, size_t index) {
  if (!IsValidFunctionName(f.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tool name '", f.name, "' does not match ^[a-zA-Z0-9_-]{1,64}$"));
  }
  const std::string fn = absl::StrCat("call", index);
  const RuleId call = b.AddRule(fn);
  if (format == ToolCallFormat::kJson) {
    JsonGrammarOptions options;
    options.whitespace = whitespace;
    options.additional_properties_default = false;
    const std::string schema = f.parameters_json.empty()
                                   ? std::string(R"({"type":"object","properties":{}})")
                                   : f.parameters_json;
    absl::StatusOr<RuleId> args = AddJsonSchemaRules(b, schema, fn + "_args", options);
    if (!args.ok()) return args.status();
    Alternative alt =
        b.Literal(absl::StrCat("<tool_call>\n{\"name\": \"", f.name, "\", \"arguments\": "));
    alt.push_back(Symbol::Rule(*args));
    const Alternative tail = b.Literal("}\n</tool_call>");
    alt.insert(alt.end(), tail.begin(), tail.end());
    b.AddAlternative(call, std::move(alt));
    return call;
  }
  json root = json::object();
  if (!f.parameters_json.empty()) {
    absl::StatusOr<json> parsed = ReadOrderedJson(f.parameters_json, kSchemaLimits);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the parameters schema is not JSON: ", parsed.status().message()));
    }
    root = std::move(*parsed);
  }
  absl::StatusOr<Alternative> params = AddXmlParameters(b, raw, whitespace, root, fn);
  if (!params.ok()) return params.status();
  Alternative alt = b.Literal(absl::StrCat("<tool_call>\n<function=", f.name, ">\n"));
  alt.insert(alt.end(), params->begin(), params->end());
  const Alternative tail = b.Literal("</function>\n</tool_call>");
  alt.insert(alt.end(), tail.begin(), tail.end());
  b.AddAlternative(call, std::move(alt));
  return call;
}

// ws ::= [ \t\n\r]{0,kLeadingWhitespace}
RuleId LeadingWhitespace(GrammarBuilder& b) {
  ByteClass ws = ByteClass::Of(' ');
  ws.Add('\t');
  ws.Add('\n');
  ws.Add('\r');
  return b.Repeat("leading_ws", {b.Bytes(ws)}, 0, kLeadingWhitespace);
}

void HashField(Sha256Hasher& h, std::string_view s) {
  const uint64_t n = s.size();
  h.Update(&n, sizeof(n));
  h.Update(s.data(), s.size());
}

// One call of any of spec.functions, or with spec.parallel one or more, each after a newline
// (as the templates separate them).
absl::StatusOr<RuleId> AddCalls(GrammarBuilder& b, const OutputConstraintSpec& spec,
                                JsonWhitespace whitespace) {
  if (spec.functions.empty()) {
    return absl::InvalidArgumentError("a tool call constraint needs at least one function");
  }
  RawText raw(b);
  std::vector<Alternative> calls;
  for (size_t i = 0; i < spec.functions.size(); ++i) {
    absl::StatusOr<RuleId> call =
        AddToolCall(b, raw, spec.functions[i], spec.format, whitespace, i);
    if (!call.ok()) {
      return absl::Status(call.status().code(), absl::StrCat("tool '", spec.functions[i].name,
                                                             "': ", call.status().message()));
    }
    calls.push_back({Symbol::Rule(*call)});
  }
  const RuleId any_call = b.Choice("call", std::move(calls));
  Alternative alt = {Symbol::Rule(any_call)};
  if (spec.parallel) {
    Alternative more = b.Literal("\n");
    more.push_back(Symbol::Rule(any_call));
    alt.push_back(Symbol::Rule(b.Star("more_calls", std::move(more))));
  }
  const RuleId r = b.AddRule("calls");
  b.AddAlternative(r, std::move(alt));
  return r;
}

}  // namespace

std::array<uint8_t, 32> OutputConstraintSpec::CacheKey() const {
  Sha256Hasher h;
  const uint8_t head[] = {static_cast<uint8_t>(kind), static_cast<uint8_t>(strict),
                          static_cast<uint8_t>(format), static_cast<uint8_t>(parallel),
                          static_cast<uint8_t>(or_calls)};
  h.Update(head, sizeof(head));
  HashField(h, schema_json);
  HashField(h, regex);
  const uint64_t n = functions.size();
  h.Update(&n, sizeof(n));
  for (const ToolFunctionSpec& f : functions) {
    HashField(h, f.name);
    HashField(h, f.parameters_json);
  }
  return h.Finish();
}

absl::StatusOr<Grammar> CompileOutputConstraint(const OutputConstraintSpec& spec,
                                                JsonWhitespace whitespace) {
  using Kind = OutputConstraintSpec::Kind;
  if (spec.kind == Kind::kRegex) return CompileRegex(spec.regex);
  GrammarBuilder b;
  const RuleId root = b.AddRule("root");
  const Symbol ws = Symbol::Rule(LeadingWhitespace(b));
  switch (spec.kind) {
    case Kind::kJsonSchema:
    case Kind::kJsonObject: {
      JsonGrammarOptions options;
      options.whitespace = whitespace;
      options.additional_properties_default = !spec.strict;
      const std::string_view schema = spec.kind == Kind::kJsonSchema
                                          ? std::string_view(spec.schema_json)
                                          : R"({"type":"object"})";
      DS_ASSIGN_OR_RETURN(const RuleId value, AddJsonSchemaRules(b, schema, "schema", options));
      b.AddAlternative(root, {ws, Symbol::Rule(value)});
      if (spec.or_calls) {
        // The document, or instead the calls: they start with '<', which no JSON text does.
        DS_ASSIGN_OR_RETURN(const RuleId calls, AddCalls(b, spec, whitespace));
        b.AddAlternative(root, {ws, Symbol::Rule(calls)});
      }
      break;
    }
    case Kind::kToolCall: {
      DS_ASSIGN_OR_RETURN(const RuleId calls, AddCalls(b, spec, whitespace));
      b.AddAlternative(root, {ws, Symbol::Rule(calls)});
      break;
    }
    case Kind::kRegex:
      break;
  }
  return std::move(b).Build(root);
}

bool IsValidFunctionName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace deltaserve::common::grammar
