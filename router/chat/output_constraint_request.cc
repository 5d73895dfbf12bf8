#include "router/chat/output_constraint_request.h"

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json_reader.h"
#include "router/api/api_error.h"

namespace deltaserve::router::chat {
namespace {

namespace v1 = ::deltaserve::v1;
using json = nlohmann::ordered_json;
using common::grammar::OutputConstraintSpec;
using common::grammar::ToolCallFormat;
using common::grammar::ToolFunctionSpec;

absl::Status ParameterSchemaError(size_t index, const absl::Status& error) {
  const std::string param = absl::StrCat("tools[", index, "].function.parameters");
  return api::InvalidRequestError(
      param, "invalid_value",
      absl::StrCat("'", param, "' cannot be enforced in a forced tool call: ", error.message()));
}

}  // namespace

ToolCallFormat ToolCallFormatOf(std::string_view chat_template) {
  return chat_template.find("<function=") != std::string_view::npos ? ToolCallFormat::kQwenXml
                                                                    : ToolCallFormat::kJson;
}

// The calls the request's tools allow, each function's parameters compiled alone so that a
// refusal names its tool; `only`: keep just that function (a named tool_choice).
absl::Status FillCalls(const api::CompletionRequest& request, ToolCallFormat format,
                       const std::string* only, bool parallel, v1::ToolCallConstraint& call) {
  // The request parser validated the tools (names, parameters objects, sizes).
  absl::StatusOr<json> tools =
      common::ReadOrderedJson(request.tools_json, common::kNoJsonReadLimits);
  if (!tools.ok() || !tools->is_array()) {
    return api::InvalidRequestError("tools", "invalid_value", "'tools' could not be read");
  }
  call.set_format(format == ToolCallFormat::kQwenXml ? v1::TOOL_CALL_FORMAT_QWEN_XML
                                                     : v1::TOOL_CALL_FORMAT_JSON);
  call.set_parallel(parallel);
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& fn = (*tools)[i]["function"];
    ToolFunctionSpec f;
    f.name = fn.value("name", "");
    if (only != nullptr && f.name != *only) continue;
    if (auto p = fn.find("parameters"); p != fn.end() && !p->is_null()) {
      f.parameters_json = p->dump(-1, ' ', false, json::error_handler_t::replace);
    }
    OutputConstraintSpec one;
    one.kind = OutputConstraintSpec::Kind::kToolCall;
    one.format = format;
    one.functions.push_back(f);
    if (absl::StatusOr<common::grammar::Grammar> g = common::grammar::CompileOutputConstraint(one);
        !g.ok()) {
      return ParameterSchemaError(i, g.status());
    }
    v1::ToolFunction& pf = *call.add_functions();
    pf.set_name(std::move(f.name));
    pf.set_parameters_schema(std::move(f.parameters_json));
  }
  if (call.functions().empty()) {
    return api::InvalidRequestError("tool_choice", "invalid_value",
                                    "'tool_choice' names no function declared in 'tools'");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<v1::OutputConstraint>> RequestOutputConstraint(
    const api::CompletionRequest& request, ToolCallFormat format) {
  v1::OutputConstraint out;
  out.set_after_reasoning(true);
  const bool chat = request.endpoint == api::Endpoint::kChatCompletions;
  const bool forced = chat && (request.tool_choice == api::ToolChoice::kRequired ||
                               request.tool_choice == api::ToolChoice::kFunction);
  if (forced) {
    const bool named = request.tool_choice == api::ToolChoice::kFunction;
    absl::Status st = FillCalls(request, format, named ? &request.tool_choice_function : nullptr,
                                !named && request.parallel_tool_calls, *out.mutable_tool_call());
    if (!st.ok()) return st;
    return out;
  }
  switch (request.response_format.type) {
    case api::ResponseFormat::Type::kText:
      return std::nullopt;
    case api::ResponseFormat::Type::kJsonObject:
      out.mutable_json_object();
      break;
    case api::ResponseFormat::Type::kJsonSchema:
      // Compiled by the request parser already (router/api/internal/response_format.h).
      out.mutable_json_schema()->set_schema(request.response_format.schema_json);
      out.mutable_json_schema()->set_strict(request.response_format.strict);
      break;
    case api::ResponseFormat::Type::kRegex:
      // Compiled by the request parser already (ParseGuidedDecoding).
      out.set_regex(request.response_format.regex);
      break;
  }
  if (chat && request.tool_choice == api::ToolChoice::kAuto && !request.tools_json.empty() &&
      request.tools_json != "[]") {
    // Structured output with tools the model may call (an agent with an output type): the
    // document, or instead calls, as with OpenAI.
    absl::Status st = FillCalls(request, format, nullptr, request.parallel_tool_calls,
                                *out.mutable_or_tool_call());
    if (!st.ok()) return st;
  }
  return out;
}

}  // namespace deltaserve::router::chat
