#include "common/internal/redis_connection.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/internal/redis_protocol.h"
#include "common/str_util.h"

namespace deltaserve::common {

using Clock = std::chrono::steady_clock;

namespace {

// Arguments at least this long are written from the caller's memory (writev / one SSL_write
// each) instead of being copied into the command buffer: snapshot values are 1-150 MiB.
constexpr size_t kInlineArgLimit = 64 << 10;
// Bytes read from the socket per read call.
constexpr size_t kReadChunk = 256 << 10;

std::string Errno(int err) { return std::strerror(err); }

// The OpenSSL error queue as text (emptied).
std::string SslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {  // NOLINT(runtime/int): OpenSSL's type
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown TLS error" : out;
}

bool IsIpLiteral(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

// A BIO over our non-blocking socket that sends with MSG_NOSIGNAL: OpenSSL's own socket BIO
// uses write(), which raises SIGPIPE on a connection the server has closed.
int BioWrite(BIO* bio, const char* data, int len) {
  const int fd = *static_cast<int*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  const ssize_t n = ::send(fd, data, static_cast<size_t>(len), MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_write(bio);
  }
  return static_cast<int>(n);
}

int BioRead(BIO* bio, char* data, int len) {
  const int fd = *static_cast<int*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  const ssize_t n = ::recv(fd, data, static_cast<size_t>(len), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_read(bio);
  }
  return static_cast<int>(n);
}

long BioCtrl(BIO*, int cmd, long, void*) {  // NOLINT(runtime/int): OpenSSL's signature
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

BIO_METHOD* SocketBioMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "deltaserve_redis");
    BIO_meth_set_write(m, BioWrite);
    BIO_meth_set_read(m, BioRead);
    BIO_meth_set_ctrl(m, BioCtrl);
    return m;
  }();
  return method;
}

}  // namespace

