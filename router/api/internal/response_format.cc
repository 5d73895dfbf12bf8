#include "router/api/internal/response_format.h"

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grammar/output_constraint.h"
#include "common/str_util.h"
#include "router/api/api_error.h"
#include "router/api/internal/json_fields.h"

namespace deltaserve::router::api::internal {
namespace {

using json = nlohmann::ordered_json;

}  // namespace

absl::Status SchemaError(std::string_view param, const absl::Status& compile_error) {
  return InvalidRequestError(
      param, "invalid_value",
      absl::StrCat("'", common::Sv(param), "' cannot be enforced: ", compile_error.message()));
}

absl::Status ParseResponseFormat(const json& doc, ResponseFormat* out) {
  const json* rf = Member(doc, "response_format");
  if (rf == nullptr) return absl::OkStatus();
  if (!rf->is_object()) return TypeError("response_format", "an object", *rf);
  const json* type = Member(*rf, "type");
  if (type == nullptr) {
    return InvalidRequestError("response_format.type", "missing_required_parameter",
                               "'response_format.type' is required");
  }
  if (!type->is_string()) return TypeError("response_format.type", "a string", *type);
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") {
    out->type = ResponseFormat::Type::kText;
    return absl::OkStatus();
  }
  if (t == "json_object") {
    out->type = ResponseFormat::Type::kJsonObject;
    return absl::OkStatus();
  }
  if (t != "json_schema") {
    return InvalidRequestError(
        "response_format.type", "invalid_value",
        absl::StrCat("'response_format.type' must be \"text\", \"json_object\" or "
                     "\"json_schema\", got '",
                     t, "'"));
  }
  out->type = ResponseFormat::Type::kJsonSchema;
  const json* js = Member(*rf, "json_schema");
  if (js == nullptr) {
    return InvalidRequestError("response_format.json_schema", "missing_required_parameter",
                               "'response_format.json_schema' is required for type json_schema");
  }
  if (!js->is_object()) return TypeError("response_format.json_schema", "an object", *js);
  std::optional<std::string> name;
  if (absl::Status s = ReadString(*js, "name", "response_format.json_schema.name", &name);
      !s.ok()) {
    return s;
  }
  if (!name) {
    return InvalidRequestError("response_format.json_schema.name", "missing_required_parameter",
                               "'response_format.json_schema.name' is required");
  }
  if (!common::grammar::IsValidFunctionName(*name)) {
    return InvalidRequestError(
        "response_format.json_schema.name", "invalid_value",
        absl::StrCat("'response_format.json_schema.name' must match ^[a-zA-Z0-9_-]{1,64}$, got '",
                     *name, "'"));
  }
  out->name = std::move(*name);
  std::optional<std::string> description;
  if (absl::Status s =
          ReadString(*js, "description", "response_format.json_schema.description", &description);
      !s.ok()) {
    return s;
  }
  std::optional<bool> strict;
  if (absl::Status s = ReadBool(*js, "strict", "response_format.json_schema.strict", &strict);
      !s.ok()) {
    return s;
  }
  out->strict = strict.value_or(false);
  const json* schema = Member(*js, "schema");
  if (schema == nullptr) {
    out->schema_json = "{}";  // OpenAI makes it optional: any JSON value
  } else {
    if (!schema->is_object() && !schema->is_boolean()) {
      return TypeError("response_format.json_schema.schema", "an object (a JSON Schema)", *schema);
    }
    out->schema_json = schema->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  if (out->schema_json.size() > kMaxResponseSchemaBytes) {
    return LimitError(
        "response_format.json_schema.schema", "max_response_schema_bytes",
        absl::StrCat("'response_format.json_schema.schema' is ", out->schema_json.size(),
                     " bytes as JSON, more than ", kMaxResponseSchemaBytes));
  }
  common::grammar::OutputConstraintSpec spec;
  spec.kind = common::grammar::OutputConstraintSpec::Kind::kJsonSchema;
  spec.schema_json = out->schema_json;
  spec.strict = out->strict;
  if (absl::StatusOr<common::grammar::Grammar> g = common::grammar::CompileOutputConstraint(spec);
      !g.ok()) {
    return SchemaError("response_format.json_schema.schema", g.status());
  }
  return absl::OkStatus();
}

std::string ChoiceRegex(const std::vector<std::string>& choices) {
  std::string out = "(";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += '|';
    for (char c : choices[i]) {
      if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
      out += c;
    }
  }
  out += ')';
  return out;
}

