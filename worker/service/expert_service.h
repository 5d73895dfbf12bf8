// MoE expert placement on the worker (docs/moe_placement.md): per served MoE model, the decayed
// routing statistics and the two-tier state that GetExpertStats reports, the checks and the
// queueing of a SetExpertPlacement, and the expert series of /metrics. WorkerService's two
// expert RPCs are defined in expert_service.cc on top of this.
//
// A model has expert tiers only on a device backend (CUDA, `sim`) whose expert budget
// (--expert-vram) holds fewer than all its experts; then ExpertTiers (worker/engine) moves
// experts and the scheduler advances the moves between steps. Without tiers (a CPU worker, or
// every expert on the device) the statistics are still served, `tiered` is false and a
// placement is refused (FAILED_PRECONDITION): there is nothing to place.
//
//   ModelExperts experts(*served, tiers, {.half_life_seconds = 60, .device_backend = true});
//   service.SetModelExperts("qwen", &experts);          // before serving
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/expert_placement.h"
#include "common/prometheus_text.h"
#include "deltaserve/v1/worker.pb.h"
#include "worker/engine/expert_tiers.h"
#include "worker/sched/expert_heat.h"
#include "worker/sched/served_model.h"

namespace deltaserve::worker {

// Where a model's start-up placement came from (ExpertStats.startup_source).
inline constexpr const char* kStartupSaved = "saved";    // the router's record in Redis
inline constexpr const char* kStartupWarmup = "warmup";  // a warm-up prefill's routing counts
inline constexpr const char* kStartupEven = "even";      // EvenExpertPlacement
inline constexpr const char* kStartupAll = "all";        // no tiers: every expert in one tier

struct ModelExpertsOptions {
  double half_life_seconds = 60;  // --expert-half-life
  // The backend's memory is not host memory (CUDA, sim): without tiers, every expert is then
  // in device memory; on the CPU none is.
  bool device_backend = false;
  // The expert budget as configured (--expert-vram), for ExpertStats.device_budget_bytes; 0:
  // the slots' bytes (n_slots x slot_bytes).
  uint64_t device_budget_bytes = 0;
  // Clock of the decayed statistics (tests).
  ExpertHeat::Clock clock = &ExpertHeat::SteadySeconds;
};

// One MoE model's placement state (see the file comment). Thread-safe; the model and the tiers
// must outlive it.
class ModelExperts {
 public:
  // `tiers`: the model's ExpertTiers (Qwen35Model::expert_tiers()), null when it has none.
  ModelExperts(ServedModel& model, ExpertTiers* tiers, const ModelExpertsOptions& options);

  ServedModel& model() const { return model_; }
  ExpertTiers* tiers() const { return tiers_; }
  ExpertHeat& heat() { return heat_; }
  const ModelExpertsOptions& options() const { return options_; }
  // ExpertStats.model_fingerprint: hex of the GGUF header's SHA-256 (common/snapshot_key.h).
  const std::string& fingerprint_hex() const { return fingerprint_hex_; }
  int64_t n_layer() const;
  int64_t n_expert() const;

  // kStartup*; set once by the start-up placement (expert_startup.h) before serving.
  void set_startup_source(std::string source) { startup_source_ = std::move(source); }
  const std::string& startup_source() const { return startup_source_; }
  // A saved placement that could not be used at start-up: Redis failed, or its record was
  // refused (bad blob, another shape). Degraded mode: counted for /metrics, logged by the caller.
  void CountSavedPlacementError(bool redis_failed) {
    ++(redis_failed ? saved_redis_errors_ : saved_invalid_);
  }
  uint64_t saved_redis_errors() const { return saved_redis_errors_; }
  uint64_t saved_invalid() const { return saved_invalid_; }

  // The device-resident experts now: the tiers' current placement, all experts (device backend
  // without tiers) or none (CPU).
  common::ExpertPlacement DeviceExperts() const;
  // Routed (token, expert) pairs since serving started, and those served from device memory.
  uint64_t routed_total() const;
  uint64_t routed_device() const;
  // Serving starts now (the end of the start-up placement): what the tiers counted before (the
  // load's and the warm-up's passes) is not reported.
  void MarkServingStart();

  // GetExpertStats for this model, served under `name`.
  void FillStats(const std::string& name, deltaserve::v1::ExpertStats& out);
  // The placement a SetExpertPlacement asks for, with the model's shape: InvalidArgument for a
  // layer outside [0, n_layer) or listed twice (experts are checked by ExpertTiers::SetTarget).
  absl::StatusOr<common::ExpertPlacement> PlacementFromRequest(
      const deltaserve::v1::SetExpertPlacementRequest& request) const;
  // Validates and queues `request` (FailedPrecondition without tiers; InvalidArgument,
  // ResourceExhausted from the checks, nothing changed then), then wakes the scheduler.
  absl::StatusOr<ExpertMoves> SetPlacement(const deltaserve::v1::SetExpertPlacementRequest& request);

 private:
  ServedModel& model_;
  ExpertTiers* tiers_;
  ModelExpertsOptions options_;
  ExpertHeat heat_;
  std::string fingerprint_hex_;
  std::string startup_source_ = kStartupAll;
  std::atomic<uint64_t> saved_redis_errors_{0}, saved_invalid_{0};
  std::atomic<uint64_t> routed_base_total_{0}, routed_base_device_{0};
};

class WorkerService;
// The expert series of /metrics (docs/metrics.md, "Expert placement") for every model with a
// ModelExperts: routed pairs and those served from device memory (counters, so that
// rate(device) / rate(total) is the share served from VRAM), moves and bytes moved, moves
// pending, device slots, migration failures, the start-up source and saved-placement errors.
void WriteExpertMetrics(const WorkerService& service, common::PrometheusText& out);

}  // namespace deltaserve::worker
