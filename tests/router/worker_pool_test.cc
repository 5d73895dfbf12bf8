// WorkerPool's connections over real gRPC on 127.0.0.1 against a ScriptedWorker (a TEST DOUBLE
// of deltaserve.v1.Worker, scripted_worker.h) behind a relay that holds each new connection
// silent for a while, as a distant worker's TLS handshake or an overloaded host does: a
// connection attempt is given connect_timeout_ms. (gRPC limits an attempt to its minimum
// reconnect backoff; left at the 100 ms of the pool's backoff, the attempt is cut off and the
// first poll finds the worker unreachable.)
#include "router/routing/worker_pool.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/router/scripted_worker.h"

namespace deltaserve::router {
namespace {

using testing::ScriptedModel;
using testing::ScriptedWorker;

// A TCP relay on 127.0.0.1 to 127.0.0.1:`upstream_port` that sends nothing either way on a
// new connection for `hold` (the client's handshake waits for the server's first bytes), then
// relays both ways until either side closes.
class SlowStartRelay {
 public:
  SlowStartRelay(int upstream_port, absl::Duration hold)
      : upstream_port_(upstream_port), hold_(hold) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listen_fd_, 16) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "relay: no listening socket on 127.0.0.1";
      return;
    }
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }

  ~SlowStartRelay() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);  // wakes poll() and accept()
    }
    cv_.notify_all();
    if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    for (std::thread& t : relays_) t.join();
    for (int fd : open_fds_) close(fd);
    if (listen_fd_ >= 0) close(listen_fd_);
  }

  int port() const { return port_; }
  int connections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return connections_;
  }

 private:
  void AcceptLoop() {
    while (true) {
      const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      std::lock_guard<std::mutex> lock(mu_);
      if (client < 0 || stopping_) {
        if (client >= 0) close(client);
        return;
      }
      ++connections_;
      open_fds_.push_back(client);
      relays_.emplace_back([this, client] { Relay(client); });
    }
  }

  void Relay(int client) {
    int upstream = -1;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, absl::ToChronoMilliseconds(hold_), [&] { return stopping_; })) return;
      upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (upstream < 0) return;
      open_fds_.push_back(upstream);
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(upstream_port_));
    if (connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return;
    pollfd fds[2] = {{client, POLLIN, 0}, {upstream, POLLIN, 0}};
    char buf[16384];
    while (true) {
      if (poll(fds, 2, -1) < 0) return;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].revents == 0) continue;
        const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          // One side closed: so is the other (the fds are closed by the destructor).
          shutdown(fds[1 - i].fd, SHUT_RDWR);
          return;
        }
        for (ssize_t sent = 0; sent < n;) {
          const ssize_t w = write(fds[1 - i].fd, buf + sent, static_cast<size_t>(n - sent));
          if (w <= 0) return;
          sent += w;
        }
      }
    }
  }

  const int upstream_port_;
  const absl::Duration hold_;
  int listen_fd_ = -1;
  int port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int connections_ = 0;
  std::vector<int> open_fds_;
  std::vector<std::thread> relays_;
  std::thread acceptor_;
};

// The relay holds the connection 1.5 s: longer than gRPC ever gave an attempt with the pool's
// reconnect backoff alone (~100 ms at first, at most ~1.2 s), far shorter than the 30 s of
// connect_timeout_ms here. One poll round (the next is a minute away): it finds the worker.
TEST(WorkerPoolTest, AConnectionIsGivenConnectTimeoutMsToBeMade) {
  ScriptedWorker worker({ScriptedModel{}});
  worker.Start();
  ASSERT_NE(worker.port(), 0);
  SlowStartRelay relay(worker.port(), absl::Milliseconds(1500));
  ASSERT_NE(relay.port(), 0);
  RoutingSettings settings;
  settings.connect_timeout_ms = 30000;
  settings.health_interval_ms = 60000;
  WorkerPool pool({WorkerEndpoint{"127.0.0.1:" + std::to_string(relay.port())}}, settings);
  pool.Start();
  ASSERT_TRUE(pool.WaitForFirstPolls(absl::Seconds(60)));
  const std::vector<WorkerSnapshot> workers = pool.Snapshot();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_TRUE(workers[0].reachable) << workers[0].last_error;
  ASSERT_EQ(workers[0].models.size(), 1u);
  EXPECT_NE(workers[0].models[0]->tokenizer, nullptr);
  EXPECT_EQ(relay.connections(), 1);  // the first attempt, not cut off and retried
  pool.Stop();
}

}  // namespace
}  // namespace deltaserve::router