namespace {

// Most choices of a `choice` constraint, and bytes of one.
constexpr size_t kMaxChoices = 256;

// One guided-decoding field: `value` at `param`, of kind `key` ("regex", "choice", "json",
// or a grammar kind), into `out`.
absl::Status ReadGuided(const json& value, const std::string& param, std::string_view key,
                        ResponseFormat* out) {
  out->param = param;
  if (key == "json_object") {
    out->type = ResponseFormat::Type::kJsonObject;
    return absl::OkStatus();  // any one JSON object: always compiles
  }
  if (key == "regex") {
    if (!value.is_string()) return TypeError(param, "a string", value);
    out->type = ResponseFormat::Type::kRegex;
    out->regex = value.get_ref<const std::string&>();
  } else if (key == "choice") {
    if (!value.is_array() || value.empty()) {
      return TypeError(param, "a non-empty array of strings", value);
    }
    if (value.size() > kMaxChoices) {
      return LimitError(param, "max_choices",
                        absl::StrCat("'", common::Sv(param), "' has ", value.size(),
                                     " choices, more than ", kMaxChoices));
    }
    std::vector<std::string> choices;
    for (size_t i = 0; i < value.size(); ++i) {
      if (!value[i].is_string()) {
        return TypeError(absl::StrCat(common::Sv(param), "[", i, "]"), "a string", value[i]);
      }
      choices.push_back(value[i].get<std::string>());
    }
    out->type = ResponseFormat::Type::kRegex;
    out->regex = ChoiceRegex(choices);
  } else if (key == "json") {
    json schema = value;
    if (value.is_string()) {
      schema =
          json::parse(value.get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
      if (schema.is_discarded()) {
        return InvalidRequestError(
            param, "invalid_value",
            absl::StrCat("'", common::Sv(param), "' is a string that does not hold JSON"));
      }
    }
    if (!schema.is_object() && !schema.is_boolean()) {
      return TypeError(param, "an object (a JSON Schema)", value);
    }
    out->type = ResponseFormat::Type::kJsonSchema;
    out->name = "guided_json";
    out->schema_json = schema.dump(-1, ' ', false, json::error_handler_t::replace);
    out->strict = false;
    if (out->schema_json.size() > kMaxResponseSchemaBytes) {
      return LimitError(param, "max_response_schema_bytes",
                        absl::StrCat("'", common::Sv(param), "' is ", out->schema_json.size(),
                                     " bytes as JSON, more than ", kMaxResponseSchemaBytes));
    }
  } else {
    return InvalidRequestError(
        param, "unsupported_value",
        absl::StrCat("'", common::Sv(param),
                     "': grammar constraints are not supported (use a regex, a choice, a JSON "
                     "Schema or response_format)"));
  }
  common::grammar::OutputConstraintSpec spec;
  if (out->type == ResponseFormat::Type::kRegex) {
    spec.kind = common::grammar::OutputConstraintSpec::Kind::kRegex;
    spec.regex = out->regex;
  } else {
    spec.kind = common::grammar::OutputConstraintSpec::Kind::kJsonSchema;
    spec.schema_json = out->schema_json;
  }
  if (absl::StatusOr<common::grammar::Grammar> g = common::grammar::CompileOutputConstraint(spec);
      !g.ok()) {
    return SchemaError(param, g.status());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseGuidedDecoding(const json& doc, ResponseFormat* out) {
  struct Found {
    std::string param;  // where it was, for errors
    std::string key;    // what it asks for: "regex", "choice", "json", "json_object", "grammar"
    const json* value;
  };
  std::vector<Found> found;
  if (const json* so = Member(doc, "structured_outputs")) {
    if (!so->is_object()) return TypeError("structured_outputs", "an object", *so);
    for (const auto& [key, value] : so->items()) {
      if (value.is_null()) continue;
      const std::string param = absl::StrCat("structured_outputs.", key);
      if (key == "json_object") {
        if (!value.is_boolean()) return TypeError(param, "a boolean", value);
        if (value.get<bool>()) found.push_back({param, key, &value});
      } else if (key == "regex" || key == "choice" || key == "json") {
        found.push_back({param, key, &value});
      } else if (key == "grammar" || key == "structural_tag") {
        found.push_back({param, "grammar", &value});
      } else {
        // vLLM's options (disable_any_whitespace, whitespace_pattern, ...) and anything else:
        // refused rather than accepted and not honoured.
        return InvalidRequestError(param, "unsupported_value",
                                   absl::StrCat("'", param, "' is not supported"));
      }
    }
  }
  for (const auto& [field, key] :
       std::initializer_list<std::pair<const char*, const char*>>{{"guided_regex", "regex"},
                                                                  {"guided_choice", "choice"},
                                                                  {"guided_json", "json"},
                                                                  {"guided_grammar", "grammar"},
                                                                  {"regex", "regex"},
                                                                  {"ebnf", "grammar"}}) {
    if (const json* v = Member(doc, field)) found.push_back({field, key, v});
  }
  if (Member(doc, "guided_whitespace_pattern") != nullptr) {
    return InvalidRequestError("guided_whitespace_pattern", "unsupported_value",
                               "'guided_whitespace_pattern' is not supported (whitespace between "
                               "JSON tokens is bounded by the grammar)");
  }
  if (found.empty()) return absl::OkStatus();
  if (found.size() > 1 || out->type != ResponseFormat::Type::kText) {
    const std::string other = found.size() > 1 ? found[1].param : std::string("response_format");
    return InvalidRequestError(found[0].param, "invalid_value",
                               absl::StrCat("'", found[0].param, "' cannot be combined with '",
                                            other, "': one output constraint per request"));
  }
  return ReadGuided(*found[0].value, found[0].param, found[0].key, out);
}

}  // namespace deltaserve::router::api::internal
