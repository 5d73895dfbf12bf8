#include "router/routing/worker_pool.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/str_util.h"
#include "proto/worker_channel.h"
#include "router/routing/internal/log.h"

namespace deltaserve::router {

namespace v1 = ::deltaserve::v1;
using internal::LogRouting;

struct WorkerPool::Worker {
  Worker(std::string a, proto::WorkerClientSecurity sec,
         std::shared_ptr<v1::Worker::StubInterface> s, const RoutingSettings& rs)
      : address(std::move(a)),
        security(std::move(sec)),
        stub(std::move(s)),
        breaker(rs.circuit_failures, absl::Milliseconds(rs.circuit_open_ms)) {}

  const std::string address;
  // The channel's TLS and secret; a reload that changes them makes a new Worker (a new channel).
  const proto::WorkerClientSecurity security;
  const std::shared_ptr<v1::Worker::StubInterface> stub;
  // Everything below is guarded by WorkerPool::mu_.
  CircuitBreaker breaker;
  bool removed = false;
  bool polled = false;
  bool reachable = false;
  bool draining = false;
  std::string worker_id;
  std::string device;
  std::string last_error;
  std::vector<std::shared_ptr<const ModelState>> models;
  absl::flat_hash_map<std::string, int64_t> inflight;         // by model
  absl::flat_hash_set<std::string> bad_snapshot_root_logged;  // models whose root was malformed
  bool poll_in_flight = false;
  bool fetch_in_flight = false;
  int64_t rounds = 0;  // polls finished, with the tokenizer fetch they started
};

// One GetWorkerInfo call. Owned by the pool (rpcs_in_flight_, then finished_rpcs_), never by
// its callback, which gets a plain pointer: the context and the worker refer to the channel.
struct WorkerPool::PollCall {
  std::shared_ptr<Worker> worker;
  grpc::ClientContext context;
  v1::WorkerInfoRequest request;
  v1::WorkerInfo response;
  std::vector<std::string> tokenizer_keys;  // a tokenizer fetch: the keys it fetches
};

namespace {

// The key tokenizers are cached under: the worker's digest, or one per worker and model when
// a worker sends none (then nothing is shared, and nothing is mixed up either).
std::string TokenizerKey(const std::string& address, const v1::ModelInfo& m) {
  return m.tokenizer_digest().empty() ? absl::StrCat("nodigest:", address, "#", m.name())
                                      : m.tokenizer_digest();
}

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

void WorkerPool::PollLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    std::vector<std::shared_ptr<Worker>> due;
    for (const auto& w : workers_) {
      if (!w->poll_in_flight) {
        w->poll_in_flight = true;
        due.push_back(w);
      }
    }
    const int64_t interval_ms = std::max<int64_t>(1, settings_.health_interval_ms);
    Released released = TakeReleasedLocked();
    lock.unlock();
    // Destroyed here, without the lock: the last reference to a channel may be among them.
    released = {};
    // gRPC may run a callback inline when a call fails at once: no lock is held here.
    for (const auto& w : due) StartPoll(w);
    due.clear();
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(interval_ms),
                 [&] { return stopping_ || poll_soon_; });
    poll_soon_ = false;
  }
}

void WorkerPool::StartPoll(const std::shared_ptr<Worker>& worker) {
  auto owned = std::make_unique<PollCall>();
  PollCall* call = owned.get();
  call->worker = worker;
  call->request.set_include_tokenizer(false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      worker->poll_in_flight = false;
      return;
    }
    ++rpcs_outstanding_;
    call->context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::milliseconds(settings_.connect_timeout_ms));
    rpcs_in_flight_.push_back(std::move(owned));
  }
  worker->stub->async()->GetWorkerInfo(
      &call->context, &call->request, &call->response,
      [this, call](grpc::Status status) { OnPolled(*call, status); });
}