namespace {

// Milliseconds to wait in poll() before `deadline`, rounded up so that a wait never ends just
// short of it; -1 when the deadline has passed.
int PollMillisUntil(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return -1;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

}  // namespace

// One TCP (or TLS over TCP) connection with its reply decoder. Every operation honours the
// call's deadline: it tries the socket first and waits in poll() only when it would block.
class RedisClient::Connection {
 public:
  Connection(int fd, const std::string& server, int64_t max_reply_bytes)
      : fd_(fd), server_(server), reader_(max_reply_bytes), buf_(new char[kReadChunk]) {}
  ~Connection() {
    if (ssl_ != nullptr) SSL_free(ssl_);  // frees the BIO too
    ::close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Waits until the socket is ready for `events` or the deadline passes.
  absl::Status Wait(int16_t events, const Call& call) {
    for (;;) {
      const int ms = PollMillisUntil(call.deadline);
      if (ms < 0) return TimedOut(call);
      pollfd p{fd_, events, 0};
      const int r = ::poll(&p, 1, ms);
      if (r > 0) return absl::OkStatus();  // ready, or an error the next I/O call will report
      if (r < 0 && errno != EINTR) return IoError(call, "poll", errno);
    }
  }

  absl::Status TimedOut(const Call& call) const {
    return absl::DeadlineExceededError(absl::StrCat("redis ", server_, ": ", Sv(call.op),
                                                    " timed out after ",
                                                    absl::FormatDuration(call.timeout)));
  }
  absl::Status IoError(const Call& call, std::string_view what, int err) const {
    return absl::UnavailableError(
        absl::StrCat("redis ", server_, ": ", Sv(call.op), ": ", Sv(what), ": ", Errno(err)));
  }
  absl::Status Closed(const Call& call) const {
    return absl::UnavailableError(
        absl::StrCat("redis ", server_, ": ", Sv(call.op), ": connection closed by the server"));
  }

  // TLS client handshake over the connected socket.
  absl::Status StartTls(SSL_CTX* ctx, const RedisOptions& o, const Call& call) {
    ssl_ = SSL_new(ctx);
    BIO* bio = ssl_ == nullptr ? nullptr : BIO_new(SocketBioMethod());
    if (bio == nullptr) return absl::InternalError(absl::StrCat("redis TLS: ", SslErrors()));
    BIO_set_data(bio, &fd_);
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl_, bio, bio);
    SSL_set_connect_state(ssl_);
    const bool ip = IsIpLiteral(o.host);
    if (!ip) SSL_set_tlsext_host_name(ssl_, o.host.c_str());
    if (!o.tls_insecure) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
      const int set = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, o.host.c_str())
                         : X509_VERIFY_PARAM_set1_host(param, o.host.c_str(), 0);
      if (set != 1) return absl::InternalError(absl::StrCat("redis TLS: ", SslErrors()));
    }
    for (;;) {
      ERR_clear_error();
      errno = 0;  // SSL_ERROR_SYSCALL with errno 0 means the peer closed
      const int r = SSL_do_handshake(ssl_);
      if (r == 1) return absl::OkStatus();
      const int err = SSL_get_error(ssl_, r);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        if (absl::Status s = Wait(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, call); !s.ok()) {
          return s;
        }
        continue;
      }
      const long verify = SSL_get_verify_result(ssl_);  // NOLINT(runtime/int): OpenSSL's type
      if (verify != X509_V_OK) {
        ERR_clear_error();
        return absl::UnavailableError(
            absl::StrCat("redis ", server_, ": TLS handshake failed: certificate verify failed: ",
                         X509_verify_cert_error_string(verify),
                         " (set tls_ca_cert to the CA that signed the server's certificate, or "
                         "tls_insecure=true to skip verification)"));
      }
      if (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
        return errno == 0 ? Closed(call) : IoError(call, "TLS handshake", errno);
      }
      return absl::UnavailableError(
          absl::StrCat("redis ", server_, ": TLS handshake failed: ", SslErrors()));
    }
  }

  // Sends `pieces` in order.
  absl::Status WriteAll(absl::Span<const std::string_view> pieces, const Call& call) {
    return ssl_ != nullptr ? WriteTls(pieces, call) : WritePlain(pieces, call);
  }

  // Sends the commands and reads one reply per command.
  absl::StatusOr<std::vector<RedisReply>> Exchange(
      absl::Span<const std::vector<std::string_view>> commands, const Call& call) {
    std::string small;
    std::vector<internal::RespGap> gaps;
    std::vector<std::string_view> large;  // the arguments not copied into `small`
    for (const std::vector<std::string_view>& argv : commands) {
      const size_t first = gaps.size();
      internal::AppendRespCommand(argv, small, kInlineArgLimit, &gaps);
      for (size_t i = first; i < gaps.size(); ++i) large.push_back(argv[gaps[i].arg_index]);
    }
    std::vector<std::string_view> pieces;
    size_t at = 0;
    for (size_t i = 0; i < gaps.size(); ++i) {
      pieces.emplace_back(small.data() + at, gaps[i].offset - at);
      pieces.push_back(large[i]);
      at = gaps[i].offset;
    }
    pieces.emplace_back(small.data() + at, small.size() - at);
    if (absl::Status s = WriteAll(pieces, call); !s.ok()) return s;

    std::vector<RedisReply> replies;
    replies.reserve(commands.size());
    while (replies.size() < commands.size()) {
      absl::StatusOr<std::optional<RedisReply>> next = reader_.Next();
      if (!next.ok()) return WithServer(next.status(), call);
      if (next->has_value()) {
        replies.push_back(std::move(**next));
        continue;
      }
      absl::StatusOr<size_t> n = ReadSome(call);
      if (!n.ok()) return n.status();
      if (absl::Status s = reader_.Feed(std::string_view(buf_.get(), *n)); !s.ok()) {
        return WithServer(s, call);
      }
    }
    return replies;
  }

 private:
  absl::Status WithServer(const absl::Status& s, const Call& call) const {
    return absl::Status(s.code(),
                        absl::StrCat("redis ", server_, ": ", Sv(call.op), ": ", s.message()));
  }

  absl::Status WritePlain(absl::Span<const std::string_view> pieces, const Call& call) {
    size_t index = 0;   // first piece not completely sent
    size_t offset = 0;  // bytes of it already sent
    while (index < pieces.size()) {
      iovec iov[64];
      int count = 0;
      for (size_t i = index; i < pieces.size() && count < 64; ++i) {
        const size_t skip = i == index ? offset : 0;
        if (pieces[i].size() == skip) continue;
        iov[count].iov_base = const_cast<char*>(pieces[i].data() + skip);
        iov[count].iov_len = pieces[i].size() - skip;
        ++count;
      }
      if (count == 0) return absl::OkStatus();
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(count);
      const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          if (absl::Status s = Wait(POLLOUT, call); !s.ok()) return s;
          continue;
        }
        return IoError(call, "write", errno);
      }
      size_t sent = static_cast<size_t>(n);
      while (index < pieces.size() && sent >= pieces[index].size() - offset) {
        sent -= pieces[index].size() - offset;
        ++index;
        offset = 0;
      }
      offset += sent;
    }
    return absl::OkStatus();
  }

  absl::Status WriteTls(absl::Span<const std::string_view> pieces, const Call& call) {
    for (const std::string_view piece : pieces) {
      size_t done = 0;
      while (done < piece.size()) {
        ERR_clear_error();
        errno = 0;
        size_t written = 0;
        const int r = SSL_write_ex(ssl_, piece.data() + done,
                                   std::min<size_t>(piece.size() - done, 1 << 30), &written);
        if (r == 1) {
          done += written;
          continue;
        }
        if (absl::Status s = TlsRetry(r, "TLS write", call); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }

  // After a failed SSL call: waits when OpenSSL asks to, else the error.
  absl::Status TlsRetry(int r, std::string_view what, const Call& call) {
    const int err = SSL_get_error(ssl_, r);
    if (err == SSL_ERROR_WANT_READ) return Wait(POLLIN, call);
    if (err == SSL_ERROR_WANT_WRITE) return Wait(POLLOUT, call);
    if (err == SSL_ERROR_ZERO_RETURN) return Closed(call);
    if (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
      return errno == 0 ? Closed(call) : IoError(call, what, errno);
    }
    return absl::UnavailableError(
        absl::StrCat("redis ", server_, ": ", Sv(call.op), ": ", Sv(what), ": ", SslErrors()));
  }

  // Reads at least one byte into buf_.
  absl::StatusOr<size_t> ReadSome(const Call& call) {
    for (;;) {
      if (ssl_ != nullptr) {
        ERR_clear_error();
        errno = 0;
        size_t n = 0;
        const int r = SSL_read_ex(ssl_, buf_.get(), kReadChunk, &n);
        if (r == 1) return n;
        if (absl::Status s = TlsRetry(r, "TLS read", call); !s.ok()) return s;
        continue;
      }
      const ssize_t n = ::recv(fd_, buf_.get(), kReadChunk, MSG_DONTWAIT);
      if (n > 0) return static_cast<size_t>(n);
      if (n == 0) return Closed(call);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return IoError(call, "read", errno);
      if (absl::Status s = Wait(POLLIN, call); !s.ok()) return s;
    }
  }

  int fd_;
  const std::string& server_;
  SSL* ssl_ = nullptr;
  internal::RespReplyReader reader_;
  std::unique_ptr<char[]> buf_;
};

namespace {

// A finished or abandoned getaddrinfo_a() lookup.
struct Lookup {
  std::string host, port;
  addrinfo hints{};
  gaicb cb{};
};

// Resolves host:port before the deadline. IP literals never touch the resolver; names go through
// getaddrinfo_a(), because getaddrinfo() can block for seconds on a slow DNS server.
absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port, Clock::time_point deadline,
                                  const std::string& server) {
  auto lookup = std::make_unique<Lookup>();
  lookup->host = host;
  lookup->port = std::to_string(port);
  lookup->hints.ai_socktype = SOCK_STREAM;
  lookup->hints.ai_family = AF_UNSPEC;
  if (IsIpLiteral(host)) {
    lookup->hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* result = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), lookup->port.c_str(), &lookup->hints, &result);
    if (rc != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("redis ", server, ": bad address: ", gai_strerror(rc)));
    }
    return result;
  }
  lookup->hints.ai_flags = AI_NUMERICSERV;
  lookup->cb.ar_name = lookup->host.c_str();
  lookup->cb.ar_service = lookup->port.c_str();
  lookup->cb.ar_request = &lookup->hints;
  gaicb* list[1] = {&lookup->cb};
  if (const int rc = ::getaddrinfo_a(GAI_NOWAIT, list, 1, nullptr); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("redis ", server, ": cannot resolve: ", gai_strerror(rc)));
  }
  for (;;) {
    const int rc = ::gai_error(&lookup->cb);
    if (rc == 0) return lookup->cb.ar_result;
    if (rc != EAI_INPROGRESS) {
      return absl::UnavailableError(
          absl::StrCat("redis ", server, ": cannot resolve ", host, ": ", gai_strerror(rc)));
    }
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) break;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    ::gai_suspend(list, 1, &ts);
  }
  const int cancel = ::gai_cancel(&lookup->cb);
  if (cancel == EAI_ALLDONE && ::gai_error(&lookup->cb) == 0) {
    ::freeaddrinfo(lookup->cb.ar_result);
  } else if (cancel == EAI_NOTCANCELED) {
    // glibc's resolver thread still writes into `lookup` when it finishes: it must outlive the
    // lookup, so it is leaked (a few hundred bytes, once per timed-out lookup of a name).
    (void)lookup.release();
  }
  return absl::DeadlineExceededError(
      absl::StrCat("redis ", server, ": resolving ", host, " timed out"));
}

}  // namespace

