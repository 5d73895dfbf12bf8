// The router's MoE expert placement loop (docs/moe_placement.md). Every `interval_seconds`, for
// each MoE model its workers report (architecture ending in "moe"):
//   1. GetExpertStats from every worker that serves it, over the worker pool's channels (a
//      worker that fails or answers nonsense is left out of this cycle: a metric and a log line);
//   2. sum the decayed routed-token counts ("heat") over the fleet, per weights fingerprint
//      (workers with another file never mix), and take per expert the larger of that sum and
//      the stored record's heat decayed to now, so a restarted fleet starts from what was learned;
//   3. plan each tiered worker's device set under its own slot budget with hysteresis against
//      its current set (PlanDeviceExpertsByCost, with costs from the settings' machine figures
//      and the worker's slot size), skipping a worker that is still moving experts;
//   4. push SetExpertPlacement where the plan changed, with a generation counter the worker
//      echoes;
//   5. store the model's record (heat, the plan for the largest budget) in Redis, when
//      configured.
// The state of the last cycle is kept for GET /admin/placement (placement_admin.h) and
// /metrics.
//
//   PlacementController placement(&pool, config->placement);
//   placement.Start();             // a cycle every interval on its own thread
//   placement.RunOnce();           // or one cycle now (tests)
//   placement.SetSettings(next);   // SIGHUP
//   placement.Stop();
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "common/expert_placement_record.h"
#include "deltaserve/v1/worker.pb.h"
#include "router/api/prometheus_text.h"
#include "router/config/router_config.h"
#include "router/placement/placement_store.h"
#include "router/routing/worker_pool.h"

namespace deltaserve::router {

// One MoE layer of one worker, as of the last cycle.
struct PlacementLayerView {
  int32_t layer = 0;
  std::vector<int32_t> device_experts;  // resident on the device, as the worker reported
  // Share of the worker's recent routed tokens (its decayed counts) that went to those experts;
  // -1 when the layer saw no tokens.
  double recent_hit_share = -1;
};

// The device slots of one expert size on one worker, as of the last cycle.
struct PlacementSlotClassView {
  uint64_t slot_bytes = 0;
  int64_t slots = 0;  // the worker's slots of this size now
  int64_t used = 0;   // of those, holding an expert (the worker's device experts of these layers)
  std::vector<int32_t> layers;  // the layers whose experts have this size
  int64_t planned_slots = -1;   // the last plan's slots of this size; -1 before a plan
};

// One worker of one model, as of the last cycle.
struct PlacementWorkerView {
  std::string address;
  std::string model_fingerprint;
  bool tiered = false;
  int64_t device_slots = 0;
  uint64_t routed_total = 0;   // (token, expert) pairs since the worker started
  uint64_t routed_device = 0;  // ... served from device memory
  double hit_share = -1;       // routed_device / routed_total; -1 before any token
  uint64_t moves_in = 0;       // experts moved into / out of device memory since start
  uint64_t moves_out = 0;
  int32_t moves_pending = 0;
  uint64_t generation = 0;     // of the placement the worker applies
  std::string startup_source;  // "saved", "warmup", "even", "all"
  // What this cycle did: "pushed", "unchanged", "moves pending", "not tiered",
  // "stats failed: ...", "push failed: ...".
  std::string outcome;
  int64_t planned_moves_in = 0;  // of the plan (pushed or not)
  int64_t planned_moves_out = 0;
  // Of the plan: layers wholly on the device, and the MoE part of a single-token step as the
  // planner models it (ExpectedStepSeconds, microseconds) with the plan and with the worker's
  // current set; -1 before a plan.
  int64_t planned_whole_layers = -1;
  double planned_moe_step_us = -1;
  double current_moe_step_us = -1;
  // The slots per expert size (one entry of every layer from a worker that reports none), and
  // the bytes they share when the worker divides them as each placement needs (0: fixed).
  std::vector<PlacementSlotClassView> slot_classes;
  uint64_t slot_budget_bytes = 0;
  std::vector<PlacementLayerView> layers;
};

// One model, as of the last cycle.
struct PlacementModelView {
  std::string model;
  int64_t last_plan_unix_ms = 0;
  // "2 of 2 workers answered; 1 pushed, 1 unchanged" and the like.
  std::string outcome;
  // Share of routed tokens served from device memory over the fleet since the previous cycle
  // (over the workers' lifetimes when there is no previous cycle); -1 when none were routed.
  double fleet_hit_share = -1;
  // The Redis record: "off", "saved", "not saved: nothing routed yet", "save failed: ...".
  std::string redis;
  // Where the stored heat came from when the cycle planned: "none", "redis (age 42 s)", ...
  std::string prior;
  std::vector<PlacementWorkerView> workers;
};

// What one RunOnce did, summed over models.
struct PlacementCycleResult {
  int models = 0;
  int workers_answered = 0;
  int workers_skipped = 0;  // statistics failed or were malformed
  int plans = 0;
  int pushes = 0;
  int push_failures = 0;
  int redis_saves = 0;
  int redis_failures = 0;  // saves and loads
};

class PlacementController {
 public:
  // Unix time in milliseconds; tests substitute their own.
  using UnixMsClock = std::function<int64_t()>;

