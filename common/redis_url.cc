#include "common/redis_url.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/str_util.h"

namespace deltaserve::common {
namespace {

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `in`; false on a malformed escape.
bool PercentDecode(std::string_view in, std::string& out) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = HexValue(in[i + 1]);
    const int lo = HexValue(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

// Percent-encodes all but unreserved characters (and '/' when `keep_slash`), so that the text
// reads back unchanged as a URL's userinfo or query value.
std::string PercentEncode(std::string_view in, bool keep_slash = false) {
  std::string out;
  for (const char c : in) {
    const auto u = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(c);
    } else {
      absl::StrAppend(&out, "%", absl::StrFormat("%02X", u));
    }
  }
  return out;
}

bool ParseBool(std::string_view v, bool& out) {
  if (v == "1" || v == "true" || v == "yes") {
    out = true;
    return true;
  }
  if (v == "0" || v == "false" || v == "no") {
    out = false;
    return true;
  }
  return false;
}

absl::Status BadUrl(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("redis URL: ", Sv(what)));
}

}  // namespace

std::string RedisOptions::HostPort() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

std::string RedisOptions::RedactedUrl() const {
  std::string url = tls ? "rediss://" : "redis://";
  if (!user.empty() || !password.empty()) {
    absl::StrAppend(&url, PercentEncode(user), password.empty() ? "" : ":***", "@");
  }
  absl::StrAppend(&url, HostPort());
  if (db != 0) absl::StrAppend(&url, "/", db);
  std::vector<std::string> params;
  if (!tls_ca_cert.empty())
    params.push_back(absl::StrCat("tls_ca_cert=", PercentEncode(tls_ca_cert, true)));
  if (tls_insecure) params.push_back("tls_insecure=true");
  if (!tls_cert.empty()) params.push_back(absl::StrCat("tls_cert=", PercentEncode(tls_cert, true)));
  if (!tls_key.empty()) params.push_back(absl::StrCat("tls_key=", PercentEncode(tls_key, true)));
  if (!params.empty()) absl::StrAppend(&url, "?", absl::StrJoin(params, "&"));
  return url;
}

absl::StatusOr<RedisOptions> ParseRedisUrl(std::string_view url) {
  RedisOptions o;
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) {
    return BadUrl("missing scheme: expected redis://host:port or rediss://host:port");
  }
  const std::string scheme = absl::AsciiStrToLower(Sv(url.substr(0, scheme_end)));
  if (scheme == "rediss") {
    o.tls = true;
  } else if (scheme != "redis") {
    return BadUrl(
        absl::StrCat("unsupported scheme \"", scheme, "\": expected redis:// or rediss://"));
  }
  std::string_view rest = url.substr(scheme_end + 3);
  if (rest.find('#') != std::string_view::npos) return BadUrl("a fragment (#...) is not allowed");

  std::string_view query;
  if (const size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  std::string_view path;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    path = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  // rest is the authority: [userinfo@]host[:port]. The last '@' ends the userinfo, so that an
  // unencoded '@' in a password still parses.
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      return BadUrl(
          "the part before '@' has no ':': write user:password@ or :password@ (a password alone)");
    }
    if (!PercentDecode(userinfo.substr(0, colon), o.user)) {
      return BadUrl("malformed percent-escape in the user name");
    }
    if (!PercentDecode(userinfo.substr(colon + 1), o.password)) {
      return BadUrl("malformed percent-escape in the password");
    }
    if (o.password.empty()) return BadUrl("empty password after ':'");
  }
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return BadUrl("unterminated '[' in an IPv6 host");
    o.host = std::string(rest.substr(1, close - 1));
    in6_addr a6;
    if (inet_pton(AF_INET6, o.host.c_str(), &a6) != 1) {
      return BadUrl(absl::StrCat("\"", o.host, "\" in [] is not an IPv6 address"));
    }
    const std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return BadUrl("expected ':port' after the IPv6 host's ']'");
      port_text = after.substr(1);
      if (port_text.empty()) return BadUrl("empty port after ':'");
    }
  } else {
    if (rest.find(':') != rest.rfind(':')) {
      return BadUrl(
          "more than one ':' in host:port (an IPv6 address is written in brackets: "
          "[::1]:6379)");
    }
    const size_t colon = rest.find(':');
    o.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = rest.substr(colon + 1);
      if (port_text.empty()) return BadUrl("empty port after ':'");
    }
    if (o.host.find_first_of(" \t[]") != std::string::npos) {
      return BadUrl(absl::StrCat("invalid host \"", o.host,
                                 "\" (an IPv6 address is written in brackets: [::1]:6379)"));
    }
  }
  if (o.host.empty()) return BadUrl("missing host");
  if (!port_text.empty()) {
    int port = 0;
    if (!IsDigits(port_text) || port_text.size() > 5 || !absl::SimpleAtoi(Sv(port_text), &port) ||
        port < 1 || port > 65535) {
      return BadUrl(absl::StrCat("invalid port \"", Sv(port_text), "\": expected 1..65535"));
    }
    o.port = port;
  }
  if (!path.empty()) {
    int db = 0;
    if (!IsDigits(path) || path.size() > 9 || !absl::SimpleAtoi(Sv(path), &db)) {
      return BadUrl(absl::StrCat("invalid database \"", Sv(path),
                                 "\": expected a number 0..999999999 after '/'"));
    }
    o.db = db;
  }
  if (!query.empty()) {
    for (const absl::string_view piece : absl::StrSplit(Sv(query), '&')) {
      const std::string_view param(piece.data(), piece.size());
      const size_t eq = param.find('=');
      const std::string_view name = param.substr(0, eq);
      std::string value;
      if (eq == std::string_view::npos || !PercentDecode(param.substr(eq + 1), value)) {
        return BadUrl(absl::StrCat("query parameter \"", Sv(name), "\" needs name=value"));
      }
      if (name != "tls_ca_cert" && name != "tls_insecure" && name != "tls_cert" &&
          name != "tls_key") {
        return BadUrl(absl::StrCat("unknown query parameter \"", Sv(name),
                                   "\" (known: tls_ca_cert, tls_insecure, tls_cert, tls_key)"));
      }
      if (!o.tls) return BadUrl(absl::StrCat("\"", Sv(name), "\" needs rediss:// (TLS)"));
      if (name == "tls_insecure") {
        if (!ParseBool(value, o.tls_insecure)) {
          return BadUrl(absl::StrCat("tls_insecure=\"", value, "\": expected true or false"));
        }
      } else if (value.empty()) {
        return BadUrl(absl::StrCat("empty ", Sv(name)));
      } else if (name == "tls_ca_cert") {
        o.tls_ca_cert = value;
      } else if (name == "tls_cert") {
        o.tls_cert = value;
      } else {
        o.tls_key = value;
      }
    }
  }
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return BadUrl("tls_cert and tls_key go together");
  }
  return o;
}

}  // namespace deltaserve::common
