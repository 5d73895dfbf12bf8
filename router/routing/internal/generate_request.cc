#include "router/routing/internal/generate_request.h"

#include <algorithm>
#include <optional>
#include <string>

namespace deltaserve::router::internal {

namespace v1 = ::deltaserve::v1;

bool ClampsMaxTokens(const api::CompletionRequest& request, const Candidate& candidate,
                     const RouterConfig& config) {
  auto of_api = [&request](const ClampMaxTokens& c) -> std::optional<bool> {
    switch (request.api) {
      case api::Api::kChatCompletions:
        return c.chat_completions;
      case api::Api::kCompletions:
        return c.completions;
      case api::Api::kResponses:
        return c.responses;
      case api::Api::kAnthropic:
        return c.anthropic;
    }
    return std::nullopt;
  };
  if (std::optional<bool> model = of_api(candidate.defaults.clamp_max_tokens)) return *model;
  if (std::optional<bool> global = of_api(config.clamp_max_tokens)) return *global;
  // Claude Code asks max_tokens 32000 on every request, whatever the context; OpenAI and vLLM
  // refuse what does not fit, and their clients count on it.
  return request.api == api::Api::kAnthropic;
}

std::optional<api::MaxTokensClamped> FillGenerateRequest(const api::CompletionRequest& request,
                                                         const Candidate& candidate,
                                                         int32_t context_length,
                                                         const PreparedPrompt& prepared,
                                                         bool clamp_max_tokens,
                                                         v1::GenerateRequest& r) {
  r.set_request_id(request.request_id);
  r.set_model(candidate.served_name);
  r.mutable_prompt_token_ids()->Assign(prepared.prompt.token_ids.begin(),
                                       prepared.prompt.token_ids.end());
  r.mutable_message_boundaries()->Assign(prepared.prompt.message_boundaries.begin(),
                                         prepared.prompt.message_boundaries.end());
  r.mutable_turn_end_token_ids()->Assign(prepared.prompt.turn_end_token_ids.begin(),
                                         prepared.prompt.turn_end_token_ids.end());
  v1::SamplingParams& sp = *r.mutable_sampling();
  const api::SamplingParams& s = prepared.sampling;
  if (s.temperature) sp.set_temperature(static_cast<float>(*s.temperature));
  if (s.top_k) sp.set_top_k(*s.top_k);
  if (s.top_p) sp.set_top_p(static_cast<float>(*s.top_p));
  if (s.min_p) sp.set_min_p(static_cast<float>(*s.min_p));
  if (s.presence_penalty != 0) sp.set_presence_penalty(static_cast<float>(s.presence_penalty));
  if (s.frequency_penalty != 0) sp.set_frequency_penalty(static_cast<float>(s.frequency_penalty));
  if (s.repetition_penalty) sp.set_repetition_penalty(static_cast<float>(*s.repetition_penalty));
  if (s.seed) sp.set_seed(static_cast<uint64_t>(*s.seed));
  for (const auto& [id, bias] : s.logit_bias) (*sp.mutable_logit_bias())[id] = bias;
  const int64_t room = static_cast<int64_t>(context_length) -
                       static_cast<int64_t>(prepared.prompt.token_ids.size());
  int64_t max_tokens = room;
  std::optional<api::MaxTokensClamped> clamped;
  if (request.max_tokens) {
    max_tokens = *request.max_tokens;
    if (clamp_max_tokens && max_tokens > room) {
      max_tokens = std::max<int64_t>(1, room);
      clamped = api::MaxTokensClamped{*request.max_tokens, max_tokens};
    }
  } else if (candidate.defaults.max_tokens) {
    max_tokens = std::min<int64_t>(*candidate.defaults.max_tokens, room);
  }
  sp.set_max_tokens(static_cast<int32_t>(std::max<int64_t>(1, max_tokens)));
  for (int32_t id : prepared.prompt.stop_token_ids) sp.add_stop_token_ids(id);
  for (const std::string& stop : request.stop) sp.add_stop_strings(stop);
  if (request.logprobs) sp.set_logprobs(true);
  if (request.top_logprobs > 0) sp.set_top_logprobs(request.top_logprobs);
  if (request.thinking_budget) r.set_reasoning_budget(*request.thinking_budget);
  if (request.n > 1) r.set_n(request.n);
  if (prepared.prompt.output_constraint) {
    *r.mutable_output_constraint() = *prepared.prompt.output_constraint;
  }
  return clamped;
}

api::TokenLogprob ToApiLogprob(const v1::TokenLogprobs& lp, const common::Tokenizer* tok) {
  // Piece() gives an empty text for an id outside the vocabulary instead of reading out of
  // bounds.
  auto text = [&](int32_t id) {
    return tok == nullptr ? std::string() : std::string(tok->Piece(id));
  };
  api::TokenLogprob out;
  out.token = text(lp.chosen().token_id());
  out.logprob = lp.chosen().logprob();
  out.top.reserve(lp.top_size());
  for (const v1::TokenLogprob& t : lp.top()) out.top.push_back({text(t.token_id()), t.logprob()});
  return out;
}

}  // namespace deltaserve::router::internal
