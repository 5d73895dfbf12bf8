#pragma once
// api::RouterState from the routing layer: the models clients may name (configured models and
// aliases; with no models configured, what the reachable workers serve, plus aliases),
// readiness (at least one worker available, or an upstream configured), and the routing metrics with worker gauges.

#include <cstdint>
#include <functional>
#include <vector>

#include "router/api/router_state.h"
#include "router/routing/router_backend.h"
#include "router/routing/worker_discovery.h"
#include "router/routing/worker_pool.h"

namespace deltaserve::router {

class RoutingState : public api::RouterState {
 public:
  // `pool` must outlive this. `created` is the `created` of every model card (Unix seconds;
  // the router's start time).
  RoutingState(ConfigSource config, const WorkerPool* pool, int64_t created);

  std::vector<api::ModelCard> Models() const override;
  api::Readiness Ready() const override;
  void WriteMetrics(api::PrometheusText& out) const override;
  // Adds the DNS lookups' metrics to WriteMetrics; `discovery` must outlive this.
  void SetDiscovery(const WorkerDiscovery* discovery) { discovery_ = discovery; }
  // Adds the families `write` appends (e.g. the placement controller's) to WriteMetrics. Before
  // the HTTP server starts only; what `write` refers to must outlive this.
  void AddMetrics(std::function<void(api::PrometheusText&)> write) {
    extra_metrics_.push_back(std::move(write));
  }

 private:
  ConfigSource config_;
  const WorkerPool* pool_;
  int64_t created_;
  const WorkerDiscovery* discovery_ = nullptr;
  std::vector<std::function<void(api::PrometheusText&)>> extra_metrics_;
};

}  // namespace deltaserve::router
