// The worker's /metrics endpoint: a deliberately small HTTP/1.1 listener (one thread, one
// connection at a time, GET /metrics only, 8 KiB request limit, 5 s read timeout) serving the
// Prometheus text exposition of the worker's counters and per-model load. The router has the
// full HTTP server; the worker only needs to be scraped.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "worker/service/worker_service.h"

namespace deltaserve::worker {

// See the file comment.
class MetricsEndpoint {
 public:
  // Listens on host:port (port 0: any free port); `render` produces the body per scrape.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& host, int port, std::function<std::string()> render);
  ~MetricsEndpoint();
  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;
  void Serve();
  void Handle(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::function<std::string()> render_;
  std::thread thread_;
};

// Prometheus text for the service: request and token counters, per-model load (running and
// waiting sequences, free KV pages and state slots, preemptions, speculation), draining.
std::string RenderWorkerMetrics(const WorkerService& service);

}  // namespace deltaserve::worker
