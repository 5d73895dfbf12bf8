#pragma once
// The request fields about reasoning and answer length that the three APIs share in meaning,
// read one way for all of them so each is honoured, or accepted only as its documented default,
// or refused with a 400 naming it (docs/api_fields.md):
//   - OpenAI's reasoning effort (Responses `reasoning.effort`, chat `reasoning_effort`):
//     none / minimal turn thinking off, low / medium / high turn it on with a reasoning budget;
//   - Anthropic's `output_config.effort`: low / medium / high give the same budgets, `max` none
//     of its own (Anthropic: no constraint on token spending); thinking stays as `thinking` says;
//   - OpenAI's verbosity (Responses `text.verbosity`, chat `verbosity`): only "medium", the
//     documented default, is accepted (the model's own length); low and high are refused, since
//     nothing here can make a model terser or wordier without changing its prompt;
//   - Responses `reasoning.summary` / `reasoning.generate_summary`: no summarizer exists here, so
//     "auto" (the summarizer the model has: none) and "none" are accepted and produce no summary
//     (the reasoning item carries the whole reasoning text); concise and detailed are refused.
// Private to router/api.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "router/api/completion_request.h"

namespace deltaserve::router::api::internal {

// The budgets of the effort levels are kReasoningBudgetLow / Medium / High (responses_request.h),
// the same for OpenAI's and Anthropic's efforts.

// OpenAI's effort `effort` (the request field `param`): sets r->enable_thinking and, for low /
// medium / high, lowers r->thinking_budget to the level's budget (a smaller budget the request
// set itself stays: both limits hold). A thinking switch the request already set the other way
// (chat_template_kwargs.enable_thinking) is a 400 at `param`, as is an unknown level.
absl::Status ApplyOpenAiEffort(std::string_view effort, std::string_view param,
                               CompletionRequest* r);

// Anthropic's output_config.effort: low / medium / high lower r->thinking_budget to the level's
// budget, max leaves it; anything else is a 400. Thinking on / off is not touched.
absl::Status ApplyAnthropicEffort(std::string_view effort, CompletionRequest* r);

// OpenAI's verbosity at `param`: "medium" passes, "low" / "high" are 400 unsupported_value,
// anything else 400 invalid_value.
absl::Status CheckVerbosity(std::string_view verbosity, std::string_view param);

// Responses' reasoning.summary (or generate_summary) at `param`: "auto" and "none" pass,
// "concise" / "detailed" are 400 unsupported_value, anything else 400 invalid_value.
absl::Status CheckReasoningSummary(std::string_view summary, std::string_view param);

// Anthropic's thinking.display: "summarized" (the default) or "omitted"; else 400.
absl::Status ReadThinkingDisplay(std::string_view display, bool* omitted);

// With thinking.display "omitted" the thinking blocks carry no text; the reasoning travels in
// the block's `signature` instead (Anthropic's multi-turn continuity), as this prefix followed
// by the text in base64. A thinking block sent back with such a signature and empty text gets
// its reasoning back.
inline constexpr std::string_view kThinkingSignaturePrefix = "deltaserve.thinking.v1:";
std::string ThinkingSignature(std::string_view reasoning);
// The reasoning a signature of ThinkingSignature carries; nullopt for any other signature.
std::optional<std::string> ReasoningFromSignature(std::string_view signature);

}  // namespace deltaserve::router::api::internal
