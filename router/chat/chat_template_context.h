// What a chat request becomes for a model's Jinja chat template: the variables transformers'
// apply_chat_template passes (docs/chat.md, "The template's context"), built from the validated
// OpenAI request, and the think-block facts the output parser needs from the rendered prompt.
//
//   absl::StatusOr<nlohmann::ordered_json> ctx = BuildTemplateContext(request, {"", "<|im_end|>"});
//   absl::StatusOr<std::string> prompt = chat_template.Render(*ctx);
//   ThinkState think = ThinkStateOf(*prompt);
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
// none)}. Messages: role, content (content-part arrays were joined by the parser; null for an
// assistant message with tool_calls and no content), name, reasoning_content, tool_calls with
// each function.arguments JSON string parsed into an object (a string that is not a JSON
// object stays a string), tool_call_id. `tools`: the request's array, or null.
// `router_keys`, when given, receives the top-level keys whose values are the router's own and
// not the request's (bos_token / eos_token, unless chat_template_kwargs replaced them): the
// trusted keys of ChatTemplate::RenderMarked.
absl::StatusOr<nlohmann::ordered_json> BuildTemplateContext(
    const api::CompletionRequest& request, const TemplateTokens& tokens,
    std::vector<std::string>* router_keys = nullptr);

// Where a rendered prompt leaves the model's reasoning block.
struct ThinkState {
  // The prompt ends inside an open <think> block (its last <think> after its last </think>).
  bool prompt_opened_think = false;
  // OutputParseOptions::allow_orphan_think_close: only where the prompt opened the block. The
  // router knows its prompt, so toolcalls.md's orphan `</think>` (a generation prompt that ended
  // with "<think>\n") is the opened case; after a prompt that did not open a block, an output
  // that begins without `<think>` is an answer and its content streams as it comes (holding it
  // for a `</think>` that real models do not write there would stream nothing until the end).
  bool allow_orphan_think_close = false;
};
ThinkState ThinkStateOf(std::string_view prompt);

}  // namespace deltaserve::router::chat
