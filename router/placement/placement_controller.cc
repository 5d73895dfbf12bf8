#include "router/placement/placement_controller.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/str_util.h"
#include "router/placement/internal/placement_cycle.h"

namespace deltaserve::router {

using common::Sv;
using internal::LogPlacement;

namespace v1 = ::deltaserve::v1;

namespace {

bool IsMoeArchitecture(std::string_view architecture) {
  return absl::EndsWith(Sv(architecture), "moe");
}

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

int64_t SystemUnixMs() { return absl::ToUnixMillis(absl::Now()); }

}  // namespace

PlacementController::PlacementController(WorkerPool* pool, const PlacementSettings& settings,
                                         UnixMsClock clock)
    : pool_(pool), clock_(clock ? std::move(clock) : UnixMsClock(SystemUnixMs)) {
  SetSettings(settings);
}

PlacementController::~PlacementController() { Stop(); }

void PlacementController::SetSettings(const PlacementSettings& settings) {
  std::shared_ptr<RedisPlacementStore> store;
  bool same_store = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    same_store = store_ != nullptr && settings.redis_url == settings_.redis_url &&
                 settings.redis_timeout_ms == settings_.redis_timeout_ms;
    store = store_;
  }
  if (!same_store) {
    store = nullptr;
    if (!settings.redis_url.empty()) {
      absl::StatusOr<std::unique_ptr<RedisPlacementStore>> made = RedisPlacementStore::Create(
          settings.redis_url, absl::Milliseconds(settings.redis_timeout_ms));
      if (made.ok()) {
        store = std::move(*made);
      } else {
        LogPlacement(absl::StrCat("placement.redis: ", made.status().message(),
                                  "; placements are not stored"));
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  settings_ = settings;
  store_ = std::move(store);
  cv_.notify_all();
}

PlacementSettings PlacementController::settings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return settings_;
}

std::shared_ptr<RedisPlacementStore> PlacementController::store() const {
  std::lock_guard<std::mutex> lock(mu_);
  return store_;
}

std::string PlacementController::StoreDescription() const {
  std::shared_ptr<RedisPlacementStore> s = store();
  return s == nullptr ? "off" : s->redacted_url();
}

void PlacementController::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void PlacementController::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void PlacementController::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const PlacementSettings at_start = settings_;
    const auto due =
        std::chrono::steady_clock::now() + std::chrono::seconds(at_start.interval_seconds);
    // A reload that changes the interval starts the wait again with the new one.
    const bool woken = cv_.wait_until(lock, due, [&] {
      return stopping_ || settings_.interval_seconds != at_start.interval_seconds;
    });
    if (woken) continue;
    lock.unlock();
    RunOnce();
    lock.lock();
  }
}

absl::StatusOr<v1::ExpertStats> PlacementController::FetchStats(const std::string& address,
                                                                const std::string& model,
                                                                int64_t timeout_ms) {
  std::unique_ptr<WorkerPool::CallTicket> ticket = pool_->BeginControlCall(address);
  if (ticket == nullptr) return absl::UnavailableError("no longer in the worker pool");
  v1::ExpertStats stats;
  grpc::Status status;
  {
    grpc::ClientContext context;  // destroyed before the ticket
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    v1::ExpertStatsRequest request;
    request.set_model(model);
    status = ticket->stub->GetExpertStats(&context, request, &stats);
  }
  if (!status.ok()) return FromGrpc(status);
  return stats;
}

absl::Status PlacementController::Push(const std::string& address,
                                       const v1::SetExpertPlacementRequest& request,
                                       int64_t timeout_ms) {
  std::unique_ptr<WorkerPool::CallTicket> ticket = pool_->BeginControlCall(address);
  if (ticket == nullptr) return absl::UnavailableError("no longer in the worker pool");
  v1::SetExpertPlacementResponse response;
  grpc::Status status;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    status = ticket->stub->SetExpertPlacement(&context, request, &response);
  }
  return status.ok() ? absl::OkStatus() : FromGrpc(status);
}

void PlacementController::LogTransition(const std::string& key, bool failing,
                                        const std::string& line) {
  bool& was = failing_[key];
  if (was != failing) LogPlacement(line);
  was = failing;
}

