// WorkerPool's health polls: the poller thread, GetWorkerInfo and the tokenizer fetches it
// starts, and publishing what they return (models, loads, tokenizers, snapshot keys) for
// routing to read.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "router/routing/internal/log.h"
#include "router/routing/internal/worker_pool_state.h"

namespace deltaserve::router {

namespace v1 = ::deltaserve::v1;
using internal::LogRouting;

namespace {

// The key tokenizers are cached under: the worker's digest, or one per worker and model when
// a worker sends none (then nothing is shared, and nothing is mixed up either).
std::string TokenizerKey(const std::string& address, const v1::ModelInfo& m) {
  return m.tokenizer_digest().empty() ? absl::StrCat("nodigest:", address, "#", m.name())
                                      : m.tokenizer_digest();
}

}  // namespace

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

}  // namespace deltaserve::router
