#include "router/upstream/http_connection.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace deltaserve::router::upstream {
namespace {

std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown TLS error" : out;
}

int MsUntil(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  const int64_t ms = absl::ToInt64Milliseconds(left) + 1;
  return ms > 1 << 30 ? 1 << 30 : static_cast<int>(ms);
}

// One client context per CA bundle ("" = the system's), made once and kept for the process:
// loading the system's CA file takes milliseconds, too much for every request. Contexts are
// reference-counted by OpenSSL; each connection takes its own reference.
absl::StatusOr<SSL_CTX*> ClientContext(const std::string& ca_pem) {
  static std::mutex mu;
  static std::map<std::string, SSL_CTX*>* contexts = new std::map<std::string, SSL_CTX*>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = contexts->find(ca_pem); it != contexts->end()) {
    SSL_CTX_up_ref(it->second);
    return it->second;
  }
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return absl::InternalError("TLS: " + OpenSslErrors());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (ca_pem.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
      SSL_CTX_free(ctx);
      return absl::InternalError("TLS: cannot load the system's CAs: " + OpenSslErrors());
    }
  } else {
    BIO* bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    int added = 0;
    while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
      added += X509_STORE_add_cert(store, cert) == 1;
      X509_free(cert);
    }
    BIO_free(bio);
    ERR_clear_error();  // the end of the bundle reads as an error
    if (added == 0) {
      SSL_CTX_free(ctx);
      return absl::InvalidArgumentError("TLS: tls_ca_file holds no certificate");
    }
  }
  (*contexts)[ca_pem] = ctx;
  SSL_CTX_up_ref(ctx);
  return ctx;
}

bool IsIpLiteral(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

}  // namespace

HttpConnection::HttpConnection() : cancel_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

HttpConnection::~HttpConnection() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  if (fd_ >= 0) close(fd_);
  if (cancel_fd_ >= 0) close(cancel_fd_);
}

void HttpConnection::Cancel() {
  const uint64_t one = 1;
  if (cancel_fd_ >= 0) (void)!write(cancel_fd_, &one, sizeof one);
}

bool HttpConnection::IdleUsable() {
  if (fd_ < 0 || cancel_fd_ < 0) return false;
  pollfd fds[2] = {{fd_, POLLIN, 0}, {cancel_fd_, POLLIN, 0}};
  if (poll(fds, 2, 0) < 0) return false;
  if (fds[1].revents != 0) return false;
  if (fds[0].revents == 0) return true;  // nothing arrived: still open as far as we can tell
  if (ssl_ == nullptr) return false;     // EOF, an error or stray bytes
  // TLS: the readable bytes may be a record that carries no data (a TLS 1.3 session ticket);
  // peeking processes it. Data or the peer's close_notify / EOF make the connection unusable.
  ERR_clear_error();
  char byte;
  const int r = SSL_peek(ssl_, &byte, 1);
  if (r > 0) return false;
  const bool alive = SSL_get_error(ssl_, r) == SSL_ERROR_WANT_READ;
  ERR_clear_error();
  return alive;
}

absl::Status HttpConnection::Wait(bool read, absl::Time deadline) {
  for (;;) {
    pollfd fds[2] = {{fd_, static_cast<short>(read ? POLLIN : POLLOUT), 0},
                     {cancel_fd_, POLLIN, 0}};
    const int timeout = MsUntil(deadline);
    if (timeout == 0) return absl::DeadlineExceededError("timed out");
    const int n = poll(fds, 2, timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (fds[1].revents != 0) return absl::CancelledError("cancelled");
    if (n == 0) return absl::DeadlineExceededError("timed out");
    return absl::OkStatus();  // readable, writable, or an error the next call reports
  }
}

absl::Status HttpConnection::Connect(const UpstreamUrl& url, const std::string& ca_pem,
                                     absl::Time deadline) {
  if (cancel_fd_ < 0) return absl::InternalError("eventfd failed");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  // getaddrinfo has no timeout of its own; the name service's (resolv.conf) bounds it.
  const int rc = getaddrinfo(url.host.c_str(), std::to_string(url.port).c_str(), &hints, &found);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", url.host, ": ", gai_strerror(rc)));
  }
  std::string last = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          a->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    fd_ = fd;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = std::strerror(errno);
      close(fd);
      fd_ = -1;
      continue;
    }
    absl::Status waited = Wait(false, deadline);
    if (!waited.ok()) {
      freeaddrinfo(found);
      return waited.code() == absl::StatusCode::kDeadlineExceeded
                 ? absl::DeadlineExceededError(
                       absl::StrCat("connecting to ", url.host, ":", url.port, " timed out"))
                 : waited;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      last = std::strerror(err);
      close(fd);
      fd_ = -1;
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    break;
  }
  freeaddrinfo(found);
  if (fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", url.host, ":", url.port, ": ", last));
  }
  return url.tls ? Handshake(url, ca_pem, deadline) : absl::OkStatus();
}

