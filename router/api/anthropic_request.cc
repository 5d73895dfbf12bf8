#include "router/api/anthropic_request.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grammar/output_constraint.h"
#include "common/str_util.h"
#include "router/api/api_error.h"
#include "router/api/internal/ignored_tools.h"
#include "router/api/internal/json_fields.h"
#include "router/api/internal/reasoning_fields.h"
#include "router/api/internal/response_format.h"
#include "router/api/internal/unserved_fields.h"
#include "router/api/request_parser.h"

namespace deltaserve::router::api {
namespace {

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
// Ordered: tool schemas and inputs reach the chat template in the client's key order.
using json = nlohmann::ordered_json;

constexpr int64_t kMaxTokensLimit = 1 << 30;

ChatMessage Message(std::string role, std::string content = "") {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

// A block's `type` (required string).
absl::Status BlockType(const json& block, const std::string& path, std::string* type) {
  if (!block.is_object()) return TypeError(path, "an object (a content block)", block);
  return RequiredString(block, "type", path + ".type", type);
}

// Appends `text` to `out`, text blocks separated by a newline (as vLLM joins text parts).
void AppendText(std::string* out, const std::string& text) {
  if (!out->empty()) out->push_back('\n');
  out->append(text);
}

// Text of a `system` or tool_result `content`: a string, or text blocks.
absl::Status TextOf(const json& v, const std::string& path, std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return absl::OkStatus();
  }
  if (!v.is_array()) return TypeError(path, "a string or an array of text blocks", v);
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string bpath = absl::StrCat(path, "[", i, "]");
    std::string type;
    DS_RETURN_IF_ERROR(BlockType(v[i], bpath, &type));
    if (type != "text") {
      return Unsupported(bpath + ".type",
                         absl::StrCat("content block type '", type,
                                      "' is not supported here; only 'text' blocks are"));
    }
    std::string text;
    DS_RETURN_IF_ERROR(RequiredString(v[i], "text", bpath + ".text", &text));
    AppendText(out, text);
  }
  return absl::OkStatus();
}

// One user message: text blocks become user messages, tool_result blocks tool messages, in
// block order (consecutive text blocks form one message).
absl::Status UserMessage(const json& content, const std::string& path,
                         std::vector<ChatMessage>* out) {
  if (content.is_string()) {
    out->push_back(Message("user", content.get<std::string>()));
    return absl::OkStatus();
  }
  if (!content.is_array()) return TypeError(path, "a string or an array of content blocks", content);
  std::optional<ChatMessage> text;
  auto flush = [&] {
    if (text) out->push_back(std::move(*text));
    text.reset();
  };
  for (size_t i = 0; i < content.size(); ++i) {
    const json& block = content[i];
    const std::string bpath = absl::StrCat(path, "[", i, "]");
    std::string type;
    DS_RETURN_IF_ERROR(BlockType(block, bpath, &type));
    if (type == "text") {
      std::string t;
      DS_RETURN_IF_ERROR(RequiredString(block, "text", bpath + ".text", &t));
      if (!text) text.emplace(Message("user"));
      AppendText(&text->content, t);
    } else if (type == "tool_result") {
      flush();
      ChatMessage m = Message("tool");
      DS_RETURN_IF_ERROR(RequiredString(block, "tool_use_id", bpath + ".tool_use_id",
                                        &m.tool_call_id));
      if (const json* c = Member(block, "content")) {
        DS_RETURN_IF_ERROR(TextOf(*c, bpath + ".content", &m.content));
      }
      std::optional<bool> is_error;
      DS_RETURN_IF_ERROR(ReadBool(block, "is_error", bpath + ".is_error", &is_error));
      out->push_back(std::move(m));
    } else if (type == "thinking" || type == "redacted_thinking" || type == "tool_use") {
      return InvalidRequestError(bpath + ".type", "invalid_value",
                                 absl::StrCat("a user message cannot hold a '", type, "' block"));
    } else {
      return Unsupported(bpath + ".type",
                         absl::StrCat("content block type '", type,
                                      "' is not supported; text and tool_result blocks are"));
    }
  }
  flush();
  return absl::OkStatus();
}

// One assistant message: text → content, thinking → reasoning_content, tool_use → tool_calls
// in OpenAI's shape ({"id","type":"function","function":{"name","arguments":"<JSON>"}}).
absl::Status AssistantMessage(const json& content, const std::string& path, ChatMessage* m,
                              std::set<std::string>* call_ids) {
  m->role = "assistant";
  if (content.is_string()) {
    m->content = content.get<std::string>();
    return absl::OkStatus();
  }
  if (!content.is_array()) return TypeError(path, "a string or an array of content blocks", content);
  json calls = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& block = content[i];
    const std::string bpath = absl::StrCat(path, "[", i, "]");
    std::string type;
    DS_RETURN_IF_ERROR(BlockType(block, bpath, &type));
    if (type == "text") {
      std::string t;
      DS_RETURN_IF_ERROR(RequiredString(block, "text", bpath + ".text", &t));
      AppendText(&m->content, t);
    } else if (type == "thinking") {
      std::string t;
      DS_RETURN_IF_ERROR(RequiredString(block, "thinking", bpath + ".thinking", &t));
      // Anyone's signature is accepted unchecked; one of ours on a block with no text (sent with
      // thinking.display "omitted") carries the reasoning.
      std::optional<std::string> signature;
      DS_RETURN_IF_ERROR(ReadString(block, "signature", bpath + ".signature", &signature));
      if (t.empty() && signature) {
        if (std::optional<std::string> carried = internal::ReasoningFromSignature(*signature)) {
          t = std::move(*carried);
        }
      }
      AppendText(&m->reasoning_content, t);
    } else if (type == "redacted_thinking") {
      // Encrypted reasoning from another provider: nothing a local model can read.
    } else if (type == "tool_use") {
      std::string id, name;
      DS_RETURN_IF_ERROR(RequiredString(block, "id", bpath + ".id", &id));
      DS_RETURN_IF_ERROR(RequiredString(block, "name", bpath + ".name", &name));
      const json* input = Member(block, "input");
      if (input != nullptr && !input->is_object()) {
        return TypeError(bpath + ".input", "an object", *input);
      }
      call_ids->insert(id);
      json call = json::object();
      call["id"] = std::move(id);
      call["type"] = "function";
      call["function"] = {{"name", std::move(name)},
                          {"arguments", input != nullptr ? Dump(*input) : std::string("{}")}};
      calls.push_back(std::move(call));
    } else if (type == "tool_result") {
      return InvalidRequestError(bpath + ".type", "invalid_value",
                                 "an assistant message cannot hold a 'tool_result' block");
    } else {
      return Unsupported(bpath + ".type",
                         absl::StrCat("content block type '", type,
                                      "' is not supported; text, thinking, redacted_thinking and "
                                      "tool_use blocks are"));
    }
  }
  if (!calls.empty()) {
    m->tool_calls_json = Dump(calls);
    m->content_null = m->content.empty();
  }
  return absl::OkStatus();
}

