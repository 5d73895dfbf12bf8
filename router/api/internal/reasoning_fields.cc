#include "router/api/internal/reasoning_fields.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"
#include "router/api/api_error.h"
#include "router/api/internal/json_fields.h"
#include "router/api/responses_request.h"

namespace deltaserve::router::api::internal {
namespace {

using common::Sv;

std::optional<int32_t> EffortBudget(std::string_view effort) {
  if (effort == "low") return kReasoningBudgetLow;
  if (effort == "medium") return kReasoningBudgetMedium;
  if (effort == "high") return kReasoningBudgetHigh;
  return std::nullopt;
}

void LowerBudget(int32_t budget, CompletionRequest* r) {
  r->thinking_budget = std::min(r->thinking_budget.value_or(budget), budget);
}

}  // namespace

absl::Status ApplyOpenAiEffort(std::string_view effort, std::string_view param,
                               CompletionRequest* r) {
  const std::optional<int32_t> budget = EffortBudget(effort);
  if (!budget && effort != "none" && effort != "minimal") {
    return InvalidRequestError(
        param, "invalid_value",
        absl::StrCat("'", Sv(param), "' must be one of none, minimal, low, medium, high; got '",
                     Sv(effort), "'"));
  }
  const bool think = budget.has_value();
  if (r->enable_thinking && *r->enable_thinking != think) {
    return InvalidRequestError(
        param, "invalid_value",
        absl::StrCat("'", Sv(param), "' \"", Sv(effort), "\" turns thinking ", think ? "on" : "off",
                     ", but chat_template_kwargs.enable_thinking turns it ", think ? "off" : "on"));
  }
  r->enable_thinking = think;
  if (budget) LowerBudget(*budget, r);
  return absl::OkStatus();
}

absl::Status ApplyAnthropicEffort(std::string_view effort, CompletionRequest* r) {
  if (effort == "max") return absl::OkStatus();  // no constraint on token spending
  const std::optional<int32_t> budget = EffortBudget(effort);
  if (budget) {
    LowerBudget(*budget, r);
    return absl::OkStatus();
  }
  if (effort == "xhigh") {
    return Unsupported("output_config.effort",
                       "'output_config.effort' \"xhigh\" is not supported: it has no reasoning "
                       "budget of its own here; use low, medium, high or max");
  }
  return InvalidRequestError(
      "output_config.effort", "invalid_value",
      absl::StrCat("'output_config.effort' must be one of low, medium, high, max; got '",
                   Sv(effort), "'"));
}

absl::Status CheckVerbosity(std::string_view verbosity, std::string_view param) {
  if (verbosity == "medium") return absl::OkStatus();
  if (verbosity == "low" || verbosity == "high") {
    return Unsupported(param,
                       absl::StrCat("'", Sv(param), "' \"", Sv(verbosity),
                                    "\" is not supported: the served models answer at their own "
                                    "length, which is \"medium\" (the default); leave it out or "
                                    "send \"medium\""));
  }
  return InvalidRequestError(
      param, "invalid_value",
      absl::StrCat("'", Sv(param), "' must be one of low, medium, high; got '", Sv(verbosity),
                   "'"));
}

absl::Status CheckReasoningSummary(std::string_view summary, std::string_view param) {
  if (summary == "auto" || summary == "none") return absl::OkStatus();
  if (summary == "concise" || summary == "detailed") {
    return Unsupported(param,
                       absl::StrCat("'", Sv(param), "' \"", Sv(summary),
                                    "\" is not supported: the served models have no reasoning "
                                    "summarizer (the reasoning item carries the whole reasoning "
                                    "text); send \"auto\" or leave it out"));
  }
  return InvalidRequestError(
      param, "invalid_value",
      absl::StrCat("'", Sv(param), "' must be one of auto, concise, detailed; got '", Sv(summary),
                   "'"));
}

absl::Status ReadThinkingDisplay(std::string_view display, bool* omitted) {
  if (display == "summarized" || display == "omitted") {
    *omitted = display == "omitted";
    return absl::OkStatus();
  }
  return InvalidRequestError(
      "thinking.display", "invalid_value",
      absl::StrCat("'thinking.display' must be summarized or omitted, got '", Sv(display), "'"));
}

std::string ThinkingSignature(std::string_view reasoning) {
  return absl::StrCat(Sv(kThinkingSignaturePrefix), absl::Base64Escape(Sv(reasoning)));
}

std::optional<std::string> ReasoningFromSignature(std::string_view signature) {
  if (!absl::StartsWith(Sv(signature), Sv(kThinkingSignaturePrefix))) return std::nullopt;
  std::string out;
  if (!absl::Base64Unescape(Sv(signature.substr(kThinkingSignaturePrefix.size())), &out)) {
    return std::nullopt;
  }
  return out;
}

}  // namespace deltaserve::router::api::internal
