// The router's PromptRenderer (router/routing/prompt_renderer.h): chat requests rendered with
// the model's own Jinja chat template — the one the worker reports from the GGUF
// (ModelInfo.chat_template), or an override: the model's `chat_template` file in the router
// config, else --chat-template — and tokenized with the model's tokenizer (special tokens
// parsed in the template's own text only, never in the request's: EncodeChatPrompt). Each
// distinct template text is parsed once and cached. A worker that reports no template falls
// back to the hand-written Qwen3 renderer (qwen_chat_template.h), logged once per
// model. The prompt comes with its message boundaries and turn-end ids (message_boundaries.h),
// the end-of-turn token as a stop id, and a ChatOutputShaper configured from the prompt's think
// state and the request's tools / tool_choice. Completions are QwenPromptRenderer's.
// docs/chat.md.
//
//   ChatPromptRenderer renderer(/*default_template=*/"");   // or --chat-template's text
//   RouterBackend backend(source, &pool, &tokenizers, &renderer);
#pragma once

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/jinja/chat_template.h"
#include "router/chat/qwen_prompt_renderer.h"
#include "router/routing/prompt_renderer.h"

namespace deltaserve::router::chat {

class ChatPromptRenderer : public PromptRenderer {
 public:
  // `default_template`: Jinja text used for every model that has no `chat_template` of its own
  // in the config, instead of the model file's (--chat-template); empty: none. Parse it first
  // (ReadChatTemplateFile) to refuse a bad one at start.
  explicit ChatPromptRenderer(std::string default_template = "");

  absl::StatusOr<RenderedPrompt> Render(const api::CompletionRequest& request,
                                        const ModelState& model,
                                        const common::Tokenizer& tokenizer) const override;

 private:
  // The parsed template of `source` (cached, failures included).
  absl::StatusOr<std::shared_ptr<const common::ChatTemplate>> Parsed(
      const std::string& source) const;

  const std::string default_template_;
  QwenPromptRenderer completions_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string,
                              absl::StatusOr<std::shared_ptr<const common::ChatTemplate>>>
      cache_ ABSL_GUARDED_BY(mu_);
  mutable absl::flat_hash_set<std::string> fallback_logged_ ABSL_GUARDED_BY(mu_);
};

}  // namespace deltaserve::router::chat