RedisClient::TlsContext::~TlsContext() { SSL_CTX_free(ctx); }

absl::StatusOr<std::unique_ptr<RedisClient::TlsContext>> RedisClient::TlsContext::Create(
    const RedisOptions& o) {
  auto tls = std::make_unique<TlsContext>();
  tls->ctx = SSL_CTX_new(TLS_client_method());
  if (tls->ctx == nullptr) return absl::InternalError(absl::StrCat("redis TLS: ", SslErrors()));
  SSL_CTX_set_min_proto_version(tls->ctx, TLS1_2_VERSION);
  // Partial writes let WriteTls resume after WANT_WRITE from where the socket stopped.
  SSL_CTX_set_mode(tls->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (o.tls_insecure) {
    SSL_CTX_set_verify(tls->ctx, SSL_VERIFY_NONE, nullptr);
  } else {
    SSL_CTX_set_verify(tls->ctx, SSL_VERIFY_PEER, nullptr);
    const int loaded = o.tls_ca_cert.empty() ? SSL_CTX_set_default_verify_paths(tls->ctx)
                                             : SSL_CTX_load_verify_locations(
                                                   tls->ctx, o.tls_ca_cert.c_str(), nullptr);
    if (loaded != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "redis TLS: cannot load CA certificates from ",
          o.tls_ca_cert.empty() ? "the system store" : o.tls_ca_cert, ": ", SslErrors()));
    }
  }
  if (!o.tls_cert.empty()) {
    if (SSL_CTX_use_certificate_chain_file(tls->ctx, o.tls_cert.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(tls->ctx, o.tls_key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(tls->ctx) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("redis TLS: client certificate ", o.tls_cert,
                                                     " / key ", o.tls_key, ": ", SslErrors()));
    }
  }
  return tls;
}

