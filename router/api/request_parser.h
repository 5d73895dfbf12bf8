#pragma once
// Parses and validates OpenAI request bodies. Every fault is an InvalidArgument status made
// by InvalidRequestError (api_error.h) naming the field as a JSON path ("messages[2].role",
// "stop[1]", "stream_options.include_usage"); the HTTP layer answers it with 400. Unknown
// fields are ignored; null counts as absent.

#include <string_view>

#include "absl/status/statusor.h"
#include "router/api/completion_request.h"

namespace deltaserve::router::api {

// Deepest nesting of arrays/objects accepted in a body (the parser's work stays bounded).
inline constexpr int kMaxJsonDepth = 64;

absl::StatusOr<CompletionRequest> ParseChatCompletionRequest(std::string_view body);
absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body);

}  // namespace deltaserve::router::api