void WorkerPool::StartTokenizerFetch(const std::shared_ptr<Worker>& worker,
                                     const std::vector<std::string>& models,
                                     std::vector<std::string> keys) {
  auto owned = std::make_unique<PollCall>();
  PollCall* call = owned.get();
  call->worker = worker;
  call->tokenizer_keys = std::move(keys);
  call->request.set_include_tokenizer(true);
  for (const std::string& m : models) call->request.add_models(m);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      for (const std::string& key : call->tokenizer_keys) fetching_.erase(key);
      worker->fetch_in_flight = false;
      ++worker->rounds;
      --rpcs_outstanding_;  // the count OnPolled took for this fetch
      cv_.notify_all();
      finished_rpcs_.push_back(std::move(owned));  // it refers to the worker: see the header
      return;
    }
    // A tokenizer is several MiB; its deadline is longer than a poll's.
    call->context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::milliseconds(settings_.connect_timeout_ms) +
                               std::chrono::seconds(30));
    rpcs_in_flight_.push_back(std::move(owned));
  }
  metrics_.CountTokenizerFetch();
  worker->stub->async()->GetWorkerInfo(
      &call->context, &call->request, &call->response,
      [this, call](grpc::Status status) { OnTokenizers(*call, status); });
}

void WorkerPool::OnPolled(PollCall& call, const grpc::Status& status) {
  const absl::Time now = absl::Now();
  std::vector<std::string> fetch;
  std::vector<std::string> fetch_keys;
  std::unique_lock<std::mutex> lock(mu_);
  Worker& w = *call.worker;
  w.poll_in_flight = false;
  if (!w.removed && !stopping_) {
    const bool first = !w.polled;
    w.polled = true;
    if (status.ok()) {
      const v1::WorkerInfo& info = call.response;
      if (!w.reachable && !first)
        LogRouting(absl::StrCat("worker ", w.address, " reachable again"));
      w.reachable = true;
      if (info.draining() != w.draining) {
        LogRouting(absl::StrCat(
            "worker ", w.address,
            info.draining() ? " is draining: no new requests" : " no longer draining"));
      }
      w.draining = info.draining();
      w.worker_id = info.worker_id();
      w.device = info.device();
      const CircuitState before = w.breaker.State(now);
      w.breaker.RecordPollSuccess(now);
      if (before == CircuitState::kHalfOpen && w.breaker.State(now) == CircuitState::kClosed) {
        LogRouting(absl::StrCat("worker ", w.address, " circuit closed (health poll succeeded)"));
      }
      PublishModelsLocked(w, info);
      if (!w.fetch_in_flight) {
        for (const v1::ModelInfo& m : info.models()) {
          const std::string key = TokenizerKey(w.address, m);
          if (tokenizers_.contains(key) || fetching_.contains(key)) continue;
          fetching_[key] = true;
          fetch_keys.push_back(key);
          fetch.push_back(m.name());
        }
      }
      if (!fetch.empty()) {
        w.fetch_in_flight = true;
        ++rpcs_outstanding_;  // the fetch's, taken before this poll's is given back
      }
    } else {
      w.last_error = absl::StrCat("GetWorkerInfo: ", status.error_message(), " (code ",
                                  static_cast<int>(status.error_code()), ")");
      if (w.reachable || first) {
        LogRouting(absl::StrCat("worker ", w.address, " unreachable: ", w.last_error));
      }
      w.reachable = false;
      metrics_.CountPollFailure(w.address);
      if (w.breaker.RecordFailure(now)) {
        metrics_.CountCircuitOpen(w.address);
        LogRouting(absl::StrCat("worker ", w.address, " circuit opened for ",
                                settings_.circuit_open_ms, " ms after failed health polls"));
      }
    }
    if (fetch.empty()) ++w.rounds;
    DropUnusedTokenizersLocked();
  }
  lock.unlock();
  if (!fetch.empty()) StartTokenizerFetch(call.worker, fetch, std::move(fetch_keys));
  FinishRpc(call);
}

