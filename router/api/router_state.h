#pragma once
// What the informational endpoints (GET /v1/models, /ready, /metrics) need to know about the
// rest of the router. The router (routing, worker health) implements it; tests use a stub.

#include <cstdint>
#include <string>
#include <vector>

#include "router/api/prometheus_text.h"

namespace deltaserve::router::api {

// One entry of GET /v1/models.
struct ModelCard {
  std::string id;
  int64_t created = 0;  // Unix seconds
  std::string owned_by = "deltaserve";
};

struct Readiness {
  bool ready = false;
  std::string detail;  // e.g. "2 of 3 workers ready"
};

class RouterState {
 public:
  virtual ~RouterState() = default;
  // Models (and aliases) a client may name.
  virtual std::vector<ModelCard> Models() const = 0;
  // Ready when at least one worker can serve.
  virtual Readiness Ready() const = 0;
  // Appends the router's own metric families (workers, routing, fallbacks, ...).
  virtual void WriteMetrics(PrometheusText& out) const = 0;
};

}  // namespace deltaserve::router::api
