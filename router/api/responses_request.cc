#include "router/api/responses_request.h"

#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/grammar/output_constraint.h"
#include "common/str_util.h"
#include "router/api/api_error.h"
#include "router/api/internal/ignored_tools.h"
#include "router/api/internal/json_fields.h"
#include "router/api/internal/reasoning_fields.h"
#include "router/api/internal/response_format.h"
#include "router/api/internal/responses_input.h"
#include "router/api/internal/unserved_fields.h"
#include "router/api/request_parser.h"

namespace deltaserve::router::api {
namespace {

using common::Sv;
using internal::Dump;
using internal::LimitError;
using internal::Member;
using internal::Missing;
using internal::ReadBool;
using internal::ReadInt;
using internal::ReadNumber;
using internal::ReadString;
using internal::RequiredString;
using internal::TypeError;
using internal::Unsupported;
// Ordered: tools and tool calls are re-serialized for the chat template, which must see the
// client's key order.
using json = nlohmann::ordered_json;

constexpr int64_t kMaxOutputTokensLimit = 1 << 30;

// Function tools into chat's shape (the rest ignored and named); the echo keeps the Responses
// shape.
absl::Status ParseTools(const json& doc, ResponsesRequest* r, json* function_tools,
                        std::set<std::string>* names, json* echo) {
  const json* tools = Member(doc, "tools");
  *echo = json::array();
  if (tools != nullptr) {
    if (!tools->is_array()) return TypeError("tools", "an array", *tools);
    if (tools->size() > kMaxTools) {
      return LimitError(
          "tools", "max_tools",
          absl::StrCat("'tools' may hold at most ", kMaxTools, " tools, got ", tools->size()));
    }
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& tool = (*tools)[i];
      const std::string path = absl::StrCat("tools[", i, "]");
      if (!tool.is_object()) return TypeError(path, "an object (a tool)", tool);
      std::string type;
      DS_RETURN_IF_ERROR(RequiredString(tool, "type", path + ".type", &type));
      if (type != "function") {
        internal::NoteIgnoredToolType(type, &r->ignored_tool_types);
        continue;
      }
      std::string name;
      DS_RETURN_IF_ERROR(RequiredString(tool, "name", path + ".name", &name));
      if (!common::grammar::IsValidFunctionName(name)) {
        return InvalidRequestError(
            path + ".name", "invalid_value",
            absl::StrCat("'", path, ".name' must match ^[a-zA-Z0-9_-]{1,64}$, got '", name, "'"));
      }
      std::optional<std::string> description;
      DS_RETURN_IF_ERROR(ReadString(tool, "description", path + ".description", &description));
      std::optional<bool> strict;
      DS_RETURN_IF_ERROR(ReadBool(tool, "strict", path + ".strict", &strict));
      json function = json::object();
      function["name"] = name;
      if (description) function["description"] = *description;
      if (const json* params = Member(tool, "parameters")) {
        if (!params->is_object()) {
          return TypeError(path + ".parameters", "an object (a JSON Schema)", *params);
        }
        const size_t bytes = Dump(*params).size();
        if (bytes > kMaxToolSchemaBytes) {
          return LimitError(path + ".parameters", "max_tool_schema_bytes",
                            absl::StrCat("'", path, ".parameters' is ", bytes,
                                         " bytes as JSON, more than ", kMaxToolSchemaBytes));
        }
        function["parameters"] = *params;
      }
      if (strict) function["strict"] = *strict;
      json e = json::object();
      e["type"] = "function";
      e["name"] = name;
      e["description"] = description ? json(*description) : json(nullptr);
      e["parameters"] = function.contains("parameters") ? function["parameters"] : json(nullptr);
      e["strict"] = strict ? json(*strict) : json(nullptr);
      echo->push_back(std::move(e));
      names->insert(name);
      function_tools->push_back(json{{"type", "function"}, {"function", std::move(function)}});
    }
  }
  return absl::OkStatus();
}

absl::Status ParseToolChoice(const json& doc, const std::set<std::string>& names,
                             ResponsesRequest* r) {
  CompletionRequest& c = r->completion;
  const json* choice = Member(doc, "tool_choice");
  if (choice == nullptr) {
    r->echo["tool_choice"] = "auto";
    return absl::OkStatus();
  }
  if (choice->is_string()) {
    const std::string& s = choice->get_ref<const std::string&>();
    if (s == "auto" || s == "none") {
      c.tool_choice = s == "none" ? ToolChoice::kNone : ToolChoice::kAuto;
    } else if (s == "required") {
      if (names.empty()) {
        return InvalidRequestError("tool_choice", "invalid_value",
                                   "'tool_choice' \"required\" needs at least one function tool "
                                   "in 'tools' (other tool types are ignored)");
      }
      c.tool_choice = ToolChoice::kRequired;
    } else {
      return InvalidRequestError(
          "tool_choice", "invalid_value",
          absl::StrCat("'tool_choice' must be \"none\", \"auto\", \"required\" or "
                       "{\"type\":\"function\",\"name\":...}, got '",
                       s, "'"));
    }
    c.tool_choice_json = Dump(*choice);
    r->echo["tool_choice"] = s;
    return absl::OkStatus();
  }
  if (!choice->is_object()) return TypeError("tool_choice", "a string or an object", *choice);
  std::string type;
  DS_RETURN_IF_ERROR(RequiredString(*choice, "type", "tool_choice.type", &type));
  if (type != "function") {
    return Unsupported("tool_choice.type",
                       absl::StrCat("'tool_choice' of type '", type,
                                    "' is not supported; only function tools can be forced"));
  }
  std::string name;
  DS_RETURN_IF_ERROR(RequiredString(*choice, "name", "tool_choice.name", &name));
  if (!names.contains(name)) {
    return InvalidRequestError("tool_choice.name", "invalid_value",
                               absl::StrCat("'tool_choice' names the function '", name,
                                            "', which 'tools' does not declare"));
  }
  c.tool_choice = ToolChoice::kFunction;
  c.tool_choice_function = name;
  c.tool_choice_json = Dump(json{{"type", "function"}, {"function", json{{"name", name}}}});
  r->echo["tool_choice"] = json{{"type", "function"}, {"name", name}};
  return absl::OkStatus();
}

// A status from the chat response_format reader, with its paths in the Responses body.
absl::Status AsTextFormatError(const absl::Status& status) {
  const std::vector<std::pair<absl::string_view, absl::string_view>> paths = {
      {"response_format.json_schema", "text.format"}, {"response_format", "text.format"}};
  return InvalidRequestError(absl::StrReplaceAll(ErrorParam(status), paths), ErrorCode(status),
                             absl::StrReplaceAll(status.message(), paths));
}

// text.format: {"type":"text"}, {"type":"json_object"} or {"type":"json_schema","name",
// "schema","strict"?,"description"?}, compiled by the structured-outputs engine;
// text.verbosity: only the default, "medium" (internal/reasoning_fields.h).
absl::Status ParseText(const json& doc, ResponsesRequest* r) {
  json echo_format = json{{"type", "text"}};
  std::optional<std::string> verbosity;
  const json* text = Member(doc, "text");
  if (text != nullptr) {
    if (!text->is_object()) return TypeError("text", "an object", *text);
    DS_RETURN_IF_ERROR(ReadString(*text, "verbosity", "text.verbosity", &verbosity));
    if (verbosity) DS_RETURN_IF_ERROR(internal::CheckVerbosity(*verbosity, "text.verbosity"));
    if (const json* format = Member(*text, "format")) {
      if (!format->is_object()) return TypeError("text.format", "an object", *format);
      std::string type;
      DS_RETURN_IF_ERROR(RequiredString(*format, "type", "text.format.type", &type));
      json rf = json::object();
      rf["type"] = type;
      if (type == "json_schema") {
        json js = json::object();
        for (const char* key : {"name", "description", "schema", "strict"}) {
          if (const json* v = Member(*format, key)) js[key] = *v;
        }
        rf["json_schema"] = std::move(js);
      }
      json wrapper = json::object();
      wrapper["response_format"] = std::move(rf);
      if (absl::Status s = internal::ParseResponseFormat(wrapper, &r->completion.response_format);
          !s.ok()) {
        return AsTextFormatError(s);
      }
      echo_format = *format;
    }
  }
  r->echo["text"] = json{{"format", std::move(echo_format)}};
  if (verbosity) r->echo["text"]["verbosity"] = *verbosity;
  return absl::OkStatus();
}

// reasoning.effort → chat_template_kwargs.enable_thinking and thinking_budget; reasoning.summary
// and generate_summary: "auto" or "none" (no summarizer here), internal/reasoning_fields.h.
absl::Status ParseReasoning(const json& doc, ResponsesRequest* r) {
  json echo = json{{"effort", nullptr}, {"summary", nullptr}};
  if (const json* reasoning = Member(doc, "reasoning")) {
    if (!reasoning->is_object()) return TypeError("reasoning", "an object", *reasoning);
    std::optional<std::string> effort, summary, generate_summary;
    DS_RETURN_IF_ERROR(ReadString(*reasoning, "effort", "reasoning.effort", &effort));
    DS_RETURN_IF_ERROR(ReadString(*reasoning, "summary", "reasoning.summary", &summary));
    DS_RETURN_IF_ERROR(ReadString(*reasoning, "generate_summary", "reasoning.generate_summary",
                                  &generate_summary));
    CompletionRequest& c = r->completion;
    if (effort) {
      DS_RETURN_IF_ERROR(internal::ApplyOpenAiEffort(*effort, "reasoning.effort", &c));
      c.chat_template_kwargs_json = Dump(json{{"enable_thinking", *c.enable_thinking}});
      echo["effort"] = *effort;
    }
    if (summary) DS_RETURN_IF_ERROR(internal::CheckReasoningSummary(*summary, "reasoning.summary"));
    if (generate_summary) {
      DS_RETURN_IF_ERROR(
          internal::CheckReasoningSummary(*generate_summary, "reasoning.generate_summary"));
    }
    if (summary || generate_summary) echo["summary"] = summary ? *summary : *generate_summary;
  }
  r->echo["reasoning"] = std::move(echo);
  return absl::OkStatus();
}

// Fields that need state DeltaServe does not keep.
absl::Status RefuseStatefulFields(const json& doc) {
  for (const char* field : {"previous_response_id", "conversation", "prompt"}) {
    if (Member(doc, field) != nullptr) {
      return Unsupported(
          field, absl::StrCat("'", field,
                              "' needs responses or prompts stored on the server; DeltaServe's "
                              "Responses API is stateless (nothing is stored): send the whole "
                              "conversation in 'input' instead"));
    }
  }
  std::optional<bool> background;
  DS_RETURN_IF_ERROR(ReadBool(doc, "background", "background", &background));
  if (background.value_or(false)) {
    return Unsupported("background",
                       "'background' responses are not supported (nothing is "
                       "stored to poll); leave it false");
  }
  return absl::OkStatus();
}

absl::Status ParseMetadata(const json& doc, ResponsesRequest* r) {
  const json* metadata = Member(doc, "metadata");
  if (metadata == nullptr) {
    r->echo["metadata"] = json::object();
    return absl::OkStatus();
  }
  if (!metadata->is_object()) return TypeError("metadata", "an object", *metadata);
  for (auto it = metadata->begin(); it != metadata->end(); ++it) {
    if (!it.value().is_string()) {
      return TypeError(absl::StrCat("metadata.", it.key()), "a string", it.value());
    }
  }
  r->echo["metadata"] = *metadata;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body) {
  absl::StatusOr<json> doc = internal::ParseJsonObject(body, RequestJsonLimits(body.size()));
  if (!doc.ok()) return doc.status();
  ResponsesRequest r;
  CompletionRequest& c = r.completion;
  c.endpoint = Endpoint::kChatCompletions;
  c.api = Api::kResponses;

  std::optional<std::string> model;
  DS_RETURN_IF_ERROR(ReadString(*doc, "model", "model", &model));
  if (!model || model->empty()) return Missing("model");
  c.model = std::move(*model);
  DS_RETURN_IF_ERROR(RefuseStatefulFields(*doc));

  std::optional<std::string> instructions;
  DS_RETURN_IF_ERROR(ReadString(*doc, "instructions", "instructions", &instructions));
  if (instructions) {
    ChatMessage system;
    system.role = "system";
    system.content = *instructions;
    c.messages.push_back(std::move(system));
  }
  DS_RETURN_IF_ERROR(internal::ParseResponsesInput(*doc, &c.messages));
  if (c.messages.empty()) {
    return InvalidRequestError("input", "invalid_value",
                               "'input' must not be empty (there is no conversation)");
  }
  if (c.messages.size() > kMaxMessages) {
    return LimitError("input", "max_messages",
                      absl::StrCat("the conversation may hold at most ", kMaxMessages,
                                   " messages, got ", c.messages.size()));
  }

  std::optional<int64_t> max_output;
  DS_RETURN_IF_ERROR(ReadInt(*doc, "max_output_tokens", "max_output_tokens", 1,
                             kMaxOutputTokensLimit, &max_output));
  if (max_output) c.max_tokens = static_cast<int32_t>(*max_output);
  DS_RETURN_IF_ERROR(
      ReadNumber(*doc, "temperature", "temperature", 0, 2, false, &c.sampling.temperature));
  DS_RETURN_IF_ERROR(ReadNumber(*doc, "top_p", "top_p", 0, 1, true, &c.sampling.top_p));
  std::optional<int64_t> top_logprobs;
  DS_RETURN_IF_ERROR(ReadInt(*doc, "top_logprobs", "top_logprobs", 0, 20, &top_logprobs));
  if (top_logprobs.value_or(0) > 0) {
    // Not returned by this endpoint: refused rather than answered without them.
    return Unsupported("top_logprobs",
                       "log-probabilities are not returned by /v1/responses (use "
                       "/v1/chat/completions with logprobs); top_logprobs must be 0");
  }

  std::optional<bool> b;
  DS_RETURN_IF_ERROR(ReadBool(*doc, "stream", "stream", &b));
  c.stream = b.value_or(false);
  if (const json* so = Member(*doc, "stream_options"); so != nullptr && !so->is_object()) {
    return TypeError("stream_options", "an object", *so);
  }
  b.reset();
  DS_RETURN_IF_ERROR(ReadBool(*doc, "store", "store", &b));  // accepted; nothing is stored
  b.reset();
  DS_RETURN_IF_ERROR(ReadBool(*doc, "parallel_tool_calls", "parallel_tool_calls", &b));
  c.parallel_tool_calls = b.value_or(true);
  std::optional<std::string> user;
  DS_RETURN_IF_ERROR(ReadString(*doc, "user", "user", &user));
  if (user) c.user = *user;
  DS_RETURN_IF_ERROR(internal::ReadSafetyIdentifier(*doc, &c));
  DS_RETURN_IF_ERROR(internal::CheckOpenAiServiceTier(*doc));
  if (const json* include = Member(*doc, "include")) {
    if (!include->is_array()) return TypeError("include", "an array of strings", *include);
    for (size_t i = 0; i < include->size(); ++i) {
      if (!(*include)[i].is_string()) {
        return TypeError(absl::StrCat("include[", i, "]"), "a string", (*include)[i]);
      }
      // Other values name outputs of tools and stores this stateless endpoint never has
      // (Codex sends reasoning.encrypted_content); logprobs would be silently missing.
      if ((*include)[i].get_ref<const std::string&>() == "message.output_text.logprobs") {
        return Unsupported(absl::StrCat("include[", i, "]"),
                           "log-probabilities are not returned by /v1/responses (use "
                           "/v1/chat/completions with logprobs)");
      }
    }
  }
  std::optional<std::string> truncation;
  DS_RETURN_IF_ERROR(ReadString(*doc, "truncation", "truncation", &truncation));
  if (truncation && *truncation != "auto" && *truncation != "disabled") {
    return InvalidRequestError(
        "truncation", "invalid_value",
        absl::StrCat("'truncation' must be \"auto\" or \"disabled\", got '", *truncation, "'"));
  }

  json function_tools = json::array();
  std::set<std::string> names;
  r.echo["instructions"] = instructions ? json(*instructions) : json(nullptr);
  r.echo["max_output_tokens"] = max_output ? json(*max_output) : json(nullptr);
  DS_RETURN_IF_ERROR(ParseMetadata(*doc, &r));
  r.echo["parallel_tool_calls"] = c.parallel_tool_calls;
  r.echo["previous_response_id"] = nullptr;
  DS_RETURN_IF_ERROR(ParseReasoning(*doc, &r));
  r.echo["store"] = false;  // stateless: nothing was stored, whatever `store` asked
  r.echo["temperature"] = c.sampling.temperature ? json(*c.sampling.temperature) : json(nullptr);
  DS_RETURN_IF_ERROR(ParseText(*doc, &r));
  // tools before tool_choice, which must name one of them; the echo keeps OpenAI's key order.
  json tools_echo;
  DS_RETURN_IF_ERROR(ParseTools(*doc, &r, &function_tools, &names, &tools_echo));
  DS_RETURN_IF_ERROR(ParseToolChoice(*doc, names, &r));
  r.echo["tools"] = std::move(tools_echo);
  r.echo["top_p"] = c.sampling.top_p ? json(*c.sampling.top_p) : json(nullptr);
  r.echo["truncation"] = truncation.value_or("disabled");
  r.echo["user"] = user ? json(*user) : json(nullptr);
  if (!function_tools.empty()) c.tools_json = Dump(function_tools);

  if ((c.tool_choice == ToolChoice::kRequired || c.tool_choice == ToolChoice::kFunction) &&
      c.response_format.type != ResponseFormat::Type::kText) {
    return InvalidRequestError("text.format", "invalid_value",
                               "'text.format' cannot be combined with a 'tool_choice' that forces "
                               "a function call");
  }
  return r;
}

std::string IgnoredToolsWarning(const std::vector<std::string>& ignored_tool_types) {
  if (ignored_tool_types.empty()) return "";
  return absl::StrCat("tools of type ", absl::StrJoin(ignored_tool_types, ", "),
                      " are not supported by DeltaServe and were ignored; only function tools "
                      "reach the model");
}

}  // namespace deltaserve::router::api
