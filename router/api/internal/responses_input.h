#pragma once
// The `input` of a POST /v1/responses body (a string, or message / function_call /
// function_call_output / reasoning items) as chat messages: function calls join the assistant
// turn they belong to as its tool_calls (chat's shape), outputs become tool messages answering an
// earlier call, reasoning becomes the next assistant turn's reasoning_content. The rules are the
// "Input items" table of docs/responses_api.md. Private to router/api.

#include <nlohmann/json.hpp>
#include <vector>

#include "absl/status/status.h"
#include "router/api/completion_request.h"

namespace deltaserve::router::api::internal {

// Appends the messages of doc["input"] to `messages` (which may already hold the instructions).
// Faults are 400s naming the item by its path ("input[3].call_id").
absl::Status ParseResponsesInput(const nlohmann::ordered_json& doc,
                                 std::vector<ChatMessage>* messages);

}  // namespace deltaserve::router::api::internal
