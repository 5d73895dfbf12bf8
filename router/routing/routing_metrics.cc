#include "router/routing/routing_metrics.h"

namespace deltaserve::router {

void RoutingMetrics::CountCall(std::string_view worker) {
  std::lock_guard<std::mutex> lock(mu_);
  ++workers_[std::string(worker)].calls;
}
void RoutingMetrics::CountFailure(std::string_view worker) {
  std::lock_guard<std::mutex> lock(mu_);
  ++workers_[std::string(worker)].failures;
}
void RoutingMetrics::CountPollFailure(std::string_view worker) {
  std::lock_guard<std::mutex> lock(mu_);
  ++workers_[std::string(worker)].poll_failures;
}
void RoutingMetrics::CountCircuitOpen(std::string_view worker) {
  std::lock_guard<std::mutex> lock(mu_);
  ++workers_[std::string(worker)].circuit_opens;
}
void RoutingMetrics::CountBadSnapshotRoot(std::string_view worker) {
  std::lock_guard<std::mutex> lock(mu_);
  ++workers_[std::string(worker)].bad_snapshot_roots;
}
void RoutingMetrics::CountPrefixRouting(std::string_view outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  ++prefix_routing_[std::string(outcome)];
}
void RoutingMetrics::CountRetry() {
  std::lock_guard<std::mutex> lock(mu_);
  ++retries_;
}
void RoutingMetrics::CountFallback(std::string_view from_model, std::string_view to_model) {
  std::lock_guard<std::mutex> lock(mu_);
  ++fallbacks_[{std::string(from_model), std::string(to_model)}];
}
void RoutingMetrics::CountRejection(std::string_view reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++rejections_[std::string(reason)];
}
void RoutingMetrics::CountTokenizerFetch() {
  std::lock_guard<std::mutex> lock(mu_);
  ++tokenizer_fetches_;
}
void RoutingMetrics::CountErrorAfterStart() {
  std::lock_guard<std::mutex> lock(mu_);
  ++errors_after_start_;
}
void RoutingMetrics::CountDiscardedPartial() {
  std::lock_guard<std::mutex> lock(mu_);
  ++discarded_partials_;
}

RoutingMetrics::WorkerCounters RoutingMetrics::worker(std::string_view address) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(address);
  return it == workers_.end() ? WorkerCounters{} : it->second;
}
int64_t RoutingMetrics::retries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retries_;
}
int64_t RoutingMetrics::fallbacks() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [key, count] : fallbacks_) n += count;
  return n;
}
int64_t RoutingMetrics::rejections(std::string_view reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rejections_.find(reason);
  return it == rejections_.end() ? 0 : it->second;
}
int64_t RoutingMetrics::tokenizer_fetches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokenizer_fetches_;
}
int64_t RoutingMetrics::errors_after_start() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_after_start_;
}
int64_t RoutingMetrics::discarded_partials() const {
  std::lock_guard<std::mutex> lock(mu_);
  return discarded_partials_;
}
int64_t RoutingMetrics::prefix_routing(std::string_view outcome) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = prefix_routing_.find(outcome);
  return it == prefix_routing_.end() ? 0 : it->second;
}

void RoutingMetrics::Write(api::PrometheusText& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  struct Family {
    const char* name;
    const char* help;
    int64_t WorkerCounters::*field;
  };
  static constexpr Family kFamilies[] = {
      {"deltaserve_router_worker_calls_total", "Generate calls started on a worker.",
       &WorkerCounters::calls},
      {"deltaserve_router_worker_failures_total",
       "Generate calls that failed on the worker's side (unreachable, UNAVAILABLE, INTERNAL, "
       "broken stream).",
       &WorkerCounters::failures},
      {"deltaserve_router_worker_poll_failures_total", "GetWorkerInfo health polls that failed.",
       &WorkerCounters::poll_failures},
      {"deltaserve_router_worker_circuit_opens_total", "Times a worker's circuit breaker opened.",
       &WorkerCounters::circuit_opens},
      {"deltaserve_router_worker_bad_snapshot_roots_total",
       "Models whose snapshot_key_root was malformed (not 16 bytes): not routed to by prefix.",
       &WorkerCounters::bad_snapshot_roots},
  };
  for (const Family& f : kFamilies) {
    for (const auto& [worker, counters] : workers_) {
      out.Counter(f.name, f.help, {{"worker", worker}}, static_cast<double>(counters.*f.field));
    }
  }
  out.Counter("deltaserve_router_retries_total",
              "Attempts after the first for one request (before its first token).", {},
              static_cast<double>(retries_));
  if (fallbacks_.empty()) {
    out.Counter("deltaserve_router_fallbacks_total",
                "Requests answered by a later model of an alias chain.", {}, 0);
  }
  for (const auto& [models, count] : fallbacks_) {
    out.Counter("deltaserve_router_fallbacks_total",
                "Requests answered by a later model of an alias chain.",
                {{"from", models.first}, {"to", models.second}}, static_cast<double>(count));
  }
  for (std::string_view reason :
       {kRejectNoWorker, kRejectSaturated, kRejectContext, kRejectUnknownModel, kRejectExhausted}) {
    auto it = rejections_.find(reason);
    out.Counter("deltaserve_router_rejections_total",
                "Requests the router answered with an error without a worker's answer.",
                {{"reason", std::string(reason)}},
                it == rejections_.end() ? 0.0 : static_cast<double>(it->second));
  }
  out.Counter("deltaserve_router_tokenizer_fetches_total",
              "GetWorkerInfo calls that fetched a tokenizer (new or changed digest).", {},
              static_cast<double>(tokenizer_fetches_));
  out.Counter("deltaserve_router_stream_errors_total",
              "Generations that failed after their first token (client saw an error event).", {},
              static_cast<double>(errors_after_start_));
  out.Counter("deltaserve_router_partial_retries_total",
              "Non-streaming generations whose worker failed mid-way, retried from scratch.", {},
              static_cast<double>(discarded_partials_));
  for (std::string_view outcome : {kPrefixHit, kPrefixOverloaded, kPrefixMiss, kPrefixOff}) {
    auto it = prefix_routing_.find(outcome);
    out.Counter("deltaserve_router_prefix_routing_total",
                "Worker choices by what routing by prefix did: hit (the worker holding the "
                "longest snapshot prefix went first), overloaded (it was busy; least loaded "
                "went first), miss (no worker holds one), off.",
                {{"outcome", std::string(outcome)}},
                it == prefix_routing_.end() ? 0.0 : static_cast<double>(it->second));
  }
}

}  // namespace deltaserve::router
