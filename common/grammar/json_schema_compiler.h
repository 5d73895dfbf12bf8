// JSON Schema -> Grammar, for `response_format: json_schema`, `json_object` and the parameters of
// forced tool calls (docs/structured_outputs.md lists what is supported and what is refused).
// A keyword the grammar cannot enforce is refused with InvalidArgument naming the keyword and
// its JSON path (`unsupported JSON Schema keyword "uniqueItems" at #/properties/tags`): never
// silently ignored. Annotation keywords that do not constrain (title, description, default,
// examples, $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored.
//
//   ASSIGN_OR_RETURN(Grammar g, CompileJsonSchema(R"({"type":"object",...})"));
//
// The documents a grammar accepts: the JSON text of an instance, with object properties in the
// schema's `properties` order (then any additional ones), whitespace between JSON tokens bounded
// by JsonGrammarOptions (checking: `json.dumps` with its `, ` / `: ` separators, compact text
// and indented text all pass; generation: at most one space, so a model cannot spend its tokens
// on whitespace), strings as valid UTF-8 with
// JSON escapes, and numbers in JSON's syntax.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"

namespace deltaserve::common::grammar {

// What may stand between two JSON tokens.
enum class JsonWhitespace {
  // Checking text written by anyone: 0..max_whitespace of space, tab, newline, carriage return
  // (compact, `json.dumps` and indented documents all pass).
  kChecking,
  // Generating: nothing or one space (Outlines' default whitespace pattern; compact JSON and
  // `json.dumps`' `, ` / `: ` separators). Whitespace costs a sampled token per byte on a small
  // vocabulary and a model with flat logits would otherwise spend its budget on it; the
  // documents are the same values, only their spelling is narrowed.
  kGeneration,
};

struct JsonGrammarOptions {
  JsonWhitespace whitespace = JsonWhitespace::kChecking;
  // kChecking: most whitespace bytes between two JSON tokens.
  int max_whitespace = 32;
  // Where the schema lists no `additionalProperties`, whether other keys are allowed (the JSON
  // Schema default: true). OpenAI's strict mode and forced tool calls set false.
  bool additional_properties_default = true;
  // `$ref` chains and nesting deeper than this are refused (recursion through `$ref` is fine: it
  // becomes a recursive rule).
  int max_schema_depth = 64;
  // Bounds on what the schema may make the grammar expand into.
  // minItems/maxItems, min/maxProperties, and minLength/maxLength next to a pattern or format:
  // larger bounds are refused (a plain string's lengths take O(log n) rules and are not limited).
  int max_repetition = 4096;
  GrammarLimits limits;
};

// The schema (JSON text) -> a grammar whose root matches one instance (see the file comment).
// InvalidArgument for text that is not JSON, a schema that is not an object or boolean, an
// unsupported keyword, an unresolvable `$ref`, an unsatisfiable combination it can detect, or a
// grammar over the limits.
absl::StatusOr<Grammar> CompileJsonSchema(std::string_view schema_json,
                                          const JsonGrammarOptions& options = {});

// Any JSON object (`response_format: {"type": "json_object"}`), nesting bounded by
// options.max_schema_depth.
Grammar JsonObjectGrammar(const JsonGrammarOptions& options = {});

// Adds the rules for `schema_json` to `builder` and returns the rule matching one instance: how
// forced tool calls embed a parameter's schema in a larger grammar (the Qwen XML call format).
// `prefix` makes the rule names unique within the builder.
absl::StatusOr<RuleId> AddJsonSchemaRules(GrammarBuilder& builder, std::string_view schema_json,
                                          std::string_view prefix,
                                          const JsonGrammarOptions& options = {});

}  // namespace deltaserve::common::grammar
