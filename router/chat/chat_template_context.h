// What a chat request becomes for a model's Jinja chat template: the variables transformers'
// apply_chat_template passes (docs/chat.md, "The template's context"), built from the validated
// OpenAI request, and the think-block facts the output parser needs from the rendered prompt.
//
//   absl::StatusOr<nlohmann::ordered_json> ctx = BuildTemplateContext(request, {"", "<|im_end|>"});
//   absl::StatusOr<std::string> prompt = chat_template.Render(*ctx);
//   bool reasoning_first = PromptOpensThink(*prompt);
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "router/api/completion_request.h"

namespace deltaserve::router::chat {

// The tokenizer's special-token strings as transformers passes them (empty: not passed).
struct TemplateTokens {
  std::string bos_token;
  std::string eos_token;
};

// {messages, tools, add_generation_prompt: true, bos_token?, eos_token?, ...every
// chat_template_kwargs key (enable_thinking from the model's defaults when the request has
// none)}. Messages: role, content (content-part arrays were joined by the parser; the empty
// text for an assistant message with tool_calls and null content, as vLLM and llama-server
// pass it), name, reasoning_content, tool_calls with each function.arguments JSON string parsed
// into an object (a string that is not a JSON object stays a string), tool_call_id. `tools`:
// the request's array, or null.
// `router_keys`, when given, receives the top-level keys whose values are the router's own and
// not the request's (bos_token / eos_token, unless chat_template_kwargs replaced them): the
// trusted keys of ChatTemplate::RenderMarked.
absl::StatusOr<nlohmann::ordered_json> BuildTemplateContext(
    const api::CompletionRequest& request, const TemplateTokens& tokens,
    std::vector<std::string>* router_keys = nullptr);

// True when a rendered prompt ends inside an open <think> block (its last <think> after its last
// </think>): the model's output starts as reasoning (OutputParseOptions::prompt_opened_think).
bool PromptOpensThink(std::string_view prompt);

}  // namespace deltaserve::router::chat