PlacementCycleResult PlacementController::RunOnce() {
  std::lock_guard<std::mutex> cycle(cycle_mu_);
  const PlacementSettings settings = this->settings();
  PlacementCycleResult result;
  if (!settings.enabled) {
    // Switched off (a reload): the last cycle's state goes with it.
    std::lock_guard<std::mutex> lock(mu_);
    views_.clear();
    for (auto& [model, c] : counters_) c.fleet_hit_share = -1;
    return result;
  }
  std::shared_ptr<RedisPlacementStore> store = this->store();
  const int64_t now_ms = clock_();

  // The MoE models and, per model, the workers that last reported serving it. One whose last
  // health poll failed is not called (it is counted and left out, as a failed call would be).
  std::map<std::string, std::vector<std::string>> serving;
  absl::flat_hash_set<std::string> unreachable;
  for (const WorkerSnapshot& w : pool_->Snapshot()) {
    if (!w.reachable) unreachable.insert(w.address);
    for (const auto& m : w.models) {
      if (IsMoeArchitecture(m->architecture)) serving[m->name].push_back(w.address);
    }
  }
  std::map<std::string, PlacementModelView> views;
  for (const auto& [model, addresses] : serving) {
    views[model] = CycleModel(model, addresses, unreachable, settings, now_ms, store.get(), result);
    ++result.models;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [model, c] : counters_) {
    if (!views.contains(model)) c.fleet_hit_share = -1;  // its gauge goes; its counters stay
  }
  views_ = std::move(views);  // models no worker serves any more drop out of the view
  ++cycles_;
  return result;
}

std::vector<PlacementModelView> PlacementController::Views() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PlacementModelView> out;
  for (const auto& [name, v] : views_) out.push_back(v);
  return out;
}

void PlacementController::WriteMetrics(api::PrometheusText& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  out.Gauge("deltaserve_router_placement_enabled", "1 when MoE expert placement is on.", {},
            settings_.enabled ? 1 : 0);
  out.Counter("deltaserve_router_placement_cycles_total",
              "Placement cycles run (each gathers statistics and plans every MoE model).", {},
              static_cast<double>(cycles_));
  struct Family {
    const char* name;
    const char* help;
    int64_t ModelCounters::*field;
  };
  static constexpr Family kCounters[] = {
      {"deltaserve_router_placement_plans_total", "Device sets planned for tiered workers.",
       &ModelCounters::plans},
      {"deltaserve_router_placement_pushes_total",
       "Changed placements pushed to workers (SetExpertPlacement accepted).",
       &ModelCounters::pushes},
      {"deltaserve_router_placement_push_failures_total",
       "SetExpertPlacement calls that failed or were refused.", &ModelCounters::push_failures},
      {"deltaserve_router_placement_stats_failures_total",
       "Workers left out of a cycle: GetExpertStats failed or answered malformed statistics.",
       &ModelCounters::stats_failures},
      {"deltaserve_router_placement_experts_moved_in_total",
       "Experts the pushed placements move into device memory.", &ModelCounters::experts_pushed_in},
  };
  for (const Family& f : kCounters) {
    for (const auto& [model, c] : counters_) {
      out.Counter(f.name, f.help, {{"model", model}}, static_cast<double>(c.*f.field));
    }
  }
  for (const auto& [model, c] : counters_) {
    if (c.fleet_hit_share < 0) continue;
    out.Gauge("deltaserve_router_placement_fleet_hit_share",
              "Share of the model's routed tokens served by device-resident experts over the "
              "fleet, since the previous cycle.",
              {{"model", model}}, c.fleet_hit_share);
  }
  for (const auto& [model, v] : views_) {
    for (const PlacementWorkerView& w : v.workers) {
      if (w.hit_share < 0) continue;
      out.Gauge("deltaserve_router_placement_worker_hit_share",
                "Share of the worker's routed tokens served by device-resident experts since it "
                "started.",
                {{"model", model}, {"worker", w.address}}, w.hit_share);
    }
  }
  for (const char* op : {"load", "save"}) {
    auto it = redis_failures_.find(op);
    out.Counter("deltaserve_router_placement_redis_failures_total",
                "Placement records not loaded from or not saved to Redis (Redis down, timeout, "
                "or a stored record that does not parse).",
                {{"operation", op}},
                it == redis_failures_.end() ? 0.0 : static_cast<double>(it->second));
  }
}

}  // namespace deltaserve::router
