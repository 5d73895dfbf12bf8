#pragma once
// Whole-config checks for a RouterConfig, however it was made (YAML, command line, tests):
// value ranges, host:port forms, unique names, alias chains that name known models (when
// `models` is listed) and have no cycles, API-key hashes of 64 hex digits, key model lists.
// Run after merging the command line into a parsed config and before swapping it in.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "router/config/router_config.h"

namespace deltaserve::router {

// Bounds of `max_body_bytes` (bytes).
inline constexpr uint64_t kMinBodyBytes = 1 << 10;
inline constexpr uint64_t kMaxBodyBytes = 1 << 30;

// OK, or InvalidArgument whose message starts with the key path ("aliases.fast[1]: ...").
absl::Status ValidateRouterConfig(const RouterConfig& config);

namespace internal {

// ValidateRouterConfig with `locate(path)` appended after the path in messages (the YAML reader
// passes " (line 9, column 12)"); `locate` may return "".
absl::Status ValidateRouterConfig(const RouterConfig& config,
                                  const std::function<std::string(std::string_view)>& locate);

// "" when `address` is host:port with a port in [min_port, 65535], else what is wrong.
std::string HostPortError(std::string_view address, int min_port);

// True for 64 hex digits (either case).
bool IsSha256Hex(std::string_view s);

}  // namespace internal
}  // namespace deltaserve::router
