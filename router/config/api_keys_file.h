#pragma once
// The API-keys file named by `api_keys_file` in the router config: one key per line,
//
//   # name   sha256 of the key (64 hex)                                  allowed models (optional)
//   ci       9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 qwen3.5-4b,fast
//
// '#' starts a comment; blank lines are skipped. Keys from the file have no rate limit.

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "router/config/router_config.h"

namespace deltaserve::router {

// Parses the file's text. `source` (the path) prefixes messages, which name the line:
// "keys.txt:3: expected 'name sha256hex [model,model]'". Hashes come back lowercase. Names and
// hashes are checked here only for form; ValidateRouterConfig checks uniqueness and model names.
// `lines`, when given, receives the 1-based line of each key (for later messages).
absl::StatusOr<std::vector<ApiKeyConfig>> ParseApiKeysFile(std::string_view text,
                                                           std::string_view source,
                                                           std::vector<int>* lines = nullptr);

}  // namespace deltaserve::router
