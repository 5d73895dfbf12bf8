// A Redis client for the session-snapshot tier (docs/redis.md): one connection, plain TCP or TLS,
// and a hard deadline on every call, connect included, so that a request never waits on Redis
// longer than its timeout (default 50 ms). hiredis encodes nothing and reads no socket here: it
// only decodes replies (common/internal/redis_protocol.h); the socket, poll() and OpenSSL are
// ours (common/internal/redis_connection.h), which is what makes the deadline exact and TLS
// possible with Debian 12's hiredis 0.14.
//
//   ASSIGN_OR_RETURN(RedisOptions options, ParseRedisUrl("redis://:secret@10.0.0.5:6379/2"));
//   ASSIGN_OR_RETURN(std::unique_ptr<RedisClient> redis, RedisClient::Create(options));
//   absl::StatusOr<std::optional<std::string>> blob = redis->Get(key);  // nullopt: no such key
//
// Failure model: any I/O error, timeout, protocol error or oversized reply closes the connection
// (its stream can no longer be trusted) and the next call reconnects. A failed connect (refused,
// timed out, TLS handshake, AUTH or SELECT refused) makes calls fail at once with Unavailable for
// `reconnect_backoff` (1 s), so a Redis that is down costs a request nothing but a clock read.
// Server error replies (-ERR, -WRONGTYPE, -OOM, ...) keep the connection and come back as a
// Status carrying the server's message.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/redis_url.h"

namespace deltaserve::common {

// One decoded reply, owning its bytes.
struct RedisReply {
  enum class Type { kNil, kString, kStatus, kError, kInteger, kArray };
  Type type = Type::kNil;
  int64_t integer = 0;               // kInteger
  std::string str;                   // kString (bulk), kStatus (+OK), kError (the message, no '-')
  std::vector<RedisReply> elements;  // kArray
};

// One connection to one server (see the file comment). Not thread-safe: one owner at a time
// (a worker's snapshot-I/O thread, or a mutex around it). Calls take an optional timeout; without
// one, the client's default applies. Every call fails with DeadlineExceeded once its timeout has
// passed, whatever it was doing (connecting, the TLS handshake, AUTH, writing, reading).
class RedisClient {
 public:
  // Checks the options and prepares TLS (loads the CA and client certificate files: a missing or
  // bad file is InvalidArgument here, not at the first call). Does not connect: the first call
  // does; call Ping() to find out whether the server answers.
  static absl::StatusOr<std::unique_ptr<RedisClient>> Create(
      RedisOptions options, absl::Duration default_timeout = absl::Milliseconds(50));
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  using Timeout = std::optional<absl::Duration>;

  absl::Status Ping(Timeout timeout = std::nullopt);
  // GET key: the value, or nullopt when the key does not exist.
  absl::StatusOr<std::optional<std::string>> Get(std::string_view key,
                                                 Timeout timeout = std::nullopt);
  // SET key value [PX ms]: `ttl` is rounded up to whole milliseconds; zero: no expiry.
  absl::Status Set(std::string_view key, std::string_view value,
                   absl::Duration ttl = absl::ZeroDuration(), Timeout timeout = std::nullopt);
  // STRLEN of every key, pipelined in one round trip; 0 for a key that does not exist.
  // A key holding another type fails the call (FailedPrecondition naming the key).
  absl::StatusOr<std::vector<int64_t>> StrLens(absl::Span<const std::string> keys,
                                               Timeout timeout = std::nullopt);
  // DEL key: true when the key existed.
  absl::StatusOr<bool> Del(std::string_view key, Timeout timeout = std::nullopt);
  // INFO [section]: the server's text (e.g. section "memory" for used_memory).
  absl::StatusOr<std::string> Info(std::string_view section = "", Timeout timeout = std::nullopt);
  // PTTL key: nullopt when the key does not exist, InfiniteDuration() when it has no expiry.
  absl::StatusOr<std::optional<absl::Duration>> Ttl(std::string_view key,
                                                    Timeout timeout = std::nullopt);
  // Any command; an error reply is a Status (as for the calls above), anything else is returned.
  absl::StatusOr<RedisReply> Command(absl::Span<const std::string_view> argv,
                                     Timeout timeout = std::nullopt);
  // Several commands in one round trip; their replies in order, error replies included as
  // kError elements (a pipeline's commands fail independently).
  absl::StatusOr<std::vector<RedisReply>> Pipeline(
      absl::Span<const std::vector<std::string_view>> commands, Timeout timeout = std::nullopt);

  // Whether a connection is open now (it may still turn out to be broken).
  bool connected() const;
  const RedisOptions& options() const { return options_; }

 private:
  class Connection;
  struct TlsContext;
  struct Call;  // one call's deadline (steady clock) and name, for messages
  RedisClient(RedisOptions options, absl::Duration default_timeout);

  Call Start(std::string_view op, Timeout timeout) const;
  absl::StatusOr<std::vector<RedisReply>> RoundTrip(
      absl::Span<const std::vector<std::string_view>> commands, const Call& call);
  absl::StatusOr<RedisReply> One(absl::Span<const std::string_view> argv, const Call& call);
  absl::Status EnsureConnected(const Call& call);
  absl::StatusOr<std::unique_ptr<Connection>> Connect(const Call& call);

  RedisOptions options_;
  absl::Duration default_timeout_;
  std::string server_;  // host:port, for messages
  std::unique_ptr<TlsContext> tls_;
  std::unique_ptr<Connection> conn_;
  std::chrono::steady_clock::time_point retry_after_{};  // no connect attempt before this
  absl::Status last_connect_error_;
};

// The Status of a server error reply, by its first word: WRONGPASS/NOAUTH/NOPERM ->
// PermissionDenied, OOM -> ResourceExhausted, LOADING/BUSY/MASTERDOWN/READONLY/TRYAGAIN ->
// Unavailable, WRONGTYPE -> FailedPrecondition, anything else (ERR ...) -> InvalidArgument.
// The message is "<context>: <server's message>" ("redis: ..." without a context).
absl::Status RedisErrorToStatus(std::string_view context, std::string_view message);

}  // namespace deltaserve::common
