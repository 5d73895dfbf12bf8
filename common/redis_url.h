// Where a Redis server is and how to reach it (RedisOptions), and the redis:// / rediss:// URLs
// that say so (ParseRedisUrl): the part of the Redis client (common/redis_client.h) that reads
// untrusted text from flags and configuration files (fuzzed by tests/fuzz/redis_url_fuzz.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace deltaserve::common {

// Where the server is and how to talk to it; usually from ParseRedisUrl.
struct RedisOptions {
  std::string host = "127.0.0.1";  // name or IP literal; IPv6 without brackets
  int port = 6379;
  std::string user;      // ACL user; empty: `AUTH password` (the default user)
  std::string password;  // empty: no AUTH
  int db = 0;            // SELECT db when not 0
  bool tls = false;      // rediss://
  // TLS: PEM file of the CAs that may sign the server's certificate; empty: the system store.
  std::string tls_ca_cert;
  // TLS: accept any server certificate and name (tests, private networks only).
  bool tls_insecure = false;
  // TLS client certificate and key (PEM files), for servers with `tls-auth-clients yes`.
  std::string tls_cert;
  std::string tls_key;
  // A reply that would decode to more than this many bytes fails with ResourceExhausted.
  int64_t max_reply_bytes = int64_t{512} << 20;
  // After a failed connect, calls fail with Unavailable for this long without trying.
  absl::Duration reconnect_backoff = absl::Seconds(1);

  // The URL of these options with the password replaced by "***", for logs and messages.
  std::string RedactedUrl() const;
  // host:port, an IPv6 host in brackets ("[::1]:6379"), for messages.
  std::string HostPort() const;
};

// Parses redis://[[user]:password@]host[:port][/db][?param=value&...] and the same with rediss://
// (TLS). host may be a name, an IPv4 literal or a bracketed IPv6 literal ([::1]); port defaults
// to 6379, db to 0; user and password are percent-decoded. Query parameters (rediss:// only):
// tls_ca_cert=<pem file>, tls_insecure=true|false|1|0, tls_cert=<pem file>, tls_key=<pem file>.
// Anything else is InvalidArgument naming the problem (never quoting the password).
absl::StatusOr<RedisOptions> ParseRedisUrl(std::string_view url);

}  // namespace deltaserve::common