absl::Status ParseMessages(const json& doc, CompletionRequest* r) {
  if (const json* system = Member(doc, "system")) {
    ChatMessage m = Message("system");
    DS_RETURN_IF_ERROR(TextOf(*system, "system", &m.content));
    r->messages.push_back(std::move(m));
  }
  const json* messages = Member(doc, "messages");
  if (messages == nullptr) return Missing("messages");
  if (!messages->is_array()) return TypeError("messages", "an array", *messages);
  if (messages->empty()) {
    return InvalidRequestError("messages", "invalid_value", "'messages' must not be empty");
  }
  if (messages->size() > kMaxMessages) {
    return LimitError("messages", "max_messages",
                      absl::StrCat("'messages' may hold at most ", kMaxMessages, " messages, got ",
                                   messages->size()));
  }
  std::set<std::string> call_ids;  // of the tool_use blocks so far
  for (size_t k = 0; k < messages->size(); ++k) {
    const json& msg = (*messages)[k];
    const std::string path = absl::StrCat("messages[", k, "]");
    if (!msg.is_object()) return TypeError(path, "an object", msg);
    std::string role;
    DS_RETURN_IF_ERROR(RequiredString(msg, "role", path + ".role", &role));
    const json* content = Member(msg, "content");
    if (content == nullptr) return Missing(path + ".content");
    if (role == "user") {
      const size_t first = r->messages.size();
      DS_RETURN_IF_ERROR(UserMessage(*content, path + ".content", &r->messages));
      // Every tool_result answers a tool_use of an earlier assistant message.
      for (size_t i = first; i < r->messages.size(); ++i) {
        const ChatMessage& m = r->messages[i];
        if (m.role == "tool" && !call_ids.contains(m.tool_call_id)) {
          return InvalidRequestError(
              path + ".content", "invalid_value",
              absl::StrCat("tool_result block for tool_use_id '", m.tool_call_id,
                           "' has no matching tool_use block in an earlier assistant message"));
        }
      }
    } else if (role == "assistant") {
      if (k + 1 == messages->size()) {
        // Anthropic continues a final assistant message ("prefill"); the chat templates close
        // every assistant turn they render, so the continuation cannot be honoured.
        return Unsupported(path, "a final assistant message (prefill) is not supported");
      }
      ChatMessage m;
      DS_RETURN_IF_ERROR(AssistantMessage(*content, path + ".content", &m, &call_ids));
      r->messages.push_back(std::move(m));
    } else {
      return InvalidRequestError(
          path + ".role", "invalid_value",
          absl::StrCat("'", path, ".role' must be \"user\" or \"assistant\", got '", role, "'"));
    }
  }
  return absl::OkStatus();
}

