#include "router/placement/expert_split_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "router/placement/internal/planner_heat.h"

namespace deltaserve::router {
namespace {

double At(const std::vector<double>& curve, int64_t s) {
  if (curve.empty()) return 0;
  return curve[static_cast<size_t>(
      std::clamp<int64_t>(s, 0, static_cast<int64_t>(curve.size()) - 1))];
}

}  // namespace

std::vector<int64_t> ChooseSlotSplit(const std::vector<std::vector<double>>& step,
                                     const std::vector<uint64_t>& slot_bytes,
                                     const std::vector<int64_t>& capacity,
                                     const std::vector<int64_t>& current, uint64_t budget_bytes) {
  const size_t n = step.size();
  if (n == 0 || n > 2 || slot_bytes.size() != n || capacity.size() != n) return {};
  for (uint64_t b : slot_bytes) {
    if (b == 0) return {};
  }
  auto most = [&](size_t c, uint64_t bytes) {
    return std::min<int64_t>(std::max<int64_t>(capacity[c], 0),
                             static_cast<int64_t>(bytes / slot_bytes[c]));
  };
  if (n == 1) return {most(0, budget_bytes)};
  auto moved = [&](int64_t s0) {  // slots that change class against `current`
    return current.size() == 2 ? std::llabs(s0 - current[0]) : 0;
  };
  std::vector<int64_t> best;
  double best_v = std::numeric_limits<double>::infinity();
  for (int64_t s0 = 0; s0 <= most(0, budget_bytes); ++s0) {
    const int64_t s1 = most(1, budget_bytes - static_cast<uint64_t>(s0) * slot_bytes[0]);
    const double v = At(step[0], s0) + At(step[1], s1);
    const double tol = 1e-12 * std::max(std::abs(v), std::abs(best_v));
    const bool better = best.empty() || v < best_v - tol;
    const bool tie = !better && v <= best_v + tol && moved(s0) < moved(best[0]);
    if (better) best_v = v;
    if (better || tie) best = {s0, s1};
  }
  return best;
}

ExpertPlan PlanDeviceExpertsWithSplit(const std::vector<std::vector<double>>& heat,
                                      const common::ExpertPlacement& current,
                                      const common::ExpertSlotClasses& classes,
                                      const std::vector<PlanCosts>& costs, uint64_t budget_bytes,
                                      const PlannerOptions& options) {
  const auto n_layer = static_cast<int64_t>(heat.size());
  const int64_t n_expert = heat.empty() ? 0 : static_cast<int64_t>(heat[0].size());
  const double total = internal::ShapeOf(heat).total;
  bool sized = true;
  for (uint64_t b : classes.slot_bytes) sized = sized && b > 0;
  if (budget_bytes == 0 || !(total > 0) || !sized || classes.n_class() > 2 ||
      static_cast<int64_t>(costs.size()) != classes.n_class() || !classes.Check(n_layer).ok()) {
    return PlanDeviceExpertsByCost(heat, current, classes, costs, options);
  }
  const bool current_fits = internal::PlacementFits(current, n_layer, n_expert);

  // Per class: the least step for every slot count it could take.
  std::vector<std::vector<double>> discounted, full;
  std::vector<int64_t> capacity;
  for (int32_t c = 0; c < classes.n_class(); ++c) {
    const std::vector<int64_t> layers = classes.LayersOf(c);
    const internal::LayerSlice slice =
        internal::SliceLayers(heat, current, current_fits, layers, n_expert);
    const auto cap = static_cast<int64_t>(layers.size()) * n_expert;
    capacity.push_back(cap);
    const int64_t most = std::min<int64_t>(
        cap, static_cast<int64_t>(budget_bytes / classes.slot_bytes[static_cast<size_t>(c)]));
    StepBySlots curves =
        BestStepBySlots(slice.heat, slice.current, most, costs[static_cast<size_t>(c)], options);
    discounted.push_back(std::move(curves.discounted));
    full.push_back(std::move(curves.full));
  }

  auto plan_within = [&](const std::vector<int64_t>& split) {
    common::ExpertSlotClasses within = classes;
    within.slots = split;
    return PlanDeviceExpertsByCost(heat, current, within, costs, options);
  };
  const std::vector<int64_t> kept_split =
      ChooseSlotSplit(discounted, classes.slot_bytes, capacity, classes.slots, budget_bytes);
  const std::vector<int64_t> free_split =
      ChooseSlotSplit(full, classes.slot_bytes, capacity, classes.slots, budget_bytes);
  ExpertPlan plan = plan_within(kept_split);
  if (free_split != kept_split) {
    ExpertPlan other = plan_within(free_split);
    if (TakeReorganisation(plan.expected_step_s, plan.whole_layers, other.expected_step_s,
                           other.whole_layers, options)) {
      other.reorganised = true;
      plan = std::move(other);
    }
  }
  return plan;
}

}  // namespace deltaserve::router
