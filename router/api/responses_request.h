#pragma once
// POST /v1/responses (OpenAI's Responses API, what Codex CLI speaks) read into the router's own
// CompletionRequest, so routing, chat rendering, tool calls and structured outputs are the chat
// endpoint's: `instructions` and `input` items become chat messages (function_call items an
// assistant's tool_calls, function_call_output items tool messages, reasoning items the next
// assistant message's reasoning_content), function tools chat's function tools, `text.format`
// chat's response_format, `reasoning.effort` thinking on/off and a budget. What the response
// object echoes back (tools, tool_choice, text, metadata, ...) is kept beside it. Every field's
// fate is in docs/responses_api.md.
//
//   absl::StatusOr<ResponsesRequest> r = ParseResponsesRequest(body);
//   if (!r.ok()) return ApiErrorResponse(ApiErrorFromStatus(r.status()));  // 400, OpenAI shape
//   backend.Generate(r->completion, observer);

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "router/api/completion_request.h"

namespace deltaserve::router::api {

// reasoning.effort → thinking: "none"/"minimal" turn thinking off; the others turn it on with
// at most this many reasoning tokens (GenerateRequest.reasoning_budget).
inline constexpr int32_t kReasoningBudgetLow = 1024;
inline constexpr int32_t kReasoningBudgetMedium = 4096;
inline constexpr int32_t kReasoningBudgetHigh = 16384;

// Most input items of one request (max_input_items, docs/router.md "Request limits").
inline constexpr size_t kMaxInputItems = 100'000;

struct ResponsesRequest {
  CompletionRequest completion;  // endpoint kChatCompletions
  // Types of `tools` entries that were ignored (not "function"), distinct, in first-seen order;
  // the answer names them in its X-DeltaServe-Warning header.
  std::vector<std::string> ignored_tool_types;
  // The request fields the response object repeats, in the response's key order:
  // instructions, max_output_tokens, metadata, parallel_tool_calls, previous_response_id,
  // reasoning, store, temperature, text, tool_choice, tools (function tools only), top_p,
  // truncation, user.
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
};

// Parses and validates a Responses body. Faults are InvalidRequestError statuses (400) whose
// param is the JSON path in the Responses body ("input[2].call_id", "text.format.schema");
// request limits are those of request_parser.h plus kMaxInputItems.
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body);

// The X-DeltaServe-Warning header's value for ignored tool types ("" when none).
std::string IgnoredToolsWarning(const std::vector<std::string>& ignored_tool_types);

}  // namespace deltaserve::router::api
