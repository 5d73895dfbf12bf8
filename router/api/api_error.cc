#include "router/api/api_error.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "common/str_util.h"

namespace deltaserve::router::api {
namespace {

using common::Sv;

constexpr char kParamUrl[] = "type.deltaserve.dev/openai.param";
constexpr char kCodeUrl[] = "type.deltaserve.dev/openai.code";

std::string Payload(const absl::Status& status, const char* url) {
  auto p = status.GetPayload(url);  // absl::optional in Debian 12
  return p ? std::string(*p) : std::string();
}

}  // namespace

absl::Status InvalidRequestError(std::string_view param, std::string_view code,
                                 std::string_view message) {
  return WithErrorDetail(absl::InvalidArgumentError(Sv(message)), param, code);
}

absl::Status WithErrorDetail(absl::Status status, std::string_view param, std::string_view code) {
  if (!param.empty()) status.SetPayload(kParamUrl, absl::Cord(Sv(param)));
  if (!code.empty()) status.SetPayload(kCodeUrl, absl::Cord(Sv(code)));
  return status;
}

std::string ErrorParam(const absl::Status& status) { return Payload(status, kParamUrl); }
std::string ErrorCode(const absl::Status& status) { return Payload(status, kCodeUrl); }

namespace {
constexpr char kRetryAfterPayloadUrl[] = "deltaserve/retry_after_seconds";
}  // namespace

absl::Status WithRetryAfter(absl::Status status, int64_t seconds) {
  status.SetPayload(kRetryAfterPayloadUrl, absl::Cord(std::to_string(seconds)));
  return status;
}

std::optional<int64_t> RetryAfterSeconds(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kResourceExhausted) return std::nullopt;
  auto payload = status.GetPayload(kRetryAfterPayloadUrl);
  int64_t seconds = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &seconds) || seconds <= 0) {
    return std::nullopt;
  }
  return seconds;
}

ApiError ApiErrorFromStatus(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  e.retry_after_seconds = RetryAfterSeconds(status).value_or(0);
  e.param = ErrorParam(status);
  e.code = ErrorCode(status);
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      e.http_status = 400;
      e.type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnimplemented:
      e.http_status = 400;  // a feature the request asks for that we do not offer
      e.type = "invalid_request_error";
      if (e.code.empty()) e.code = "unsupported_value";
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.type = "authentication_error";
      if (e.code.empty()) e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http_status = 403;
      e.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "invalid_request_error";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      if (e.code.empty()) e.code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kCancelled:
      e.http_status = 499;
      e.type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_error";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "server_error";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

ApiError ApiErrorFromHttpStatus(int http_status, std::string_view message) {
  ApiError e;
  e.http_status = http_status;
  e.message = std::string(message);
  e.type = http_status >= 500 ? "server_error" : "invalid_request_error";
  switch (http_status) {
    case 404:
      e.code = "not_found";
      break;
    case 405:
      e.code = "method_not_allowed";
      break;
    case 408:
      e.code = "request_timeout";
      break;
    case 413:
      e.code = "request_too_large";
      break;
    case 431:
      e.code = "header_too_large";
      break;
    case 400:
      e.code = "bad_request";
      break;
    default:
      break;
  }
  return e;
}

std::string ApiErrorJson(const ApiError& error) {
  auto null_if_empty = [](const std::string& s) {
    return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
  };
  nlohmann::json body = {{"error",
                          {{"message", error.message},
                           {"type", error.type},
                           {"param", null_if_empty(error.param)},
                           {"code", null_if_empty(error.code)}}}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

http::Response ApiErrorResponse(const ApiError& error) {
  http::Response r = http::Response::Json(error.http_status, ApiErrorJson(error));
  if (error.retry_after_seconds > 0) {
    r.headers.push_back({"Retry-After", std::to_string(error.retry_after_seconds)});
  }
  return r;
}

}  // namespace deltaserve::router::api
