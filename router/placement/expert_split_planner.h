// The router's plan for a worker whose expert slots of different sizes share one budget of bytes
// (docs/moe_placement.md, "Slots per expert size"): besides which experts go to the device, how
// many slots of each size. A Q4_K_M file stores some layers' experts about 15 % larger than the
// others; with the budget split between the sizes in fixed proportion, each size can end in a
// partly filled layer, where keeping whole layers (llama.cpp's --n-cpu-moe) would leave at most
// one. Letting the plan choose the split removes that: any placement whose slots fit the bytes,
// the --n-cpu-moe one included, is a candidate.
//
//   ExpertPlan plan = PlanDeviceExpertsWithSplit(heat, current, classes, costs,
//                                                stats.slot_budget_bytes(), options);
//   // plan.class_slots: the slots per size; the worker re-divides its arena to hold them.
#pragma once

#include <cstdint>
#include <vector>

#include "common/expert_placement.h"
#include "router/placement/expert_planner.h"

namespace deltaserve::router {

// The slots per class (`slot_bytes[c]` bytes each, at most `capacity[c]`) within `budget_bytes`
// that minimise the sum of `step[c][slots]` (non-increasing curves over 0..their size - 1 slots;
// a class's slots beyond its curve count as its last point). Ties go to the split nearest
// `current` (fewest slots changing class), then to fewer slots of class 0. Exact for one or two
// classes; empty for more (see PlanDeviceExpertsWithSplit).
std::vector<int64_t> ChooseSlotSplit(const std::vector<std::vector<double>>& step,
                                     const std::vector<uint64_t>& slot_bytes,
                                     const std::vector<int64_t>& capacity,
                                     const std::vector<int64_t>& current, uint64_t budget_bytes);

// PlanDeviceExpertsByCost per class (expert_planner.h), with the classes' slots chosen by the
// plan within `budget_bytes` (the bytes of the worker's slots, all sizes together) instead of
// fixed at classes.slots. Per class the programme's least step for every slot count
// (BestStepBySlots) gives the split; the plan with hysteresis uses the split its discounted
// curves choose, and the split the undiscounted curves choose replaces it when its plan's
// expected step is shorter by more than options.replan_gain (the structural reorganisation
// PlanDeviceExpertsByCost makes within a class, here across them: e.g. the whole layers of a
// uniform load, as --n-cpu-moe keeps them). plan.class_slots is the split; the placement fills
// it and common::SplitForPlacement of it within budget_bytes holds it.
//
// Planned as PlanDeviceExpertsByCost within classes.slots (the worker's current split) when
// budget_bytes is 0 (a worker whose split is fixed), nothing has been routed yet, a class has
// no slot size, or there are more than two classes (the split's search is then not exact; such
// files keep their split).
ExpertPlan PlanDeviceExpertsWithSplit(const std::vector<std::vector<double>>& heat,
                                      const common::ExpertPlacement& current,
                                      const common::ExpertSlotClasses& classes,
                                      const std::vector<PlanCosts>& costs, uint64_t budget_bytes,
                                      const PlannerOptions& options);

}  // namespace deltaserve::router
