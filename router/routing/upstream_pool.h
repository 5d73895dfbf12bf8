// The router's side of its upstreams (docs/upstreams.md): per upstream name, a circuit breaker
// (RoutingSettings::circuit_failures consecutive failures keep it out for circuit_open_ms, then
// one trial), the requests in flight against its max_concurrent_requests, and its metrics —
// requests by outcome, errors by kind, time to first output, tokens. State is kept by name, so
// it survives a SIGHUP reload that keeps the upstream. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "router/api/completion_backend.h"
#include "router/api/prometheus_text.h"
#include "router/config/router_config.h"
#include "router/routing/circuit_breaker.h"

namespace deltaserve::router {

enum class UpstreamAdmission { kAdmitted, kCircuitOpen, kSaturated };

class UpstreamPool {
 public:
  explicit UpstreamPool(RoutingSettings settings = {});
  void SetSettings(const RoutingSettings& settings);

  // Takes a place for one request (kAdmitted), or says why not. Every kAdmitted is followed by
  // exactly one End*.
  UpstreamAdmission TryBegin(const UpstreamConfig& upstream);
  // The request's answer ended well: `ttft_seconds` to its first output, the upstream's usage.
  void EndSuccess(std::string_view name, double ttft_seconds, const api::Usage& usage);
  // It failed with `kind` (upstream_call.h's kError*). `health` false for failures that say
  // nothing about the upstream's health (the request refused as invalid, rate limits).
  void EndFailure(std::string_view name, std::string_view kind, bool health);
  // Cancelled by the client.
  void EndNeutral(std::string_view name);
  // A request never sent (it cannot be said in the upstream's API): counted under `kind`, no
  // place taken, the breaker untouched.
  void CountSkipped(std::string_view name, std::string_view kind);

  // deltaserve_router_upstream_requests_total{upstream,outcome},
  // deltaserve_router_upstream_errors_total{upstream,kind},
  // deltaserve_router_upstream_ttft_seconds{upstream} (histogram),
  // deltaserve_router_upstream_tokens_total{upstream,type}, deltaserve_router_upstream_in_flight,
  // deltaserve_router_upstream_circuit_open{upstream} and, from the connection pool,
  // deltaserve_router_upstream_connections_total{upstream,kind}; `upstreams`: the ones
  // configured now (listed even before their first request).
  void Write(api::PrometheusText& out, const std::vector<UpstreamConfig>& upstreams) const;

  struct Counters {
    int64_t ok = 0, failed = 0, cancelled = 0;
    std::map<std::string, int64_t, std::less<>> errors;  // by kind
    int64_t prompt_tokens = 0, completion_tokens = 0;
    int64_t in_flight = 0;
  };
  Counters counters(std::string_view name) const;

 private:
  struct State {
    explicit State(const RoutingSettings& s);
    CircuitBreaker breaker;
    Counters counters;
    api::BucketHistogram ttft;
  };
  State& Get(std::string_view name);  // under mu_

  mutable std::mutex mu_;
  RoutingSettings settings_;
  std::map<std::string, State, std::less<>> states_;
};

}  // namespace deltaserve::router