  // `pool` must outlive this. A bad `settings.redis_url` (config validation refuses one) leaves
  // the store off, with a log line.
  PlacementController(WorkerPool* pool, const PlacementSettings& settings,
                      UnixMsClock clock = nullptr);
  ~PlacementController();  // Stop()
  PlacementController(const PlacementController&) = delete;
  PlacementController& operator=(const PlacementController&) = delete;

  // Starts the thread: a cycle every interval_seconds (the first one interval_seconds after
  // Start, when the pool has polled its workers), while enabled.
  void Start();
  // Stops the thread; a cycle in progress finishes first. Idempotent.
  void Stop();
  // Reload: new interval, hysteresis, store (when the URL changed), on/off.
  void SetSettings(const PlacementSettings& settings);

  // One cycle now, on the caller's thread (cycles never overlap). Nothing when disabled.
  PlacementCycleResult RunOnce();

  // The last cycle's state, models by name.
  std::vector<PlacementModelView> Views() const;
  PlacementSettings settings() const;
  // "off" or the store's URL with the password masked.
  std::string StoreDescription() const;
  // deltaserve_router_placement_* families (docs/metrics.md).
  void WriteMetrics(api::PrometheusText& out) const;

 private:
  struct ModelCounters {
    int64_t plans = 0;
    int64_t pushes = 0;
    int64_t push_failures = 0;
    int64_t stats_failures = 0;
    int64_t experts_pushed_in = 0;  // moves_in of the plans pushed
    double fleet_hit_share = -1;
  };
  // One worker's answer within a cycle.
  struct Polled;
  // Workers of one model with the same weights (fingerprint and shape).
  struct Group;
  // A stored record and whether the store was asked for it.
  struct Prior {
    bool loaded = false;
    std::optional<common::ExpertPlacementRecord> record;
  };

  void Loop();
  PlacementModelView CycleModel(const std::string& model, const std::vector<std::string>& addresses,
                                const absl::flat_hash_set<std::string>& unreachable,
                                const PlacementSettings& settings, int64_t now_ms,
                                RedisPlacementStore* store, PlacementCycleResult& result);
  void PlanGroup(const std::string& model, Group& group, const PlacementSettings& settings,
                 int64_t now_ms, RedisPlacementStore* store, PlacementModelView& view,
                 PlacementCycleResult& result);
  absl::StatusOr<deltaserve::v1::ExpertStats> FetchStats(const std::string& address,
                                                         const std::string& model,
                                                         int64_t timeout_ms);
  absl::Status Push(const std::string& address, const deltaserve::v1::SetExpertPlacementRequest&,
                    int64_t timeout_ms);
  // Logs `line` when the state of `key` changes to `failing` (and once when it recovers).
  void LogTransition(const std::string& key, bool failing, const std::string& line);
  std::shared_ptr<RedisPlacementStore> store() const;

  WorkerPool* const pool_;
  const UnixMsClock clock_;

  mutable std::mutex mu_;  // guards everything below but cycle-only state
  std::condition_variable cv_;
  PlacementSettings settings_;
  std::shared_ptr<RedisPlacementStore> store_;
  std::map<std::string, PlacementModelView> views_;
  std::map<std::string, ModelCounters> counters_;
  std::map<std::string, int64_t> redis_failures_;  // by operation: "load", "save"
  int64_t cycles_ = 0;
  bool stopping_ = false;
  std::thread thread_;

  std::mutex cycle_mu_;  // one cycle at a time; guards the cycle-only state below
  uint64_t next_generation_ = 1;
  std::map<std::string, Prior> priors_;  // by fingerprint and shape
  // The previous cycle's (routed_total, routed_device) per model and worker.
  std::map<std::string, std::pair<uint64_t, uint64_t>> last_routed_;
  std::map<std::string, bool> failing_;  // LogTransition's states
};

}  // namespace deltaserve::router
