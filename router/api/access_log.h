#pragma once
// The router's log line per request (docs/metrics.md, "Logs"): one per HTTP exchange, written
// when the answer is complete (a stream at its end), with the request id that the client sent
// in X-Request-Id or the router made up (the same id goes to the worker, whose own line carries
// it, and back in the X-Request-Id response header), the route, status, duration, and what the
// generation noted (model, tokens, finish reason, time to first token). Successful probes and
// scrapes (GET /health, /ready, /metrics answered 2xx) are not logged: a scraper would
// otherwise write a line every few seconds.
//
//   opts.on_exchange_done = [](const http::ExchangeRecord& r) {
//     LogExchange(r, common::LogFormat::kJson);
//   };

#include "common/request_log.h"
#include "router/http/http_server.h"

namespace deltaserve::router::api {

// The line for `record`, or "" when it is not logged (see above).
std::string ExchangeLogLine(const http::ExchangeRecord& record, common::LogFormat format);

// Writes ExchangeLogLine to stderr (when not empty).
void LogExchange(const http::ExchangeRecord& record, common::LogFormat format);

}  // namespace deltaserve::router::api
