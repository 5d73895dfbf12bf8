// Idle HTTP/1.1 connections to upstreams kept for the next request (docs/upstreams.md,
// "Connection reuse"): a new TCP connection and TLS handshake to a cloud API costs one to three
// round trips (often 50-200 ms) that a kept connection saves. Connections are kept by what they
// are connected to — scheme, host, port and the CA bundle they were verified with — so two
// upstream names on the same endpoint share them; the counters of new and reused connections
// are by upstream name (deltaserve_router_upstream_connections_total).
//
// UpstreamCall takes a connection (Take), and gives it back (Put) only when its response was
// read exactly to its end and the server keeps it open; every other connection is closed.
// At most kMaxIdleConnectionsPerEndpoint are kept per endpoint (the oldest closed first), each
// at most kIdleConnectionTimeout: servers close idle connections after their own keep-alive
// timeout (commonly 60 s to several minutes), and a connection taken just as the server closes it
// costs a retry, so ours is shorter. Thread-safe; one pool per process (Global).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "router/config/upstream_config.h"
#include "router/upstream/http_connection.h"

namespace deltaserve::router::upstream {

inline constexpr int kMaxIdleConnectionsPerEndpoint = 8;
inline constexpr absl::Duration kIdleConnectionTimeout = absl::Seconds(30);

// What a connection is connected to: connections with equal keys are interchangeable.
std::string ConnectionKey(const UpstreamUrl& url, const std::string& ca_pem);

class ConnectionPool {
 public:
  static ConnectionPool& Global();

  // The most recently kept idle connection for `key` that still looks usable, or nullptr.
  // Connections closed by the server are dropped on the way, and those of any endpoint past the
  // idle timeout (`now`: the clock, a parameter for tests).
  std::unique_ptr<HttpConnection> Take(const std::string& key, absl::Time now);
  // Keeps `connection` idle for the next request to `key`.
  void Put(const std::string& key, std::unique_ptr<HttpConnection> connection, absl::Time now);

  // Connections opened and connections reused, by upstream name.
  void CountNew(std::string_view upstream);
  void CountReused(std::string_view upstream);
  struct Counts {
    int64_t opened = 0;
    int64_t reused = 0;
  };
  Counts counts(std::string_view upstream) const;

  // Idle connections kept for `key` now.
  size_t idle(const std::string& key) const;
  // Closes every idle connection (tests).
  void Clear();

 private:
  struct Idle {
    std::unique_ptr<HttpConnection> connection;
    absl::Time since;
  };
  // Moves the connections idle for kIdleConnectionTimeout or longer, of every endpoint, to
  // `dropped`. Under mu_.
  void DropExpired(absl::Time now, std::vector<std::unique_ptr<HttpConnection>>* dropped);

  mutable std::mutex mu_;
  std::map<std::string, std::deque<Idle>> idle_;  // oldest first
  std::map<std::string, Counts, std::less<>> counts_;
};

}  // namespace deltaserve::router::upstream
