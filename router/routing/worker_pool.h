#pragma once
// The router's view of its workers: one gRPC channel and stub per configured worker, a
// background poller that calls GetWorkerInfo every `health_interval_ms` (the tokenizer is
// fetched only for a digest no worker has delivered yet), and per worker a circuit breaker
// (circuit_breaker.h). Routing reads thread-safe snapshots (ModelsServing), starts calls with
// BeginCall and reports how they ended with EndCall, which feeds the breaker and the router's
// own count of streams per worker.
//
//   WorkerPool pool(config->workers, config->routing);
//   pool.Start();                                    // first poll at once
//   pool.WaitForFirstPolls(absl::Seconds(5));         // optional (tests, start-up)
//   ... RouterBackend(config_source, &pool, ...) ...
//   // SIGHUP: pool.SetWorkers(new->workers); pool.SetSettings(new->routing);
//   pool.Stop();                                     // or the destructor
//
// Degraded modes, each logged (stderr, on the transition) and counted (RoutingMetrics):
// a worker unreachable (poll failed), draining, its circuit opening and closing, a tokenizer
// fetch failing.
//
// Channel lifetime: the pool holds the last reference to every worker channel and lets it go
// only on its own threads (the poller, Stop(), the destructor), never on a gRPC callback thread.
// gRPC 1.51 polls the callback API's completion queue on threads of its own and destroys that
// queue when the last channel that used it is destroyed; destroyed from one of those threads,
// the queue is freed under the thread that goes on polling it (a double free). So polls are
// owned by the pool, not by their callbacks, and a CallTicket gives its worker back to the pool
// instead of dropping it: a worker removed by a reload keeps its channel until its calls end.

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/snapshot_key.h"
#include "deltaserve/v1/worker.grpc.pb.h"
#include "router/api/prometheus_text.h"
#include "router/config/router_config.h"
#include "router/routing/circuit_breaker.h"
#include "router/routing/routing_metrics.h"
#include "router/routing/worker_choice.h"

namespace deltaserve::router {

// One model on one worker, as of the last successful poll. Immutable once published.
struct ModelState {
  std::string name;  // ModelInfo.name (the served name)
  std::string architecture;
  int32_t context_length = 0;  // tokens, prompt + completion
  int32_t n_ctx_train = 0;
  int32_t n_vocab = 0;
  WorkerLoad load;
  std::string tokenizer_digest;
  // Null until a worker delivered the tokenizer of this digest; shared by every worker that
  // reports the same digest.
  std::shared_ptr<const deltaserve::v1::Tokenizer> tokenizer;
  std::string chat_template;  // Jinja text; empty if none
  // Root of the worker's snapshot key chain (ModelInfo.snapshot_key_root); unset when the
  // worker has snapshots off or sent a root that is not 16 bytes.
  std::optional<common::SnapshotKey> snapshot_root;
  // ModelLoad.snapshot_key_prefixes of the last poll, sorted for binary search; null: none.
  std::shared_ptr<const std::vector<uint64_t>> snapshot_prefixes;
};

// One worker as of now.
struct WorkerSnapshot {
  std::string address;  // as configured (host:port); the worker's identity in the router
  std::string worker_id;
  std::string device;
  bool polled = false;     // a poll has finished (either way)
  bool reachable = false;  // the last poll succeeded
  bool draining = false;
  CircuitState circuit = CircuitState::kClosed;
  int consecutive_failures = 0;
  std::string last_error;  // of the last failed poll or call
  std::vector<std::shared_ptr<const ModelState>> models;
};

// One worker that serves a given model, for routing.
struct ServingWorker {
  std::string address;
  // Reachable, not draining, circuit admits a call, and the tokenizer is known.
  bool available = false;
  std::shared_ptr<const ModelState> model;
  int64_t router_inflight = 0;  // this router's open Generate streams there, for this model
};

// How a call ended, for the circuit breaker.
enum class CallOutcome {
  kSuccess,  // the worker answered (a stream that ended, or a refusal about the request)
  kFailure,  // unreachable, UNAVAILABLE, INTERNAL, a broken stream
  kNeutral,  // cancelled by the router, queue full: says nothing about the worker's health
};

class WorkerPool {
  struct Worker;  // one worker's channel, stub, breaker and last poll (private)

 public:
  // A started call: keeps the worker's stub (and channel) alive while the call runs, even if
  // a reload removes the worker. Destroying it hands the worker back to the pool, which lets it
  // go on its own thread; a ClientContext of the call (it refers to the channel too) must be
  // destroyed before its ticket. Every ticket must be destroyed before the pool.
  class CallTicket {
   public:
    ~CallTicket();
    CallTicket(const CallTicket&) = delete;
    CallTicket& operator=(const CallTicket&) = delete;

    const std::string address;
    const std::string model;
    deltaserve::v1::Worker::StubInterface* const stub;  // valid while the ticket lives

   private:
    friend class WorkerPool;
    CallTicket(WorkerPool* pool, std::shared_ptr<Worker> worker, std::string model);

    WorkerPool* const pool_;
    std::shared_ptr<Worker> worker_;
  };

