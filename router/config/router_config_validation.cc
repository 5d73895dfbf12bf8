#include "router/config/router_config_validation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/redis_url.h"
#include "common/str_util.h"
#include "router/config/upstream_config.h"

namespace deltaserve::router {
namespace internal {
namespace {

using common::Sv;

using Locate = std::function<std::string(std::string_view)>;

// Names travel in whitespace-separated files, logs and metric labels.
constexpr size_t kMaxNameBytes = 256;

class Checker {
 public:
  explicit Checker(const Locate& locate) : locate_(locate) {}

  absl::Status Error(std::string_view path, std::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(path), locate_ ? locate_(path) : std::string(), ": ", Sv(message)));
  }

  absl::Status Name(std::string_view path, std::string_view name) const {
    if (name.empty()) return Error(path, "must not be empty");
    if (name.size() > kMaxNameBytes) {
      return Error(path, absl::StrCat("longer than ", kMaxNameBytes, " bytes"));
    }
    for (unsigned char c : name) {
      if (c <= 0x20 || c == 0x7F || c == ',' || c == '#') {
        return Error(path, absl::StrCat("'", absl::CHexEscape(Sv(name)),
                                        "' contains whitespace, a control character, ',' or '#'"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Range(std::string_view path, std::optional<double> v, double lo, bool lo_open,
                     double hi, bool hi_open) const {
    if (!v) return absl::OkStatus();
    const bool ok =
        std::isfinite(*v) && (lo_open ? *v > lo : *v >= lo) && (hi_open ? *v < hi : *v <= hi);
    if (ok) return absl::OkStatus();
    return Error(path, absl::StrCat("must be in ", lo_open ? "(" : "[", lo, ", ", hi,
                                    hi_open ? ")" : "]", ", got ", *v));
  }

  absl::Status IntRange(std::string_view path, std::optional<int64_t> v, int64_t lo,
                        int64_t hi) const {
    if (!v || (*v >= lo && *v <= hi)) return absl::OkStatus();
    return Error(path, absl::StrCat("must be in [", lo, ", ", hi, "], got ", *v));
  }

 private:
  const Locate& locate_;
};

absl::Status CheckDefaults(const Checker& c, const std::string& p, const ModelDefaults& d) {
  // The same ranges the API accepts in a request (docs/router_http.md, "Request fields").
  if (auto s = c.Range(p + ".temperature", d.temperature, 0, false, 2, false); !s.ok()) return s;
  if (auto s = c.Range(p + ".top_p", d.top_p, 0, true, 1, false); !s.ok()) return s;
  if (auto s = c.IntRange(p + ".top_k", d.top_k, -1, INT32_MAX); !s.ok()) return s;
  if (auto s = c.Range(p + ".min_p", d.min_p, 0, false, 1, false); !s.ok()) return s;
  if (auto s = c.Range(p + ".repetition_penalty", d.repetition_penalty, 0, true, 2, false);
      !s.ok()) {
    return s;
  }
  return c.IntRange(p + ".max_tokens", d.max_tokens, 1, INT32_MAX);
}

// The worker channel's settings that only make sense together (the files themselves are read
// and checked by LoadRouterConfigFile).
absl::Status CheckChannel(const Checker& c, const std::string& p, const WorkerChannelConfig& w) {
  if (w.tls_cert_file.empty() != w.tls_key_file.empty()) {
    return c.Error(p + (w.tls_cert_file.empty() ? ".tls_cert_file" : ".tls_key_file"),
                   "is missing: a client certificate needs tls_cert_file and tls_key_file");
  }
  if (w.tls_ca_file.empty()) {
    for (const auto& [key, value] : {std::pair{".tls_cert_file", &w.tls_cert_file},
                                     std::pair{".tls_server_name", &w.tls_server_name}}) {
      if (!value->empty()) {
        return c.Error(p + key, "needs tls_ca_file (the CA that signed the workers' certificates)");
      }
    }
  }
  if (!w.secret_file.empty() && !w.secret_env.empty()) {
    return c.Error(p + ".secret_env", "and secret_file are both given; use one");
  }
  return absl::OkStatus();
}

}  // namespace

std::string HostPortError(std::string_view address, int min_port) {
  if (address.empty()) return "is empty; expected host:port";
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return "has no port; expected host:port";
  std::string_view host = address.substr(0, colon);
  const std::string_view port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]
  } else if (host.find(':') != std::string_view::npos) {
    return "is an IPv6 address without brackets; write [addr]:port";
  }
  if (host.empty()) return "has no host; expected host:port";
  for (unsigned char c : host) {
    if (c <= 0x20 || c == 0x7F || c == '/' || c == '[' || c == ']') {
      return "has an invalid character in the host";
    }
  }
  int value = 0;
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string_view::npos ||
      !absl::SimpleAtoi(Sv(port), &value) || value < min_port || value > 65535) {
    return absl::StrCat("has port '", Sv(port), "'; expected an integer in [", min_port,
                        ", 65535]");
  }
  return "";
}

bool IsSha256Hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::Status ValidateRouterConfig(const RouterConfig& config, const Locate& locate) {
  const Checker c(locate);

  if (std::string e = HostPortError(config.listen, 0); !e.empty()) {
    return c.Error("listen", absl::StrCat("'", config.listen, "' ", e));
  }
  absl::flat_hash_map<std::string_view, size_t> worker_index;
  for (size_t i = 0; i < config.workers.size(); ++i) {
    const std::string path = absl::StrCat("workers[", i, "]");
    const std::string& a = config.workers[i].address;
    // dns:///NAME:PORT: every address of NAME (router/routing/worker_discovery.h).
    const bool dns = std::string_view(a).starts_with("dns:///");
    if (std::string e = HostPortError(dns ? std::string_view(a).substr(7) : a, 1); !e.empty()) {
      return c.Error(path, absl::StrCat("'", a, "' ", e, dns ? " (dns:///NAME:PORT)" : ""));
    }
    if (dns && a[7] == '[') {
      return c.Error(path, absl::StrCat("'", a, "': dns:/// takes a name, not an IP address"));
    }
    if (auto [it, added] = worker_index.try_emplace(a, i); !added) {
      return c.Error(path,
                     absl::StrCat("duplicate worker '", a, "' (also workers[", it->second, "])"));
    }
    if (const auto& channel = config.workers[i].channel; channel) {
      if (auto s = CheckChannel(c, path + ".channel", *channel); !s.ok()) return s;
    }
  }
  if (auto s = CheckChannel(c, "worker_channel", config.worker_channel); !s.ok()) return s;

  // Model and alias names share one namespace: both are what a client puts in "model".
  absl::flat_hash_map<std::string_view, std::string> names;  // name -> where defined
  for (size_t i = 0; i < config.models.size(); ++i) {
    const ModelConfig& m = config.models[i];
    const std::string path = absl::StrCat("models[", i, "]");
    if (auto s = c.Name(path + ".name", m.name); !s.ok()) return s;
    if (auto s = c.Name(path + ".served_name", m.served_name); !s.ok()) return s;
    if (auto [it, added] = names.try_emplace(m.name, path); !added) {
      return c.Error(path + ".name",
                     absl::StrCat("duplicate model name '", m.name, "' (also ", it->second, ")"));
    }
    if (auto s = CheckDefaults(c, path + ".defaults", m.defaults); !s.ok()) return s;
  }
  for (size_t i = 0; i < config.upstreams.size(); ++i) {
    const UpstreamConfig& u = config.upstreams[i];
    const std::string path = absl::StrCat("upstreams[", i, "]");
    if (auto s = c.Name(path + ".name", u.name); !s.ok()) return s;
    if (auto [it, added] = names.try_emplace(u.name, path); !added) {
      return c.Error(path + ".name",
                     absl::StrCat("duplicate name '", u.name, "' (also ", it->second, ")"));
    }
    if (std::string e = UpstreamError(u); !e.empty()) {
      const size_t colon = e.find(':');
      return c.Error(absl::StrCat(path, ".", e.substr(0, colon)), e.substr(colon + 2));
    }
  }
  absl::flat_hash_map<std::string_view, const AliasConfig*> aliases;
  for (const AliasConfig& a : config.aliases) {
    const std::string path = absl::StrCat("aliases.", a.name);
    if (auto s = c.Name(path, a.name); !s.ok()) return s;
    if (auto [it, added] = names.try_emplace(a.name, path); !added) {
      return c.Error(path, absl::StrCat("duplicate name '", a.name, "' (also ", it->second, ")"));
    }
    aliases[a.name] = &a;
  }
  for (const AliasConfig& a : config.aliases) {
    const std::string path = absl::StrCat("aliases.", a.name);
    if (a.chain.empty()) return c.Error(path, "must list at least one model");
    absl::flat_hash_set<std::string_view> seen;
    for (size_t j = 0; j < a.chain.size(); ++j) {
      const std::string item = absl::StrCat(path, "[", j, "]");
      if (auto s = c.Name(item, a.chain[j]); !s.ok()) return s;
      if (!seen.insert(a.chain[j]).second) {
        return c.Error(item, absl::StrCat("'", a.chain[j], "' appears twice in the chain"));
      }
      // With no `models` list the router offers whatever the workers report, so an unknown
      // name may still be a worker's model; aliases are always known.
      if (!config.models.empty() && !names.contains(a.chain[j])) {
        return c.Error(item, absl::StrCat("'", a.chain[j],
                                          "' is neither a model in `models` nor "
                                          "an alias"));
      }
    }
  }
  // Cycles: depth-first over alias -> alias edges (0 unvisited, 1 on the stack, 2 done).
  absl::flat_hash_map<std::string_view, int> state;
  std::vector<std::string_view> stack;
  std::function<absl::Status(const AliasConfig&)> visit =
      [&](const AliasConfig& a) -> absl::Status {
    state[a.name] = 1;
    stack.push_back(a.name);
    for (size_t j = 0; j < a.chain.size(); ++j) {
      auto it = aliases.find(a.chain[j]);
      if (it == aliases.end()) continue;
      const int s = state[it->first];
      if (s == 1) {
        std::vector<std::string> cycle(std::find(stack.begin(), stack.end(), it->first),
                                       stack.end());
        cycle.emplace_back(it->first);
        return c.Error(absl::StrCat("aliases.", a.name, "[", j, "]"),
                       absl::StrCat("alias cycle ", absl::StrJoin(cycle, " -> ")));
      }
      if (s == 0) {
        if (auto st = visit(*it->second); !st.ok()) return st;
      }
    }
    stack.pop_back();
    state[a.name] = 2;
    return absl::OkStatus();
  };
  for (const AliasConfig& a : config.aliases) {
    if (state[a.name] == 0) {
      if (auto s = visit(a); !s.ok()) return s;
    }
  }

  absl::flat_hash_map<std::string, size_t> key_names, key_hashes;
  for (size_t i = 0; i < config.api_keys.size(); ++i) {
    const ApiKeyConfig& k = config.api_keys[i];
    const std::string path = absl::StrCat("api_keys[", i, "]");
    if (auto s = c.Name(path + ".name", k.name); !s.ok()) return s;
    if (auto [it, added] = key_names.try_emplace(k.name, i); !added) {
      return c.Error(path + ".name", absl::StrCat("duplicate key name '", k.name,
                                                  "' (also api_keys[", it->second, "])"));
    }
    if (!IsSha256Hex(k.sha256_hex)) {
      return c.Error(path + ".sha256",
                     "must be 64 hex digits (the SHA-256 of the key: printf %s \"$KEY\" | "
                     "sha256sum)");
    }
    if (auto [it, added] = key_hashes.try_emplace(absl::AsciiStrToLower(k.sha256_hex), i); !added) {
      return c.Error(path + ".sha256",
                     absl::StrCat("the same hash as api_keys[", it->second, "] ('",
                                  config.api_keys[it->second].name, "')"));
    }
    for (size_t j = 0; j < k.models.size(); ++j) {
      const std::string item = absl::StrCat(path, ".models[", j, "]");
      if (auto s = c.Name(item, k.models[j]); !s.ok()) return s;
      if (!config.models.empty() && !names.contains(k.models[j])) {
        return c.Error(item, absl::StrCat("'", k.models[j],
                                          "' is neither a model in `models` "
                                          "nor an alias"));
      }
    }
    if (auto s = c.IntRange(path + ".requests_per_minute", k.limit.requests_per_minute, 0,
                            int64_t{1} << 40);
        !s.ok()) {
      return s;
    }
    if (auto s =
            c.IntRange(path + ".tokens_per_minute", k.limit.tokens_per_minute, 0, int64_t{1} << 40);
        !s.ok()) {
      return s;
    }
    if (auto s = c.IntRange(path + ".max_concurrent_requests", k.limit.max_concurrent_requests, 0,
                            int64_t{1} << 30);
        !s.ok()) {
      return s;
    }
  }

  const RoutingSettings& r = config.routing;
  constexpr int64_t kHourMs = 3600 * 1000;
  if (auto s = c.IntRange("routing.max_attempts", r.max_attempts, 1, 100); !s.ok()) return s;
  if (auto s = c.IntRange("routing.retry_backoff_ms", r.retry_backoff_ms, 0, 60 * 1000); !s.ok()) {
    return s;
  }
  if (auto s = c.IntRange("routing.health_interval_ms", r.health_interval_ms, 10, kHourMs);
      !s.ok()) {
    return s;
  }
  if (auto s = c.IntRange("routing.dns_interval_ms", r.dns_interval_ms, 100, kHourMs); !s.ok()) {
    return s;
  }
  if (auto s = c.IntRange("routing.circuit_failures", r.circuit_failures, 1, 1000); !s.ok()) {
    return s;
  }
  if (auto s = c.IntRange("routing.circuit_open_ms", r.circuit_open_ms, 0, kHourMs); !s.ok()) {
    return s;
  }
  if (auto s = c.IntRange("routing.connect_timeout_ms", r.connect_timeout_ms, 1, 10 * 60 * 1000);
      !s.ok()) {
    return s;
  }
  if (auto s = c.IntRange("routing.prefix_max_waiting", r.prefix_max_waiting, 1, 1024);
      !s.ok()) {
    return s;
  }
  const PlacementSettings& pl = config.placement;
  if (auto s = c.IntRange("placement.interval_seconds", pl.interval_seconds, 1, 24 * 3600);
      !s.ok()) {
    return s;
  }
  if (auto s = c.Range("placement.hysteresis", pl.hysteresis, 0, false, 100, false); !s.ok()) {
    return s;
  }
  if (auto s = c.Range("placement.min_gain", pl.min_gain, 0, false, 1e12, false); !s.ok()) {
    return s;
  }
  if (auto s = c.Range("placement.device_bandwidth_gbs", pl.device_bandwidth_gbs, 0, true, 1e6,
                       false);
      !s.ok()) {
    return s;
  }
  if (auto s =
          c.Range("placement.host_bandwidth_gbs", pl.host_bandwidth_gbs, 0, true, 1e6, false);
      !s.ok()) {
    return s;
  }
  if (auto s = c.Range("placement.layer_sync_us", pl.layer_sync_us, 0, false, 1e6, false);
      !s.ok()) {
    return s;
  }
  if (auto s = c.IntRange("placement.rpc_timeout_ms", pl.rpc_timeout_ms, 1, 10 * 60 * 1000);
      !s.ok()) {
    return s;
  }
  if (auto s = c.IntRange("placement.redis_timeout_ms", pl.redis_timeout_ms, 1, 60 * 1000);
      !s.ok()) {
    return s;
  }
  if (!pl.redis_url.empty()) {
    if (absl::StatusOr<common::RedisOptions> r = common::ParseRedisUrl(pl.redis_url); !r.ok()) {
      return c.Error("placement.redis", std::string(r.status().message()));
    }
  }
  if (config.max_body_bytes < kMinBodyBytes || config.max_body_bytes > kMaxBodyBytes) {
    return c.Error("max_body_bytes", absl::StrCat("must be in [", kMinBodyBytes, ", ",
                                                  kMaxBodyBytes, "], got ", config.max_body_bytes));
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::Status ValidateRouterConfig(const RouterConfig& config) {
  return internal::ValidateRouterConfig(config, nullptr);
}

}  // namespace deltaserve::router
