#pragma once
// The router's api::PromptTokenizer (count_tokens, /tokenize, /detokenize): resolves the model
// name as RouterBackend does (aliases, the candidate's sampling and enable_thinking defaults),
// takes the first candidate whose tokenizer a worker has delivered (the worker need not be
// available: no call is made), and renders with the same PromptRenderer, so counts equal a
// generation's prompt_tokens.
//
//   RouterTokenizer tokenizer(source, &pool, &tokenizers, &renderer);
//   api.SetPromptTokenizer(&tokenizer);

#include <string_view>

#include "router/api/prompt_tokenizer.h"
#include "router/routing/candidates.h"
#include "router/routing/prompt_renderer.h"
#include "router/routing/router_backend.h"
#include "router/routing/tokenizer_provider.h"
#include "router/routing/worker_pool.h"

namespace deltaserve::router {

class RouterTokenizer : public api::PromptTokenizer {
 public:
  // `pool`, `tokenizers` and `renderer` must outlive this.
  RouterTokenizer(ConfigSource config, const WorkerPool* pool, TokenizerProvider* tokenizers,
                  const PromptRenderer* renderer);

  absl::StatusOr<api::TokenizedPrompt> Tokenize(
      const api::CompletionRequest& request) const override;
  absl::StatusOr<api::TokenizedPrompt> TokenizeText(std::string_view model, std::string_view text,
                                                    api::TextTokenizeOptions options) const override;
  absl::StatusOr<std::string> Detokenize(std::string_view model,
                                         const std::vector<int32_t>& token_ids) const override;
  absl::StatusOr<std::vector<std::string>> Pieces(
      std::string_view model, const std::vector<int32_t>& token_ids) const override;

 private:
  struct Resolved {
    Candidate candidate;
    std::shared_ptr<const ModelState> model;
    const common::Tokenizer* tokenizer = nullptr;
  };
  // `model` (empty: the only model served) to a candidate with a tokenizer in hand.
  absl::StatusOr<Resolved> Resolve(std::string_view model) const;

  ConfigSource config_;
  const WorkerPool* pool_;
  TokenizerProvider* tokenizers_;
  const PromptRenderer* renderer_;
};

}  // namespace deltaserve::router
