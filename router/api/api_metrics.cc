#include "router/api/api_metrics.h"

#include <algorithm>

namespace deltaserve::router::api {
namespace {

// Seconds; spans a cached /health (~50 us) to a long non-streamed generation.
const std::vector<double> kDurationBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                             0.05,   0.1,   0.25,   0.5,   1,    2.5,
                                             5,      10,    30,     60,    120,  300};
// Time to first token: a GPU answers a short prompt in ~10 ms, a CPU a 4k-token prompt in tens
// of seconds (docs/metrics.md, "Buckets").
const std::vector<double> kTtftBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                         0.15,  0.2,    0.3,   0.5,  0.75,  1,    1.5,   2,
                                         3,     5,      7.5,   10,   20,    30,   60,    120};
// Per output token: a GPU decodes in 5-30 ms, a CPU in 20-500 ms.
const std::vector<double> kItlBounds = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03,
                                        0.04,  0.05,   0.075, 0.1,  0.15,  0.2,  0.3,
                                        0.5,   0.75,   1,     2.5,  5};
// A whole request: milliseconds (a refusal) to twenty minutes (a long CPU generation).
const std::vector<double> kE2eBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,   2.5, 5,   10,  15,
                                        20,   30,    45,   60,  90,   120, 180, 300, 600, 1200};
// Routing and queueing in the router, until a worker accepts: microseconds when idle, seconds
// when requests wait for a request thread or retry across workers.
const std::vector<double> kRoutingBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                            0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                            1,      2.5,     5,      10};

// Distinct model label values kept at most (answered models; more count as "other").
constexpr size_t kMaxModels = 256;

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

ApiMetrics::ModelSeries::ModelSeries()
    : ttft(kTtftBounds), itl(kItlBounds), e2e(kE2eBounds), routing(kRoutingBounds) {}

ApiMetrics::ApiMetrics() = default;

void ApiMetrics::RecordExchange(const http::ExchangeRecord& r) {
  std::string route = r.route_matched ? r.path : "other";
  std::lock_guard<std::mutex> lock(mu_);
  if (r.over_connection_limit) {
    ++connections_refused_;
    return;  // no request was read: not an exchange of any route
  }
  ++requests_[{route, r.route_matched ? r.method : "other", r.status}];
  auto it = durations_.find(route);
  if (it == durations_.end())
    it = durations_.emplace(route, BucketHistogram(kDurationBounds)).first;
  it->second.Observe(r.seconds);
}

ApiMetrics::ModelSeries& ApiMetrics::Model(std::string_view model) {
  auto it = models_.find(model);
  if (it == models_.end()) it = models_.emplace(std::string(model), ModelSeries()).first;
  return it->second;
}

std::string ApiMetrics::ModelLabel(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return answered_.count(name) > 0 ? std::string(name) : std::string("other");
}

void ApiMetrics::RecordStarted(std::string_view model, double routing_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  // Names come from the router's config and its workers, never from a client as such; the cap
  // only bounds a pathological config.
  if (answered_.count(model) == 0 && answered_.size() < kMaxModels) answered_.emplace(model);
  Model(answered_.count(model) > 0 ? model : "other").routing.Observe(routing_seconds);
}

void ApiMetrics::RecordTimeToFirstToken(std::string_view model, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  Model(model).ttft.Observe(seconds);
}

void ApiMetrics::RecordInterTokenLatency(std::string_view model, double seconds, uint64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  Model(model).itl.ObserveN(seconds, tokens);
}

void ApiMetrics::RecordRequest(std::string_view endpoint, std::string_view model, int http_status,
                               double e2e_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ++generations_[{std::string(endpoint), std::string(model), http_status}];
  Model(model).e2e.Observe(e2e_seconds);
}

void ApiMetrics::RecordFinished(std::string_view model, const Usage& usage, FinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ModelSeries& m = Model(model);
  m.prompt_tokens += static_cast<uint64_t>(std::max<int64_t>(0, usage.prompt_tokens));
  m.cached_tokens += static_cast<uint64_t>(std::max<int64_t>(0, usage.cached_tokens));
  m.completion_tokens += static_cast<uint64_t>(std::max<int64_t>(0, usage.completion_tokens));
  ++finish_reasons_[std::string(FinishReasonName(reason))];
}

void ApiMetrics::RecordGenerationError(const std::string& type) {
  std::lock_guard<std::mutex> lock(mu_);
  ++errors_[type];
}

void ApiMetrics::RecordRateLimited(std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  ++rate_limited_[std::string(key)];
}

