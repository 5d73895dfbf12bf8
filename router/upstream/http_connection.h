// One HTTP/1.1 connection from the router to an upstream (docs/upstreams.md): TCP, and TLS over
// it for https (OpenSSL; the peer's certificate checked against the system's CAs or the
// upstream's tls_ca_file, and its name or IP address against the URL's host). Blocking, one
// thread per exchange (router/upstream/upstream_call.h); every wait has a deadline, and
// Cancel() from any other thread wakes a blocked call, which then returns Cancelled.
//
//   HttpConnection c;
//   RETURN_IF_ERROR(c.Connect(url, ca_pem, deadline));
//   RETURN_IF_ERROR(c.Write(request_bytes, deadline));
//   ASSIGN_OR_RETURN(size_t n, c.Read(buf, sizeof buf, deadline));   // 0: the peer closed
//
// Errors: Unavailable for connection failures (refused, reset, DNS), DeadlineExceeded past a
// deadline, Cancelled after Cancel(), FailedPrecondition for TLS verification failures.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "router/config/upstream_config.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace deltaserve::router::upstream {

class HttpConnection {
 public:
  HttpConnection();
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Resolves url.host, connects (each address in turn) and, for https, completes the TLS
  // handshake; `ca_pem` "" means the system's CAs.
  absl::Status Connect(const UpstreamUrl& url, const std::string& ca_pem, absl::Time deadline);
  absl::Status Write(std::string_view bytes, absl::Time deadline);
  // Up to `n` bytes; 0 when the peer closed the connection.
  absl::StatusOr<size_t> Read(char* buffer, size_t n, absl::Time deadline);

  // Thread-safe, never blocks; later and blocked calls return Cancelled.
  void Cancel();

  // For a connection kept idle between requests (connection_pool.h): false when the peer has
  // closed it, reset it or sent bytes nobody asked for (any of which makes it unusable), or it
  // was cancelled. Never blocks. True is no promise: the peer may close it a moment later.
  bool IdleUsable();

 private:
  // Waits until the socket is readable (`read`) or writable, the deadline or a Cancel().
  absl::Status Wait(bool read, absl::Time deadline);
  absl::Status Handshake(const UpstreamUrl& url, const std::string& ca_pem, absl::Time deadline);

  int fd_ = -1;
  int cancel_fd_ = -1;  // an eventfd Cancel() writes to
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
};

}  // namespace deltaserve::router::upstream
