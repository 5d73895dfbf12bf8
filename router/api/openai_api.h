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
#include <functional>
#include <string_view>

#include "absl/status/statusor.h"

#include "router/api/api_metrics.h"
#include "router/api/completion_backend.h"
#include "router/api/router_state.h"
#include "router/http/http_server.h"

namespace deltaserve::router::api {

// Who may list which models on GET /v1/models. The router's API keys implement it
// (auth::KeyedModelListGate): with keys configured the list needs a valid key (401 otherwise,
// as OpenAI does) and shows only the models and aliases that key may use.
class ModelListGate {
 public:
  virtual ~ModelListGate() = default;
  // For the Authorization header's value ("" when absent): Unauthenticated, or a predicate
  // telling which model ids the caller may see.
  virtual absl::StatusOr<std::function<bool(std::string_view)>> Visible(
      std::string_view authorization) const = 0;
};

class OpenAiApi {
 public:
  // The references must outlive the server the routes are registered on.
  OpenAiApi(CompletionBackend& backend, const RouterState& state, ApiMetrics& metrics);

  // Sets the server's error bodies to the OpenAI shape and feeds `metrics` from every
  // finished exchange (chaining any on_exchange_done already set).
  static void ConfigureServer(http::HttpServerOptions& options, ApiMetrics* metrics);

  void Register(http::HttpServer& server);

  // Filters GET /v1/models through `gate` (must outlive the server); none: everything listed.
  void SetModelListGate(const ModelListGate* gate) { gate_ = gate; }

  // While draining, GET /ready answers 503 so load balancers stop sending new requests.
  void SetDraining(bool draining) { draining_.store(draining); }

 private:
  http::Response Models(const http::Request& request) const;
  http::Response Ready() const;
  http::Response Metrics() const;

  CompletionBackend& backend_;
  const RouterState& state_;
  ApiMetrics& metrics_;
  std::atomic<bool> draining_{false};
  const ModelListGate* gate_ = nullptr;
};

}  // namespace deltaserve::router::api
