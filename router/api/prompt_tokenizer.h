#pragma once
// Tokenizing without generating, for POST /v1/messages/count_tokens, /tokenize and /detokenize:
// the router renders and tokenizes exactly as it would for a generation (the same chat template,
// tools and enable_thinking, the same tokenizer), so a count equals the prompt_tokens a
// generation of the same request reports. router/routing/router_tokenizer.h implements it over
// the worker pool's tokenizers; tests use a stub.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "router/api/completion_request.h"

namespace deltaserve::router::api {

struct TokenizedPrompt {
  std::string model;               // the model whose tokenizer was used (after aliases)
  std::vector<int32_t> token_ids;  // the prompt as a generation would send it
  int64_t max_model_len = 0;       // that model's context length (tokens)
};

// What a raw-text tokenization should add or parse.
struct TextTokenizeOptions {
  bool add_special = true;    // prepend BOS when the model's tokenizer asks for it
  bool parse_special = true;  // "<|im_start|>" in the text is the control token
};

class PromptTokenizer {
 public:
  virtual ~PromptTokenizer() = default;
  // `request` (chat: rendered with the model's template; completions: its prompt, with BOS as
  // a generation adds it) tokenized with the first candidate of request.model whose tokenizer
  // the router holds. NotFound for an unknown model (404), Unavailable when no worker has
  // reported the tokenizer yet (503); template faults are InvalidArgument (400).
  virtual absl::StatusOr<TokenizedPrompt> Tokenize(const CompletionRequest& request) const = 0;
  // Raw text with that model's tokenizer (`model` empty: the one model served, else 400).
  virtual absl::StatusOr<TokenizedPrompt> TokenizeText(std::string_view model,
                                                       std::string_view text,
                                                       TextTokenizeOptions options) const = 0;
  // The text of `token_ids` (400 naming the first id outside the vocabulary).
  virtual absl::StatusOr<std::string> Detokenize(std::string_view model,
                                                 const std::vector<int32_t>& token_ids) const = 0;
  // The bytes one token stands for (llama.cpp's with_pieces); "" outside the vocabulary.
  virtual absl::StatusOr<std::vector<std::string>> Pieces(
      std::string_view model, const std::vector<int32_t>& token_ids) const = 0;
};

}  // namespace deltaserve::router::api