// `tools` → OpenAI function tools; server tools (a `type` other than "custom", such as
// web_search_20250305) are skipped: they run on Anthropic's side.
absl::Status ParseTools(const json& doc, CompletionRequest* r, std::vector<std::string>* names,
                        AnthropicParseNotes* notes) {
  const json* tools = Member(doc, "tools");
  if (tools == nullptr) return absl::OkStatus();
  if (!tools->is_array()) return TypeError("tools", "an array", *tools);
  if (tools->size() > kMaxTools) {
    return LimitError(
        "tools", "max_tools",
        absl::StrCat("'tools' may hold at most ", kMaxTools, " tools, got ", tools->size()));
  }
  json out = json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& tool = (*tools)[i];
    const std::string path = absl::StrCat("tools[", i, "]");
    if (!tool.is_object()) return TypeError(path, "an object", tool);
    std::optional<std::string> type;
    DS_RETURN_IF_ERROR(ReadString(tool, "type", path + ".type", &type));
    if (type && *type != "custom") {
      if (notes != nullptr) internal::NoteIgnoredToolType(*type, &notes->ignored_tool_types);
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
    const json* schema = Member(tool, "input_schema");
    if (schema == nullptr) return Missing(path + ".input_schema");
    if (!schema->is_object()) return TypeError(path + ".input_schema", "an object", *schema);
    std::string schema_text = Dump(*schema);
    if (schema_text.size() > kMaxToolSchemaBytes) {
      return LimitError(path + ".input_schema", "max_tool_schema_bytes",
                        absl::StrCat("'", path, ".input_schema' is ", schema_text.size(),
                                     " bytes as JSON, more than ", kMaxToolSchemaBytes));
    }
    json function = json::object();
    function["name"] = name;
    if (description) function["description"] = std::move(*description);
    function["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
    names->push_back(std::move(name));
  }
  if (!out.empty()) r->tools_json = Dump(out);
  return absl::OkStatus();
}

// tool_choice {type: auto | any | tool (+ name) | none, disable_parallel_tool_use?}.
absl::Status ParseToolChoice(const json& doc, const std::vector<std::string>& names,
                             CompletionRequest* r) {
  const json* choice = Member(doc, "tool_choice");
  if (choice == nullptr) return absl::OkStatus();
  if (!choice->is_object()) return TypeError("tool_choice", "an object", *choice);
  std::string type;
  DS_RETURN_IF_ERROR(RequiredString(*choice, "type", "tool_choice.type", &type));
  std::optional<bool> no_parallel;
  DS_RETURN_IF_ERROR(ReadBool(*choice, "disable_parallel_tool_use",
                              "tool_choice.disable_parallel_tool_use", &no_parallel));
  r->parallel_tool_calls = !no_parallel.value_or(false);
  if (type == "auto") {
    r->tool_choice = ToolChoice::kAuto;
  } else if (type == "none") {
    r->tool_choice = ToolChoice::kNone;
  } else if (type == "any") {
    if (names.empty()) {
      return InvalidRequestError("tool_choice", "invalid_value",
                                 "tool_choice 'any' needs at least one tool in 'tools'");
    }
    r->tool_choice = ToolChoice::kRequired;
  } else if (type == "tool") {
    std::string name;
    DS_RETURN_IF_ERROR(RequiredString(*choice, "name", "tool_choice.name", &name));
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return InvalidRequestError(
          "tool_choice.name", "invalid_value",
          absl::StrCat("tool_choice names the tool '", name, "', which 'tools' does not declare"));
    }
    r->tool_choice = ToolChoice::kFunction;
    r->tool_choice_function = std::move(name);
  } else {
    return InvalidRequestError(
        "tool_choice.type", "invalid_value",
        absl::StrCat("'tool_choice.type' must be auto, any, tool or none, got '", type, "'"));
  }
  // Kept for the chat template in OpenAI's words.
  r->tool_choice_json = Dump(r->tool_choice == ToolChoice::kFunction
                                 ? json{{"type", "function"}, {"function", {{"name", r->tool_choice_function}}}}
                                 : json(r->tool_choice == ToolChoice::kRequired ? "required"
                                        : r->tool_choice == ToolChoice::kNone   ? "none"
                                                                                : "auto"));
  return absl::OkStatus();
}

