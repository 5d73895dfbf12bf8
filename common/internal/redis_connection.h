// How RedisClient (common/redis_client.h) holds its connection, shared by redis_client.cc (the
// calls: each one's deadline, the commands and their replies) and redis_connection.cc (the
// connection's life: resolving the host within the deadline, the socket, the TLS handshake,
// AUTH and SELECT, reconnecting after the backoff, dropping a connection after any failure, and
// the deadline-bound writes and reads over plain TCP or TLS). Internal to the client.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/redis_client.h"

typedef struct ssl_ctx_st SSL_CTX;  // <openssl/ssl.h>, kept out of the client's calls

namespace deltaserve::common {

struct RedisClient::Call {
  std::chrono::steady_clock::time_point deadline;
  absl::Duration timeout;
  std::string_view op;  // "GET", "pipelined STRLEN", ... (static or caller-owned)
};

// The client's TLS settings (CA, verification, client certificate), loaded once by Create.
struct RedisClient::TlsContext {
  SSL_CTX* ctx = nullptr;
  ~TlsContext();

  // Loads the CA and the client certificate of `o` (o.tls is set): a missing or bad file is
  // InvalidArgument naming it.
  static absl::StatusOr<std::unique_ptr<TlsContext>> Create(const RedisOptions& o);
};

}  // namespace deltaserve::common
