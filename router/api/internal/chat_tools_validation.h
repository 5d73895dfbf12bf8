#pragma once
// Checks of a chat request's tool fields that the request parser runs after the messages:
// `tools` (OpenAI function tools), `tool_choice`, and that every `tool` message answers a call
// an earlier assistant message made. Each fault is a 400 invalid_request_error whose `param` is
// the JSON path of the offending field (docs/chat.md, "Errors"). Private to router/api.

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "router/api/completion_request.h"

namespace deltaserve::router::api::internal {

// `tools` (may be null: none): at most kMaxTools (request_parser.h), each `parameters` at most
// kMaxToolSchemaBytes as JSON; an array of {"type":"function","function":{"name",
// "description"?, "parameters"?}} with names matching ^[a-zA-Z0-9_-]{1,64}$ and `parameters` an
// object.
absl::Status ValidateTools(const nlohmann::ordered_json* tools);

// `tool_choice` (may be null): "none", "auto", "required" (with at least one tool) or
// {"type":"function","function":{"name": N}} with N declared in `tools`; sets out->tool_choice
// and out->tool_choice_function.
absl::Status ValidateToolChoice(const nlohmann::ordered_json* tool_choice,
                                const nlohmann::ordered_json* tools, CompletionRequest* out);

// Every role-"tool" message's tool_call_id is the id of a call in an earlier assistant
// message's tool_calls. `messages` is the body's array that `request.messages` was parsed from.
absl::Status ValidateToolMessages(const nlohmann::ordered_json& messages,
                                  const CompletionRequest& request);

}  // namespace deltaserve::router::api::internal
