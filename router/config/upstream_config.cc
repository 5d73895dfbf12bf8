#include "router/config/upstream_config.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/key_material.h"
#include "common/str_util.h"

namespace deltaserve::router {

using common::Sv;

absl::StatusOr<UpstreamUrl> ParseUpstreamUrl(std::string_view url) {
  UpstreamUrl out;
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("'", Sv(url), "' ", Sv(why)));
  };
  std::string_view rest = url;
  if (rest.starts_with("https://")) {
    out.tls = true;
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else {
    return bad("must start with http:// or https://");
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    return bad("must not hold user information (put the key in api_key_env or api_key_file)");
  }
  if (path.find_first_of("?#") != std::string_view::npos) {
    return bad("must not hold a query or a fragment");
  }
  for (char ch : path) {
    if (static_cast<unsigned char>(ch) <= 0x20 || static_cast<unsigned char>(ch) >= 0x7f) {
      return bad("has a space or a non-ASCII byte in its path");
    }
  }
  std::string_view port_text;
  if (authority.starts_with("[")) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("has an unclosed '[' in its host");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("has bytes after the IPv6 address");
      port_text = after.substr(1);
      if (port_text.empty()) return bad("has an empty port");
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return bad("has an empty port");
    }
  }
  if (out.host.empty()) return bad("has no host");
  for (char ch : out.host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-' &&
        ch != ':' && ch != '_') {
      return bad("has a host with a character other than letters, digits, '.', '-', '_'");
    }
  }
  if (port_text.empty()) {
    out.port = out.tls ? 443 : 80;
  } else {
    int port = 0;
    if (port_text.find_first_not_of("0123456789") != std::string_view::npos ||
        !absl::SimpleAtoi(Sv(port_text), &port) || port < 1 || port > 65535) {
      return bad("has a port outside 1..65535");
    }
    out.port = static_cast<uint16_t>(port);
  }
  while (path.ends_with('/')) path.remove_suffix(1);
  out.path = std::string(path);
  return out;
}

std::string_view UpstreamKindName(UpstreamKind kind) {
  return kind == UpstreamKind::kAnthropic ? "anthropic" : "openai";
}

absl::Status LoadUpstreamKeyMaterial(const std::filesystem::path& dir, UpstreamConfig& u) {
  auto resolve = [&](const std::string& file) {
    const std::filesystem::path f(file);
    return (f.is_relative() ? dir / f : f).string();
  };
  u.api_key.clear();
  u.ca_pem.clear();
  if (!u.api_key_file.empty() || !u.api_key_env.empty()) {
    absl::StatusOr<std::string> key = common::ReadSharedSecret(
        u.api_key_file.empty() ? "" : resolve(u.api_key_file), u.api_key_env.c_str());
    if (!key.ok()) {
      return absl::Status(key.status().code(),
                          absl::StrCat(u.api_key_file.empty() ? "api_key_env" : "api_key_file",
                                       ": ", key.status().message()));
    }
    u.api_key = std::move(*key);
  }
  if (!u.tls_ca_file.empty()) {
    absl::StatusOr<std::string> pem = common::ReadPemFile(resolve(u.tls_ca_file), "tls_ca_file");
    if (!pem.ok()) {
      return absl::Status(pem.status().code(),
                          absl::StrCat("tls_ca_file: ", pem.status().message()));
    }
    u.ca_pem = std::move(*pem);
  }
  return absl::OkStatus();
}

namespace internal {

std::string UpstreamError(const UpstreamConfig& u) {
  absl::StatusOr<UpstreamUrl> url = ParseUpstreamUrl(u.base_url);
  if (!url.ok()) return absl::StrCat("base_url: ", url.status().message());
  if (u.model.empty()) return "model: must not be empty";
  if (!u.api_key_env.empty() && !u.api_key_file.empty()) {
    return "api_key_env: give api_key_env or api_key_file, not both";
  }
  if (!u.tls_ca_file.empty() && !url->tls) {
    return "tls_ca_file: only meaningful with an https:// base_url";
  }
  const std::pair<std::string_view, int64_t> times[] = {
      {"connect_timeout_ms", u.connect_timeout_ms},
      {"first_byte_timeout_ms", u.first_byte_timeout_ms},
      {"idle_timeout_ms", u.idle_timeout_ms}};
  for (const auto& [key, ms] : times) {
    if (ms < 1 || ms > 3600 * 1000) {
      return absl::StrCat(Sv(key), ": must be in [1, 3600000] milliseconds, got ", ms);
    }
  }
  if (u.max_concurrent_requests < 0) {
    return absl::StrCat("max_concurrent_requests: must not be negative, got ",
                        u.max_concurrent_requests);
  }
  if (u.context_window < 0) {
    return absl::StrCat("context_window: must not be negative, got ", u.context_window);
  }
  return "";
}

}  // namespace internal
}  // namespace deltaserve::router