absl::Status HttpConnection::Handshake(const UpstreamUrl& url, const std::string& ca_pem,
                                       absl::Time deadline) {
  absl::StatusOr<SSL_CTX*> ctx = ClientContext(ca_pem);
  if (!ctx.ok()) return ctx.status();
  ctx_ = *ctx;
  ssl_ = SSL_new(ctx_);
  if (ssl_ == nullptr) return absl::InternalError("TLS: " + OpenSslErrors());
  SSL_set_fd(ssl_, fd_);
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
  if (IsIpLiteral(url.host)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, url.host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl_, url.host.c_str());
    X509_VERIFY_PARAM_set1_host(param, url.host.c_str(), 0);
  }
  for (;;) {
    const int r = SSL_connect(ssl_);
    if (r == 1) return absl::OkStatus();
    const int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      absl::Status waited = Wait(e == SSL_ERROR_WANT_READ, deadline);
      if (!waited.ok()) {
        return waited.code() == absl::StatusCode::kDeadlineExceeded
                   ? absl::DeadlineExceededError("TLS handshake timed out")
                   : waited;
      }
      continue;
    }
    const long verify = SSL_get_verify_result(ssl_);
    if (verify != X509_V_OK) {
      return absl::FailedPreconditionError(
          absl::StrCat("TLS: the certificate of ", url.host,
                       " is not trusted: ", X509_verify_cert_error_string(verify)));
    }
    return absl::UnavailableError("TLS handshake failed: " + OpenSslErrors());
  }
}

absl::Status HttpConnection::Write(std::string_view bytes, absl::Time deadline) {
  while (!bytes.empty()) {
    if (ssl_ != nullptr) {
      ERR_clear_error();
      const int r = SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size()));
      if (r > 0) {
        bytes.remove_prefix(static_cast<size_t>(r));
        continue;
      }
      const int e = SSL_get_error(ssl_, r);
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
        return absl::UnavailableError("TLS write failed: " + OpenSslErrors());
      }
      if (absl::Status s = Wait(e == SSL_ERROR_WANT_READ, deadline); !s.ok()) return s;
      continue;
    }
    const ssize_t r = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (r > 0) {
      bytes.remove_prefix(static_cast<size_t>(r));
      continue;
    }
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    }
    if (absl::Status s = Wait(false, deadline); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> HttpConnection::Read(char* buffer, size_t n, absl::Time deadline) {
  for (;;) {
    if (ssl_ != nullptr) {
      ERR_clear_error();
      const int r = SSL_read(ssl_, buffer, static_cast<int>(n));
      if (r > 0) return static_cast<size_t>(r);
      const int e = SSL_get_error(ssl_, r);
      if (e == SSL_ERROR_ZERO_RETURN) return 0;
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (absl::Status s = Wait(e == SSL_ERROR_WANT_READ, deadline); !s.ok()) return s;
        continue;
      }
      // A peer that closes without close_notify: the end of the bytes for framing's sake.
      if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) return 0;
      return absl::UnavailableError("TLS read failed: " + OpenSslErrors());
    }
    const ssize_t r = recv(fd_, buffer, n, 0);
    if (r >= 0) return static_cast<size_t>(r);
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    }
    if (absl::Status s = Wait(true, deadline); !s.ok()) return s;
  }
}

}  // namespace deltaserve::router::upstream
