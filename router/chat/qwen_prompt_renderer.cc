#include "router/chat/qwen_prompt_renderer.h"

#include "absl/strings/str_cat.h"
#include "router/chat/message_boundaries.h"
#include "router/chat/output_constraint_request.h"
#include "router/chat/qwen_chat_template.h"

namespace deltaserve::router::chat {

std::vector<int32_t> EncodeChatPrompt(const common::Tokenizer& tokenizer,
                                      const common::MarkedText& prompt,
                                      bool allow_special_tokens_in_content) {
  if (allow_special_tokens_in_content) return tokenizer.Encode(prompt.text, /*parse_special=*/true);
  return tokenizer.EncodeMarked(prompt.text, prompt.untrusted);
}

absl::StatusOr<RenderedPrompt> QwenPromptRenderer::Render(const api::CompletionRequest& request,
                                                          const ModelState& model,
                                                          const common::Tokenizer& tokenizer) const {
  RenderedPrompt out;
  const bool add_bos = model.tokenizer != nullptr && model.tokenizer->special().add_bos() &&
                       tokenizer.bos_id() >= 0;
  if (add_bos) out.token_ids.push_back(tokenizer.bos_id());
  if (request.endpoint == api::Endpoint::kChatCompletions) {
    ChatOptions options;
    options.enable_thinking = request.enable_thinking.value_or(true);
    options.tools_json = request.tools_json;
    absl::StatusOr<common::MarkedText> text = RenderChatMarked(request.messages, options);
    if (!text.ok()) return text.status();
    const std::vector<int32_t> ids =
        EncodeChatPrompt(tokenizer, *text, request.allow_special_tokens_in_content);
    out.token_ids.insert(out.token_ids.end(), ids.begin(), ids.end());
    const int32_t im_end = tokenizer.Find("<|im_end|>");
    if (im_end >= 0) out.stop_token_ids.push_back(im_end);
  } else if (request.prompt_is_tokens) {
    for (int32_t id : request.prompt_tokens) {
      if (id < 0 || id >= model.n_vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("prompt: token id ", id, " outside the vocabulary (", model.n_vocab, ")"));
      }
    }
    out.token_ids.insert(out.token_ids.end(), request.prompt_tokens.begin(),
                         request.prompt_tokens.end());
  } else {
    // Text completions: control-token text in the prompt is ordinary text (as OpenAI does)
    // unless the client asks for it to be parsed, as a raw prompt written in the model's own
    // markup needs (docs/chat.md, "Special tokens in content").
    const std::vector<int32_t> ids = tokenizer.Encode(request.prompt, request.parse_special_tokens);
    out.token_ids.insert(out.token_ids.end(), ids.begin(), ids.end());
  }
  // Boundaries for completions too: a raw prompt given as ids can carry ChatML markup.
  const TurnEndTokens turn_end = FindTurnEndTokens(tokenizer, model.tokenizer.get());
  out.message_boundaries = MessageBoundaries(out.token_ids, turn_end.eot_id, turn_end.newline_id);
  if (request.endpoint == api::Endpoint::kChatCompletions && turn_end.eot_id >= 0) {
    out.turn_end_token_ids.push_back(turn_end.eot_id);
    if (turn_end.newline_id >= 0) out.turn_end_token_ids.push_back(turn_end.newline_id);
  }
  // The built-in template is Qwen3's: calls as JSON in <tool_call>.
  absl::StatusOr<std::optional<v1::OutputConstraint>> constraint =
      RequestOutputConstraint(request, common::grammar::ToolCallFormat::kJson);
  if (!constraint.ok()) return constraint.status();
  out.output_constraint = std::move(*constraint);
  if (out.token_ids.empty()) {
    return absl::InvalidArgumentError(request.endpoint == api::Endpoint::kChatCompletions
                                          ? "messages: the rendered prompt is empty"
                                          : "prompt: the prompt is empty");
  }
  return out;
}

}  // namespace deltaserve::router::chat
