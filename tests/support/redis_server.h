// A real redis-server (Debian's /usr/bin/redis-server, 7.0) for integration tests: started on a
// free 127.0.0.1 port with its own temporary directory and no persistence, ready (answering) when
// Start() returns, and controllable the ways Redis fails in production: stopped (SIGSTOP, every
// call times out), killed, restarted empty on the same port.
//
//   RedisServerProcess redis;
//   RedisServerOptions options;  // (designated initializers trip g++'s -Wextra here)
//   options.password = "secret";
//   ASSERT_TRUE(redis.Start(options));
//   ... RedisClient::Create(*ParseRedisUrl(redis.url())) ...
//   redis.Pause();  redis.Resume();  redis.Kill();  ASSERT_TRUE(redis.Restart());
//
// TLS: MakeTestTlsFiles() writes a throw-away CA and a server certificate for 127.0.0.1 and
// localhost (with the openssl CLI); pass them in RedisServerOptions::tls and the server listens
// for TLS only, and url() is rediss://...?tls_ca_cert=<ca>.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/test_certificates.h"  // MakeTestTlsFiles

namespace deltaserve::testing {

// Whether this redis-server was built with TLS (Debian's is); tests skip TLS cases otherwise.
bool RedisServerHasTls();

// How to configure the server. Everything off by default: no password, no eviction, plain TCP.
struct RedisServerOptions {
  std::string password;             // requirepass (the default user's password)
  std::string acl_user;             // an extra ACL user with every permission ...
  std::string acl_password;         // ... and this password
  int64_t maxmemory = 0;            // bytes; 0: no limit
  std::string maxmemory_policy;     // e.g. "allkeys-lru"; empty: Redis's default (noeviction)
  std::optional<TestTlsFiles> tls;  // set: TLS-only listener (port 0, tls-port), no client certs
  std::vector<std::string> extra_config;  // more redis.conf lines, verbatim
};

// One redis-server child process (see the file comment). The destructor kills it and removes
// its directory. Not thread-safe.
class RedisServerProcess {
 public:
  RedisServerProcess();
  ~RedisServerProcess();
  RedisServerProcess(const RedisServerProcess&) = delete;
  RedisServerProcess& operator=(const RedisServerProcess&) = delete;

  // Starts the server on a free port and waits (up to 20 s) until it accepts connections; false
  // with a test failure (ADD_FAILURE, the server's log) when it does not.
  bool Start(const RedisServerOptions& options = {});
  // SIGTERM and wait for the exit (SIGKILL after 10 s).
  void Stop();
  // SIGKILL and wait: a crash.
  void Kill();
  // SIGSTOP / SIGCONT: the server keeps its connections and accepts new ones (the kernel's
  // backlog does) but answers nothing, so every client call runs into its timeout.
  void Pause();
  void Resume();
  // Kills the server if it runs, then starts it again on the same port with the same options and
  // no data (nothing is ever saved); false with a test failure when it does not come up.
  bool Restart();

  bool running() const { return child_ != nullptr; }
  int port() const { return port_; }
  // redis://[user:password@]127.0.0.1:port, or rediss://...?tls_ca_cert=... with TLS; the
  // ACL user when one is configured, else the password of the default user.
  std::string url() const;
  // The temporary directory (redis.conf, redis.log, the TLS files a test puts there).
  const std::string& dir() const { return dir_; }
  // The server's log so far.
  std::string log() const;

 private:
  bool Launch();

  RedisServerOptions options_;
  std::string dir_;
  int port_ = 0;
  bool paused_ = false;
  std::unique_ptr<ChildProcess> child_;
};

// Path of the redis-server binary: $DELTASERVE_REDIS_SERVER, else /usr/bin/redis-server.
std::string RedisServerBinary();

}  // namespace deltaserve::testing
