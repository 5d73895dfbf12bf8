#include "router/routing/worker_discovery.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/str_util.h"
#include "router/routing/internal/log.h"
#include "router/routing/worker_pool.h"

namespace deltaserve::router {

using internal::LogRouting;

namespace {

constexpr std::string_view kDnsScheme = "dns:///";

bool SameEndpoints(const std::vector<WorkerEndpoint>& a, const std::vector<WorkerEndpoint>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].address != b[i].address || a[i].channel != b[i].channel) return false;
  }
  return true;
}

}  // namespace

std::optional<DnsTarget> ParseDnsTarget(std::string_view address) {
  if (!address.starts_with(kDnsScheme)) return std::nullopt;
  const std::string_view rest = address.substr(kDnsScheme.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  DnsTarget t;
  if (!absl::SimpleAtoi(common::Sv(rest.substr(colon + 1)), &t.port) || t.port < 1 ||
      t.port > 65535) {
    return std::nullopt;
  }
  t.name = std::string(rest.substr(0, colon));
  return t;
}

HostResolver SystemResolver() {
  return [](const std::string& name) -> absl::StatusOr<std::vector<std::string>> {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &list);
    if (rc != 0) {
      return absl::UnavailableError(absl::StrCat("getaddrinfo(", name, "): ", gai_strerror(rc)));
    }
    std::set<std::string> found;
    for (const addrinfo* a = list; a != nullptr; a = a->ai_next) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw = nullptr;
      if (a->ai_family == AF_INET) {
        raw = &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr;
      } else if (a->ai_family == AF_INET6) {
        raw = &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr;
      }
      if (raw != nullptr && inet_ntop(a->ai_family, raw, text, sizeof(text)) != nullptr) {
        found.insert(text);
      }
    }
    freeaddrinfo(list);
    if (found.empty()) {
      return absl::UnavailableError(absl::StrCat("getaddrinfo(", name, "): no address"));
    }
    return std::vector<std::string>(found.begin(), found.end());
  };
}

std::vector<WorkerEndpoint> ExpandWorkers(
    const std::vector<WorkerEndpoint>& configured,
    const std::map<std::string, std::vector<std::string>>& resolved) {
  std::vector<WorkerEndpoint> out;
  std::set<std::string> seen;
  auto add = [&](WorkerEndpoint e) {
    if (seen.insert(e.address).second) out.push_back(std::move(e));
  };
  for (const WorkerEndpoint& e : configured) {
    const std::optional<DnsTarget> target = ParseDnsTarget(e.address);
    if (!target) {
      add(e);
      continue;
    }
    auto it = resolved.find(target->name);
    if (it == resolved.end()) continue;
    for (const std::string& ip : it->second) {
      WorkerEndpoint w;
      const bool v6 = ip.find(':') != std::string::npos;
      w.address = absl::StrCat(v6 ? "[" : "", ip, v6 ? "]" : "", ":", target->port);
      w.channel = e.channel;
      if (w.channel && !w.channel->ca_pem.empty() && w.channel->tls_server_name.empty()) {
        w.channel->tls_server_name = target->name;
      }
      add(std::move(w));
    }
  }
  return out;
}

WorkerDiscovery::WorkerDiscovery(WorkerPool* pool, HostResolver resolver)
    : pool_(pool), resolver_(std::move(resolver)) {}

WorkerDiscovery::~WorkerDiscovery() { Stop(); }

void WorkerDiscovery::SetEndpoints(const std::vector<WorkerEndpoint>& configured,
                                   absl::Duration interval) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    configured_ = configured;
    interval_ = interval;
  }
  ResolveAndPublish(/*force=*/true);
  cv_.notify_all();  // the thread's next round counts from now
}

void WorkerDiscovery::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Loop(); });
}

void WorkerDiscovery::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WorkerDiscovery::Refresh() { ResolveAndPublish(/*force=*/false); }

void WorkerDiscovery::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    // Woken early by SetEndpoints (a reload) or Stop; either way the period restarts.
    if (cv_.wait_for(lock, absl::ToChronoMilliseconds(interval_)) == std::cv_status::no_timeout) {
      continue;
    }
    if (stopping_) break;
    lock.unlock();
    ResolveAndPublish(/*force=*/false);
    lock.lock();
  }
}

void WorkerDiscovery::ResolveAndPublish(bool force) {
  std::lock_guard<std::mutex> publish(publish_mu_);
  std::vector<WorkerEndpoint> configured;
  {
    std::lock_guard<std::mutex> lock(mu_);
    configured = configured_;
  }
  std::set<std::string> names;
  for (const WorkerEndpoint& e : configured) {
    if (std::optional<DnsTarget> t = ParseDnsTarget(e.address)) names.insert(t->name);
  }
  // Lookups may block for seconds (a resolver timeout): no lock held meanwhile.
  std::map<std::string, absl::StatusOr<std::vector<std::string>>> answers;
  for (const std::string& name : names) answers.emplace(name, resolver_(name));

  std::vector<WorkerEndpoint> expanded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, answer] : answers) {
      const bool failed = !answer.ok();
      ++lookups_[{name, failed ? "error" : "ok"}];
      const bool was_failing = failing_[name];
      failing_[name] = failed;
      if (failed) {
        if (!was_failing) {
          const auto known = resolved_.find(name);
          LogRouting(
              absl::StrCat("dns:///", name, ": lookup failed, keeping ",
                           known == resolved_.end() ? 0 : known->second.size(),
                           " known address(es) until it succeeds: ", answer.status().message()));
        }
        continue;
      }
      std::vector<std::string>& now = *answer;
      std::vector<std::string>& before = resolved_[name];
      if (was_failing) LogRouting(absl::StrCat("dns:///", name, ": lookups succeed again"));
      if (now != before) {
        LogRouting(absl::StrCat("dns:///", name, " resolves to ", now.size(),
                                " address(es): ", absl::StrJoin(now, ", ")));
        before = std::move(now);
      }
    }
    // Names no longer configured are forgotten (a reload removed them).
    for (auto it = resolved_.begin(); it != resolved_.end();) {
      it = names.contains(it->first) ? std::next(it) : resolved_.erase(it);
    }
    for (auto it = failing_.begin(); it != failing_.end();) {
      it = names.contains(it->first) ? std::next(it) : failing_.erase(it);
    }
    expanded = ExpandWorkers(configured, resolved_);
    if (!force && published_once_ && SameEndpoints(expanded, published_)) return;
    published_ = expanded;
    published_once_ = true;
  }
  // Under publish_mu_ only: the pool takes its own lock, and a concurrent Refresh waits here.
  pool_->SetWorkers(expanded);
}

void WorkerDiscovery::WriteMetrics(api::PrometheusText& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, n] : lookups_) {
    out.Counter("deltaserve_router_dns_lookups_total",
                "Lookups of dns:/// worker names, by result (error: the name's last known "
                "addresses are kept).",
                {{"name", key.first}, {"result", key.second}}, static_cast<double>(n));
  }
  for (const auto& [name, addresses] : resolved_) {
    out.Gauge("deltaserve_router_dns_addresses",
              "Addresses a dns:/// worker name resolves to (the last successful lookup).",
              {{"name", name}}, static_cast<double>(addresses.size()));
  }
}

}  // namespace deltaserve::router
