#pragma once
// Workers found by DNS: a `workers` entry written `dns:///NAME:PORT` (a Kubernetes headless
// Service, or any name with several A/AAAA records) stands for every address NAME resolves to,
// each a worker at that address and PORT. WorkerDiscovery resolves such names with getaddrinfo
// on a background thread every `interval`, and hands the expanded list (plain host:port
// entries as they are, each DNS name replaced by its addresses) to WorkerPool::SetWorkers
// whenever it changes: new pods are polled and used, vanished ones are dropped while their
// calls in flight finish on their tickets (worker_pool.h). Nothing of this is used when no
// entry starts with dns:///.
//
//   WorkerPool pool({}, config->routing);
//   WorkerDiscovery discovery(&pool, SystemResolver());
//   discovery.SetEndpoints(config->workers, absl::Milliseconds(config->routing.dns_interval_ms));
//   pool.Start();
//   discovery.Start();               // re-resolves until Stop() or the destructor
//   // SIGHUP: discovery.SetEndpoints(new->workers, ...) instead of pool.SetWorkers(...)
//
// Degraded mode: a lookup that fails (the DNS server unreachable, NXDOMAIN because no pod is
// ready) keeps the addresses the name had before, so a DNS hiccup never empties the pool; it is
// logged on the transition and counted in deltaserve_router_dns_lookups_total{result="error"}.
// The workers kept are still health-polled, so those that are really gone are not routed to.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "router/api/prometheus_text.h"
#include "router/config/router_config.h"

namespace deltaserve::router {

class WorkerPool;

// `dns:///NAME:PORT` taken apart.
struct DnsTarget {
  std::string name;
  int port = 0;
};

// The target of a `dns:///` address; nullopt for any other address (host:port). Malformed DNS
// addresses are refused by the config's validation (router_config_validation.h) before this.
std::optional<DnsTarget> ParseDnsTarget(std::string_view address);

// Returns the addresses `name` resolves to, as numeric strings ("10.0.0.5", "fd00::5"), or an
// error (the name does not resolve, the resolver is unreachable).
using HostResolver = std::function<absl::StatusOr<std::vector<std::string>>(const std::string&)>;

// getaddrinfo(name, AF_UNSPEC, SOCK_STREAM): A and AAAA records, deduplicated and sorted.
HostResolver SystemResolver();

// The pool's list: `configured` with each dns:/// entry replaced by one endpoint per address in
// `resolved[name]` ("IP:PORT", IPv6 in brackets), in configured order, duplicates dropped (the
// first wins). A DNS entry's channel is copied to its addresses; with TLS and no
// tls_server_name, the name checked in the worker's certificate is the DNS name (a pod's
// certificate names the Service, not the pod's IP). Names missing from `resolved` add nothing.
std::vector<WorkerEndpoint> ExpandWorkers(
    const std::vector<WorkerEndpoint>& configured,
    const std::map<std::string, std::vector<std::string>>& resolved);

class WorkerDiscovery {
 public:
  // `pool` must outlive this.
  WorkerDiscovery(WorkerPool* pool, HostResolver resolver);
  ~WorkerDiscovery();  // Stop()
  WorkerDiscovery(const WorkerDiscovery&) = delete;
  WorkerDiscovery& operator=(const WorkerDiscovery&) = delete;

  // Start-up and reload: takes the configured list, resolves its DNS names at once (on the
  // caller's thread, so the pool starts with the addresses) and gives the pool the expanded
  // list. `interval` is the re-resolution period from now on.
  void SetEndpoints(const std::vector<WorkerEndpoint>& configured, absl::Duration interval);
  // Starts the re-resolving thread (a no-op while no entry is a DNS name: it only sleeps).
  void Start();
  // Stops the thread. Idempotent.
  void Stop();
  // Resolves every DNS name once now and updates the pool if anything changed (the thread's
  // step; tests call it directly).
  void Refresh();

  // deltaserve_router_dns_lookups_total{name,result} and deltaserve_router_dns_addresses{name}.
  void WriteMetrics(api::PrometheusText& out) const;

 private:
  void Loop();
  // Resolves the names of `configured_` (mu_ not held while the resolver runs), then publishes.
  void ResolveAndPublish(bool force);

  WorkerPool* const pool_;
  const HostResolver resolver_;
  // Serialises ResolveAndPublish: a reload and the thread never interleave their publishes.
  std::mutex publish_mu_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WorkerEndpoint> configured_;
  absl::Duration interval_ = absl::Seconds(5);
  std::map<std::string, std::vector<std::string>> resolved_;        // name -> addresses, last good
  std::map<std::string, bool> failing_;                             // name -> last lookup failed
  std::map<std::pair<std::string, std::string>, int64_t> lookups_;  // (name, result) -> count
  std::vector<WorkerEndpoint> published_;
  bool published_once_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace deltaserve::router