  WorkerPool(const std::vector<WorkerEndpoint>& workers, const RoutingSettings& settings);
  // Stop(), then waits until every CallTicket is destroyed.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Starts the poller thread; the first round of polls goes out at once.
  void Start();
  // Stops polling, cancels polls in flight and waits for their callbacks. Idempotent. Calls
  // still running on tickets are not waited for (the destructor does).
  void Stop();
  // Reload: adds new addresses, drops missing ones (calls in flight finish on their ticket).
  void SetWorkers(const std::vector<WorkerEndpoint>& workers);
  void SetSettings(const RoutingSettings& settings);
  // Wakes the poller for an early round (e.g. after a NOT_FOUND from a worker).
  void PollSoon();
  // Waits until every worker has finished `rounds` polls and no tokenizer fetch is in flight.
  // False on timeout.
  bool WaitForFirstPolls(absl::Duration timeout, int rounds = 1);

  std::vector<WorkerSnapshot> Snapshot() const;
  // The workers that reported `served_name`, available or not, in configuration order.
  std::vector<ServingWorker> ModelsServing(std::string_view served_name) const;
  // Whether any worker has reported `served_name` (now or earlier in this process).
  bool EverServed(std::string_view served_name) const;
  // Names of the models the reachable workers serve, sorted, without duplicates.
  std::vector<std::string> ServedModelNames() const;
  // Workers available for at least one model / configured.
  int ReadyWorkers() const;
  int WorkerCount() const;

  // Admits a call to `address` for `model` if the worker is still in the pool and its circuit
  // admits one (a half-open circuit admits one trial). Counts it as in flight.
  std::unique_ptr<CallTicket> BeginCall(std::string_view address, std::string_view model);
  // Every admitted call ends here exactly once.
  void EndCall(const CallTicket& ticket, CallOutcome outcome, std::string_view error = {});
  // A ticket for a call outside routing (the placement controller's GetExpertStats and
  // SetExpertPlacement): it keeps the worker's channel alive as BeginCall's does, but the call
  // is not counted in flight, not admitted by the circuit breaker and needs no EndCall, so
  // control traffic neither steers routing nor opens or closes a circuit. Null when `address`
  // is not in the pool.
  std::unique_ptr<CallTicket> BeginControlCall(std::string_view address);

  RoutingMetrics& metrics() { return metrics_; }
  const RoutingMetrics& metrics() const { return metrics_; }
  // RoutingMetrics plus gauges: deltaserve_router_worker_{up,draining,circuit_open},
  // deltaserve_router_model_{running,waiting,free_kv_pages,router_inflight}{worker,model}.
  void WriteMetrics(api::PrometheusText& out) const;

 private:
  struct PollCall;

  // What the pool lets go of on its own thread (see "Channel lifetime" above).
  struct Released {
    std::vector<std::unique_ptr<PollCall>> calls;
    std::vector<std::shared_ptr<Worker>> workers;
  };

  void PollLoop();
  void StartPoll(const std::shared_ptr<Worker>& worker);
  void OnPolled(PollCall& call, const grpc::Status& status);
  void StartTokenizerFetch(const std::shared_ptr<Worker>& worker,
                           const std::vector<std::string>& models, std::vector<std::string> keys);
  void OnTokenizers(PollCall& call, const grpc::Status& status);
  // Publishes the models of `info` for `worker` (mu_ held).
  void PublishModelsLocked(Worker& worker, const deltaserve::v1::WorkerInfo& info);
  // Fills `s`'s snapshot root and key prefixes from `m` (mu_ held).
  void PublishSnapshotKeysLocked(Worker& worker, const deltaserve::v1::ModelInfo& m, ModelState& s);
  void DropUnusedTokenizersLocked();
  bool AvailableLocked(const Worker& worker, const ModelState& model, absl::Time now) const;
  // The last step of a poll's or fetch's callback: `call` moves to the finished ones.
  void FinishRpc(PollCall& call);
  void ReturnTicket(std::shared_ptr<Worker> worker);
  // Finished polls and returned workers, taken out to be destroyed once mu_ is released.
  Released TakeReleasedLocked();

  std::shared_ptr<Worker> MakeWorker(const WorkerEndpoint& endpoint) const;

  RoutingMetrics metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  RoutingSettings settings_;
  std::vector<std::shared_ptr<Worker>> workers_;
  absl::flat_hash_map<std::string, std::shared_ptr<const deltaserve::v1::Tokenizer>> tokenizers_;
  absl::flat_hash_map<std::string, bool> ever_served_;
  // Tokenizer keys being fetched (from any worker): a digest is fetched once, not per worker.
  absl::flat_hash_map<std::string, bool> fetching_;
  // Polls and fetches whose callback has not run yet; then, until the pool's thread destroys
  // them, finished_rpcs_.
  std::vector<std::unique_ptr<PollCall>> rpcs_in_flight_;
  std::vector<std::unique_ptr<PollCall>> finished_rpcs_;
  int64_t rpcs_outstanding_ = 0;
  // Workers whose CallTickets were destroyed, to be let go by the pool's thread.
  std::vector<std::shared_ptr<Worker>> returned_workers_;
  int64_t tickets_outstanding_ = 0;
  bool started_ = false;
  bool stopping_ = false;
  bool poll_soon_ = false;
  std::thread poller_;
};

}  // namespace deltaserve::router
