#include "router/chat/chat_template_context.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/json_reader.h"

namespace deltaserve::router::chat {
namespace {

using json = nlohmann::ordered_json;

// Request JSON the parser has checked, read again in time linear in its size: nlohmann's
// ordered_json parse searches an object's keys per key (common/json_reader.h, issue 17).
// Discarded when not JSON.
json ReadJson(const std::string& text) {
  absl::StatusOr<json> v = common::ReadOrderedJson(text, common::kNoJsonReadLimits);
  return v.ok() ? *std::move(v) : json(json::value_t::discarded);
}

// OpenAI sends tool-call arguments as a JSON string; the templates (Qwen3.5's `|items`) expect
// the object transformers users pass (../shared/fixtures/templates/README.md).
json ConvertToolCalls(const std::string& tool_calls_json) {
  json calls = ReadJson(tool_calls_json);
  if (!calls.is_array()) return json::array();
  for (json& call : calls) {
    if (!call.is_object()) continue;
    auto function = call.find("function");
    if (function == call.end() || !function->is_object()) continue;
    auto arguments = function->find("arguments");
    if (arguments == function->end() || !arguments->is_string()) continue;
    json parsed = ReadJson(arguments->get<std::string>());
    if (parsed.is_object()) *arguments = std::move(parsed);
  }
  return calls;
}

}  // namespace

absl::StatusOr<json> BuildTemplateContext(const api::CompletionRequest& request,
                                          const TemplateTokens& tokens,
                                          std::vector<std::string>* router_keys) {
  std::vector<std::string> own;
  json messages = json::array();
  for (const api::ChatMessage& m : request.messages) {
    json message = {{"role", m.role}};
    // A null content (an assistant message with tool_calls, as the OpenAI SDK sends it back) is
    // the empty text, as vLLM and llama-server pass it: templates such as Qwen3's test
    // `'</think>' in message.content`, which jinja2 refuses on None.
    message["content"] = m.content;
    if (!m.name.empty()) message["name"] = m.name;
    if (!m.reasoning_content.empty()) message["reasoning_content"] = m.reasoning_content;
    if (!m.tool_calls_json.empty()) message["tool_calls"] = ConvertToolCalls(m.tool_calls_json);
    if (!m.tool_call_id.empty()) message["tool_call_id"] = m.tool_call_id;
    messages.push_back(std::move(message));
  }
  json context = {{"messages", std::move(messages)}};
  json tools = request.tools_json.empty() ? json(nullptr) : ReadJson(request.tools_json);
  if (tools.is_discarded()) return absl::InvalidArgumentError("tools: not valid JSON");
  // An empty array renders as no tools in every template we know; transformers passes it on.
  context["tools"] = std::move(tools);
  context["add_generation_prompt"] = true;
  if (!tokens.bos_token.empty()) {
    context["bos_token"] = tokens.bos_token;
    own.emplace_back("bos_token");
  }
  if (!tokens.eos_token.empty()) {
    context["eos_token"] = tokens.eos_token;
    own.emplace_back("eos_token");
  }
  if (!request.chat_template_kwargs_json.empty()) {
    json kwargs = ReadJson(request.chat_template_kwargs_json);
    if (!kwargs.is_object()) {
      return absl::InvalidArgumentError("chat_template_kwargs: not a JSON object");
    }
    // Merged through a hash index: context[key] searches the keys so far, quadratic in the
    // number of kwargs (up to kMaxObjectKeys of them).
    common::OrderedObjectBuilder merged;
    for (auto it = context.begin(); it != context.end(); ++it) {
      merged.Set(it.key(), std::move(it.value()));
    }
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
      merged.Set(it.key(), std::move(it.value()));
      std::erase(own, it.key());  // the request's value now, so request text
    }
    context = merged.Take();
  }
  if (request.enable_thinking && !context.contains("enable_thinking")) {
    context["enable_thinking"] = *request.enable_thinking;
  }
  if (router_keys != nullptr) *router_keys = std::move(own);
  return context;
}

bool PromptOpensThink(std::string_view prompt) {
  const size_t open = prompt.rfind("<think>");
  const size_t close = prompt.rfind("</think>");
  return open != std::string_view::npos && (close == std::string_view::npos || open > close);
}

}  // namespace deltaserve::router::chat
