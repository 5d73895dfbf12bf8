// Fuzz target: the router's configuration files, which an operator may get wrong in any way —
// the YAML config (ParseRouterConfigYaml) and the API-keys file (ParseApiKeysFile). The first
// byte picks the parser (even: YAML, odd: keys file); the rest is the text. Checks: never a
// crash, a hang or an exception out of yaml-cpp; a refusal is InvalidArgument with a message;
// an accepted YAML config passes ValidateRouterConfig again (parsing validates it whole, so a
// second validation must agree); accepted key lines have lowercase 64-hex hashes and names.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "router/config/api_keys_file.h"
#include "router/config/router_config_validation.h"
#include "router/config/router_config_yaml.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

void Check(bool ok, const char* what) { deltaserve::fuzz::Check(ok, "router_config_fuzz", what); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((data[0] & 1) == 0) {
    absl::StatusOr<deltaserve::router::RouterConfig> c =
        deltaserve::router::ParseRouterConfigYaml(text);
    if (!c.ok()) {
      Check(c.status().code() == absl::StatusCode::kInvalidArgument, "YAML refusals are invalid");
      Check(!c.status().message().empty(), "YAML refusals say why");
      return 0;
    }
    Check(deltaserve::router::ValidateRouterConfig(*c).ok(), "an accepted config validates");
    return 0;
  }
  std::vector<int> lines;
  absl::StatusOr<std::vector<deltaserve::router::ApiKeyConfig>> keys =
      deltaserve::router::ParseApiKeysFile(text, "keys.txt", &lines);
  if (!keys.ok()) {
    Check(keys.status().code() == absl::StatusCode::kInvalidArgument, "key refusals are invalid");
    Check(keys.status().message().substr(0, 9) == "keys.txt:",
          "key refusals name the file");
    return 0;
  }
  Check(lines.size() == keys->size(), "one line number per key");
  for (const auto& k : *keys) {
    Check(!k.name.empty(), "key names are not empty");
    Check(deltaserve::router::internal::IsSha256Hex(k.sha256_hex), "hashes are 64 hex");
    for (char ch : k.sha256_hex) Check(!(ch >= 'A' && ch <= 'F'), "hashes are lowercase");
  }
  return 0;
}
