// What each section of the router's YAML configuration holds (docs/router.md, "Configuration"):
// the keys of the document, its models, workers and their channels, upstreams, aliases, API keys,
// routing, placement and clamp_max_tokens, read with the typed readers of
// internal/config_reader.h into a RouterConfig.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "router/config/internal/config_reader.h"
#include "router/config/router_config.h"

namespace deltaserve::router::internal {

absl::Status ConfigReader::Channel(const YAML::Node& node, const std::string& path,
                                   WorkerChannelConfig& w) {
  return ForEachField(node, path,
                      {"tls_ca_file", "tls_cert_file", "tls_key_file", "tls_server_name",
                       "secret_file", "secret_env"},
                      [&](std::string_view k, const YAML::Node& v, const std::string& p) {
                        std::string* out = k == "tls_ca_file"       ? &w.tls_ca_file
                                           : k == "tls_cert_file"   ? &w.tls_cert_file
                                           : k == "tls_key_file"    ? &w.tls_key_file
                                           : k == "tls_server_name" ? &w.tls_server_name
                                           : k == "secret_file"     ? &w.secret_file
                                                                    : &w.secret_env;
                        return String(v, p, *out);
                      });
}

absl::Status ConfigReader::Worker(const YAML::Node& node, const std::string& path,
                                  WorkerEndpoint& w) {
  if (node.IsScalar()) return String(node, path, w.address);
  if (!node.IsMap()) return Error(path, node, "must be host:port or a mapping with address");
  bool has_address = false;
  absl::Status s = ForEachField(
      node, path, {"address", "channel"},
      [&](std::string_view key, const YAML::Node& v, const std::string& p) -> absl::Status {
        if (key == "address") {
          has_address = true;
          return String(v, p, w.address);
        }
        w.channel.emplace();
        return Channel(v, p, *w.channel);
      });
  if (!s.ok()) return s;
  if (!has_address) return Error(path + ".address", node, "is missing");
  return absl::OkStatus();
}

absl::Status ConfigReader::Clamp(const YAML::Node& node, const std::string& path,
                                 ClampMaxTokens& c) {
  if (node.IsScalar()) {
    std::optional<bool> all;
    if (auto st = Bool(node, path, all); !st.ok()) return st;
    c = {all, all, all, all};
    return absl::OkStatus();
  }
  return ForEachField(
      node, path, {"chat_completions", "completions", "responses", "anthropic"},
      [&](std::string_view k, const YAML::Node& v, const std::string& p) -> absl::Status {
        if (k == "chat_completions") return Bool(v, p, c.chat_completions);
        if (k == "completions") return Bool(v, p, c.completions);
        if (k == "responses") return Bool(v, p, c.responses);
        return Bool(v, p, c.anthropic);
      });
}

absl::Status ConfigReader::Placement(const YAML::Node& node, const std::string& path,
                                     PlacementSettings& s) {
  return ForEachField(
      node, path,
      {"enabled", "interval_seconds", "hysteresis", "min_gain", "device_bandwidth_gbs",
       "host_bandwidth_gbs", "layer_sync_us", "redis", "rpc_timeout_ms", "redis_timeout_ms"},
      [&](std::string_view k, const YAML::Node& v, const std::string& p) -> absl::Status {
        if (k == "enabled") {
          std::optional<bool> on;
          if (auto st = Bool(v, p, on); !st.ok()) return st;
          s.enabled = *on;
          return absl::OkStatus();
        }
        double* number = k == "hysteresis"             ? &s.hysteresis
                         : k == "min_gain"             ? &s.min_gain
                         : k == "device_bandwidth_gbs" ? &s.device_bandwidth_gbs
                         : k == "host_bandwidth_gbs"   ? &s.host_bandwidth_gbs
                         : k == "layer_sync_us"        ? &s.layer_sync_us
                                                       : nullptr;
        if (number != nullptr) {
          std::optional<double> x;
          if (auto st = Number(v, p, x); !st.ok()) return st;
          *number = *x;
          return absl::OkStatus();
        }
        if (k == "redis") return String(v, p, s.redis_url);
        if (k == "interval_seconds") return Integer(v, p, s.interval_seconds);
        if (k == "rpc_timeout_ms") return Integer(v, p, s.rpc_timeout_ms);
        return Integer(v, p, s.redis_timeout_ms);
      });
}

absl::Status ConfigReader::Model(const YAML::Node& node, const std::string& path, ModelConfig& m) {
  if (!node.IsMap()) return Error(path, node, "must be a mapping with name, served_name, defaults");
  bool has_name = false;
  absl::Status s = ForEachField(
      node, path,
      {"name", "served_name", "chat_template", "allow_special_tokens_in_content",
       "clamp_max_tokens", "defaults"},
      [&](std::string_view key, const YAML::Node& v, const std::string& p) -> absl::Status {
        if (key == "name") {
          has_name = true;
          return String(v, p, m.name);
        }
        if (key == "served_name") return String(v, p, m.served_name);
        if (key == "chat_template") return String(v, p, m.defaults.chat_template_file);
        if (key == "allow_special_tokens_in_content") {
          return Bool(v, p, m.defaults.allow_special_tokens_in_content);
        }
        if (key == "clamp_max_tokens") return Clamp(v, p, m.defaults.clamp_max_tokens);
        ModelDefaults& d = m.defaults;
        return ForEachField(v, p,
                            {"temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                             "max_tokens", "enable_thinking"},
                            [&](std::string_view k, const YAML::Node& dv, const std::string& dp) {
                              if (k == "temperature") return Number(dv, dp, d.temperature);
                              if (k == "top_p") return Number(dv, dp, d.top_p);
                              if (k == "top_k") return Integer(dv, dp, d.top_k);
                              if (k == "min_p") return Number(dv, dp, d.min_p);
                              if (k == "repetition_penalty")
                                return Number(dv, dp, d.repetition_penalty);
                              if (k == "max_tokens") return Integer(dv, dp, d.max_tokens);
                              return Bool(dv, dp, d.enable_thinking);
                            });
      });
  if (!s.ok()) return s;
  if (!has_name) return Error(path + ".name", node, "is missing (every model needs a name)");
  if (m.served_name.empty()) m.served_name = m.name;
  return absl::OkStatus();
}

absl::Status ConfigReader::ApiKey(const YAML::Node& node, const std::string& path,
                                  ApiKeyConfig& k) {
  if (!node.IsMap()) return Error(path, node, "must be a mapping with name and sha256");
  bool has_name = false, has_hash = false;
  absl::Status s = ForEachField(
      node, path,
      {"name", "sha256", "models", "requests_per_minute", "tokens_per_minute",
       "max_concurrent_requests", "admin"},
      [&](std::string_view key, const YAML::Node& v, const std::string& p) -> absl::Status {
        if (key == "name") {
          has_name = true;
          return String(v, p, k.name);
        }
        if (key == "sha256") {
          has_hash = true;
          if (auto st = String(v, p, k.sha256_hex); !st.ok()) return st;
          absl::AsciiStrToLower(&k.sha256_hex);
          return absl::OkStatus();
        }
        if (key == "models") return StringList(v, p, k.models);
        if (key == "admin") {
          std::optional<bool> admin;
          if (auto st = Bool(v, p, admin); !st.ok()) return st;
          k.admin = *admin;
          return absl::OkStatus();
        }
        if (key == "requests_per_minute") return Integer(v, p, k.limit.requests_per_minute);
        if (key == "max_concurrent_requests") {
          return Integer(v, p, k.limit.max_concurrent_requests);
        }
        return Integer(v, p, k.limit.tokens_per_minute);
      });
  if (!s.ok()) return s;
  if (!has_name) return Error(path + ".name", node, "is missing (every key needs a name)");
  if (!has_hash) {
    return Error(path + ".sha256", node,
                 "is missing (the key's SHA-256 in hex: printf %s \"$KEY\" | sha256sum)");
  }
  return absl::OkStatus();
}

absl::Status ConfigReader::Upstream(const YAML::Node& node, const std::string& path,
                                    UpstreamConfig& u) {
  if (!node.IsMap()) return Error(path, node, "must be a mapping with name, kind, base_url, model");
  bool has_name = false, has_url = false, has_model = false;
  absl::Status s = ForEachField(
      node, path,
      {"name", "kind", "base_url", "model", "api_key_env", "api_key_file", "tls_ca_file",
       "connect_timeout_ms", "first_byte_timeout_ms", "idle_timeout_ms", "max_concurrent_requests",
       "context_window"},
      [&](std::string_view key, const YAML::Node& v, const std::string& p) -> absl::Status {
        if (key == "name") {
          has_name = true;
          return String(v, p, u.name);
        }
        if (key == "kind") {
          std::string kind;
          if (auto st = String(v, p, kind); !st.ok()) return st;
          if (kind == "openai") {
            u.kind = UpstreamKind::kOpenAi;
          } else if (kind == "anthropic") {
            u.kind = UpstreamKind::kAnthropic;
          } else {
            return Error(
                p, v,
                absl::StrCat("must be openai or anthropic, got '", absl::CHexEscape(kind), "'"));
          }
          return absl::OkStatus();
        }
        if (key == "base_url") {
          has_url = true;
          return String(v, p, u.base_url);
        }
        if (key == "model") {
          has_model = true;
          return String(v, p, u.model);
        }
        if (key == "api_key_env") return String(v, p, u.api_key_env);
        if (key == "api_key_file") return String(v, p, u.api_key_file);
        if (key == "tls_ca_file") return String(v, p, u.tls_ca_file);
        if (key == "connect_timeout_ms") return Integer(v, p, u.connect_timeout_ms);
        if (key == "first_byte_timeout_ms") return Integer(v, p, u.first_byte_timeout_ms);
        if (key == "idle_timeout_ms") return Integer(v, p, u.idle_timeout_ms);
        if (key == "max_concurrent_requests") return Integer(v, p, u.max_concurrent_requests);
        return Integer(v, p, u.context_window);
      });
  if (!s.ok()) return s;
  if (!has_name) return Error(path + ".name", node, "is missing (every upstream needs a name)");
  if (!has_url) return Error(path + ".base_url", node, "is missing (e.g. https://HOST/v1)");
  if (!has_model) return Error(path + ".model", node, "is missing (the upstream's model name)");
  return absl::OkStatus();
}

absl::Status ConfigReader::Read(const YAML::Node& root, RouterConfig& out) {
  return ForEachField(
      root, "",
      {"listen", "workers", "worker_channel", "models", "upstreams", "aliases", "api_keys",
       "api_keys_file", "routing", "placement", "max_body_bytes", "clamp_max_tokens"},
      [&](std::string_view key, const YAML::Node& v, const std::string& p) -> absl::Status {
        if (key == "listen") return String(v, p, out.listen);
        if (key == "workers") {
          return ForEachItem(v, p, [&](size_t, const YAML::Node& item, const std::string& ip) {
            WorkerEndpoint w;
            if (auto s = Worker(item, ip, w); !s.ok()) return s;
            out.workers.push_back(std::move(w));
            return absl::OkStatus();
          });
        }
        if (key == "worker_channel") return Channel(v, p, out.worker_channel);
        if (key == "models") {
          return ForEachItem(v, p, [&](size_t, const YAML::Node& item, const std::string& ip) {
            ModelConfig m;
            if (auto s = Model(item, ip, m); !s.ok()) return s;
            out.models.push_back(std::move(m));
            return absl::OkStatus();
          });
        }
        if (key == "upstreams") {
          return ForEachItem(v, p, [&](size_t, const YAML::Node& item, const std::string& ip) {
            UpstreamConfig u;
            if (auto s = Upstream(item, ip, u); !s.ok()) return s;
            out.upstreams.push_back(std::move(u));
            return absl::OkStatus();
          });
        }
        if (key == "aliases") {
          if (!v.IsMap()) return Error(p, v, "must be a mapping of alias name to a list of models");
          absl::flat_hash_set<std::string> seen;
          for (auto it = v.begin(); it != v.end(); ++it) {
            const YAML::Node name = it->first;
            const YAML::Node chain = it->second;
            if (!name.IsScalar()) return Error(p, name, "has a key that is not a string");
            AliasConfig a;
            a.name = name.Scalar();
            const std::string ap = absl::StrCat(p, ".", a.name);
            Remember(ap, name);
            if (!seen.insert(a.name).second) return Error(ap, name, "is given twice");
            if (!chain.IsSequence()) {
              return Error(ap, chain, "must be a list of model names (primary first)");
            }
            if (auto s = StringList(chain, ap, a.chain); !s.ok()) return s;
            out.aliases.push_back(std::move(a));
          }
          return absl::OkStatus();
        }
        if (key == "api_keys") {
          return ForEachItem(v, p, [&](size_t, const YAML::Node& item, const std::string& ip) {
            ApiKeyConfig k;
            if (auto s = ApiKey(item, ip, k); !s.ok()) return s;
            out.api_keys.push_back(std::move(k));
            return absl::OkStatus();
          });
        }
        if (key == "api_keys_file") return String(v, p, out.api_keys_file);
        if (key == "routing") {
          RoutingSettings& r = out.routing;
          return ForEachField(v, p,
                              {"max_attempts", "retry_backoff_ms", "health_interval_ms",
                               "circuit_failures", "circuit_open_ms", "connect_timeout_ms",
                               "prefix_affinity", "prefix_max_waiting", "dns_interval_ms"},
                              [&](std::string_view k, const YAML::Node& rv, const std::string& rp) {
                                if (k == "max_attempts") return Integer(rv, rp, r.max_attempts);
                                if (k == "prefix_affinity") {
                                  std::optional<bool> on;
                                  if (auto st = Bool(rv, rp, on); !st.ok()) return st;
                                  r.prefix_affinity = *on;
                                  return absl::OkStatus();
                                }
                                if (k == "prefix_max_waiting")
                                  return Integer(rv, rp, r.prefix_max_waiting);
                                if (k == "retry_backoff_ms")
                                  return Integer(rv, rp, r.retry_backoff_ms);
                                if (k == "dns_interval_ms")
                                  return Integer(rv, rp, r.dns_interval_ms);
                                if (k == "health_interval_ms")
                                  return Integer(rv, rp, r.health_interval_ms);
                                if (k == "circuit_failures")
                                  return Integer(rv, rp, r.circuit_failures);
                                if (k == "circuit_open_ms")
                                  return Integer(rv, rp, r.circuit_open_ms);
                                return Integer(rv, rp, r.connect_timeout_ms);
                              });
        }
        if (key == "placement") return Placement(v, p, out.placement);
        if (key == "clamp_max_tokens") return Clamp(v, p, out.clamp_max_tokens);
        int64_t bytes = 0;
        if (auto s = Integer(v, p, bytes); !s.ok()) return s;
        if (bytes < 0) return Error(p, v, absl::StrCat("must not be negative, got ", bytes));
        out.max_body_bytes = static_cast<uint64_t>(bytes);
        return absl::OkStatus();
      });
}

}  // namespace deltaserve::router::internal