void ApiMetrics::Write(PrometheusText& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, n] : requests_) {
    const auto& [route, method, status] = key;
    out.Counter("deltaserve_router_http_requests_total", "HTTP requests answered.",
                {{"route", route}, {"method", method}, {"code", std::to_string(status)}},
                static_cast<double>(n));
  }
  out.Counter("deltaserve_router_http_connections_refused_total",
              "Connections answered 503 and closed because max_connections were open.", {},
              static_cast<double>(connections_refused_));
  for (const auto& [route, h] : durations_) {
    out.Histogram("deltaserve_router_http_request_duration_seconds",
                  "From the end of the request to the end of the answer (whole stream).",
                  {{"route", route}}, h);
  }
  out.Gauge("deltaserve_router_sse_streams_active", "SSE responses being streamed.", {},
            static_cast<double>(active_streams_.load(std::memory_order_relaxed)));
  for (const auto& [key, n] : generations_) {
    const auto& [endpoint, model, status] = key;
    out.Counter("deltaserve_router_requests_total",
                "Generation requests by endpoint, model and the HTTP status they ended with (an "
                "error event after the first token counts with its error's status).",
                {{"endpoint", endpoint}, {"model", model}, {"code", std::to_string(status)}},
                static_cast<double>(n));
  }
  struct Hist {
    const char* name;
    const char* help;
    BucketHistogram ModelSeries::*field;
  };
  static constexpr Hist kHistograms[] = {
      {"deltaserve_router_time_to_first_token_seconds",
       "From the request (body read) to its first generated token.", &ModelSeries::ttft},
      {"deltaserve_router_inter_token_latency_seconds",
       "Gap between generated tokens as the router receives them (a delta of n tokens counts n "
       "gaps of 1/n its delay).",
       &ModelSeries::itl},
      {"deltaserve_router_e2e_request_latency_seconds",
       "From the request (body read) to its last token or its error.", &ModelSeries::e2e},
      {"deltaserve_router_routing_seconds",
       "From the request (body read) until a worker accepted it: queueing for a request thread, "
       "rendering, worker choice, retries and fallbacks.",
       &ModelSeries::routing},
  };
  for (const Hist& h : kHistograms) {
    for (const auto& [model, m] : models_)
      out.Histogram(h.name, h.help, {{"model", model}}, m.*h.field);
  }
  struct Tokens {
    const char* name;
    const char* help;
    uint64_t ModelSeries::*field;
  };
  static constexpr Tokens kTokens[] = {
      {"deltaserve_router_prompt_tokens_total", "Prompt tokens of finished generations.",
       &ModelSeries::prompt_tokens},
      {"deltaserve_router_cached_prompt_tokens_total",
       "Prompt tokens served from the prefix cache.", &ModelSeries::cached_tokens},
      {"deltaserve_router_completion_tokens_total", "Tokens generated by finished generations.",
       &ModelSeries::completion_tokens},
  };
  for (const Tokens& t : kTokens) {
    for (const auto& [model, m] : models_) {
      out.Counter(t.name, t.help, {{"model", model}}, static_cast<double>(m.*t.field));
    }
  }
  for (const auto& [reason, n] : finish_reasons_) {
    out.Counter("deltaserve_router_generations_total", "Finished generations by finish reason.",
                {{"finish_reason", reason}}, static_cast<double>(n));
  }
  for (const auto& [type, n] : errors_) {
    out.Counter("deltaserve_router_generation_errors_total", "Generations that failed.",
                {{"type", type}}, static_cast<double>(n));
  }
  out.Counter("deltaserve_router_client_disconnects_total",
              "Generations cancelled because the client disconnected.", {},
              static_cast<double>(client_gone_.load(std::memory_order_relaxed)));
  if (rate_limited_.empty()) {
    out.Counter("deltaserve_router_rate_limited_total",
                "Requests refused 429 by an API key's rate or concurrency limit, by key name.", {},
                0);
  }
  for (const auto& [key, n] : rate_limited_) {
    out.Counter("deltaserve_router_rate_limited_total",
                "Requests refused 429 by an API key's rate or concurrency limit, by key name.",
                {{"key", key}}, static_cast<double>(n));
  }
}

GenerationTimer::GenerationTimer(ApiMetrics& metrics, std::string endpoint,
                                 std::string requested_model)
    : metrics_(metrics),
      endpoint_(std::move(endpoint)),
      model_(std::move(requested_model)),
      begin_(std::chrono::steady_clock::now()) {}

double GenerationTimer::elapsed_seconds() const { return Since(begin_); }

void GenerationTimer::Started(std::string_view model) {
  if (started_) return;
  started_ = true;
  if (!model.empty()) model_ = std::string(model);
  metrics_.RecordStarted(model_, Since(begin_));
  model_ = metrics_.ModelLabel(model_);
}

void GenerationTimer::Tokens(int64_t tokens) {
  if (tokens <= 0 || done_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!first_token_) {
    first_token_ = true;
    ttft_seconds_ = std::chrono::duration<double>(now - begin_).count();
    metrics_.RecordTimeToFirstToken(model_, ttft_seconds_);
    // The first token's gap is its TTFT; the rest of its delta came with it.
    if (tokens > 1) metrics_.RecordInterTokenLatency(model_, 0, static_cast<uint64_t>(tokens - 1));
  } else {
    const double gap = std::chrono::duration<double>(now - last_token_).count();
    metrics_.RecordInterTokenLatency(model_, gap / static_cast<double>(tokens),
                                     static_cast<uint64_t>(tokens));
  }
  last_token_ = now;
}

void GenerationTimer::Finished(const Usage& usage, FinishReason reason) {
  if (done_) return;
  done_ = true;
  if (!started_) model_ = metrics_.ModelLabel(model_);
  metrics_.RecordFinished(model_, usage, reason);
  metrics_.RecordRequest(endpoint_, model_, 200, Since(begin_));
}

void GenerationTimer::Failed(int http_status) {
  if (done_) return;
  done_ = true;
  if (!started_) model_ = metrics_.ModelLabel(model_);
  metrics_.RecordRequest(endpoint_, model_, http_status, Since(begin_));
}

}  // namespace deltaserve::router::api