void WorkerPool::OnTokenizers(PollCall& call, const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Worker& w = *call.worker;
    w.fetch_in_flight = false;
    ++w.rounds;
    for (const std::string& key : call.tokenizer_keys) fetching_.erase(key);
    if (!status.ok()) {
      if (!stopping_) {
        LogRouting(absl::StrCat("worker ", w.address, " tokenizer fetch failed: ",
                                status.error_message(), " (retried at the next poll)"));
      }
    } else if (!w.removed) {
      bool any = false;
      for (v1::ModelInfo& m : *call.response.mutable_models()) {
        if (!m.has_tokenizer()) continue;
        const std::string key = TokenizerKey(w.address, m);
        tokenizers_[key] = std::make_shared<const v1::Tokenizer>(std::move(*m.mutable_tokenizer()));
        any = true;
      }
      if (any) {
        // Every worker whose models wait for one of these digests gets it.
        for (const auto& other : workers_) {
          for (auto& model : other->models) {
            if (model->tokenizer != nullptr) continue;
            auto it = tokenizers_.find(model->tokenizer_digest);
            if (it == tokenizers_.end()) continue;
            auto copy = std::make_shared<ModelState>(*model);
            copy->tokenizer = it->second;
            model = std::move(copy);
          }
        }
      }
    }
  }
  FinishRpc(call);
}

void WorkerPool::PublishModelsLocked(Worker& worker, const v1::WorkerInfo& info) {
  std::vector<std::shared_ptr<const ModelState>> models;
  models.reserve(info.models_size());
  for (const v1::ModelInfo& m : info.models()) {
    auto s = std::make_shared<ModelState>();
    s->name = m.name();
    s->architecture = m.architecture();
    s->context_length = m.context_length();
    s->n_ctx_train = m.n_ctx_train();
    s->n_vocab = m.n_vocab();
    s->load.running = m.load().running_sequences();
    s->load.waiting = m.load().waiting_sequences();
    s->load.free_kv_pages = m.load().free_kv_pages();
    s->load.total_kv_pages = m.load().total_kv_pages();
    s->load.free_state_slots = m.load().free_state_slots();
    s->load.max_parallel = m.max_parallel_sequences();
    s->tokenizer_digest = TokenizerKey(worker.address, m);
    if (auto it = tokenizers_.find(s->tokenizer_digest); it != tokenizers_.end()) {
      s->tokenizer = it->second;
    }
    s->chat_template = m.chat_template();
    PublishSnapshotKeysLocked(worker, m, *s);
    ever_served_[s->name] = true;
    models.push_back(std::move(s));
  }
  worker.models = std::move(models);
}

void WorkerPool::PublishSnapshotKeysLocked(Worker& worker, const v1::ModelInfo& m, ModelState& s) {
  auto prefixes = std::make_shared<std::vector<uint64_t>>(m.load().snapshot_key_prefixes().begin(),
                                                          m.load().snapshot_key_prefixes().end());
  std::sort(prefixes->begin(), prefixes->end());
  s.snapshot_prefixes = std::move(prefixes);
  if (m.snapshot_key_root().empty()) return;  // snapshots off on the worker
  absl::StatusOr<common::SnapshotKey> root = common::SnapshotKeyFromBytes(m.snapshot_key_root());
  if (root.ok()) {
    s.snapshot_root = *root;
    return;
  }
  // A worker of another protocol version: its snapshots are not routed to, said once.
  if (worker.bad_snapshot_root_logged.insert(m.name()).second) {
    metrics_.CountBadSnapshotRoot(worker.address);
    LogRouting(absl::StrCat(
        "worker ", worker.address, " model '", m.name(),
        "': snapshot_key_root ignored (no routing by prefix there): ", root.status().message()));
  }
}

void WorkerPool::DropUnusedTokenizersLocked() {
  absl::flat_hash_map<std::string, bool> used;
  for (const auto& w : workers_) {
    for (const auto& m : w->models) used[m->tokenizer_digest] = true;
  }
  absl::erase_if(tokenizers_, [&](const auto& kv) { return !used.contains(kv.first); });
}

void WorkerPool::FinishRpc(PollCall& call) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(rpcs_in_flight_.begin(), rpcs_in_flight_.end(),
                         [&](const auto& c) { return c.get() == &call; });
  if (it != rpcs_in_flight_.end()) {
    finished_rpcs_.push_back(std::move(*it));
    rpcs_in_flight_.erase(it);
  }
  --rpcs_outstanding_;
  // Notified under the lock: Stop() may destroy the pool as soon as it sees zero. Nothing of
  // the call is touched after this.
  cv_.notify_all();
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
