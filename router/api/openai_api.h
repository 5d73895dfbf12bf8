#pragma once
// The router's OpenAI-compatible HTTP API: registers POST /v1/chat/completions,
// POST /v1/completions, POST /v1/responses (responses_endpoint.h), GET /v1/models, GET /health,
// GET /ready and GET /metrics on an HttpServer, backed by a CompletionBackend (generation) and a
// RouterState (models, readiness, router metrics) that the rest of the router implements.
//
//   ApiMetrics metrics;
//   http::HttpServerOptions opts;  opts.port = 8080;
//   OpenAiApi::ConfigureServer(opts, &metrics);   // OpenAI error bodies, request metrics
//   http::HttpServer server(opts);
//   OpenAiApi api(backend, state, metrics);
//   api.Register(server);
//   server.Start();

#include <atomic>
#include <cstddef>
#include <functional>
#include <string_view>

#include "absl/status/statusor.h"

#include "router/api/api_error.h"
#include "router/api/api_metrics.h"
#include "router/api/completion_backend.h"
#include "router/api/request_workers.h"
#include "router/api/router_state.h"
#include "router/http/http_server.h"

namespace deltaserve::router::api {

class PromptTokenizer;  // prompt_tokenizer.h

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

// Where POST bodies are handled (issue 17: work that can take long stays off the io threads).
struct OpenAiApiOptions {
  // Bodies up to this size are parsed, rendered and sent on the io thread that read them: at
  // the measured worst case of 50 ms per MB that is a few milliseconds (docs/benchmarks.md).
  size_t inline_body_bytes = 64 << 10;
  // Larger ones go to a pool of this many threads (RequestWorkers)...
  int request_threads = 2;
  // ...where at most this many wait; more are answered 429 with Retry-After: 1.
  size_t max_queued_requests = 64;
};

class OpenAiApi {
 public:
  // The references must outlive the server the routes are registered on.
  OpenAiApi(CompletionBackend& backend, const RouterState& state, ApiMetrics& metrics,
            OpenAiApiOptions options = {});

  // Sets the server's error bodies to the OpenAI shape and feeds `metrics` from every
  // finished exchange (chaining any on_exchange_done already set).
  static void ConfigureServer(http::HttpServerOptions& options, ApiMetrics* metrics);

  void Register(http::HttpServer& server);

  // Filters GET /v1/models through `gate` (must outlive the server); none: everything listed.
  void SetModelListGate(const ModelListGate* gate) { gate_ = gate; }

  // Serves /v1/messages/count_tokens, /tokenize and /detokenize through `tokenizer` (must
  // outlive the server); none: those answer 503.
  void SetPromptTokenizer(const PromptTokenizer* tokenizer) { tokenizer_ = tokenizer; }

  // Large POST bodies waiting for a request thread right now.
  size_t queued_requests() const { return workers_.queued(); }

  // While draining, GET /ready answers 503 so load balancers stop sending new requests.
  void SetDraining(bool draining) { draining_.store(draining); }

 private:
  // A POST completion: at once when the body is small, else on workers_.
  void Completion(Endpoint endpoint, std::shared_ptr<http::HttpExchange> exchange);
  // Runs `handler` for a POST exchange: at once when the body is small, else on workers_
  // (429 with Retry-After when too many wait). Every POST endpoint goes through it.
  using PostHandler = std::function<void(std::shared_ptr<http::HttpExchange>)>;
  // `busy` writes that 429 (Anthropic's endpoints answer in their own shape).
  void RunPost(std::shared_ptr<http::HttpExchange> exchange, PostHandler handler,
               http::Response (*busy)(const ApiError&) = &ApiErrorResponse);
  http::Response Models(const http::Request& request) const;
  http::Response Ready() const;
  http::Response Metrics() const;

  CompletionBackend& backend_;
  const RouterState& state_;
  ApiMetrics& metrics_;
  const OpenAiApiOptions options_;
  RequestWorkers workers_;
  std::atomic<bool> draining_{false};
  const ModelListGate* gate_ = nullptr;
  const PromptTokenizer* tokenizer_ = nullptr;
};

}  // namespace deltaserve::router::api
