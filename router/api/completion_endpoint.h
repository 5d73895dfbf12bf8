#pragma once
// POST /v1/chat/completions and POST /v1/completions: validate the body, start the generation
// on the CompletionBackend, and answer with one JSON object or an SSE stream of chunks. A
// client that disconnects cancels its generation.

#include <memory>

#include "router/api/api_metrics.h"
#include "router/api/completion_backend.h"
#include "router/api/completion_request.h"
#include "router/http/http_exchange.h"

namespace deltaserve::router::api {

void HandleCompletion(Endpoint endpoint, std::shared_ptr<http::HttpExchange> exchange,
                      CompletionBackend& backend, ApiMetrics& metrics);

}  // namespace deltaserve::router::api
