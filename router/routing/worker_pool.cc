#include "router/routing/worker_pool.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/str_util.h"
#include "proto/worker_channel.h"
#include "router/routing/internal/log.h"
#include "router/routing/internal/worker_pool_state.h"

namespace deltaserve::router {

namespace v1 = ::deltaserve::v1;
using internal::LogRouting;

namespace {

proto::WorkerClientSecurity SecurityOf(const WorkerEndpoint& e) {
  proto::WorkerClientSecurity s;
  if (!e.channel) return s;
  s.ca_pem = e.channel->ca_pem;
  s.cert_pem = e.channel->cert_pem;
  s.key_pem = e.channel->key_pem;
  s.server_name = e.channel->tls_server_name;
  s.secret = e.channel->secret;
  return s;
}

}  // namespace

std::shared_ptr<WorkerPool::Worker> WorkerPool::MakeWorker(const WorkerEndpoint& e) const {
  grpc::ChannelArguments args;
  // A full tokenizer goes past gRPC's default 4 MiB (proto/README.md).
  args.SetMaxReceiveMessageSize(64 << 20);
  // A restarted worker is used again within about a second, not after gRPC's default
  // reconnect backoff of up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // gRPC takes its "min reconnect backoff" as the time one connection attempt (TCP, TLS and
  // HTTP/2 handshakes) may take: connect_timeout_ms, as a poll. Not 100 ms: a handshake with a
  // distant worker, or any on a loaded host, takes longer, and an attempt cut off fails the poll.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(std::clamp<int64_t>(settings_.connect_timeout_ms, 100, INT32_MAX)));
  // One connection per worker of our own, not shared with other channels to the same address.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  proto::WorkerClientSecurity security = SecurityOf(e);
  std::shared_ptr<grpc::Channel> channel = proto::CreateWorkerChannel(e.address, security, args);
  std::shared_ptr<v1::Worker::StubInterface> stub = v1::Worker::NewStub(channel);
  return std::make_shared<Worker>(e.address, std::move(security), std::move(stub), settings_);
}

WorkerPool::WorkerPool(const std::vector<WorkerEndpoint>& workers, const RoutingSettings& settings)
    : settings_(settings) {
  for (const WorkerEndpoint& e : workers) {
    bool dup = false;
    for (const auto& w : workers_) dup |= w->address == e.address;
    if (!dup) workers_.push_back(MakeWorker(e));
  }
}

WorkerPool::CallTicket::CallTicket(WorkerPool* pool, std::shared_ptr<Worker> worker,
                                   std::string model)
    : address(worker->address),
      model(std::move(model)),
      stub(worker->stub.get()),
      pool_(pool),
      worker_(std::move(worker)) {}

WorkerPool::CallTicket::~CallTicket() { pool_->ReturnTicket(std::move(worker_)); }

WorkerPool::~WorkerPool() {
  Stop();
  Released released;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return tickets_outstanding_ == 0; });
    released = TakeReleasedLocked();
  }
  // `released` and then the members go here, on this thread.
}

void WorkerPool::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ || stopping_) return;
  started_ = true;
  poller_ = std::thread([this] { PollLoop(); });
}

void WorkerPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !poller_.joinable() && rpcs_outstanding_ == 0 && finished_rpcs_.empty()) {
      return;
    }
    stopping_ = true;
  }
  cv_.notify_all();
  if (poller_.joinable()) poller_.join();
  // No call starts now (stopping_), and only this thread destroys finished ones: the pointers
  // stay valid while their cancels go out, without the lock (a callback may run inline).
  std::vector<PollCall*> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& call : rpcs_in_flight_) live.push_back(call.get());
  }
  for (PollCall* call : live) call->context.TryCancel();
  Released released;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return rpcs_outstanding_ == 0; });
  released = TakeReleasedLocked();
  lock.unlock();
}

