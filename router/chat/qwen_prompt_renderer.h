// The router's PromptRenderer for the Qwen ChatML family: chat requests rendered with the Qwen3
// template (qwen_chat_template.h) and tokenized with the model's own tokenizer (special tokens
// parsed in the template's own markup, never in the request's text: EncodeChatPrompt);
// completions tokenized with their control-token text parsed (plain text when the body says
// `parse_special_tokens: false`) or passed through as token ids. `<|im_end|>` ends an assistant
// turn, so it is a stop id. The message boundaries of every prompt (message_boundaries.h) and,
// for chat, the turn-end tokens go with it.
#pragma once

#include <cstdint>
#include <vector>

#include "common/marked_text.h"
#include "router/routing/prompt_renderer.h"

namespace deltaserve::router::chat {

// The ids of a rendered chat prompt: control tokens only from the template's own text, so a
// message that types "<|im_end|>" gets text tokens (docs/chat.md, "Special tokens in content");
// everywhere when the model's config sets allow_special_tokens_in_content.
std::vector<int32_t> EncodeChatPrompt(const common::Tokenizer& tokenizer,
                                      const common::MarkedText& prompt,
                                      bool allow_special_tokens_in_content);

// See the file comment. Stateless and thread-safe.
class QwenPromptRenderer : public PromptRenderer {
 public:
  absl::StatusOr<RenderedPrompt> Render(const api::CompletionRequest& request,
                                        const ModelState& model,
                                        const common::Tokenizer& tokenizer) const override;
};

}  // namespace deltaserve::router::chat
