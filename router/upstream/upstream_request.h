// What the router sends an upstream (docs/upstreams.md, "What is sent"): the request in the
// upstream's own API. A client that speaks that API (chat completions or completions to an
// `openai` upstream, Messages to an `anthropic` one) has its body passed through as it sent
// it, with only `model` replaced by the upstream's and streaming turned on; any other request is
// translated from the router's parsed form (CompletionRequest): Responses and Messages requests
// to chat completions, chat completions and Responses requests to Messages. What one API has no
// way to say is refused (InvalidArgument naming the field) rather than dropped.
//
// The router always asks for a stream (with usage), whatever the client asked: the answer is
// read as it arrives and re-framed for the client by its endpoint.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "router/api/completion_request.h"
#include "router/config/router_config.h"
#include "router/config/upstream_config.h"

namespace deltaserve::router::upstream {

struct UpstreamHttpRequest {
  std::string path;   // "/v1/chat/completions" (the base URL's path + the endpoint)
  std::string body;   // JSON
  bool passed_through = false;  // the client's own body (model and stream replaced)
};

// When Messages requests give no max_tokens (chat completions may omit it, Anthropic requires it).
inline constexpr int32_t kDefaultAnthropicMaxTokens = 4096;
// The `anthropic-version` header sent to Anthropic upstreams.
inline constexpr const char* kAnthropicVersion = "2023-06-01";

absl::StatusOr<UpstreamHttpRequest> BuildUpstreamRequest(const api::CompletionRequest& request,
                                                         const UpstreamConfig& upstream,
                                                         const UpstreamUrl& url);

// The HTTP/1.1 request's bytes: request line, Host, the key (Authorization: Bearer, or x-api-key
// and anthropic-version), X-Request-Id, Content-Type / Length, Accept: text/event-stream,
// Connection: keep-alive (the connection may go back to the pool, connection_pool.h).
std::string UpstreamHttpRequestBytes(const UpstreamHttpRequest& request,
                                     const UpstreamConfig& upstream, const UpstreamUrl& url,
                                     const std::string& request_id);

}  // namespace deltaserve::router::upstream