void WorkerPool::SetWorkers(const std::vector<WorkerEndpoint>& endpoints) {
  std::vector<std::shared_ptr<Worker>> previous;  // let go after the lock (declared before it)
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Worker>> next;
  for (const WorkerEndpoint& e : endpoints) {
    bool dup = false;
    for (const auto& w : next) dup |= w->address == e.address;
    if (dup) continue;
    std::shared_ptr<Worker> found;
    bool reconnect = false;
    for (const auto& w : workers_) {
      if (w->address != e.address) continue;
      if (w->security == SecurityOf(e)) {
        found = w;
      } else {
        reconnect = true;
      }
    }
    if (!found) {
      found = MakeWorker(e);
      LogRouting(absl::StrCat("worker ", e.address,
                              reconnect ? ": channel settings changed, reconnecting" : " added"));
    }
    next.push_back(std::move(found));
  }
  for (const auto& w : workers_) {
    if (std::find(next.begin(), next.end(), w) == next.end()) {
      w->removed = true;
      bool replaced = false;  // by a new channel to the same address
      for (const auto& n : next) replaced |= n->address == w->address;
      if (!replaced) LogRouting(absl::StrCat("worker ", w->address, " removed"));
    }
  }
  previous = std::exchange(workers_, std::move(next));
  DropUnusedTokenizersLocked();
  poll_soon_ = true;
  cv_.notify_all();
}

void WorkerPool::SetSettings(const RoutingSettings& settings) {
  std::lock_guard<std::mutex> lock(mu_);
  settings_ = settings;
  for (const auto& w : workers_) {
    w->breaker.Reconfigure(settings.circuit_failures, absl::Milliseconds(settings.circuit_open_ms));
  }
}

void WorkerPool::PollSoon() {
  std::lock_guard<std::mutex> lock(mu_);
  poll_soon_ = true;
  cv_.notify_all();
}

bool WorkerPool::WaitForFirstPolls(absl::Duration timeout, int rounds) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout), [&] {
    for (const auto& w : workers_) {
      if (w->rounds < rounds) return false;
    }
    return fetching_.empty();
  });
}

void WorkerPool::ReturnTicket(std::shared_ptr<Worker> worker) {
  std::lock_guard<std::mutex> lock(mu_);
  returned_workers_.push_back(std::move(worker));
  --tickets_outstanding_;
  cv_.notify_all();  // under the lock: the destructor may be waiting to return
}

WorkerPool::Released WorkerPool::TakeReleasedLocked() {
  Released out;
  out.calls = std::move(finished_rpcs_);
  finished_rpcs_.clear();
  out.workers = std::move(returned_workers_);
  returned_workers_.clear();
  return out;
}

bool WorkerPool::AvailableLocked(const Worker& worker, const ModelState& model,
                                 absl::Time now) const {
  return !worker.removed && worker.reachable && !worker.draining && worker.breaker.Admits(now) &&
         model.tokenizer != nullptr;
}

