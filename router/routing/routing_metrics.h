#pragma once
// Counters of the routing layer for /metrics: calls and failures per worker, health-poll
// failures, circuit opens, retries, fallbacks taken (from → to), requests refused before any
// worker was tried (by reason), tokenizer fetches. Every degraded mode logs a line (stderr)
// and counts here. Thread-safe; WorkerPool owns one and RouterBackend counts into it.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "router/api/prometheus_text.h"

namespace deltaserve::router {

// Reasons a request is refused before (or after) trying workers; the `reason` label.
inline constexpr std::string_view kRejectNoWorker = "no_worker";            // 503
inline constexpr std::string_view kRejectSaturated = "saturated";           // 429
inline constexpr std::string_view kRejectContext = "context_length";        // 400
inline constexpr std::string_view kRejectUnknownModel = "unknown_model";    // 404
inline constexpr std::string_view kRejectExhausted = "attempts_exhausted";  // 503 / 429

// What routing by prefix did for one worker choice; the `outcome` label (docs/router.md,
// "Routing by prefix").
inline constexpr std::string_view kPrefixHit = "hit";                // the holder went first
inline constexpr std::string_view kPrefixOverloaded = "overloaded";  // holder busy: least loaded
inline constexpr std::string_view kPrefixMiss = "miss";              // no worker holds a prefix
inline constexpr std::string_view kPrefixOff = "off";  // knob off, or no worker snapshots

class RoutingMetrics {
 public:
  struct WorkerCounters {
    int64_t calls = 0;          // Generate calls started
    int64_t failures = 0;       // Generate calls that failed on the worker's side
    int64_t poll_failures = 0;  // GetWorkerInfo polls that failed
    int64_t circuit_opens = 0;
    int64_t bad_snapshot_roots = 0;  // models whose snapshot_key_root was not 16 bytes
  };

  void CountCall(std::string_view worker);
  void CountFailure(std::string_view worker);
  void CountPollFailure(std::string_view worker);
  void CountCircuitOpen(std::string_view worker);
  void CountBadSnapshotRoot(std::string_view worker);
  // One of kPrefixHit, kPrefixOverloaded, kPrefixMiss, kPrefixOff.
  void CountPrefixRouting(std::string_view outcome);
  void CountRetry();
  void CountFallback(std::string_view from_model, std::string_view to_model);
  void CountRejection(std::string_view reason);
  void CountTokenizerFetch();
  void CountErrorAfterStart();
  // A non-streaming generation's worker failed after producing tokens the client had not yet
  // received; they were dropped and the request retried.
  void CountDiscardedPartial();

  WorkerCounters worker(std::string_view address) const;
  int64_t retries() const;
  int64_t fallbacks() const;  // summed over model pairs
  int64_t rejections(std::string_view reason) const;
  int64_t tokenizer_fetches() const;
  int64_t errors_after_start() const;
  int64_t discarded_partials() const;
  int64_t prefix_routing(std::string_view outcome) const;

  // deltaserve_router_worker_{calls,failures,poll_failures,circuit_opens,
  // bad_snapshot_roots}_total{worker}, deltaserve_router_{retries,fallbacks,rejections,
  // tokenizer_fetches,stream_errors,partial_retries}_total,
  // deltaserve_router_prefix_routing_total{outcome}.
  void Write(api::PrometheusText& out) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, WorkerCounters, std::less<>> workers_;
  std::map<std::pair<std::string, std::string>, int64_t> fallbacks_;
  std::map<std::string, int64_t, std::less<>> rejections_;
  std::map<std::string, int64_t, std::less<>> prefix_routing_;
  int64_t retries_ = 0;
  int64_t tokenizer_fetches_ = 0;
  int64_t errors_after_start_ = 0;
  int64_t discarded_partials_ = 0;
};

}  // namespace deltaserve::router
