// The worker's /metrics endpoint: a deliberately small HTTP/1.1 listener (one thread, one
// connection at a time, GET /metrics only, 8 KiB request limit, 5 s read timeout) serving the
// Prometheus text exposition of the worker's counters and per-model load. The router has the
// full HTTP server; the worker only needs to be scraped.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/prometheus_text.h"
#include "kernels/cpu/cpu_features.h"
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

// Prometheus text for the service (every family in docs/metrics.md, "Worker"): request and
// token counters, per-model load (running and waiting sequences, KV pages and state slots used,
// preemptions, speculation), the engine's prefill/decode tokens and batch sizes, MoE expert
// routing, session snapshots (RAM and Redis), constrained decoding, draining; and the
// whole-worker gauges llm-d's endpoint picker reads.
void WriteWorkerMetrics(const WorkerService& service, common::PrometheusText& out);
std::string RenderWorkerMetrics(const WorkerService& service);

// deltaserve_worker_cpu_isa_info{isa, best} 1: the CPU kernel level the worker runs (the best its
// CPU supports, or DELTASERVE_CPU_ISA's) and the best one (kernels/cpu/cpu_features.h).
void WriteCpuIsaInfo(kernels::CpuIsa isa, common::PrometheusText& out);

// How far each model's start-up load is (deltaserve_worker_model_load_progress), served from
// before the first model loads. Thread-safe.
class ModelLoadProgress {
 public:
  explicit ModelLoadProgress(const std::vector<std::string>& models);
  void Set(const std::string& model, double fraction);
  void Write(common::PrometheusText& out) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, double> fraction_;
};

}  // namespace deltaserve::worker
