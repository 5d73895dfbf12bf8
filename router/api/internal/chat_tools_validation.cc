#include "router/api/internal/chat_tools_validation.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/grammar/output_constraint.h"
#include "router/api/api_error.h"
#include "router/api/internal/json_fields.h"
#include "router/api/request_parser.h"

namespace deltaserve::router::api::internal {
namespace {

using json = nlohmann::ordered_json;

absl::Status Missing(const std::string& path, std::string_view what) {
  return InvalidRequestError(path, "missing_required_parameter",
                             absl::StrCat("'", path, "' is required (", std::string(what), ")"));
}

}  // namespace

absl::Status ValidateTools(const json* tools) {
  if (tools == nullptr) return absl::OkStatus();
  if (!tools->is_array()) return TypeError("tools", "an array", *tools);
  if (tools->size() > kMaxTools) {
    return LimitError(
        "tools", "max_tools",
        absl::StrCat("'tools' may hold at most ", kMaxTools, " tools, got ", tools->size()));
  }
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& tool = (*tools)[i];
    const std::string path = absl::StrCat("tools[", i, "]");
    if (!tool.is_object()) return TypeError(path, "an object", tool);
    const json* type = Member(tool, "type");
    if (type == nullptr) return Missing(path + ".type", "\"function\"");
    if (!type->is_string() || type->get<std::string>() != "function") {
      return InvalidRequestError(
          path + ".type", "invalid_value",
          absl::StrCat("'", path, ".type' must be \"function\", got ",
                       type->dump(-1, ' ', false, json::error_handler_t::replace)));
    }
    const json* function = Member(tool, "function");
    if (function == nullptr) return Missing(path + ".function", "an object with a name");
    if (!function->is_object()) return TypeError(path + ".function", "an object", *function);
    const json* name = Member(*function, "name");
    if (name == nullptr) return Missing(path + ".function.name", "the function's name");
    if (!name->is_string()) return TypeError(path + ".function.name", "a string", *name);
    if (!common::grammar::IsValidFunctionName(name->get<std::string>())) {
      return InvalidRequestError(
          path + ".function.name", "invalid_value",
          absl::StrCat("'", path, ".function.name' must match ^[a-zA-Z0-9_-]{1,64}$, got '",
                       name->get<std::string>(), "'"));
    }
    if (const json* params = Member(*function, "parameters"); params != nullptr) {
      if (!params->is_object()) {
        return TypeError(path + ".function.parameters", "an object (a JSON Schema)", *params);
      }
      // The schema is rendered into every prompt and may be compiled into a grammar; its size
      // as compact JSON bounds that work.
      const size_t bytes = params->dump(-1, ' ', false, json::error_handler_t::replace).size();
      if (bytes > kMaxToolSchemaBytes) {
        return LimitError(path + ".function.parameters", "max_tool_schema_bytes",
                          absl::StrCat("'", path, ".function.parameters' is ", bytes,
                                       " bytes as JSON, more than ", kMaxToolSchemaBytes));
      }
    }
    if (const json* d = Member(*function, "description"); d != nullptr && !d->is_string()) {
      return TypeError(path + ".function.description", "a string", *d);
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateToolChoice(const json* choice, const json* tools, CompletionRequest* out) {
  if (choice == nullptr) return absl::OkStatus();
  const bool has_tools = tools != nullptr && tools->is_array() && !tools->empty();
  if (choice->is_string()) {
    const std::string& s = choice->get_ref<const std::string&>();
    if (s == "none" || s == "auto") {
      out->tool_choice = s == "none" ? ToolChoice::kNone : ToolChoice::kAuto;
      return absl::OkStatus();
    }
    if (s == "required") {
      if (!has_tools) {
        return InvalidRequestError("tool_choice", "invalid_value",
                                   "'tool_choice' \"required\" needs at least one tool in 'tools'");
      }
      out->tool_choice = ToolChoice::kRequired;
      return absl::OkStatus();
    }
    return InvalidRequestError("tool_choice", "invalid_value",
                               absl::StrCat("'tool_choice' must be \"none\", \"auto\", "
                                            "\"required\" or a function object, got '",
                                            s, "'"));
  }
  if (!choice->is_object()) return TypeError("tool_choice", "a string or an object", *choice);
  const json* type = Member(*choice, "type");
  if (type == nullptr || !type->is_string() || type->get<std::string>() != "function") {
    return InvalidRequestError("tool_choice.type", "invalid_value",
                               "'tool_choice.type' must be \"function\"");
  }
  const json* function = Member(*choice, "function");
  const json* name =
      function != nullptr && function->is_object() ? Member(*function, "name") : nullptr;
  if (name == nullptr || !name->is_string()) {
    return InvalidRequestError("tool_choice.function.name", "missing_required_parameter",
                               "'tool_choice.function.name' is required (a string)");
  }
  const std::string& wanted = name->get_ref<const std::string&>();
  if (has_tools) {
    for (const json& tool : *tools) {
      const json* f = Member(tool, "function");
      const json* n = f != nullptr ? Member(*f, "name") : nullptr;
      if (n != nullptr && n->is_string() && n->get_ref<const std::string&>() == wanted) {
        out->tool_choice = ToolChoice::kFunction;
        out->tool_choice_function = wanted;
        return absl::OkStatus();
      }
    }
  }
  return InvalidRequestError("tool_choice.function.name", "invalid_value",
                             absl::StrCat("'tool_choice' names the function '", wanted,
                                          "', which 'tools' does not declare"));
}

absl::Status ValidateToolMessages(const json& messages, const CompletionRequest& request) {
  std::set<std::string, std::less<>> call_ids;
  for (size_t i = 0; i < request.messages.size() && i < messages.size(); ++i) {
    const ChatMessage& m = request.messages[i];
    if (m.role == "assistant" && !m.tool_calls_json.empty()) {
      // The calls as read from the body: re-parsing tool_calls_json with nlohmann's ordered_json
      // parse would search each object's keys per key (quadratic in a wide object).
      const json* calls = Member(messages[i], "tool_calls");
      if (calls == nullptr || !calls->is_array()) continue;
      for (const json& call : *calls) {
        const json* id = call.is_object() ? Member(call, "id") : nullptr;
        if (id != nullptr && id->is_string()) call_ids.insert(id->get<std::string>());
      }
    } else if (m.role == "tool" && !call_ids.contains(m.tool_call_id)) {
      return InvalidRequestError(
          absl::StrCat("messages[", i, "].tool_call_id"), "invalid_value",
          absl::StrCat("'messages[", i, "].tool_call_id' is '", m.tool_call_id,
                       "', which matches no tool call of an earlier assistant message"));
    }
  }
  return absl::OkStatus();
}

}  // namespace deltaserve::router::api::internal
