#pragma once
// OpenAI-style errors for the router's API: {"error":{"message","type","param","code"}} with
// the HTTP status that goes with them. Faults travel as absl::Status across module
// boundaries; InvalidRequestError() attaches the offending field (`param`) and a short code
// as payloads, and ApiErrorFromStatus() turns any status into the body and status a client
// gets (InvalidArgument 400, Unauthenticated 401, PermissionDenied 403, NotFound 404,
// ResourceExhausted 429, Unavailable 503, ...).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "router/http/http_message.h"

namespace deltaserve::router::api {

struct ApiError {
  int http_status = 500;
  std::string message;
  std::string type;   // "invalid_request_error", "authentication_error", "server_error", ...
  std::string param;  // the offending field ("messages[1].content"); empty: null
  std::string code;   // "invalid_type", "model_not_found", ...; empty: null
  int64_t retry_after_seconds = 0;  // > 0: sent as the Retry-After header (429)
};

// `status` (a ResourceExhausted) asking the client to retry after `seconds`; ApiErrorFromStatus
// turns the hint into ApiError::retry_after_seconds. router/auth's rate limits set it.
absl::Status WithRetryAfter(absl::Status status, int64_t seconds);
// The hint WithRetryAfter attached to a ResourceExhausted status (> 0), or nullopt.
std::optional<int64_t> RetryAfterSeconds(const absl::Status& status);

// An InvalidArgument status naming `param` (a JSON path such as "stop[2]") and `code`
// ("invalid_json", "invalid_type", "invalid_value", "missing_required_parameter",
// "unsupported_value").
absl::Status InvalidRequestError(std::string_view param, std::string_view code,
                                 std::string_view message);

// The `param` / `code` attached by InvalidRequestError (or WithErrorDetail); empty if none.
std::string ErrorParam(const absl::Status& status);
std::string ErrorCode(const absl::Status& status);
// Returns `status` with `param` and `code` attached (for other modules' statuses, e.g. a
// NotFound for an unknown model with param "model" and code "model_not_found").
absl::Status WithErrorDetail(absl::Status status, std::string_view param, std::string_view code);

// The HTTP status and OpenAI error fields for `status` (which must not be OK).
ApiError ApiErrorFromStatus(const absl::Status& status);
// For errors made directly from an HTTP status (the server's own 404/405/408/413/431).
ApiError ApiErrorFromHttpStatus(int http_status, std::string_view message);

// {"error":{...}} as compact JSON (invalid UTF-8 in the message is replaced).
std::string ApiErrorJson(const ApiError& error);
http::Response ApiErrorResponse(const ApiError& error);

}  // namespace deltaserve::router::api
