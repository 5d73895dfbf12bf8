#pragma once
// `response_format` of chat completions and completions (docs/structured_outputs.md, "The
// API"): {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema":
// {"name", "description"?, "schema"?, "strict"?}}, as OpenAI's API reference and its Python SDK
// (openai.types.shared_params.ResponseFormatJSONSchema) send it. The schema is compiled here, so
// a schema the grammar engine cannot enforce is a 400 naming the keyword (param
// `response_format.json_schema.schema`) before any worker is involved. Private to router/api.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "router/api/completion_request.h"

namespace deltaserve::router::api::internal {

// Most bytes of a json_schema's schema as compact JSON (max_response_schema_bytes).
inline constexpr size_t kMaxResponseSchemaBytes = 1 << 20;

// Reads doc["response_format"] (absent or null: text) into `out`.
absl::Status ParseResponseFormat(const nlohmann::ordered_json& doc, ResponseFormat* out);

// vLLM's and SGLang's guided-decoding fields, for clients written against them (docs/
// structured_outputs.md, "vLLM-style fields"): `structured_outputs` {"regex" | "choice" |
// "json" | "json_object": true}, the older `guided_regex` / `guided_choice` / `guided_json`, and
// SGLang's `regex`; vLLM's other options (whitespace, fallback) are refused, not ignored.
// A regex is the whole output (anchored at both ends); a choice is one of the listed strings
// exactly (a regex of the escaped alternatives); json is a JSON Schema (an object, or a string
// holding one). At most one constraint per request, `response_format` included (400 otherwise);
// grammars (`grammar`, `guided_grammar`, `ebnf`, `structural_tag`) are a 400: not supported.
// Compiled here like a json_schema. Call after ParseResponseFormat.
absl::Status ParseGuidedDecoding(const nlohmann::ordered_json& doc, ResponseFormat* out);

// The regex that matches exactly one of `choices` (each escaped).
std::string ChoiceRegex(const std::vector<std::string>& choices);

// The 400 for a constraint the grammar compiler refused: param `param`, code "invalid_value",
// the compiler's message (which names the keyword and where).
absl::Status SchemaError(std::string_view param, const absl::Status& compile_error);

}  // namespace deltaserve::router::api::internal
