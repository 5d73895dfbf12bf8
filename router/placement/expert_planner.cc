#include "router/placement/expert_planner.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace deltaserve::router {
namespace {

// One (layer, expert) pair and its heat. Rank order: hotter first, ties to the lower layer,
// then the lower expert id; so "best" means first in that order and "coldest" last. The same
// order as common::HottestExpertPlacement, so a planner with nothing resident and no hysteresis
// picks exactly what a start-up placement from the same counts would.
struct Ranked {
  double heat;
  int64_t layer;
  int32_t expert;
};

bool Before(const Ranked& a, const Ranked& b) {
  if (a.heat != b.heat) return a.heat > b.heat;
  if (a.layer != b.layer) return a.layer < b.layer;
  return a.expert < b.expert;
}

// Heat as the planner uses it: counts come from workers over the network and are summed, so a
// NaN, infinity or negative value means nothing trustworthy; it plans as 0 (never preferred,
// never protected).
double CleanHeat(double h) { return std::isfinite(h) && h > 0 ? h : 0.0; }

// current.device as a resident mask over [n_layer][n_expert]; nothing when its shape differs from
// the heat's. Ids out of range and duplicates are ignored (the worker validates what it gets;
// here they only mean "not resident").
std::vector<std::vector<char>> ResidentMask(const common::ExpertPlacement& current, int64_t n_layer,
                                            int64_t n_expert) {
  std::vector<std::vector<char>> mask(static_cast<size_t>(n_layer),
                                      std::vector<char>(static_cast<size_t>(n_expert), 0));
  if (current.n_layer != n_layer || current.n_expert != n_expert ||
      static_cast<int64_t>(current.device.size()) != n_layer) {
    return mask;
  }
  for (int64_t l = 0; l < n_layer; ++l) {
    for (int32_t e : current.device[static_cast<size_t>(l)]) {
      if (e >= 0 && e < n_expert) mask[static_cast<size_t>(l)][static_cast<size_t>(e)] = 1;
    }
  }
  return mask;
}

}  // namespace

ExpertPlan PlanDeviceExperts(const std::vector<std::vector<double>>& heat,
                             const common::ExpertPlacement& current, int64_t n_slots,
                             const PlannerOptions& options) {
  const auto n_layer = static_cast<int64_t>(heat.size());
  int64_t n_expert = 0;
  for (const auto& row : heat) n_expert = std::max(n_expert, static_cast<int64_t>(row.size()));
  const std::vector<std::vector<char>> resident_mask = ResidentMask(current, n_layer, n_expert);

  // Residents coldest first (the order they leave in), candidates hottest first.
  std::vector<Ranked> residents;
  std::vector<Ranked> candidates;
  for (int64_t l = 0; l < n_layer; ++l) {
    const auto& row = heat[static_cast<size_t>(l)];
    for (int64_t e = 0; e < n_expert; ++e) {
      const double h =
          e < static_cast<int64_t>(row.size()) ? CleanHeat(row[static_cast<size_t>(e)]) : 0.0;
      const Ranked r{h, l, static_cast<int32_t>(e)};
      (resident_mask[static_cast<size_t>(l)][static_cast<size_t>(e)] ? residents : candidates)
          .push_back(r);
    }
  }
  std::sort(residents.begin(), residents.end(),
            [](const Ranked& a, const Ranked& b) { return Before(b, a); });
  std::sort(candidates.begin(), candidates.end(), Before);

  const int64_t slots = std::max<int64_t>(n_slots, 0);
  size_t evict = 0;  // residents[0, evict) leave
  size_t admit = 0;  // candidates[0, admit) enter
  // A budget that shrank below the current set: the coldest go first.
  if (static_cast<int64_t>(residents.size()) > slots) {
    evict = residents.size() - static_cast<size_t>(slots);
  }
  // Free slots take the hottest candidates: filling free device memory displaces nothing.
  int64_t kept = static_cast<int64_t>(residents.size() - evict);
  while (kept + static_cast<int64_t>(admit) < slots && admit < candidates.size()) ++admit;
  // Then swaps, hottest candidate for coldest resident, while the candidate clearly beats it.
  // Candidates only get colder and residents only hotter along the way, so the first pair that
  // does not pay stops the loop: nothing later would.
  const double factor = 1.0 + std::max(options.hysteresis, 0.0);
  const double min_gain = std::max(options.min_gain, 0.0);
  while (admit < candidates.size() && evict < residents.size()) {
    if (!(candidates[admit].heat > residents[evict].heat * factor + min_gain)) break;
    ++admit;
    ++evict;
  }

  ExpertPlan plan;
  plan.placement = common::ExpertPlacement::Empty(n_layer, n_expert);
  for (size_t i = evict; i < residents.size(); ++i) {
    plan.placement.device[static_cast<size_t>(residents[i].layer)].push_back(residents[i].expert);
  }
  for (size_t i = 0; i < admit; ++i) {
    plan.placement.device[static_cast<size_t>(candidates[i].layer)].push_back(candidates[i].expert);
  }
  for (auto& l : plan.placement.device) std::sort(l.begin(), l.end());
  plan.moves_in = static_cast<int64_t>(admit);
  plan.moves_out = static_cast<int64_t>(evict);
  plan.changed = !(plan.placement == current);
  return plan;
}

}  // namespace deltaserve::router
