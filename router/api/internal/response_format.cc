#include "router/api/internal/response_format.h"

#include <string>

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

}  // namespace deltaserve::router::api::internal
