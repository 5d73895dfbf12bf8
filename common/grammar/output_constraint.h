// Output constraints as the API states them -> one Grammar: `response_format` json_schema and
// json_object, a plain regex, and forced tool calls (`tool_choice: "required"` or a named
// function) in the model's own call markup, Qwen XML or a JSON body. Shared by the router, which
// compiles a request's constraint to answer a bad one with 400 before any worker is involved,
// and the worker, which compiles it once per distinct constraint (CacheKey) and masks tokens
// with it. docs/structured_outputs.md, "The API".
//
//   OutputConstraintSpec spec;
//   spec.kind = OutputConstraintSpec::Kind::kJsonSchema;
//   spec.schema_json = R"({"type":"object","properties":{"ok":{"type":"boolean"}}})";
//   ASSIGN_OR_RETURN(Grammar g, CompileOutputConstraint(spec));
//
// JSON kinds and tool calls accept up to kLeadingWhitespace whitespace bytes first (what a
// model writes after `</think>`; JSON allows it) and end where the value or the last call ends,
// so a matcher that is accepting and cannot continue means the output is complete.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"
#include "common/grammar/json_schema_compiler.h"

namespace deltaserve::common::grammar {

inline constexpr int kLeadingWhitespace = 4;

// How the model writes a tool call (from its chat template).
enum class ToolCallFormat {
  // Qwen3.5 / Qwen3-Coder: "<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n
  // ...</function>\n</tool_call>". Parameters in the schema's `properties` order, every
  // `required` one present. Each VALUE is written as the tool-call parser reads it back
  // (../shared/fixtures/toolcalls.md rule 6: the declared type from "type", else from the first
  // typed anyOf/oneOf member): raw text for a string (enum/const/pattern/minLength/maxLength
  // enforced, no "</" inside; pydantic's Optional[str], enum-class $ref and Optional[Enum]
  // shapes followed), JSON text for any other type.
  kQwenXml,
  // Qwen3 / Qwen2.5 / Hermes: "<tool_call>\n{\"name\": \"NAME\", \"arguments\":
  // ARGS}\n</tool_call>"
  // with ARGS an instance of the parameters schema.
  kJson,
};

struct ToolFunctionSpec {
  std::string name;             // ^[a-zA-Z0-9_-]{1,64}$
  std::string parameters_json;  // the `parameters` JSON Schema as JSON text; empty: none
};

struct OutputConstraintSpec {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kToolCall };
  Kind kind = Kind::kJsonObject;
  std::string schema_json;  // kJsonSchema
  bool strict = false;      // kJsonSchema: no properties beyond `properties` unless allowed
  std::string regex;        // kRegex: the whole output, anchored at both ends
  // kToolCall: the callable functions (at least one), the markup, and whether more than one
  // call may follow (separated by "\n", as the templates write them). With kJsonSchema or
  // kJsonObject and `or_calls`: the output is the document or, instead, such calls (the tools of
  // a `tool_choice: "auto"` request that also asked for structured output).
  std::vector<ToolFunctionSpec> functions;
  bool or_calls = false;
  ToolCallFormat format = ToolCallFormat::kQwenXml;
  bool parallel = false;

  // SHA-256 of everything above (not of how it is used): equal keys, equal grammars.
  std::array<uint8_t, 32> CacheKey() const;
};

// The constraint's grammar (see the file comment). InvalidArgument, naming the keyword and its
// place, for what cannot be enforced: the JSON Schema compiler's refusals, a bad regex, a tool
// name outside ^[a-zA-Z0-9_-]{1,64}$, no functions, and XML parameters the raw-text form cannot
// express (`format` or an applicator on a string value, a non-local or non-string `$ref`, string
// and non-string members mixed where the parser would read a JSON string back with its quotes).
// `whitespace`: what the JSON parts allow between tokens. kChecking (the router's validation,
// deltaserve-grammar check) accepts any bounded whitespace; the worker generates with
// kGeneration (nothing or one space), which admits the same values and refuses the same schemas.
absl::StatusOr<Grammar> CompileOutputConstraint(
    const OutputConstraintSpec& spec, JsonWhitespace whitespace = JsonWhitespace::kChecking);

// OpenAI's rule for function and response-format names: 1-64 of [a-zA-Z0-9_-]. The call markup a
// grammar writes embeds the name, so this is also what keeps it from closing a tag.
bool IsValidFunctionName(std::string_view name);

}  // namespace deltaserve::common::grammar
