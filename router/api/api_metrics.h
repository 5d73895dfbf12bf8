#pragma once
// The HTTP/OpenAI layer's own metrics, thread-safe, written into GET /metrics next to the
// router's (RouterState::WriteMetrics). Names start with deltaserve_router_; every family,
// its labels and its vLLM/SGLang counterpart are listed in docs/metrics.md.
//
// Two views: per HTTP exchange (route, method, status code, duration; every route, recorded by
// the server's on_exchange_done), and per generation, labelled with the model and endpoint
// (requests by status code, time to first token, inter-token latency, end-to-end latency,
// routing/queue time, tokens). A generation endpoint reports through a GenerationTimer:
//
//   GenerationTimer timer(metrics, "chat_completions", request.model);
//   timer.Started(start.model);     // GenerationObserver::OnStart
//   timer.Tokens(delta.tokens);     // each OnDelta
//   timer.Finished(end.usage, end.finish_reason);   // or timer.Failed(api_error)
//
// Latency buckets (seconds) span a GPU's millisecond decode steps and a CPU's second-long
// prompts alike; they are listed in docs/metrics.md ("Buckets").

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "router/api/openai_response.h"
#include "router/api/prometheus_text.h"
#include "router/http/http_server.h"

namespace deltaserve::router::api {

class ApiMetrics {
 public:
  ApiMetrics();

  // For HttpServerOptions::on_exchange_done: requests by route/method/status, duration.
  void RecordExchange(const http::ExchangeRecord& record);
  void StreamStarted() { active_streams_.fetch_add(1, std::memory_order_relaxed); }
  void StreamEnded() { active_streams_.fetch_sub(1, std::memory_order_relaxed); }
  // A generation was cancelled because its client disconnected.
  void RecordClientGone() { client_gone_.fetch_add(1, std::memory_order_relaxed); }
  // A generation failed (`type` is the OpenAI error type).
  void RecordGenerationError(const std::string& type);
  // A request refused 429 by an API key's rate or concurrency limit (router/auth), by key name.
  void RecordRateLimited(std::string_view key);

  // Per-generation series (GenerationTimer calls these). `model` is the model that answered,
  // or for a request refused before any worker accepted it, the name it asked for when that
  // name has answered before, else "other" (a client cannot mint label values).
  void RecordStarted(std::string_view model, double routing_seconds);
  void RecordTimeToFirstToken(std::string_view model, double seconds);
  void RecordInterTokenLatency(std::string_view model, double seconds, uint64_t tokens);
  void RecordRequest(std::string_view endpoint, std::string_view model, int http_status,
                     double e2e_seconds);
  void RecordFinished(std::string_view model, const Usage& usage, FinishReason reason);
  // Older, model-less forms (counted under model "other"); new endpoints use GenerationTimer.
  void RecordTimeToFirstToken(double seconds) { RecordTimeToFirstToken("other", seconds); }
  void RecordFinished(const Usage& usage, FinishReason reason) {
    RecordFinished("other", usage, reason);
  }
  // The label value for a model name (see above).
  std::string ModelLabel(std::string_view name) const;

  void Write(PrometheusText& out) const;

 private:
  struct ModelSeries {
    ModelSeries();
    BucketHistogram ttft, itl, e2e, routing;
    uint64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  };
  ModelSeries& Model(std::string_view model);  // needs mu_

  mutable std::mutex mu_;
  // (route, method, status) -> count; unregistered paths count under route "other".
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_;
  uint64_t connections_refused_ = 0;                  // over the HTTP server's max_connections
  std::map<std::string, BucketHistogram> durations_;  // by route
  std::map<std::string, uint64_t> finish_reasons_;
  std::map<std::string, uint64_t> errors_;
  std::map<std::string, uint64_t, std::less<>> rate_limited_;  // by key name
  // (endpoint, model, status) -> generations that ended so.
  std::map<std::tuple<std::string, std::string, int>, uint64_t> generations_;
  std::map<std::string, ModelSeries, std::less<>> models_;
  std::set<std::string, std::less<>> answered_;  // models that answered (ModelLabel)
  std::atomic<int64_t> active_streams_{0};
  std::atomic<uint64_t> client_gone_{0};
};

// One generation's clock, for a generation endpoint's observer (not thread-safe: the
// observer's calls never overlap). Created when the request has been parsed; reports into
// ApiMetrics at most once per event, and exactly one Finished or Failed.
class GenerationTimer {
 public:
  GenerationTimer(ApiMetrics& metrics, std::string endpoint, std::string requested_model);

  // A worker accepted the generation (OnStart); `model` answers it ("" keeps the requested).
  void Started(std::string_view model);
  // A delta of `tokens` generated tokens arrived: the first is the time to first token, each
  // later one an inter-token gap spread over its tokens.
  void Tokens(int64_t tokens);
  void Finished(const Usage& usage, FinishReason reason);
  void Failed(int http_status);

  const std::string& model() const { return model_; }
  // Seconds from construction to the first token, -1 before it.
  double ttft_seconds() const { return ttft_seconds_; }
  double elapsed_seconds() const;

 private:
  ApiMetrics& metrics_;
  const std::string endpoint_;
  std::string model_;
  bool started_ = false, first_token_ = false, done_ = false;
  double ttft_seconds_ = -1;
  const std::chrono::steady_clock::time_point begin_;
  std::chrono::steady_clock::time_point last_token_;
};

}  // namespace deltaserve::router::api
