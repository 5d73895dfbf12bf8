// The router's MoE expert placement policy (docs/moe_placement.md): from decayed routed-token
// counts ("heat") per (layer, expert), which experts a worker keeps in device memory under its
// slot budget. Pure functions, no I/O: the placement controller (placement_controller.h) feeds
// them the fleet's statistics and pushes the result; deltaserve-placement-sim replays routing
// traces through the same code, so the simulator measures the policy the router runs.
//
//   PlannerOptions o{.hysteresis = 0.25};
//   ExpertPlan plan = PlanDeviceExperts(heat, current, /*n_slots=*/1024, o);
//   if (plan.changed) PushToWorker(plan.placement);
#pragma once

#include <cstdint>
#include <vector>

#include "common/expert_placement.h"

namespace deltaserve::router {

struct PlannerOptions {
  // A resident expert is replaced only by a candidate whose heat exceeds the resident's by this
  // fraction (0.25: 25 % hotter) plus `min_gain` tokens: a placement does not flap between
  // near-equal experts, and each move (a copy over PCIe) has to pay for itself.
  double hysteresis = 0.25;
  double min_gain = 1.0;
};

// One planning decision.
struct ExpertPlan {
  common::ExpertPlacement placement;  // the new device set (valid for n_slots)
  int64_t moves_in = 0;               // experts entering device memory vs `current`
  int64_t moves_out = 0;
  bool changed = false;               // placement != current
};

// `heat` is [n_layer][n_expert] (decayed routed tokens, summed over the fleet's workers of the
// model or one worker's own); `current` the worker's device set (same shape; an empty or
// mismatched one counts as nothing resident). The plan fills free slots with the hottest
// non-resident experts, then swaps the coldest resident for the hottest candidate while the
// candidate beats it by the hysteresis; never more than n_slots experts. Deterministic: ties go
// to the lower layer, then the lower expert id.
ExpertPlan PlanDeviceExperts(const std::vector<std::vector<double>>& heat,
                             const common::ExpertPlacement& current, int64_t n_slots,
                             const PlannerOptions& options);

}  // namespace deltaserve::router
