#pragma once
// POST /v1/responses (OpenAI's Responses API): reads the body into a CompletionRequest
// (responses_request.h), starts it on the CompletionBackend and answers with a `response`
// object or its stream of `response.*` events (responses_output.h). Stateless: nothing is
// stored. Tools of types other than "function" are dropped and named in the
// X-DeltaServe-Warning header; deltaserve_router_responses_ignored_tools_total counts them.
// docs/responses_api.md.

#include <memory>

#include "router/api/api_metrics.h"
#include "router/api/completion_backend.h"
#include "router/api/prometheus_text.h"
#include "router/http/http_exchange.h"

namespace deltaserve::router::api {

// The header that names what a request asked for and did not get (ignored tool types).
inline constexpr char kWarningHeader[] = "X-DeltaServe-Warning";

void HandleResponses(std::shared_ptr<http::HttpExchange> exchange, CompletionBackend& backend,
                     ApiMetrics& metrics);

// deltaserve_router_responses_ignored_tools_total{type}: tools ignored since start, by type.
void WriteResponsesMetrics(PrometheusText& out);

}  // namespace deltaserve::router::api
