// The field readers of the router's YAML configuration (router_config_yaml.h), shared by
// config_reader.cc (the typed readers: mappings of known keys, lists, strings, numbers, booleans,
// each value's line and column kept) and router_config_yaml_sections.cc (what each section of
// the document holds). yaml-cpp types stay inside router/config.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "router/config/router_config.h"

namespace deltaserve::router::internal {

// The field readers of one document. Every value read leaves its position in `locations_`, so
// ValidateRouterConfig's messages (which name a key path) can say where the value is.
class ConfigReader {
 public:
  using FieldFn = std::function<absl::Status(std::string_view key, const YAML::Node& value,
                                             const std::string& path)>;

  // The whole document (router_config_yaml_sections.cc).
  absl::Status Read(const YAML::Node& root, RouterConfig& out);

  // " (line L, column C)" of `path` or of the nearest enclosing key that was read; "" if none.
  std::string Locate(std::string_view path) const;

  void SetLocation(const std::string& path, std::string where) {
    locations_[path] = std::move(where);
  }

 private:
  absl::Status Error(const std::string& path, const YAML::Node& node, std::string_view message);

  void Remember(const std::string& path, const YAML::Node& node);

  // Calls `fn` for each entry of the mapping `node` (null: none). Keys must be scalars, unique
  // and among `known`; a null value counts as absent and is skipped.
  absl::Status ForEachField(const YAML::Node& node, const std::string& path,
                            std::initializer_list<std::string_view> known, const FieldFn& fn);

  // Calls `fn(index, item, path)` for each item of the sequence `node` (null: none).
  absl::Status ForEachItem(
      const YAML::Node& node, const std::string& path,
      const std::function<absl::Status(size_t, const YAML::Node&, const std::string&)>& fn);

  absl::Status String(const YAML::Node& node, const std::string& path, std::string& out);

  absl::Status StringList(const YAML::Node& node, const std::string& path,
                          std::vector<std::string>& out);

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

  absl::Status Number(const YAML::Node& node, const std::string& path, std::optional<double>& out);

  absl::Status Bool(const YAML::Node& node, const std::string& path, std::optional<bool>& out);

  // The sections (router_config_yaml_sections.cc).
  absl::Status Model(const YAML::Node& node, const std::string& path, ModelConfig& m);
  absl::Status Channel(const YAML::Node& node, const std::string& path, WorkerChannelConfig& w);
  // A `workers` item: "host:port", or a mapping of address and the worker's own channel.
  absl::Status Worker(const YAML::Node& node, const std::string& path, WorkerEndpoint& w);
  absl::Status ApiKey(const YAML::Node& node, const std::string& path, ApiKeyConfig& k);
  absl::Status Upstream(const YAML::Node& node, const std::string& path, UpstreamConfig& u);
  // `clamp_max_tokens`: true / false for every API, or a mapping of the APIs.
  absl::Status Clamp(const YAML::Node& node, const std::string& path, ClampMaxTokens& c);
  absl::Status Placement(const YAML::Node& node, const std::string& path, PlacementSettings& s);

  absl::flat_hash_map<std::string, std::string> locations_;
};

}  // namespace deltaserve::router::internal
