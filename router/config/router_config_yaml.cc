#include "router/config/router_config_yaml.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"
#include "common/jinja/chat_template.h"
#include "common/key_material.h"
#include "router/config/api_keys_file.h"
#include "router/config/router_config_validation.h"
#include "router/config/upstream_config.h"

namespace deltaserve::router {
namespace {

using common::Sv;

std::string JoinNames(std::initializer_list<std::string_view> names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// The field readers of one document. Every value read leaves its position in `locations_`, so
// ValidateRouterConfig's messages (which name a key path) can say where the value is.
class ConfigReader {
 public:
  using FieldFn = std::function<absl::Status(std::string_view key, const YAML::Node& value,
                                             const std::string& path)>;

  absl::Status Read(const YAML::Node& root, RouterConfig& out);

  // " (line L, column C)" of `path` or of the nearest enclosing key that was read; "" if none.
  std::string Locate(std::string_view path) const {
    std::string p(path);
    while (!p.empty()) {
      if (auto it = locations_.find(p); it != locations_.end()) return it->second;
      const size_t cut = p.find_last_of(".[");
      if (cut == std::string::npos) break;
      p.resize(cut);
    }
    return "";
  }

  void SetLocation(const std::string& path, std::string where) {
    locations_[path] = std::move(where);
  }

 private:
  absl::Status Error(const std::string& path, const YAML::Node& node, std::string_view message) {
    Remember(path, node);
    return absl::InvalidArgumentError(absl::StrCat(path, Locate(path), ": ", Sv(message)));
  }

  void Remember(const std::string& path, const YAML::Node& node) {
    const YAML::Mark m = node.Mark();
    if (m.line >= 0) {
      locations_[path] = absl::StrCat(" (line ", m.line + 1, ", column ", m.column + 1, ")");
    }
  }

  // Calls `fn` for each entry of the mapping `node` (null: none). Keys must be scalars, unique
  // and among `known`; a null value counts as absent and is skipped.
  absl::Status ForEachField(const YAML::Node& node, const std::string& path,
                            std::initializer_list<std::string_view> known, const FieldFn& fn) {
    if (node.IsNull()) return absl::OkStatus();
    if (!node.IsMap()) {
      return Error(path.empty() ? "(document)" : path, node,
                   absl::StrCat("must be a mapping of ", JoinNames(known)));
    }
    absl::flat_hash_set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node k = it->first;
      const YAML::Node v = it->second;
      if (!k.IsScalar()) return Error(path, k, "has a key that is not a string");
      const std::string& key = k.Scalar();
      const std::string child = path.empty() ? key : absl::StrCat(path, ".", key);
      bool is_known = false;
      for (std::string_view name : known) is_known = is_known || name == key;
      if (!is_known) {
        return Error(child, k,
                     absl::StrCat("unknown key '", absl::CHexEscape(key), "'",
                                  path.empty() ? "" : absl::StrCat(" in ", path),
                                  " (known: ", JoinNames(known), ")"));
      }
      if (!seen.insert(key).second) return Error(child, k, "is given twice");
      Remember(child, v.IsNull() ? k : v);
      if (v.IsNull()) continue;
      if (auto s = fn(key, v, child); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Calls `fn(index, item, path)` for each item of the sequence `node` (null: none).
  absl::Status ForEachItem(
      const YAML::Node& node, const std::string& path,
      const std::function<absl::Status(size_t, const YAML::Node&, const std::string&)>& fn) {
    if (node.IsNull()) return absl::OkStatus();
    if (!node.IsSequence()) return Error(path, node, "must be a list");
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string child = absl::StrCat(path, "[", i, "]");
      Remember(child, node[i]);
      if (auto s = fn(i, node[i], child); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status String(const YAML::Node& node, const std::string& path, std::string& out) {
    if (!node.IsScalar()) return Error(path, node, "must be a string");
    out = node.Scalar();
    return absl::OkStatus();
  }

  absl::Status StringList(const YAML::Node& node, const std::string& path,
                          std::vector<std::string>& out) {
    out.clear();
    return ForEachItem(node, path, [&](size_t, const YAML::Node& item, const std::string& p) {
      std::string s;
      if (auto st = String(item, p, s); !st.ok()) return st;
      out.push_back(std::move(s));
      return absl::OkStatus();
    });
  }

  template <typename Int>
  absl::Status Integer(const YAML::Node& node, const std::string& path, Int& out) {
    int64_t v = 0;
    if (!node.IsScalar() || node.Scalar().empty() ||
        node.Scalar().find_first_not_of("+-0123456789") != std::string::npos ||
        !absl::SimpleAtoi(node.Scalar(), &v)) {
      return Error(path, node,
                   absl::StrCat("must be an integer, got '", absl::CHexEscape(node.Scalar()), "'"));
    }
    if (v < static_cast<int64_t>(std::numeric_limits<Int>::min()) ||
        (v > 0 &&
         static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<Int>::max()))) {
      return Error(path, node, absl::StrCat("is out of range: ", v));
    }
    out = static_cast<Int>(v);
    return absl::OkStatus();
  }

  template <typename Int>
  absl::Status Integer(const YAML::Node& node, const std::string& path, std::optional<Int>& out) {
    Int v{};
    if (auto s = Integer(node, path, v); !s.ok()) return s;
    out = v;
    return absl::OkStatus();
  }

  absl::Status Number(const YAML::Node& node, const std::string& path, std::optional<double>& out) {
    double v = 0;
    if (!node.IsScalar() || !absl::SimpleAtod(node.Scalar(), &v) || !std::isfinite(v)) {
      return Error(path, node,
                   absl::StrCat("must be a number, got '", absl::CHexEscape(node.Scalar()), "'"));
    }
    out = v;
    return absl::OkStatus();
  }

  absl::Status Bool(const YAML::Node& node, const std::string& path, std::optional<bool>& out) {
    const std::string s = node.IsScalar() ? node.Scalar() : "";
    if (s == "true" || s == "True" || s == "TRUE") {
      out = true;
    } else if (s == "false" || s == "False" || s == "FALSE") {
      out = false;
    } else {
      return Error(path, node,
                   absl::StrCat("must be true or false, got '", absl::CHexEscape(s), "'"));
    }
    return absl::OkStatus();
  }

  absl::Status Model(const YAML::Node& node, const std::string& path, ModelConfig& m);
  absl::Status Channel(const YAML::Node& node, const std::string& path, WorkerChannelConfig& w) {
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
  // A `workers` item: "host:port", or a mapping of address and the worker's own channel.
  absl::Status Worker(const YAML::Node& node, const std::string& path, WorkerEndpoint& w) {
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
  absl::Status ApiKey(const YAML::Node& node, const std::string& path, ApiKeyConfig& k);
  absl::Status Upstream(const YAML::Node& node, const std::string& path, UpstreamConfig& u);
  // `clamp_max_tokens`: true / false for every API, or a mapping of the APIs.
  absl::Status Clamp(const YAML::Node& node, const std::string& path, ClampMaxTokens& c) {
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

  absl::Status Placement(const YAML::Node& node, const std::string& path, PlacementSettings& s) {
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

  absl::flat_hash_map<std::string, std::string> locations_;
};

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
       "connect_timeout_ms", "first_byte_timeout_ms", "idle_timeout_ms",
       "max_concurrent_requests", "context_window"},
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
            return Error(p, v, absl::StrCat("must be openai or anthropic, got '",
                                            absl::CHexEscape(kind), "'"));
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

// Parses `yaml` into `out` with `reader` keeping where each value was.
absl::Status ParseInto(std::string_view yaml, ConfigReader& reader, RouterConfig& out) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid YAML at line ", e.mark.line + 1,
                                                   ", column ", e.mark.column + 1, ": ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid YAML: ", e.what()));
  }
  try {
    return reader.Read(root, out);
  } catch (const std::exception& e) {  // yaml-cpp node access; not expected after the checks
    return absl::InvalidArgumentError(absl::StrCat("invalid configuration: ", e.what()));
  }
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, std::string_view what) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(Sv(what), " ", path, ": ", ec.message()));
  if (size > kMaxConfigFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(what), " ", path, ": ", size,
                                                   " bytes, more than the ", kMaxConfigFileBytes,
                                                   " accepted"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(Sv(what), " ", path, ": cannot open"));
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (static_cast<uintmax_t>(in.gcount()) != size) {
    return absl::DataLossError(absl::StrCat(Sv(what), " ", path, ": short read"));
  }
  return text;
}

absl::Status Prefixed(const absl::Status& s, std::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(Sv(prefix), ": ", s.message()));
}

// Reads the files (and the environment variable) `w` names, relative paths from `dir`; errors
// start with the key path and its place in the file.
absl::Status LoadChannelFiles(const std::filesystem::path& dir, const std::string& path,
                              const ConfigReader& reader, WorkerChannelConfig& w) {
  auto fail = [&](std::string_view key, const absl::Status& s) {
    const std::string at = absl::StrCat(path, ".", Sv(key));
    return absl::Status(s.code(), absl::StrCat(at, reader.Locate(at), ": ", s.message()));
  };
  auto resolve = [&](const std::string& file) {
    const std::filesystem::path f(file);
    return (f.is_relative() ? dir / f : f).string();
  };
  const std::tuple<std::string_view, const std::string*, std::string*> pems[] = {
      {"tls_ca_file", &w.tls_ca_file, &w.ca_pem},
      {"tls_cert_file", &w.tls_cert_file, &w.cert_pem},
      {"tls_key_file", &w.tls_key_file, &w.key_pem}};
  for (const auto& [key, file, pem] : pems) {
    if (file->empty()) continue;
    absl::StatusOr<std::string> text = common::ReadPemFile(resolve(*file), key);
    if (!text.ok()) return fail(key, text.status());
    *pem = std::move(*text);
  }
  if (!w.secret_file.empty() || !w.secret_env.empty()) {
    absl::StatusOr<std::string> secret = common::ReadSharedSecret(
        w.secret_file.empty() ? "" : resolve(w.secret_file), w.secret_env.c_str());
    if (!secret.ok()) {
      return fail(w.secret_file.empty() ? "secret_env" : "secret_file", secret.status());
    }
    w.secret = std::move(*secret);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RouterConfig> ParseRouterConfigYaml(std::string_view yaml) {
  RouterConfig config;
  ConfigReader reader;
  if (auto s = ParseInto(yaml, reader, config); !s.ok()) return s;
  if (auto s = internal::ValidateRouterConfig(
          config, [&](std::string_view path) { return reader.Locate(path); });
      !s.ok()) {
    return s;
  }
  return config;
}

absl::StatusOr<std::string> ReadChatTemplateFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, "chat template");
  if (!text.ok()) return text.status();
  absl::StatusOr<common::ChatTemplate> parsed = common::ChatTemplate::Parse(*text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the chat template does not parse: ", parsed.status().message()));
  }
  return text;
}

absl::StatusOr<RouterConfig> LoadRouterConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, "router config");
  if (!text.ok()) return text.status();
  RouterConfig config;
  ConfigReader reader;
  if (auto s = ParseInto(*text, reader, config); !s.ok()) return Prefixed(s, path);
  for (size_t i = 0; i < config.models.size(); ++i) {
    ModelConfig& m = config.models[i];
    if (m.defaults.chat_template_file.empty()) continue;
    std::filesystem::path file(m.defaults.chat_template_file);
    if (file.is_relative()) file = std::filesystem::path(path).parent_path() / file;
    const std::string key = absl::StrCat("models[", i, "].chat_template");
    absl::StatusOr<std::string> source = ReadChatTemplateFile(file.string());
    if (!source.ok()) {
      return Prefixed(absl::InvalidArgumentError(absl::StrCat(key, reader.Locate(key), ": ",
                                                              source.status().message())),
                      path);
    }
    m.defaults.chat_template = std::move(*source);
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (auto s = LoadChannelFiles(dir, "worker_channel", reader, config.worker_channel); !s.ok()) {
    return Prefixed(s, path);
  }
  for (size_t i = 0; i < config.workers.size(); ++i) {
    if (!config.workers[i].channel) continue;
    const std::string key = absl::StrCat("workers[", i, "].channel");
    if (auto s = LoadChannelFiles(dir, key, reader, *config.workers[i].channel); !s.ok()) {
      return Prefixed(s, path);
    }
  }
  for (size_t i = 0; i < config.upstreams.size(); ++i) {
    const std::string key = absl::StrCat("upstreams[", i, "]");
    if (auto s = LoadUpstreamKeyMaterial(dir, config.upstreams[i]); !s.ok()) {
      return Prefixed(absl::Status(s.code(), absl::StrCat(key, ".", s.message())), path);
    }
  }
  if (!config.api_keys_file.empty()) {
    std::filesystem::path keys_path(config.api_keys_file);
    if (keys_path.is_relative()) keys_path = std::filesystem::path(path).parent_path() / keys_path;
    absl::StatusOr<std::string> keys_text = ReadSmallFile(keys_path.string(), "api_keys_file");
    if (!keys_text.ok()) return Prefixed(keys_text.status(), path);
    std::vector<int> lines;
    absl::StatusOr<std::vector<ApiKeyConfig>> keys =
        ParseApiKeysFile(*keys_text, keys_path.string(), &lines);
    if (!keys.ok()) return Prefixed(keys.status(), path);
    for (size_t i = 0; i < keys->size(); ++i) {
      reader.SetLocation(absl::StrCat("api_keys[", config.api_keys.size(), "]"),
                         absl::StrCat(" (", keys_path.string(), ":", lines[i], ")"));
      config.api_keys.push_back(std::move((*keys)[i]));
    }
  }
  if (auto s = internal::ValidateRouterConfig(config,
                                              [&](std::string_view p) { return reader.Locate(p); });
      !s.ok()) {
    return Prefixed(s, path);
  }
  return config;
}

}  // namespace deltaserve::router