// thinking {type: enabled, budget_tokens} | {type: disabled} | {type: adaptive | between_tools}
// (thinking on, no budget); `display` summarized (thinking returned as it is) or omitted.
absl::Status ParseThinking(const json& doc, CompletionRequest* r, AnthropicParseNotes* notes) {
  const json* thinking = Member(doc, "thinking");
  if (thinking == nullptr) return absl::OkStatus();
  if (!thinking->is_object()) return TypeError("thinking", "an object", *thinking);
  std::string type;
  DS_RETURN_IF_ERROR(RequiredString(*thinking, "type", "thinking.type", &type));
  std::optional<std::string> display;
  DS_RETURN_IF_ERROR(ReadString(*thinking, "display", "thinking.display", &display));
  bool omitted = false;
  if (display) DS_RETURN_IF_ERROR(internal::ReadThinkingDisplay(*display, &omitted));
  if (notes != nullptr) notes->thinking_omitted = omitted;
  if (type == "disabled") {
    r->enable_thinking = false;
    return absl::OkStatus();
  }
  if (type != "enabled" && type != "adaptive" && type != "between_tools") {
    return InvalidRequestError(
        "thinking.type", "invalid_value",
        absl::StrCat("'thinking.type' must be enabled, disabled, adaptive or between_tools, got '",
                     type, "'"));
  }
  r->enable_thinking = true;
  std::optional<int64_t> budget;
  DS_RETURN_IF_ERROR(
      ReadInt(*thinking, "budget_tokens", "thinking.budget_tokens", 0, INT32_MAX, &budget));
  if (type == "enabled" && !budget) return Missing("thinking.budget_tokens");
  if (budget) r->thinking_budget = static_cast<int32_t>(*budget);
  return absl::OkStatus();
}

