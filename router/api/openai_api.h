#pragma once
// The router's OpenAI-compatible HTTP API: registers POST /v1/chat/completions,
// POST /v1/completions, GET /v1/models, GET /health, GET /ready and GET /metrics on an
// HttpServer, backed by a CompletionBackend (generation) and a RouterState (models, readiness,
// router metrics) that the rest of the router implements.
//
//   ApiMetrics metrics;
//   http::HttpServerOptions opts;  opts.port = 8080;
//   OpenAiApi::ConfigureServer(opts, &metrics);   // OpenAI error bodies, request metrics
//   http::HttpServer server(opts);
//   OpenAiApi api(backend, state, metrics);
//   api.Register(server);
//   server.Start();

#include <atomic>

#include "router/api/api_metrics.h"
#include "router/api/completion_backend.h"
#include "router/api/router_state.h"
#include "router/http/http_server.h"

namespace deltaserve::router::api {

class OpenAiApi {
 public:
  // The references must outlive the server the routes are registered on.
  OpenAiApi(CompletionBackend& backend, const RouterState& state, ApiMetrics& metrics);

  // Sets the server's error bodies to the OpenAI shape and feeds `metrics` from every
  // finished exchange (chaining any on_exchange_done already set).
  static void ConfigureServer(http::HttpServerOptions& options, ApiMetrics* metrics);

  void Register(http::HttpServer& server);

  // While draining, GET /ready answers 503 so load balancers stop sending new requests.
  void SetDraining(bool draining) { draining_.store(draining); }

 private:
  http::Response Models() const;
  http::Response Ready() const;
  http::Response Metrics() const;

  CompletionBackend& backend_;
  const RouterState& state_;
  ApiMetrics& metrics_;
  std::atomic<bool> draining_{false};
};

}  // namespace deltaserve::router::api
