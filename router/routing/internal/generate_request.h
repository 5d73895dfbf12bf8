#pragma once
// The translation between the OpenAI-side request and the worker contract for one attempt:
// CompletionRequest + the candidate's prepared prompt → deltaserve.v1.GenerateRequest, and the
// worker's logprobs → the API's. Private to router/routing (RouterBackend's attempts).

#include <cstdint>
#include <optional>

#include "common/tokenizer.h"
#include "deltaserve/v1/worker.pb.h"
#include "router/api/completion_request.h"
#include "router/api/openai_response.h"
#include "router/config/router_config.h"
#include "router/routing/candidates.h"
#include "router/routing/internal/prefix_match.h"
#include "router/routing/prompt_renderer.h"

namespace deltaserve::router::internal {

// What one candidate's prompt became for one tokenizer digest.
struct PreparedPrompt {
  const common::Tokenizer* tokenizer = nullptr;
  RenderedPrompt prompt;
  api::SamplingParams sampling;  // the request's, with the candidate's defaults applied
  // The prompt's snapshot keys at its message boundaries, per chain root (routing by prefix).
  std::optional<PromptPrefixMatcher> prefix_matcher;
};

// Whether `request`'s max_tokens is lowered to the room its prompt leaves on `candidate`'s
// workers instead of refused: the model's clamp_max_tokens for the request's API, else the
// config's, else the API's default (Anthropic on, the OpenAI APIs off; docs/router.md).
bool ClampsMaxTokens(const api::CompletionRequest& request, const Candidate& candidate,
                     const RouterConfig& config);

// Fills `out` for a call to `candidate` on a worker whose context holds `context_length`
// tokens. max_tokens: the request's (with `clamp_max_tokens`, at most the room the prompt
// leaves); else the candidate's default, capped by that room; else all that room; at least 1
// (the worker was chosen because the prompt leaves room for one token). Returns what was
// asked and given when the request's max_tokens was lowered.
std::optional<api::MaxTokensClamped> FillGenerateRequest(
    const api::CompletionRequest& request, const Candidate& candidate, int32_t context_length,
    const PreparedPrompt& prepared, bool clamp_max_tokens, deltaserve::v1::GenerateRequest& out);

// One token's logprobs with token texts from `tokenizer` (empty texts when it is null, or for
// an id outside its vocabulary: a worker that does not match its tokenizer).
api::TokenLogprob ToApiLogprob(const deltaserve::v1::TokenLogprobs& logprobs,
                               const common::Tokenizer* tokenizer);

}  // namespace deltaserve::router::internal
