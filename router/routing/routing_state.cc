#include "router/routing/routing_state.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace deltaserve::router {

RoutingState::RoutingState(ConfigSource config, const WorkerPool* pool, int64_t created)
    : config_(std::move(config)), pool_(pool), created_(created) {}

std::vector<api::ModelCard> RoutingState::Models() const {
  const std::shared_ptr<const RouterConfig> config = config_();
  std::vector<std::string> names;
  if (config->models.empty()) {
    names = pool_->ServedModelNames();
  } else {
    for (const ModelConfig& m : config->models) names.push_back(m.name);
  }
  for (const UpstreamConfig& u : config->upstreams) {
    if (std::find(names.begin(), names.end(), u.name) == names.end()) names.push_back(u.name);
  }
  for (const AliasConfig& a : config->aliases) {
    if (std::find(names.begin(), names.end(), a.name) == names.end()) names.push_back(a.name);
  }
  std::vector<api::ModelCard> cards;
  cards.reserve(names.size());
  for (std::string& n : names) cards.push_back(api::ModelCard{std::move(n), created_});
  return cards;
}

api::Readiness RoutingState::Ready() const {
  const int ready = pool_->ReadyWorkers();
  const int total = pool_->WorkerCount();
  // An upstream model can serve without any worker (docs/upstreams.md).
  const size_t upstreams = config_()->upstreams.size();
  return api::Readiness{
      ready > 0 || upstreams > 0,
      absl::StrCat(ready, " of ", total, " workers ready",
                   upstreams > 0 ? absl::StrCat(", ", upstreams, " upstream(s)") : "")};
}

void RoutingState::WriteMetrics(api::PrometheusText& out) const {
  pool_->WriteMetrics(out);
  if (discovery_ != nullptr) discovery_->WriteMetrics(out);
  for (const auto& write : extra_metrics_) write(out);
}

}  // namespace deltaserve::router
