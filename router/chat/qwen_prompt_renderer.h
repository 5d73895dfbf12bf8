// The router's PromptRenderer for the Qwen ChatML family: chat requests rendered with the Qwen3
// template (qwen_chat_template.h) and tokenized with the model's own tokenizer (special tokens
// parsed, as the template's control tokens must be); completions tokenized as plain text or
// passed through as token ids. `<|im_end|>` ends an assistant turn, so it is a stop id. The
// message boundaries of every prompt (message_boundaries.h) and, for chat, the turn-end tokens
// go with it.
#pragma once

#include "router/routing/prompt_renderer.h"

namespace deltaserve::router::chat {

// See the file comment. Stateless and thread-safe.
class QwenPromptRenderer : public PromptRenderer {
 public:
  absl::StatusOr<RenderedPrompt> Render(const api::CompletionRequest& request,
                                        const ModelState& model,
                                        const common::Tokenizer& tokenizer) const override;
};

}  // namespace deltaserve::router::chat