RedisClient::RedisClient(RedisOptions options, absl::Duration default_timeout)
    : options_(std::move(options)),
      default_timeout_(default_timeout),
      server_(options_.HostPort()) {}

RedisClient::~RedisClient() = default;

bool RedisClient::connected() const { return conn_ != nullptr; }

absl::StatusOr<std::unique_ptr<RedisClient::Connection>> RedisClient::Connect(const Call& call) {
  absl::StatusOr<addrinfo*> addrs = Resolve(options_.host, options_.port, call.deadline, server_);
  if (!addrs.ok()) return addrs.status();
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owner(*addrs, ::freeaddrinfo);
  absl::Status last = absl::UnavailableError(absl::StrCat("redis ", server_, ": no address"));
  for (addrinfo* ai = *addrs; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last = absl::UnavailableError(absl::StrCat("redis ", server_, ": socket: ", Errno(errno)));
      continue;
    }
    auto conn = std::make_unique<Connection>(fd, server_, options_.max_reply_bytes);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last = conn->IoError(call, "connect", errno);
        continue;
      }
      if (absl::Status s = conn->Wait(POLLOUT, call); !s.ok()) return s;
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = conn->IoError(call, "connect", err);
        continue;
      }
    }
    if (tls_ != nullptr) {
      if (absl::Status s = conn->StartTls(tls_->ctx, options_, call); !s.ok()) return s;
    }
    std::vector<std::vector<std::string_view>> hello;
    const std::string db = std::to_string(options_.db);
    if (!options_.password.empty()) {
      if (options_.user.empty()) {
        hello.push_back({"AUTH", options_.password});
      } else {
        hello.push_back({"AUTH", options_.user, options_.password});
      }
    }
    if (options_.db != 0) hello.push_back({"SELECT", db});
    if (!hello.empty()) {
      absl::StatusOr<std::vector<RedisReply>> replies = conn->Exchange(hello, call);
      if (!replies.ok()) return replies.status();
      for (size_t i = 0; i < replies->size(); ++i) {
        const RedisReply& r = (*replies)[i];
        if (r.type == RedisReply::Type::kError) {
          return RedisErrorToStatus(absl::StrCat("redis ", server_, ": ", Sv(hello[i][0])), r.str);
        }
      }
    }
    return conn;
  }
  return last;
}

absl::Status RedisClient::EnsureConnected(const Call& call) {
  if (conn_ != nullptr) return absl::OkStatus();
  const Clock::time_point now = Clock::now();
  if (now < retry_after_) {
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(retry_after_ - now);
    return absl::UnavailableError(absl::StrCat(
        "redis ", server_, ": ", Sv(call.op), ": not connecting for another ", wait.count(),
        " ms after the last attempt failed: ", last_connect_error_.message()));
  }
  absl::StatusOr<std::unique_ptr<Connection>> conn = Connect(call);
  if (!conn.ok()) {
    retry_after_ = Clock::now() + absl::ToChronoNanoseconds(options_.reconnect_backoff);
    last_connect_error_ = conn.status();
    return conn.status();
  }
  conn_ = *std::move(conn);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RedisReply>> RedisClient::RoundTrip(
    absl::Span<const std::vector<std::string_view>> commands, const Call& call) {
  if (commands.empty()) return std::vector<RedisReply>{};
  if (absl::Status s = EnsureConnected(call); !s.ok()) return s;
  absl::StatusOr<std::vector<RedisReply>> replies = conn_->Exchange(commands, call);
  // Whatever failed (timeout, I/O, protocol, size cap), replies may still be in flight: the
  // stream is out of step with our requests, so the connection cannot be used again.
  if (!replies.ok()) conn_.reset();
  return replies;
}

}  // namespace deltaserve::common
