#pragma once
// The HTTP/OpenAI layer's own metrics (requests by route and status, latency, SSE streams,
// time to first token, tokens, client disconnects), thread-safe, written into GET /metrics
// next to the router's (RouterState::WriteMetrics). Names start with deltaserve_router_.

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "router/api/openai_response.h"
#include "router/api/prometheus_text.h"
#include "router/http/http_server.h"

namespace deltaserve::router::api {

// Fixed-bucket histogram (not thread-safe by itself; ApiMetrics locks around it).
struct BucketHistogram {
  explicit BucketHistogram(std::vector<double> bounds)
      : upper_bounds(std::move(bounds)), counts(upper_bounds.size() + 1, 0) {}
  void Observe(double v);
  std::vector<double> upper_bounds;
  std::vector<uint64_t> counts;  // per bucket, last is +Inf
  double sum = 0;
};

class ApiMetrics {
 public:
  ApiMetrics();

  // For HttpServerOptions::on_exchange_done: requests by route/method/status, duration.
  void RecordExchange(const http::ExchangeRecord& record);
  void StreamStarted() { active_streams_.fetch_add(1, std::memory_order_relaxed); }
  void StreamEnded() { active_streams_.fetch_sub(1, std::memory_order_relaxed); }
  void RecordTimeToFirstToken(double seconds);
  void RecordFinished(const Usage& usage, FinishReason reason);
  // A generation was cancelled because its client disconnected.
  void RecordClientGone() { client_gone_.fetch_add(1, std::memory_order_relaxed); }
  // A generation failed (`type` is the OpenAI error type).
  void RecordGenerationError(const std::string& type);

  void Write(PrometheusText& out) const;

 private:
  mutable std::mutex mu_;
  // (route, method, status) -> count; unregistered paths count under route "other".
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_;
  uint64_t connections_refused_ = 0;  // over the HTTP server's max_connections
  std::map<std::string, BucketHistogram> durations_;  // by route
  BucketHistogram ttft_;
  std::map<std::string, uint64_t> finish_reasons_;
  std::map<std::string, uint64_t> errors_;
  uint64_t prompt_tokens_ = 0;
  uint64_t cached_tokens_ = 0;
  uint64_t completion_tokens_ = 0;
  std::atomic<int64_t> active_streams_{0};
  std::atomic<uint64_t> client_gone_{0};
};

}  // namespace deltaserve::router::api
