#include "router/routing/upstream_pool.h"

#include <string>
#include <vector>

#include "router/upstream/connection_pool.h"

namespace deltaserve::router {
namespace {

std::vector<double> TtftBounds() {
  return {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 60};
}

}  // namespace

UpstreamPool::State::State(const RoutingSettings& s)
    : breaker(s.circuit_failures, absl::Milliseconds(s.circuit_open_ms)), ttft(TtftBounds()) {}

UpstreamPool::UpstreamPool(RoutingSettings settings) : settings_(settings) {}

void UpstreamPool::SetSettings(const RoutingSettings& settings) {
  std::lock_guard<std::mutex> lock(mu_);
  settings_ = settings;
  for (auto& [name, state] : states_) {
    state.breaker.Reconfigure(settings.circuit_failures,
                              absl::Milliseconds(settings.circuit_open_ms));
  }
}

UpstreamPool::State& UpstreamPool::Get(std::string_view name) {
  auto it = states_.find(name);
  if (it == states_.end()) it = states_.emplace(std::string(name), State(settings_)).first;
  return it->second;
}

UpstreamAdmission UpstreamPool::TryBegin(const UpstreamConfig& upstream) {
  std::lock_guard<std::mutex> lock(mu_);
  State& s = Get(upstream.name);
  if (upstream.max_concurrent_requests > 0 &&
      s.counters.in_flight >= upstream.max_concurrent_requests) {
    return UpstreamAdmission::kSaturated;
  }
  if (!s.breaker.TryBeginCall(absl::Now())) return UpstreamAdmission::kCircuitOpen;
  ++s.counters.in_flight;
  return UpstreamAdmission::kAdmitted;
}

void UpstreamPool::EndSuccess(std::string_view name, double ttft_seconds,
                              const api::Usage& usage) {
  std::lock_guard<std::mutex> lock(mu_);
  State& s = Get(name);
  --s.counters.in_flight;
  ++s.counters.ok;
  s.counters.prompt_tokens += usage.prompt_tokens;
  s.counters.completion_tokens += usage.completion_tokens;
  if (ttft_seconds > 0) s.ttft.Observe(ttft_seconds);
  s.breaker.RecordCallSuccess(absl::Now());
}

void UpstreamPool::EndFailure(std::string_view name, std::string_view kind, bool health) {
  std::lock_guard<std::mutex> lock(mu_);
  State& s = Get(name);
  --s.counters.in_flight;
  ++s.counters.failed;
  ++s.counters.errors[std::string(kind)];
  if (health) {
    s.breaker.RecordFailure(absl::Now());
  } else {
    s.breaker.RecordNeutral(absl::Now());
  }
}

void UpstreamPool::EndNeutral(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  State& s = Get(name);
  --s.counters.in_flight;
  ++s.counters.cancelled;
  s.breaker.RecordNeutral(absl::Now());
}

void UpstreamPool::CountSkipped(std::string_view name, std::string_view kind) {
  std::lock_guard<std::mutex> lock(mu_);
  ++Get(name).counters.errors[std::string(kind)];
}

UpstreamPool::Counters UpstreamPool::counters(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = states_.find(name);
  return it == states_.end() ? Counters{} : it->second.counters;
}

void UpstreamPool::Write(api::PrometheusText& out,
                         const std::vector<UpstreamConfig>& upstreams) const {
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Time now = absl::Now();
  // Configured upstreams first (zeros before their first request), then any dropped by a reload
  // whose counters remain.
  std::vector<std::string> names;
  for (const UpstreamConfig& u : upstreams) names.push_back(u.name);
  for (const auto& [name, state] : states_) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  if (names.empty()) return;
  const State blank(settings_);
  auto state = [&](const std::string& name) -> const State& {
    auto it = states_.find(name);
    return it == states_.end() ? blank : it->second;
  };
  for (const std::string& n : names) {
    const Counters& c = state(n).counters;
    const std::pair<const char*, int64_t> outcomes[] = {
        {"ok", c.ok}, {"error", c.failed}, {"cancelled", c.cancelled}};
    for (const auto& [outcome, value] : outcomes) {
      out.Counter("deltaserve_router_upstream_requests_total",
                  "Requests sent to an upstream, by how they ended.",
                  {{"upstream", n}, {"outcome", outcome}}, static_cast<double>(value));
    }
  }
  for (const std::string& n : names) {
    for (const char* kind : {"connect", "timeout", "rate_limited", "server", "auth", "not_found",
                             "refused", "protocol", "stream", "untranslatable"}) {
      auto it = state(n).counters.errors.find(kind);
      out.Counter("deltaserve_router_upstream_errors_total",
                  "Upstream requests that failed, by kind (docs/upstreams.md).",
                  {{"upstream", n}, {"kind", kind}},
                  it == state(n).counters.errors.end() ? 0.0 : static_cast<double>(it->second));
    }
  }
  for (const std::string& n : names) {
    out.Histogram("deltaserve_router_upstream_ttft_seconds",
                  "Seconds from sending a request to an upstream to its first output.",
                  {{"upstream", n}}, state(n).ttft);
  }
  for (const std::string& n : names) {
    const Counters& c = state(n).counters;
    out.Counter("deltaserve_router_upstream_tokens_total",
                "Tokens an upstream reported in its usage.", {{"upstream", n}, {"type", "prompt"}},
                static_cast<double>(c.prompt_tokens));
    out.Counter("deltaserve_router_upstream_tokens_total",
                "Tokens an upstream reported in its usage.",
                {{"upstream", n}, {"type", "completion"}},
                static_cast<double>(c.completion_tokens));
  }
  for (const std::string& n : names) {
    const upstream::ConnectionPool::Counts c = upstream::ConnectionPool::Global().counts(n);
    const std::pair<const char*, int64_t> kinds[] = {{"new", c.opened}, {"reused", c.reused}};
    for (const auto& [kind, value] : kinds) {
      out.Counter("deltaserve_router_upstream_connections_total",
                  "Connections a request to an upstream used: newly opened, or kept from an "
                  "earlier request.",
                  {{"upstream", n}, {"kind", kind}}, static_cast<double>(value));
    }
  }
  for (const std::string& n : names) {
    out.Gauge("deltaserve_router_upstream_in_flight", "Requests in flight to an upstream.",
              {{"upstream", n}}, static_cast<double>(state(n).counters.in_flight));
  }
  for (const std::string& n : names) {
    out.Gauge("deltaserve_router_upstream_circuit_open",
              "1 while an upstream's circuit breaker keeps it out.", {{"upstream", n}},
              state(n).breaker.State(now) == CircuitState::kOpen ? 1.0 : 0.0);
  }
}

}  // namespace deltaserve::router
