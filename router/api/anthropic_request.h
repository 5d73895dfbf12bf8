#pragma once
// Anthropic Messages API bodies (POST /v1/messages and /v1/messages/count_tokens) translated into
// the router's CompletionRequest, so generation, routing and chat rendering stay the ones chat
// completions use. docs/anthropic_api.md maps every field to supported / ignored / refused.
//
//   absl::StatusOr<CompletionRequest> r = ParseAnthropicMessagesRequest(body);
//   // system → a system message; text blocks → content; tool_use → assistant tool_calls
//   // (OpenAI shape); tool_result → role "tool" messages; thinking → reasoning_content;
//   // tools[].input_schema → tools_json in OpenAI's function shape; tool_choice any/tool →
//   // the forced-call constrained decoding (required / named function).
//
// Faults are InvalidRequestError statuses (api_error.h) whose param is the Anthropic JSON path
// ("messages[1].content[0].tool_use_id"); anthropic_response.h writes them in Anthropic's error
// shape. Fields for Anthropic-side services are refused unless they ask for nothing
// (docs/api_fields.md); fields Anthropic does not define are ignored, null counts as absent. The
// body is read with the same linear reader and limits as chat completions (request_parser.h).

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "router/api/completion_request.h"

namespace deltaserve::router::api {

// Most entries of `stop_sequences` (max_stop_sequences; Anthropic sets no cap, OpenAI's 4 is
// too few for some agents). Each is at most kMaxStopBytes (request_parser.h).
inline constexpr size_t kMaxStopSequences = 64;

// What a parse dropped rather than refused, for the answer's warning header and metrics.
struct AnthropicParseNotes {
  // `type` of each server tool skipped (web_search_20250305, bash_20250124, ...), distinct, in
  // first-seen order, cut to header- and log-safe characters (internal/ignored_tools.h).
  std::vector<std::string> ignored_tool_types;
  // thinking.display "omitted": thinking blocks go out with empty text, their reasoning in the
  // signature (internal/reasoning_fields.h ThinkingSignature).
  bool thinking_omitted = false;
};

// POST /v1/messages: `model`, `messages` and `max_tokens` are required.
absl::StatusOr<CompletionRequest> ParseAnthropicMessagesRequest(
    std::string_view body, AnthropicParseNotes* notes = nullptr);

// POST /v1/messages/count_tokens: the same body without `max_tokens` (and without the sampling
// fields, which are ignored if present).
absl::StatusOr<CompletionRequest> ParseAnthropicCountTokensRequest(std::string_view body);

}  // namespace deltaserve::router::api
