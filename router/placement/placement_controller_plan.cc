// The placement loop's planning (placement_controller.h, steps 3 to 5): for a group of workers
// with the same weights, the fleet's heat with the stored record's, a plan per tiered worker
// within its slots, SetExpertPlacement where the plan changed, and the group's record saved to
// Redis.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/expert_placement.h"
#include "common/expert_placement_record.h"
#include "router/placement/expert_planner.h"
#include "router/placement/expert_split_planner.h"
#include "router/placement/internal/placement_cycle.h"
#include "router/placement/placement_controller.h"
#include "router/placement/worker_expert_stats.h"

namespace deltaserve::router {

using common::ExpertPlacement;
using internal::LogPlacement;

namespace {

bool IsHexFingerprint(const std::string& fp) {
  if (fp.empty() || fp.size() > common::kMaxModelFingerprintChars) return false;
  for (char c : fp) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

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
        LogPlacement(absl::StrCat("model ", model, ": stored placement is shaped ",
                                  (*loaded)->n_layer, " x ", (*loaded)->n_expert,
                                  ", the workers report ", g.n_layer, " x ", g.n_expert,
                                  "; ignored"));
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

}  // namespace deltaserve::router