std::vector<WorkerSnapshot> WorkerPool::Snapshot() const {
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerSnapshot> out;
  for (const auto& w : workers_) {
    WorkerSnapshot s;
    s.address = w->address;
    s.worker_id = w->worker_id;
    s.device = w->device;
    s.polled = w->polled;
    s.reachable = w->reachable;
    s.draining = w->draining;
    s.circuit = w->breaker.State(now);
    s.consecutive_failures = w->breaker.consecutive_failures();
    s.last_error = w->last_error;
    s.models = w->models;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<ServingWorker> WorkerPool::ModelsServing(std::string_view served_name) const {
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ServingWorker> out;
  for (const auto& w : workers_) {
    for (const auto& m : w->models) {
      if (m->name != served_name) continue;
      ServingWorker s;
      s.address = w->address;
      s.available = AvailableLocked(*w, *m, now);
      s.model = m;
      if (auto it = w->inflight.find(m->name); it != w->inflight.end()) {
        s.router_inflight = it->second;
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

bool WorkerPool::EverServed(std::string_view served_name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ever_served_.contains(common::Sv(served_name));
}

std::vector<std::string> WorkerPool::ServedModelNames() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const auto& w : workers_) {
    if (!w->reachable) continue;
    for (const auto& m : w->models) names.push_back(m->name);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

int WorkerPool::ReadyWorkers() const {
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& w : workers_) {
    bool any = false;
    for (const auto& m : w->models) any |= AvailableLocked(*w, *m, now);
    n += any ? 1 : 0;
  }
  return n;
}

int WorkerPool::WorkerCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(workers_.size());
}

std::unique_ptr<WorkerPool::CallTicket> WorkerPool::BeginCall(std::string_view address,
                                                              std::string_view model) {
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& w : workers_) {
    if (w->address != address) continue;
    if (!w->breaker.TryBeginCall(now)) return nullptr;
    ++w->inflight[std::string(model)];
    metrics_.CountCall(w->address);
    ++tickets_outstanding_;
    return std::unique_ptr<CallTicket>(new CallTicket(this, w, std::string(model)));
  }
  return nullptr;
}

std::unique_ptr<WorkerPool::CallTicket> WorkerPool::BeginControlCall(std::string_view address) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& w : workers_) {
    if (w->address != address) continue;
    ++tickets_outstanding_;
    return std::unique_ptr<CallTicket>(new CallTicket(this, w, std::string()));
  }
  return nullptr;
}

void WorkerPool::EndCall(const CallTicket& ticket, CallOutcome outcome, std::string_view error) {
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  if (outcome == CallOutcome::kFailure) metrics_.CountFailure(ticket.address);
  for (const auto& w : workers_) {
    if (w->address != ticket.address) continue;
    if (auto it = w->inflight.find(ticket.model); it != w->inflight.end() && it->second > 0) {
      --it->second;
    }
    const CircuitState before = w->breaker.State(now);
    switch (outcome) {
      case CallOutcome::kSuccess:
        w->breaker.RecordCallSuccess(now);
        if (before == CircuitState::kHalfOpen) {
          LogRouting(absl::StrCat("worker ", w->address, " circuit closed (trial call succeeded)"));
        }
        break;
      case CallOutcome::kFailure:
        w->last_error = std::string(error);
        if (w->breaker.RecordFailure(now)) {
          metrics_.CountCircuitOpen(w->address);
          LogRouting(absl::StrCat(
              "worker ", w->address, " circuit opened for ", settings_.circuit_open_ms,
              " ms after ",
              before == CircuitState::kHalfOpen ? "a failed trial call" : "consecutive failures",
              ": ", common::Sv(error)));
        }
        break;
      case CallOutcome::kNeutral:
        w->breaker.RecordNeutral(now);
        break;
    }
    return;
  }
}

void WorkerPool::WriteMetrics(api::PrometheusText& out) const {
  metrics_.Write(out);
  const std::vector<WorkerSnapshot> workers = Snapshot();
  std::vector<std::pair<std::string, int64_t>> inflight;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& w : workers_) {
      for (const auto& [model, n] : w->inflight)
        inflight.emplace_back(w->address + "\n" + model, n);
    }
  }
  for (const WorkerSnapshot& w : workers) {
    out.Gauge("deltaserve_router_worker_up", "1 when the worker's last health poll succeeded.",
              {{"worker", w.address}}, w.reachable ? 1 : 0);
  }
  for (const WorkerSnapshot& w : workers) {
    out.Gauge("deltaserve_router_worker_draining", "1 while the worker reports draining.",
              {{"worker", w.address}}, w.draining ? 1 : 0);
  }
  for (const WorkerSnapshot& w : workers) {
    out.Gauge("deltaserve_router_worker_circuit_open",
              "Circuit breaker state: 0 closed, 1 open, 2 half-open.", {{"worker", w.address}},
              w.circuit == CircuitState::kClosed ? 0
              : w.circuit == CircuitState::kOpen ? 1
                                                 : 2);
  }
  struct ModelGauge {
    const char* name;
    const char* help;
    double (*value)(const ModelState&);
  };
  static constexpr ModelGauge kGauges[] = {
      {"deltaserve_router_model_running_sequences", "Running sequences the worker last reported.",
       [](const ModelState& m) { return static_cast<double>(m.load.running); }},
      {"deltaserve_router_model_waiting_sequences", "Waiting sequences the worker last reported.",
       [](const ModelState& m) { return static_cast<double>(m.load.waiting); }},
      {"deltaserve_router_model_free_kv_pages", "Free KV pages the worker last reported.",
       [](const ModelState& m) { return static_cast<double>(m.load.free_kv_pages); }},
      {"deltaserve_router_model_context_length", "Context length the worker serves.",
       [](const ModelState& m) { return static_cast<double>(m.context_length); }},
  };
  for (const ModelGauge& g : kGauges) {
    for (const WorkerSnapshot& w : workers) {
      for (const auto& m : w.models) {
        out.Gauge(g.name, g.help, {{"worker", w.address}, {"model", m->name}}, g.value(*m));
      }
    }
  }
  for (const auto& [key, n] : inflight) {
    const size_t cut = key.find('\n');
    out.Gauge("deltaserve_router_model_router_inflight",
              "Generate streams this router has open on the worker for the model.",
              {{"worker", key.substr(0, cut)}, {"model", key.substr(cut + 1)}},
              static_cast<double>(n));
  }
}

}  // namespace deltaserve::router
