#include "router/api/openai_api.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/api/anthropic_endpoint.h"
#include "router/api/anthropic_response.h"
#include "router/api/api_error.h"
#include "router/api/completion_endpoint.h"
#include "router/api/prometheus_text.h"
#include "router/api/responses_endpoint.h"
#include "router/api/tokenize_endpoint.h"

namespace deltaserve::router::api {

using json = nlohmann::json;

OpenAiApi::OpenAiApi(CompletionBackend& backend, const RouterState& state, ApiMetrics& metrics,
                     OpenAiApiOptions options)
    : backend_(backend),
      state_(state),
      metrics_(metrics),
      options_(options),
      workers_(options.request_threads, options.max_queued_requests) {}

void OpenAiApi::ConfigureServer(http::HttpServerOptions& options, ApiMetrics* metrics) {
  options.error_response = [](int status, std::string_view message) {
    return ApiErrorResponse(ApiErrorFromHttpStatus(status, message));
  };
  // The Anthropic Messages API answers the server's own errors (413, 404, ...) in its shape.
  options.error_response_at = [](std::string_view path, int status, std::string_view message) {
    const ApiError error = ApiErrorFromHttpStatus(status, message);
    return path.starts_with("/v1/messages") ? AnthropicErrorResponse(error)
                                            : ApiErrorResponse(error);
  };
  if (metrics != nullptr) {
    options.on_exchange_done = [metrics, previous = std::move(options.on_exchange_done)](
                                   const http::ExchangeRecord& record) {
      metrics->RecordExchange(record);
      if (previous) previous(record);
    };
  }
}

void OpenAiApi::Register(http::HttpServer& server) {
  server.Route("POST", "/v1/chat/completions", [this](std::shared_ptr<http::HttpExchange> ex) {
    Completion(Endpoint::kChatCompletions, std::move(ex));
  });
  server.Route("POST", "/v1/completions", [this](std::shared_ptr<http::HttpExchange> ex) {
    Completion(Endpoint::kCompletions, std::move(ex));
  });
  server.Route("POST", "/v1/responses", [this](std::shared_ptr<http::HttpExchange> ex) {
    RunPost(std::move(ex), [this](std::shared_ptr<http::HttpExchange> e) {
      HandleResponses(std::move(e), backend_, metrics_);
    });
  });
  server.Route("POST", "/v1/messages", [this](std::shared_ptr<http::HttpExchange> ex) {
    RunPost(
        std::move(ex),
        [this](std::shared_ptr<http::HttpExchange> e) {
          HandleAnthropicMessages(std::move(e), backend_, metrics_);
        },
        &AnthropicErrorResponse);
  });
  server.Route("POST", "/v1/messages/count_tokens", [this](std::shared_ptr<http::HttpExchange> ex) {
    RunPost(
        std::move(ex),
        [this](std::shared_ptr<http::HttpExchange> e) {
          HandleAnthropicCountTokens(std::move(e), tokenizer_, gate_);
        },
        &AnthropicErrorResponse);
  });
  server.Route("POST", "/tokenize", [this](std::shared_ptr<http::HttpExchange> ex) {
    RunPost(std::move(ex), [this](std::shared_ptr<http::HttpExchange> e) {
      HandleTokenize(std::move(e), tokenizer_, gate_);
    });
  });
  server.Route("POST", "/detokenize", [this](std::shared_ptr<http::HttpExchange> ex) {
    RunPost(std::move(ex), [this](std::shared_ptr<http::HttpExchange> e) {
      HandleDetokenize(std::move(e), tokenizer_, gate_);
    });
  });
  server.RouteSync("GET", "/v1/models/*", [this](const http::Request& r) {
    return ModelById(r, std::string_view(r.path).substr(sizeof("/v1/models/") - 1), state_,
                     gate_);
  });
  server.RouteSync("GET", "/v1/models", [this](const http::Request& r) { return Models(r); });
  server.RouteSync("GET", "/health", [](const http::Request&) {
    return http::Response::Json(200, R"({"status":"ok"})");
  });
  server.RouteSync("GET", "/ready", [this](const http::Request&) { return Ready(); });
  server.RouteSync("GET", "/metrics", [this](const http::Request&) { return Metrics(); });
}

void OpenAiApi::Completion(Endpoint endpoint, std::shared_ptr<http::HttpExchange> exchange) {
  RunPost(std::move(exchange), [this, endpoint](std::shared_ptr<http::HttpExchange> ex) {
    HandleCompletion(endpoint, std::move(ex), backend_, metrics_);
  });
}

void OpenAiApi::RunPost(std::shared_ptr<http::HttpExchange> exchange, PostHandler handler,
                        http::Response (*busy_response)(const ApiError&)) {
  if (exchange->request().body.size() <= options_.inline_body_bytes) {
    handler(std::move(exchange));
    return;
  }
  // A copy of the exchange pointer: TrySubmit does not run a task it refuses, and then this
  // one still answers.
  auto task = [handler, ex = exchange] { handler(ex); };
  if (workers_.TrySubmit(std::move(task))) return;
  const absl::Status busy = absl::ResourceExhaustedError(
      absl::StrCat("the router already has ", options_.max_queued_requests,
                   " large requests waiting to be read; retry shortly"));
  exchange->Respond(busy_response(ApiErrorFromStatus(WithRetryAfter(busy, 1))));
}

http::Response OpenAiApi::Models(const http::Request& request) const {
  std::function<bool(std::string_view)> visible;
  if (gate_ != nullptr) {
    absl::StatusOr<std::function<bool(std::string_view)>> v =
        gate_->Visible(request.Header("authorization"));
    if (!v.ok()) return ApiErrorResponse(ApiErrorFromStatus(v.status()));
    visible = std::move(*v);
  }
  json data = json::array();
  for (const ModelCard& m : state_.Models()) {
    if (visible && !visible(m.id)) continue;
    data.push_back(
        {{"id", m.id}, {"object", "model"}, {"created", m.created}, {"owned_by", m.owned_by}});
  }
  json body = {{"object", "list"}, {"data", std::move(data)}};
  return http::Response::Json(200, body.dump(-1, ' ', false, json::error_handler_t::replace));
}

http::Response OpenAiApi::Ready() const {
  Readiness r = draining_.load() ? Readiness{false, "draining"} : state_.Ready();
  json body = {{"status", r.ready ? "ready" : "not_ready"}, {"detail", r.detail}};
  return http::Response::Json(r.ready ? 200 : 503,
                              body.dump(-1, ' ', false, json::error_handler_t::replace));
}

http::Response OpenAiApi::Metrics() const {
  PrometheusText out;
  metrics_.Write(out);
  WriteResponsesMetrics(out);
  WriteAnthropicMetrics(out);
  state_.WriteMetrics(out);
  return http::Response::Text(200, out.Take(), std::string(kPrometheusContentType));
}

}  // namespace deltaserve::router::api
