// Connection reuse for upstream requests (router/upstream/connection_pool.h, upstream_call.h)
// against a real HTTP/1.1 server on 127.0.0.1 written for the test, which counts the TCP
// connections it accepted: sequential requests share one connection, streamed or not; an answer
// with "Connection: close", extra bytes after its end or a client that cancelled mid-stream
// leaves no connection to reuse; a kept connection the server closed is retried once on a new
// one, but never once a byte of the answer came. Counts only, no timings.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "router/upstream/connection_pool.h"
#include "router/upstream/http_response_reader.h"
#include "router/upstream/upstream_call.h"

namespace deltaserve::router::upstream {
namespace {

// What the server does with one request: the bytes it answers (maybe none) and whether it then
// closes the connection. `connection` and `request` count from 0 (request: on that connection).
struct Reply {
  std::string bytes;
  bool close = false;
  bool wait_for_client_close = false;  // after `bytes`, read until the client closes
};
using Script = std::function<Reply(int connection, int request)>;

class FakeUpstream {
 public:
  explicit FakeUpstream(Script script) : script_(std::move(script)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(listen(listen_fd_, 16), 0);
    socklen_t len = sizeof addr;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~FakeUpstream() {
    shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    close(listen_fd_);
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
    for (int fd : open_fds_) close(fd);
  }

  int port() const { return port_; }
  int accepted() const { return accepted_.load(); }
  int requests() const { return requests_.load(); }

 private:
  void Accept() {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      const int index = accepted_++;
      std::lock_guard<std::mutex> lock(mu_);
      open_fds_.push_back(fd);
      threads_.emplace_back([this, fd, index] { Serve(fd, index); });
    }
  }

  // Reads one request (headers, then Content-Length bytes); false when the client closed.
  static bool ReadRequest(int fd, std::string& pending) {
    for (;;) {
      const size_t end = pending.find("\r\n\r\n");
      if (end != std::string::npos) {
        size_t length = 0;
        const size_t at = pending.find("Content-Length: ");
        if (at != std::string::npos && at < end) length = std::stoul(pending.substr(at + 16));
        if (pending.size() >= end + 4 + length) {
          pending.erase(0, end + 4 + length);
          return true;
        }
      }
      char buf[4096];
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return false;
      pending.append(buf, static_cast<size_t>(n));
    }
  }

  void Serve(int fd, int connection) {
    std::string pending;
    for (int request = 0; ReadRequest(fd, pending); ++request) {
      ++requests_;
      const Reply reply = script_(connection, request);
      if (!reply.bytes.empty()) {
        (void)!send(fd, reply.bytes.data(), reply.bytes.size(), MSG_NOSIGNAL);
      }
      if (reply.wait_for_client_close) {
        char buf[4096];
        while (recv(fd, buf, sizeof buf, 0) > 0) {
        }
      }
      if (reply.close || reply.wait_for_client_close) break;
    }
    shutdown(fd, SHUT_RDWR);  // closed by the destructor: no fd number reused under our feet
  }

  Script script_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int> accepted_{0};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::vector<int> open_fds_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

const std::string kWholeBody =
    R"({"choices":[{"index":0,"message":{"role":"assistant","content":"hello"},)"
    R"("finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}})";

std::string Whole(const std::string& extra_headers = "") {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra_headers +
         "Content-Length: " + std::to_string(kWholeBody.size()) + "\r\n\r\n" + kWholeBody;
}

std::string Chunk(const std::string& data) {
  char size[32];
  snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

const std::string kStreamHead =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
const std::string kFirstEvent = Chunk(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hel\"},\"finish_reason\":null}]}"
    "\n\n");

std::string Stream() {
  return kStreamHead + kFirstEvent +
         Chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},"
               "\"finish_reason\":\"stop\"}]}\n\n") +
         Chunk("data: [DONE]\n\n") + "0\r\n\r\n";
}

class Sink : public UpstreamCallSink {
 public:
  explicit Sink(std::function<void()> on_deltas = nullptr) : on_deltas_(std::move(on_deltas)) {}
  void OnUpstreamDeltas(std::vector<api::GenerationDelta> deltas, int64_t) override {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& d : deltas) text += d.text;
    if (on_deltas_) on_deltas_();
  }
  void OnUpstreamEnd(const api::GenerationEnd&) override {
    std::lock_guard<std::mutex> lock(mu);
    ended = true;
  }
  void OnUpstreamFailed(const UpstreamFailure& f) override {
    std::lock_guard<std::mutex> lock(mu);
    failure = f;
    failed = true;
  }
  std::mutex mu;
  std::string text;
  bool ended = false;
  bool failed = false;
  UpstreamFailure failure;

 private:
  std::function<void()> on_deltas_;
};