absl::Status ParseStopSequences(const json& doc, CompletionRequest* r) {
  const json* stops = Member(doc, "stop_sequences");
  if (stops == nullptr) return absl::OkStatus();
  if (!stops->is_array()) return TypeError("stop_sequences", "an array of strings", *stops);
  if (stops->size() > kMaxStopSequences) {
    return LimitError("stop_sequences", "max_stop_sequences",
                      absl::StrCat("'stop_sequences' may hold at most ", kMaxStopSequences,
                                   " strings, got ", stops->size()));
  }
  for (size_t i = 0; i < stops->size(); ++i) {
    const json& v = (*stops)[i];
    const std::string path = absl::StrCat("stop_sequences[", i, "]");
    if (!v.is_string()) return TypeError(path, "a string", v);
    const std::string& s = v.get_ref<const std::string&>();
    if (s.empty()) {
      return InvalidRequestError(path, "invalid_value", "stop sequences must not be empty");
    }
    if (s.size() > kMaxStopBytes) {
      return LimitError(path, "max_stop_bytes",
                        absl::StrCat("'", path, "' is longer than ", kMaxStopBytes, " bytes"));
    }
    r->stop.push_back(s);
  }
  return absl::OkStatus();
}

// output_config.format (or the beta's top-level output_format): {type: json_schema, schema} →
// response_format json_schema, enforced by the structured-outputs engine. output_config.effort
// is read into `effort`: the caller applies it (internal::ApplyAnthropicEffort) once the
// explicit thinking budget has been checked against max_tokens.
absl::Status ParseOutputConfig(const json& doc, CompletionRequest* r,
                               std::optional<std::string>* effort) {
  std::string path = "output_config.format";
  const json* format = nullptr;
  if (const json* config = Member(doc, "output_config")) {
    if (!config->is_object()) return TypeError("output_config", "an object", *config);
    DS_RETURN_IF_ERROR(ReadString(*config, "effort", "output_config.effort", effort));
    format = Member(*config, "format");
  }
  if (format == nullptr) {
    format = Member(doc, "output_format");
    path = "output_format";
  }
  if (format == nullptr) return absl::OkStatus();
  if (!format->is_object()) return TypeError(path, "an object", *format);
  std::string type;
  DS_RETURN_IF_ERROR(RequiredString(*format, "type", path + ".type", &type));
  if (type != "json_schema") {
    return InvalidRequestError(path + ".type", "invalid_value",
                               absl::StrCat("'", path, ".type' must be json_schema, got '", type,
                                            "'"));
  }
  const json* schema = Member(*format, "schema");
  if (schema == nullptr) return Missing(path + ".schema");
  if (!schema->is_object()) return TypeError(path + ".schema", "an object", *schema);
  // The chat parser's reader of the same thing, so limits and schema refusals are the same.
  json wrapped = json::object();
  wrapped["response_format"] = {{"type", "json_schema"},
                                {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
  absl::Status s = internal::ParseResponseFormat(wrapped, &r->response_format);
  if (!s.ok()) {
    const std::string code = ErrorCode(s).empty() ? "invalid_value" : ErrorCode(s);
    return InvalidRequestError(path + ".schema", code, std::string(s.message()));
  }
  if (r->tool_choice == ToolChoice::kRequired || r->tool_choice == ToolChoice::kFunction) {
    return InvalidRequestError(path, "invalid_value",
                               "a structured output format cannot be combined with a tool_choice "
                               "that forces a tool call");
  }
  return absl::OkStatus();
}

// What both endpoints read: model, system, messages, tools, tool_choice, thinking,
// output_config (its effort into `effort`), the fields of Anthropic-side services.
absl::StatusOr<json> ParseShared(std::string_view body, CompletionRequest* r,
                                 AnthropicParseNotes* notes, std::optional<std::string>* effort) {
  absl::StatusOr<json> doc = internal::ParseJsonObject(body, RequestJsonLimits(body.size()));
  if (!doc.ok()) return doc.status();
  r->endpoint = Endpoint::kChatCompletions;
  r->api = Api::kAnthropic;
  std::optional<std::string> model;
  DS_RETURN_IF_ERROR(ReadString(*doc, "model", "model", &model));
  if (!model || model->empty()) return Missing("model");
  r->model = std::move(*model);
  DS_RETURN_IF_ERROR(ParseMessages(*doc, r));
  std::vector<std::string> names;
  DS_RETURN_IF_ERROR(ParseTools(*doc, r, &names, notes));
  DS_RETURN_IF_ERROR(ParseToolChoice(*doc, names, r));
  DS_RETURN_IF_ERROR(ParseThinking(*doc, r, notes));
  DS_RETURN_IF_ERROR(ParseOutputConfig(*doc, r, effort));
  DS_RETURN_IF_ERROR(internal::CheckAnthropicUnservedFields(*doc));
  return doc;
}

}  // namespace

absl::StatusOr<CompletionRequest> ParseAnthropicMessagesRequest(std::string_view body,
                                                                AnthropicParseNotes* notes) {
  CompletionRequest r;
  std::optional<std::string> effort;
  absl::StatusOr<json> doc = ParseShared(body, &r, notes, &effort);
  if (!doc.ok()) return doc.status();
  std::optional<int64_t> max_tokens;
  DS_RETURN_IF_ERROR(ReadInt(*doc, "max_tokens", "max_tokens", 1, kMaxTokensLimit, &max_tokens));
  if (!max_tokens) return Missing("max_tokens");
  r.max_tokens = static_cast<int32_t>(*max_tokens);
  if (r.thinking_budget && *r.thinking_budget >= *r.max_tokens) {
    return InvalidRequestError("thinking.budget_tokens", "invalid_value",
                               "'thinking.budget_tokens' must be less than 'max_tokens'");
  }
  if (effort) DS_RETURN_IF_ERROR(internal::ApplyAnthropicEffort(*effort, &r));
  // Anthropic's ranges: temperature [0, 1], top_p [0, 1], top_k >= 0 (0: off).
  SamplingParams& p = r.sampling;
  DS_RETURN_IF_ERROR(ReadNumber(*doc, "temperature", "temperature", 0, 1, false, &p.temperature));
  DS_RETURN_IF_ERROR(ReadNumber(*doc, "top_p", "top_p", 0, 1, true, &p.top_p));
  std::optional<int64_t> top_k;
  DS_RETURN_IF_ERROR(ReadInt(*doc, "top_k", "top_k", 0, INT32_MAX, &top_k));
  if (top_k) p.top_k = static_cast<int32_t>(*top_k);
  DS_RETURN_IF_ERROR(ParseStopSequences(*doc, &r));
  std::optional<bool> stream;
  DS_RETURN_IF_ERROR(ReadBool(*doc, "stream", "stream", &stream));
  r.stream = stream.value_or(false);
  if (const json* metadata = Member(*doc, "metadata")) {
    if (!metadata->is_object()) return TypeError("metadata", "an object", *metadata);
    std::optional<std::string> user;
    DS_RETURN_IF_ERROR(ReadString(*metadata, "user_id", "metadata.user_id", &user));
    if (user) r.user = std::move(*user);
  }
  return r;
}

absl::StatusOr<CompletionRequest> ParseAnthropicCountTokensRequest(std::string_view body) {
  CompletionRequest r;
  std::optional<std::string> effort;
  absl::StatusOr<json> doc = ParseShared(body, &r, nullptr, &effort);
  if (!doc.ok()) return doc.status();
  // The budget does not change the prompt; a bad effort is still the 400 a message would get.
  if (effort) DS_RETURN_IF_ERROR(internal::ApplyAnthropicEffort(*effort, &r));
  return r;
}

}  // namespace deltaserve::router::api
