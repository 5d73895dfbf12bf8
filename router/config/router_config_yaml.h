#pragma once
// Reads the router's YAML configuration (docs/router.md, "Configuration") into a RouterConfig
// and validates it whole: unknown keys, wrong types, out-of-range values, duplicate names,
// aliases naming unknown models or forming cycles are refused with an InvalidArgument that
// names the key path and its line ("models[1].defaults.top_p (line 9, column 12): ...").
//
//   absl::StatusOr<RouterConfig> config = LoadRouterConfigFile("/etc/deltaserve/router.yaml");
//
// yaml-cpp's exceptions never leave this module.

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "router/config/router_config.h"

namespace deltaserve::router {

// Largest configuration or API-keys file read (bytes).
inline constexpr uint64_t kMaxConfigFileBytes = 16ull << 20;

// Parses and validates one YAML document. `api_keys_file` is kept as written and not read (the
// text has no directory to resolve it against): LoadRouterConfigFile reads it.
absl::StatusOr<RouterConfig> ParseRouterConfigYaml(std::string_view yaml);

// Reads `path`, parses it as ParseRouterConfigYaml does, then reads `api_keys_file` (a relative
// path is taken from the config file's folder), appends its keys to `api_keys` and validates the
// result again (a key name or hash defined twice across both is an error). Messages start with
// the file's path. Each model's `chat_template` file is read (relative to the config file's
// folder) and parsed too.
absl::StatusOr<RouterConfig> LoadRouterConfigFile(const std::string& path);

// Reads a Jinja chat template file (a model's `chat_template` key, --chat-template) and checks
// that it parses; the error names the file and the template's line.
absl::StatusOr<std::string> ReadChatTemplateFile(const std::string& path);

}  // namespace deltaserve::router