// Each upstream a name of its own, so that the process-wide counters start at 0 for it (also
// under --gtest_repeat).
UpstreamConfig Upstream(const std::string& name, int port) {
  static std::atomic<int> serial{0};
  UpstreamConfig u;
  u.name = name + "-" + std::to_string(serial++);
  u.base_url = "http://127.0.0.1:" + std::to_string(port) + "/v1";
  u.model = "m";
  // Bounds so that a wrong client fails instead of hanging; no test waits on them.
  u.connect_timeout_ms = 10000;
  u.first_byte_timeout_ms = 10000;
  u.idle_timeout_ms = 10000;
  return u;
}

// One request, run to its end (its thread ended, so a kept connection is back in the pool).
// `cancel_mid_stream`: the sink cancels the call at its first output, as the router does when
// its client goes away.
std::shared_ptr<Sink> Call(const UpstreamConfig& u, bool cancel_mid_stream = false) {
  auto slot = std::make_shared<std::weak_ptr<UpstreamCall>>();
  auto sink = std::make_shared<Sink>(cancel_mid_stream ? std::function<void()>([slot] {
    if (auto c = slot->lock()) c->Cancel();
  })
                                                       : nullptr);
  UpstreamHttpRequest request{"/v1/chat/completions", R"({"model":"m","stream":true})"};
  auto call = std::make_shared<UpstreamCall>(u, request, api::Endpoint::kChatCompletions, 1,
                                             "req", sink);
  *slot = call;
  call->Start();
  call.reset();
  EXPECT_TRUE(WaitForUpstreamCalls(absl::Seconds(60)));
  return sink;
}

void ExpectOk(const std::shared_ptr<Sink>& s) {
  std::lock_guard<std::mutex> lock(s->mu);
  EXPECT_TRUE(s->ended) << s->failure.status;
  EXPECT_EQ(s->text, "hello");
}

TEST(UpstreamConnectionReuseTest, SequentialWholeAnswersShareOneConnection) {
  FakeUpstream server([](int, int) { return Reply{Whole()}; });
  const UpstreamConfig u = Upstream("whole", server.port());
  for (int i = 0; i < 3; ++i) ExpectOk(Call(u));
  EXPECT_EQ(server.accepted(), 1);
  EXPECT_EQ(server.requests(), 3);
  EXPECT_EQ(ConnectionPool::Global().counts(u.name).opened, 1);
  EXPECT_EQ(ConnectionPool::Global().counts(u.name).reused, 2);
}

TEST(UpstreamConnectionReuseTest, SequentialStreamsShareOneConnection) {
  FakeUpstream server([](int, int) { return Reply{Stream()}; });
  const UpstreamConfig u = Upstream("stream", server.port());
  for (int i = 0; i < 3; ++i) ExpectOk(Call(u));
  EXPECT_EQ(server.accepted(), 1);
  EXPECT_EQ(ConnectionPool::Global().counts(u.name).opened, 1);
  EXPECT_EQ(ConnectionPool::Global().counts(u.name).reused, 2);
}

TEST(UpstreamConnectionReuseTest, ErrorAnswersKeepTheConnectionToo) {
  const std::string body = R"({"error":{"message":"bad"}})";
  FakeUpstream server([&](int, int request) {
    return Reply{request == 0 ? "HTTP/1.1 400 Bad Request\r\nContent-Length: " +
                                    std::to_string(body.size()) + "\r\n\r\n" + body
                              : Whole()};
  });
  const UpstreamConfig u = Upstream("error", server.port());
  auto first = Call(u);
  EXPECT_TRUE(first->failed);
  ExpectOk(Call(u));
  EXPECT_EQ(server.accepted(), 1);
}

TEST(UpstreamConnectionReuseTest, ConnectionCloseGetsANewConnection) {
  FakeUpstream server([](int, int) { return Reply{Whole("Connection: close\r\n"), true}; });
  const UpstreamConfig u = Upstream("close", server.port());
  for (int i = 0; i < 3; ++i) ExpectOk(Call(u));
  EXPECT_EQ(server.accepted(), 3);
  EXPECT_EQ(ConnectionPool::Global().counts(u.name).reused, 0);
}

