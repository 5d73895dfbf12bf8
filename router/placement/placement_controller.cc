#include "router/placement/placement_controller.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/expert_placement.h"
#include "common/str_util.h"
#include "router/placement/expert_planner.h"
#include "router/placement/expert_split_planner.h"
#include "router/placement/worker_expert_stats.h"

namespace deltaserve::router {

namespace v1 = ::deltaserve::v1;
using common::ExpertPlacement;
using common::Sv;

struct PlacementController::Polled {
  std::string address;
  v1::ExpertStats stats;
  ExpertPlacement current;                // the device set it reported
  std::vector<std::vector<double>> heat;  // its decayed counts, [n_layer][n_expert], cleaned
  PlacementWorkerView* view = nullptr;    // its entry in the model's view
};

struct PlacementController::Group {
  std::string fingerprint;
  int64_t n_layer = 0;
  int64_t n_expert = 0;
  std::vector<Polled*> workers;
};

namespace {

// The placement loop's log lines (stderr); failures log on their transitions, not per cycle.
void Log(const std::string& line) { std::fprintf(stderr, "placement: %s\n", line.c_str()); }

bool IsMoeArchitecture(std::string_view architecture) {
  return absl::EndsWith(Sv(architecture), "moe");
}

bool IsHexFingerprint(const std::string& fp) {
  if (fp.empty() || fp.size() > common::kMaxModelFingerprintChars) return false;
  for (char c : fp) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

std::vector<PlacementLayerView> LayerViews(const ExpertPlacement& current,
                                           const std::vector<std::vector<double>>& heat) {
  std::vector<PlacementLayerView> out;
  for (size_t l = 0; l < current.device.size(); ++l) {
    PlacementLayerView v;
    v.layer = static_cast<int32_t>(l);
    v.device_experts = current.device[l];
    double all = 0, device = 0;
    for (double h : heat[l]) all += h;
    for (int32_t e : current.device[l]) device += heat[l][static_cast<size_t>(e)];
    if (all > 0) v.recent_hit_share = device / all;
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<PlacementSlotClassView> SlotClassViews(const common::ExpertSlotClasses& classes,
                                                   const ExpertPlacement& current) {
  std::vector<PlacementSlotClassView> out;
  for (int32_t c = 0; c < classes.n_class(); ++c) {
    PlacementSlotClassView v;
    v.slot_bytes = classes.slot_bytes[static_cast<size_t>(c)];
    v.slots = classes.slots[static_cast<size_t>(c)];
    for (int64_t l : classes.LayersOf(c)) {
      v.layers.push_back(static_cast<int32_t>(l));
      if (l < static_cast<int64_t>(current.device.size())) {
        v.used += static_cast<int64_t>(current.device[static_cast<size_t>(l)].size());
      }
    }
    out.push_back(std::move(v));
  }
  return out;
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
        Log(absl::StrCat("placement.redis: ", made.status().message(),
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
  if (was != failing) Log(line);
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

PlacementModelView PlacementController::CycleModel(
    const std::string& model, const std::vector<std::string>& addresses,
    const absl::flat_hash_set<std::string>& unreachable, const PlacementSettings& settings,
    int64_t now_ms, RedisPlacementStore* store, PlacementCycleResult& result) {
  PlacementModelView view;
  view.model = model;
  view.last_plan_unix_ms = now_ms;
  view.redis = store == nullptr ? "off" : "";
  view.prior = store == nullptr ? "off" : "none";
  view.workers.reserve(addresses.size());  // Polled::view points into it
  std::vector<Polled> polled;
  polled.reserve(addresses.size());
  int64_t stats_failures = 0;
  for (const std::string& address : addresses) {
    PlacementWorkerView& wv = view.workers.emplace_back();
    wv.address = address;
    const std::string key = absl::StrCat("stats\n", model, "\n", address);
    absl::StatusOr<v1::ExpertStats> stats =
        unreachable.contains(address)
            ? absl::UnavailableError("unreachable (its last health poll failed)")
            : FetchStats(address, model, settings.rpc_timeout_ms);
    Polled p;
    absl::Status read =
        stats.ok() ? ReadWorkerExpertStats(*stats, p.current, p.heat) : stats.status();
    if (!read.ok()) {
      wv.outcome = absl::StrCat("stats failed: ", read.message());
      ++stats_failures;
      ++result.workers_skipped;
      LogTransition(key, true,
                    absl::StrCat("model ", model, ": worker ", address,
                                 " left out of planning: GetExpertStats: ", read.message()));
      continue;
    }
    LogTransition(
        key, false,
        absl::StrCat("model ", model, ": worker ", address, " answers GetExpertStats again"));
    ++result.workers_answered;
    const v1::ExpertStats& s = *stats;
    wv.model_fingerprint = s.model_fingerprint();
    wv.tiered = s.tiered();
    wv.device_slots = s.device_slots();
    wv.routed_total = s.routed_total();
    wv.routed_device = s.routed_device();
    if (s.routed_total() > 0) {
      wv.hit_share = static_cast<double>(s.routed_device()) / static_cast<double>(s.routed_total());
    }
    wv.moves_in = s.moves_in();
    wv.moves_out = s.moves_out();
    wv.moves_pending = s.moves_pending();
    wv.generation = s.placement_generation();
    wv.startup_source = s.startup_source();
    wv.layers = LayerViews(p.current, p.heat);
    wv.slot_classes = SlotClassViews(SlotClassesOf(s), p.current);
    wv.slot_budget_bytes = s.slot_budget_bytes();
    p.address = address;
    p.stats = *std::move(stats);
    p.view = &wv;
    polled.push_back(std::move(p));
  }

  // The fleet's hit share since the previous cycle (a restarted worker's counters went back:
  // its whole count is the delta then).
  uint64_t delta_total = 0, delta_device = 0, life_total = 0, life_device = 0;
  for (const Polled& p : polled) {
    const uint64_t total = p.stats.routed_total(), device = p.stats.routed_device();
    life_total += total;
    life_device += device;
    auto [it, fresh] =
        last_routed_.try_emplace(absl::StrCat(model, "\n", p.address), total, device);
    if (!fresh) {
      const bool reset = total < it->second.first || device < it->second.second;
      delta_total += reset ? total : total - it->second.first;
      delta_device += reset ? device : device - it->second.second;
      it->second = {total, device};
    }
  }
  if (delta_total > 0) {
    view.fleet_hit_share = static_cast<double>(delta_device) / static_cast<double>(delta_total);
  } else if (life_total > 0) {
    view.fleet_hit_share = static_cast<double>(life_device) / static_cast<double>(life_total);
  }

  // Workers of the same weights plan from the same heat.
  std::vector<Group> groups;
  for (Polled& p : polled) {
    Group* g = nullptr;
    for (Group& candidate : groups) {
      if (candidate.fingerprint == p.stats.model_fingerprint() &&
          candidate.n_layer == p.stats.n_layer() && candidate.n_expert == p.stats.n_expert()) {
        g = &candidate;
      }
    }
    if (g == nullptr) {
      g = &groups.emplace_back();
      g->fingerprint = p.stats.model_fingerprint();
      g->n_layer = p.stats.n_layer();
      g->n_expert = p.stats.n_expert();
    }
    g->workers.push_back(&p);
  }
  for (Group& g : groups) PlanGroup(model, g, settings, now_ms, store, view, result);

  int pushed = 0, unchanged = 0, pending = 0, untiered = 0, failed = 0;
  for (const PlacementWorkerView& wv : view.workers) {
    pushed += wv.outcome == "pushed";
    unchanged += wv.outcome == "unchanged";
    pending += wv.outcome == "moves pending";
    untiered += wv.outcome == "not tiered";
    failed += absl::StartsWith(wv.outcome, "push failed");
  }
  view.outcome =
      absl::StrCat(polled.size(), " of ", addresses.size(), " workers answered; ", pushed,
                   " pushed, ", unchanged, " unchanged, ", pending, " moves pending, ", untiered,
                   " not tiered, ", failed, " push failed");
  std::lock_guard<std::mutex> lock(mu_);
  ModelCounters& c = counters_[model];
  c.stats_failures += stats_failures;
  c.fleet_hit_share = view.fleet_hit_share;
  return view;
}

void PlacementController::PlanGroup(const std::string& model, Group& g,
                                    const PlacementSettings& settings, int64_t now_ms,
                                    RedisPlacementStore* store, PlacementModelView& view,
                                    PlacementCycleResult& result) {
  // The fleet's heat: the sum of the workers' decayed counts.
  std::vector<std::vector<double>> heat(static_cast<size_t>(g.n_layer),
                                        std::vector<double>(static_cast<size_t>(g.n_expert)));
  double half_life = 0;
  for (const Polled* p : g.workers) {
    for (size_t l = 0; l < heat.size(); ++l) {
      for (size_t e = 0; e < heat[l].size(); ++e) heat[l][e] += p->heat[l][e];
    }
    if (half_life <= 0 && std::isfinite(p->stats.half_life_seconds())) {
      half_life = p->stats.half_life_seconds();
    }
  }
  const bool storable = store != nullptr && IsHexFingerprint(g.fingerprint);

  // The stored record, asked for once per fingerprint (again after a failed load).
  const std::string prior_key = absl::StrCat(g.fingerprint, "/", g.n_layer, "x", g.n_expert);
  Prior& prior = priors_[prior_key];
  if (storable && !prior.loaded) {
    absl::StatusOr<std::optional<common::ExpertPlacementRecord>> loaded =
        store->Load(g.fingerprint);
    const bool bad_record =
        !loaded.ok() && loaded.status().code() == absl::StatusCode::kInvalidArgument;
    if (!loaded.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      ++redis_failures_["load"];
      ++result.redis_failures;
    }
    if (loaded.ok() || bad_record) prior.loaded = true;
    LogTransition(absl::StrCat("load\n", prior_key), !loaded.ok(),
                  loaded.ok() ? absl::StrCat("model ", model, ": Redis answers again")
                              : absl::StrCat("model ", model, ": stored placement not read (",
                                             bad_record ? "ignored" : "Redis down",
                                             "): ", loaded.status().message()));
    if (loaded.ok() && loaded->has_value()) {
      if ((*loaded)->n_layer == g.n_layer && (*loaded)->n_expert == g.n_expert) {
        prior.record = **loaded;
      } else {
        Log(absl::StrCat("model ", model, ": stored placement is shaped ", (*loaded)->n_layer,
                         " x ", (*loaded)->n_expert, ", the workers report ", g.n_layer, " x ",
                         g.n_expert, "; ignored"));
      }
    }
    if (!loaded.ok()) view.prior = absl::StrCat("not read: ", loaded.status().message());
  }
  if (prior.record) {
    const common::ExpertPlacementRecord& r = *prior.record;
    const double age_s =
        std::max<double>(0, static_cast<double>(now_ms - r.updated_unix_ms) / 1000);
    const double decay = std::exp2(-age_s / r.half_life_seconds);
    for (size_t l = 0; l < heat.size(); ++l) {
      for (size_t e = 0; e < heat[l].size(); ++e) {
        heat[l][e] = std::max(heat[l][e], r.heat[l][e] * decay);
      }
    }
    if (half_life <= 0) half_life = r.half_life_seconds;
    view.prior = absl::StrCat("redis (age ", static_cast<int64_t>(age_s), " s)");
  }

  // Plan and push, worker by worker.
  const PlannerOptions options{
      .hysteresis = settings.hysteresis, .min_gain = settings.min_gain, .shrink_count_noise = true};
  std::optional<ExpertPlacement> largest_plan;
  int64_t largest_slots = -1;
  for (Polled* p : g.workers) {
    PlacementWorkerView& wv = *p->view;
    if (!p->stats.tiered()) {
      wv.outcome = "not tiered";
      continue;
    }
    if (p->stats.moves_pending() > 0) {
      // Its current set is about to change: plan against it next cycle.
      wv.outcome = "moves pending";
      continue;
    }
    // The worker's slots per expert size (one class of device_slots from a worker that does
    // not report them), and per size the planner's costs from the configured machine.
    const common::ExpertSlotClasses classes = SlotClassesOf(p->stats);
    std::vector<PlanCosts> costs;
    for (uint64_t bytes : classes.slot_bytes) {
      costs.push_back(PlanCostsFor(bytes, settings.device_bandwidth_gbs * 1e9,
                                   settings.host_bandwidth_gbs * 1e9, settings.layer_sync_us * 1e-6,
                                   p->stats.n_expert_used() > 0 ? p->stats.n_expert_used() : 1));
    }
    // A worker that divides its slot bytes between the sizes as a placement needs gets the
    // division with the plan; one whose division is fixed (slot_budget_bytes 0) is planned
    // within it.
    const ExpertPlan plan = PlanDeviceExpertsWithSplit(heat, p->current, classes, costs,
                                                       p->stats.slot_budget_bytes(), options);
    ++result.plans;
    for (size_t c = 0; c < wv.slot_classes.size() && c < plan.class_slots.size(); ++c) {
      wv.slot_classes[c].planned_slots = plan.class_slots[c];
    }
    wv.planned_moves_in = plan.moves_in;
    wv.planned_moves_out = plan.moves_out;
    wv.planned_whole_layers = plan.whole_layers;
    wv.planned_moe_step_us = plan.expected_step_s * 1e6;
    wv.current_moe_step_us = plan.current_step_s * 1e6;
    if (p->stats.device_slots() > largest_slots) {
      largest_slots = p->stats.device_slots();
      largest_plan = plan.placement;
    }
    int64_t pushes = 0, push_failures = 0;
    if (!plan.changed) {
      wv.outcome = "unchanged";
    } else {
      const uint64_t generation = std::max(next_generation_, p->stats.placement_generation() + 1);
      next_generation_ = generation + 1;
      absl::Status pushed =
          Push(p->address, PushRequest(model, plan.placement, generation), settings.rpc_timeout_ms);
      const std::string key = absl::StrCat("push\n", model, "\n", p->address);
      if (pushed.ok()) {
        wv.outcome = "pushed";
        ++pushes;
        ++result.pushes;
        LogTransition(
            key, false,
            absl::StrCat("model ", model, ": worker ", p->address, " takes placements again"));
      } else {
        wv.outcome = absl::StrCat("push failed: ", pushed.message());
        ++push_failures;
        ++result.push_failures;
        LogTransition(key, true,
                      absl::StrCat("model ", model, ": worker ", p->address,
                                   " refused or missed a placement: ", pushed.message()));
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    ModelCounters& c = counters_[model];
    ++c.plans;
    c.pushes += pushes;
    c.push_failures += push_failures;
    if (pushes > 0) c.experts_pushed_in += plan.moves_in;
  }

  // The model's record.
  if (store == nullptr) return;
  if (!IsHexFingerprint(g.fingerprint)) {
    view.redis = "not saved: the workers report no hex model fingerprint";
    return;
  }
  double total = 0;
  for (const auto& row : heat) {
    for (double h : row) total += h;
  }
  if (total <= 0) {
    view.redis = "not saved: nothing routed yet";
    return;
  }
  common::ExpertPlacementRecord record;
  record.model_fingerprint = g.fingerprint;
  record.n_layer = g.n_layer;
  record.n_expert = g.n_expert;
  record.half_life_seconds = half_life > 0 ? half_life : 300;
  record.updated_unix_ms = std::max<int64_t>(now_ms, 0);
  record.heat = heat;
  if (largest_plan) {
    record.device = *std::move(largest_plan);
  } else {
    int64_t slots = 0;
    for (const Polled* p : g.workers) slots = std::max<int64_t>(slots, p->stats.device_slots());
    record.device = common::HottestExpertPlacement(heat, slots);
  }
  const absl::Status saved = store->Save(record);
  LogTransition(absl::StrCat("save\n", prior_key), !saved.ok(),
                saved.ok()
                    ? absl::StrCat("model ", model, ": placement saved to Redis again")
                    : absl::StrCat("model ", model,
                                   ": placement not saved (Redis down?): ", saved.message()));
  if (saved.ok()) {
    view.redis = "saved";
    ++result.redis_saves;
    prior.loaded = true;
    prior.record = std::move(record);
  } else {
    view.redis = absl::StrCat("save failed: ", saved.message());
    ++result.redis_failures;
    std::lock_guard<std::mutex> lock(mu_);
    ++redis_failures_["save"];
  }
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
