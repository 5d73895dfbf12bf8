// The pieces of an upstream's configuration (router_config.h, UpstreamConfig) that need more
// than the YAML reader: its base URL taken apart, its key material read from the environment
// or a file, and the checks ValidateRouterConfig runs on it. Errors never quote a key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "router/config/router_config.h"

namespace deltaserve::router {

// An upstream's base_url: scheme, host, port, and the path requests are appended to.
struct UpstreamUrl {
  bool tls = false;
  std::string host;  // a name or an IP address (IPv6 without its brackets)
  uint16_t port = 0;
  std::string path;  // "" or "/v1" (no trailing slash)
};

// http://HOST[:PORT][/PATH] or https://...; no user info, query or fragment.
absl::StatusOr<UpstreamUrl> ParseUpstreamUrl(std::string_view url);

// "openai" or "anthropic".
std::string_view UpstreamKindName(UpstreamKind kind);

// Reads `u.api_key_file` (relative to `dir`) or `u.api_key_env` into `u.api_key`, and
// `u.tls_ca_file` into `u.ca_pem`. The message of an error starts with the field's key
// ("api_key_env: $CLOUD_KEY is not set") and never holds the key.
absl::Status LoadUpstreamKeyMaterial(const std::filesystem::path& dir, UpstreamConfig& u);

namespace internal {

// "" when `u` is acceptable, else "FIELD: what is wrong" (names are checked by the caller).
std::string UpstreamError(const UpstreamConfig& u);

}  // namespace internal
}  // namespace deltaserve::router