TEST(UpstreamConnectionReuseTest, AnswerUntilCloseIsNotReused) {
  // No Content-Length, no chunks: the body ends where the connection does.
  FakeUpstream server([](int, int) {
    return Reply{"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + kWholeBody, true};
  });
  const UpstreamConfig u = Upstream("untilclose", server.port());
  for (int i = 0; i < 2; ++i) ExpectOk(Call(u));
  EXPECT_EQ(server.accepted(), 2);
}

TEST(UpstreamConnectionReuseTest, ServerThatClosedAKeptConnectionIsRetriedOnce) {
  // The server takes the second request on its first connection and closes without a byte of
  // answer, as one does that timed out the idle connection just as the request came.
  FakeUpstream server([](int connection, int request) {
    if (connection == 0 && request == 1) return Reply{"", true};
    return Reply{Whole()};
  });
  const UpstreamConfig u = Upstream("retry", server.port());
  ExpectOk(Call(u));
  ExpectOk(Call(u));
  EXPECT_EQ(server.accepted(), 2);
  EXPECT_EQ(server.requests(), 3);
  EXPECT_EQ(ConnectionPool::Global().counts(u.name).opened, 2);
  EXPECT_EQ(ConnectionPool::Global().counts(u.name).reused, 1);
  ExpectOk(Call(u));  // the retry's connection was kept
  EXPECT_EQ(server.accepted(), 2);
}

TEST(UpstreamConnectionReuseTest, ServerThatClosesIdleConnectionsStillAnswers) {
  // Closes after every answer without saying so: the next request finds the connection closed
  // (at the pool, or when its read ends) and goes out on a new one.
  FakeUpstream server([](int, int) { return Reply{Whole(), true}; });
  const UpstreamConfig u = Upstream("idleclose", server.port());
  for (int i = 0; i < 3; ++i) ExpectOk(Call(u));
  EXPECT_EQ(server.accepted(), 3);
  EXPECT_EQ(server.requests(), 3);
}

TEST(UpstreamConnectionReuseTest, NoRetryOnceTheAnswerStarted) {
  FakeUpstream server([](int connection, int request) {
    if (connection == 0 && request == 1) return Reply{"HTTP/1.1 200 OK\r\nContent-Le", true};
    return Reply{Whole()};
  });
  const UpstreamConfig u = Upstream("noretry", server.port());
  ExpectOk(Call(u));
  auto second = Call(u);
  EXPECT_TRUE(second->failed);
  EXPECT_FALSE(second->ended);
  EXPECT_EQ(server.accepted(), 1);
  EXPECT_EQ(server.requests(), 2);
}

TEST(UpstreamConnectionReuseTest, CancelMidStreamClosesTheConnection) {
  // The first answer stops after its first event until the client goes away.
  FakeUpstream server([](int connection, int request) {
    if (connection == 0 && request == 0) {
      Reply r{kStreamHead + kFirstEvent};
      r.wait_for_client_close = true;
      return r;
    }
    return Reply{Stream()};
  });
  const UpstreamConfig u = Upstream("cancel", server.port());
  auto cancelled = Call(u, /*cancel_mid_stream=*/true);
  {
    std::lock_guard<std::mutex> lock(cancelled->mu);
    EXPECT_TRUE(cancelled->failed);
    EXPECT_EQ(cancelled->failure.status.code(), absl::StatusCode::kCancelled);
  }
  ExpectOk(Call(u));
  EXPECT_EQ(server.accepted(), 2);
  EXPECT_EQ(ConnectionPool::Global().counts(u.name).reused, 0);
}

TEST(UpstreamConnectionReuseTest, TrailingBytesAreNotReused) {
  FakeUpstream server([](int, int) { return Reply{Whole() + "GARBAGE"}; });
  const UpstreamConfig u = Upstream("garbage", server.port());
  for (int i = 0; i < 2; ++i) ExpectOk(Call(u));
  EXPECT_EQ(server.accepted(), 2);
  FakeUpstream chunked([](int, int) { return Reply{Stream() + "HTTP/1.1 200 OK\r\n"}; });
  const UpstreamConfig c = Upstream("garbage-stream", chunked.port());
  for (int i = 0; i < 2; ++i) ExpectOk(Call(c));
  EXPECT_EQ(chunked.accepted(), 2);
}

TEST(UpstreamConnectionReuseTest, MetricKindsAreCountedPerUpstream) {
  FakeUpstream server([](int, int) { return Reply{Whole()}; });
  const UpstreamConfig a = Upstream("metric-a", server.port());
  const UpstreamConfig b = Upstream("metric-b", server.port());
  ExpectOk(Call(a));
  ExpectOk(Call(b));  // the same endpoint: a's kept connection serves b
  EXPECT_EQ(server.accepted(), 1);
  EXPECT_EQ(ConnectionPool::Global().counts(a.name).opened, 1);
  EXPECT_EQ(ConnectionPool::Global().counts(b.name).opened, 0);
  EXPECT_EQ(ConnectionPool::Global().counts(b.name).reused, 1);
}

// The pool itself, with the clock passed in: the cap per endpoint, the idle timeout (swept on
// every endpoint, so that an upstream no longer asked for keeps nothing open), and keys that tell
// endpoints and CA bundles apart.
TEST(ConnectionPoolTest, IdleConnectionsAreCappedAndExpire) {
  FakeUpstream server([](int, int) { return Reply{Whole()}; });
  UpstreamUrl url;
  url.host = "127.0.0.1";
  url.port = static_cast<uint16_t>(server.port());
  auto connect = [&] {
    auto c = std::make_unique<HttpConnection>();
    EXPECT_TRUE(c->Connect(url, "", absl::Now() + absl::Seconds(10)).ok());
    return c;
  };
  ConnectionPool pool;
  const std::string key = ConnectionKey(url, "");
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000'000);
  for (int i = 0; i < kMaxIdleConnectionsPerEndpoint + 2; ++i) pool.Put(key, connect(), t0);
  EXPECT_EQ(pool.idle(key), static_cast<size_t>(kMaxIdleConnectionsPerEndpoint));
  EXPECT_NE(pool.Take(key, t0 + kIdleConnectionTimeout - absl::Seconds(1)), nullptr);
  EXPECT_EQ(pool.idle(key), static_cast<size_t>(kMaxIdleConnectionsPerEndpoint - 1));
  // Another endpoint's connection kept at the timeout: this endpoint's are closed.
  UpstreamUrl other = url;
  other.tls = true;
  pool.Put(ConnectionKey(other, ""), connect(), t0 + kIdleConnectionTimeout);
  EXPECT_EQ(pool.idle(key), 0u);
  EXPECT_EQ(pool.Take(key, t0 + kIdleConnectionTimeout), nullptr);
  EXPECT_EQ(pool.idle(ConnectionKey(other, "")), 1u);
  EXPECT_EQ(pool.Take(ConnectionKey(other, ""), t0 + 2 * kIdleConnectionTimeout), nullptr);

  EXPECT_NE(ConnectionKey(url, ""), ConnectionKey(url, "-----BEGIN CERTIFICATE-----"));
  EXPECT_NE(ConnectionKey(url, ""), ConnectionKey(other, ""));
  UpstreamUrl port = url;
  ++port.port;
  EXPECT_NE(ConnectionKey(url, ""), ConnectionKey(port, ""));
  UpstreamUrl path = url;
  path.path = "/other";
  EXPECT_EQ(ConnectionKey(url, ""), ConnectionKey(path, ""));  // the same server
}

TEST(ConnectionPoolTest, AConnectionWithUnreadBytesIsNotTaken) {
  FakeUpstream server([](int, int) { return Reply{Whole()}; });
  UpstreamUrl url;
  url.host = "127.0.0.1";
  url.port = static_cast<uint16_t>(server.port());
  auto c = std::make_unique<HttpConnection>();
  ASSERT_TRUE(c->Connect(url, "", absl::Now() + absl::Seconds(10)).ok());
  ASSERT_TRUE(c->Write("GET / HTTP/1.1\r\nHost: x\r\n\r\n", absl::Now() + absl::Seconds(10)).ok());
  // The answer comes unread: bytes nobody asked for, by the time the connection is idle.
  char byte;
  ASSERT_TRUE(c->Read(&byte, 1, absl::Now() + absl::Seconds(10)).ok());
  ConnectionPool pool;
  const std::string key = ConnectionKey(url, "");
  const absl::Time now = absl::Now();
  pool.Put(key, std::move(c), now);
  EXPECT_EQ(pool.Take(key, now), nullptr);
  EXPECT_EQ(pool.idle(key), 0u);
}

}  // namespace
}  // namespace deltaserve::router::upstream
