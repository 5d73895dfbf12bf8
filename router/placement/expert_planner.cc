#include "router/placement/expert_planner.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <queue>

#include "router/placement/internal/planner_heat.h"

namespace deltaserve::router {
namespace {

using internal::CleanHeat;

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

// current.device as a resident mask over [n_layer][n_expert]; nothing when its shape differs from
// the heat's. Ids out of range and duplicates are ignored (the worker validates what it gets;
// here they only mean "not resident").
std::vector<std::vector<char>> ResidentMask(const common::ExpertPlacement& current, int64_t n_layer,
                                            int64_t n_expert) {
  std::vector<std::vector<char>> mask(static_cast<size_t>(n_layer),
                                      std::vector<char>(static_cast<size_t>(n_expert), 0));
  if (!internal::PlacementFits(current, n_layer, n_expert)) return mask;
  for (int64_t l = 0; l < n_layer; ++l) {
    for (int32_t e : current.device[static_cast<size_t>(l)]) {
      if (e >= 0 && e < n_expert) mask[static_cast<size_t>(l)][static_cast<size_t>(e)] = 1;
    }
  }
  return mask;
}

// One layer's candidates for the cost-aware plan: its experts in the order they are kept (each
// plan of the layer is a prefix of `order`), and the modelled cost of every prefix length.
struct LayerCurve {
  std::vector<int32_t> order;
  std::vector<double> adjusted;  // order[i]'s heat as ranked (newcomers discounted)
  std::vector<double> cost;      // cost[m]: the first m experts on the device, m = 0..n_expert
};

// The discounted heat of a newcomer (PlannerOptions): it must beat a resident's full heat.
double NewcomerHeat(double h, double factor, double min_gain) {
  return std::max(h - min_gain, 0.0) / factor;
}

// `discount`: newcomers' read savings are credited at their discounted heat (the plan with
// hysteresis); else at their full heat (the reorganisation candidate), the order being the same.
LayerCurve CurveOf(const std::vector<double>& row, const std::vector<char>& resident,
                   int64_t n_expert, const PlanCosts& c, double factor, double min_gain,
                   bool discount) {
  LayerCurve lc;
  std::vector<double> h(static_cast<size_t>(n_expert), 0.0);
  double total = 0;
  for (int64_t e = 0; e < n_expert; ++e) {
    h[e] = e < static_cast<int64_t>(row.size()) ? CleanHeat(row[static_cast<size_t>(e)]) : 0.0;
    total += h[e];
  }
  lc.order.resize(static_cast<size_t>(n_expert));
  std::iota(lc.order.begin(), lc.order.end(), 0);
  auto adjusted = [&](int32_t e) {
    return resident[e] != 0 ? h[e] : NewcomerHeat(h[e], factor, min_gain);
  };
  std::stable_sort(lc.order.begin(), lc.order.end(), [&](int32_t a, int32_t b) {
    const double ha = adjusted(a), hb = adjusted(b);
    if (ha != hb) return ha > hb;
    return resident[a] > resident[b];  // then the lower id (stable over iota)
  });
  lc.adjusted.resize(lc.order.size());
  for (size_t i = 0; i < lc.order.size(); ++i) lc.adjusted[i] = adjusted(lc.order[i]);

  // A layer nothing was routed through (while others had traffic) is taken as routing evenly;
  // its newcomers are credited nothing, so it is not reorganised on no evidence.
  const bool even = !(total > 0);
  const double n = static_cast<double>(n_expert);
  const auto k = static_cast<double>(c.k);
  lc.cost.resize(static_cast<size_t>(n_expert) + 1);
  double share = 0, credited = 0;
  for (int64_t m = 0;; ++m) {
    const double p = AllOnDeviceProbability(share, m, c.k);
    lc.cost[static_cast<size_t>(m)] = p * k * c.device_expert_s +
                                      k * (1 - std::min(credited, 1.0)) * c.host_expert_s +
                                      (1 - p) * c.layer_sync_s;
    if (m == n_expert) break;
    const int32_t e = lc.order[static_cast<size_t>(m)];
    const double s = even ? 1 / n : h[e] / total;
    share += s;
    if (!discount || resident[e] != 0) {
      credited += s;
    } else if (!even) {
      credited += lc.adjusted[static_cast<size_t>(m)] / total;
    }
  }
  return lc;
}

// The layers' prefix lengths of least total cost within `slots`: a dynamic programme over the
// layers, in units of `q` experts (1 unless the problem is huge), option j of a layer keeping
// min(j q, n_expert) experts. dp rows are kept for the walk back, which gives each layer from
// the last the smallest option within rounding of the best: ties give the lower layers more.
// One layer of the programme: cur[b] = min over options j <= b of prev[b - j] + cost[j].
void AddLayer(const double* prev, const std::vector<double>& cost, int64_t units, double* cur) {
  const auto options = static_cast<int64_t>(cost.size()) - 1;
  for (int64_t b = 0; b <= units; ++b) cur[b] = prev[b] + cost[0];
  for (int64_t j = 1; j <= options && j <= units; ++j) {
    const double cj = cost[static_cast<size_t>(j)];
    // Written so the compiler vectorises it: the strict < keeps the earlier (smaller) option.
    for (int64_t b = j; b <= units; ++b) {
      const double v = prev[b - j] + cj;
      cur[b] = v < cur[b] ? v : cur[b];
    }
  }
}

std::vector<int64_t> ChooseCounts(const std::vector<LayerCurve>& curves, int64_t n_expert,
                                  int64_t slots, int64_t q) {
  const auto n_layer = static_cast<int64_t>(curves.size());
  const int64_t units = slots / q;
  const int64_t options = (n_expert + q - 1) / q;  // j = 0..options
  const auto width = static_cast<size_t>(units + 1);
  std::vector<double> dp(static_cast<size_t>(n_layer + 1) * width, 0.0);
  std::vector<double> cost(static_cast<size_t>(options) + 1);
  auto option_cost = [&](int64_t l, std::vector<double>& out) {
    for (int64_t j = 0; j <= options; ++j) {
      out[static_cast<size_t>(j)] =
          curves[static_cast<size_t>(l)].cost[static_cast<size_t>(std::min(j * q, n_expert))];
    }
  };
  for (int64_t l = 0; l < n_layer; ++l) {
    option_cost(l, cost);
    AddLayer(dp.data() + static_cast<size_t>(l) * width, cost, units,
             dp.data() + static_cast<size_t>(l + 1) * width);
  }
  std::vector<int64_t> counts(static_cast<size_t>(n_layer), 0);
  int64_t b = units;
  for (int64_t l = n_layer - 1; l >= 0; --l) {
    option_cost(l, cost);
    const double* prev = dp.data() + static_cast<size_t>(l) * width;
    // The smallest option within rounding of the best: sums of the same costs in another order
    // differ in their last bits, and an exact tie must still go to the lower layers.
    const double target = dp[static_cast<size_t>(l + 1) * width + static_cast<size_t>(b)];
    const double within = target + 1e-12 * std::abs(target);
    int64_t j = 0;
    while (j < options && j < b && !(prev[b - j] + cost[static_cast<size_t>(j)] <= within)) ++j;
    counts[static_cast<size_t>(l)] = std::min(j * q, n_expert);
    b -= j;
  }
  return counts;
}

// The unit of ChooseCounts: 1 while n_layer * slots * n_expert steps and the n_layer * slots
// table stay within bounds, else the smallest that brings both within them.
int64_t PlanningUnit(int64_t n_layer, int64_t n_expert, int64_t slots) {
  constexpr double kMaxSteps = 2e8;
  constexpr double kMaxCells = 4e6;  // doubles in the table: 32 MB
  for (int64_t q = 1;; q *= 2) {
    const double units = static_cast<double>(slots / q) + 1;
    const double options = static_cast<double>((n_expert + q - 1) / q) + 1;
    const double layers = static_cast<double>(n_layer);
    if ((layers * units * options <= kMaxSteps && layers * units <= kMaxCells) || q >= n_expert) {
      return q;
    }
  }
}

// The cost-aware placement for given hysteresis terms (PlanDeviceExpertsByCost).
common::ExpertPlacement CostPlacement(const std::vector<std::vector<double>>& heat,
                                      const std::vector<std::vector<char>>& resident,
                                      int64_t n_expert, int64_t slots, const PlanCosts& c,
                                      double factor, double min_gain, bool discount) {
  const auto n_layer = static_cast<int64_t>(heat.size());
  std::vector<LayerCurve> curves;
  curves.reserve(static_cast<size_t>(n_layer));
  for (int64_t l = 0; l < n_layer; ++l) {
    curves.push_back(CurveOf(heat[static_cast<size_t>(l)], resident[static_cast<size_t>(l)],
                             n_expert, c, factor, min_gain, discount));
  }
  std::vector<int64_t> counts =
      slots == n_layer * n_expert
          ? std::vector<int64_t>(static_cast<size_t>(n_layer), n_expert)
          : ChooseCounts(curves, n_expert, slots, PlanningUnit(n_layer, n_expert, slots));

  // Slots left unused take the next experts of the layers' orders, hottest (as ranked) first,
  // then residents, then the lower layer: free device memory displaces nothing.
  int64_t left = slots - std::accumulate(counts.begin(), counts.end(), int64_t{0});
  struct Next {
    double heat;
    char resident;
    int64_t layer;
  };
  auto after = [](const Next& a, const Next& b) {  // priority_queue: the top is the best
    if (a.heat != b.heat) return a.heat < b.heat;
    if (a.resident != b.resident) return a.resident < b.resident;
    return a.layer > b.layer;
  };
  auto next_of = [&](int64_t l) {
    const LayerCurve& lc = curves[static_cast<size_t>(l)];
    const auto m = static_cast<size_t>(counts[static_cast<size_t>(l)]);
    return Next{lc.adjusted[m], resident[static_cast<size_t>(l)][static_cast<size_t>(lc.order[m])],
                l};
  };
  std::priority_queue<Next, std::vector<Next>, decltype(after)> queue(after);
  for (int64_t l = 0; l < n_layer && left > 0; ++l) {
    if (counts[static_cast<size_t>(l)] < n_expert) queue.push(next_of(l));
  }
  while (left > 0 && !queue.empty()) {
    const int64_t l = queue.top().layer;
    queue.pop();
    --left;
    if (++counts[static_cast<size_t>(l)] < n_expert) queue.push(next_of(l));
  }

  common::ExpertPlacement out = common::ExpertPlacement::Empty(n_layer, n_expert);
  for (int64_t l = 0; l < n_layer; ++l) {
    const LayerCurve& lc = curves[static_cast<size_t>(l)];
    auto& d = out.device[static_cast<size_t>(l)];
    d.assign(lc.order.begin(), lc.order.begin() + counts[static_cast<size_t>(l)]);
    std::sort(d.begin(), d.end());
  }
  return out;
}

// The programme's last row for every slot count up to `slots` (BestStepBySlots).
std::vector<double> LeastCostBySlots(const std::vector<std::vector<double>>& heat,
                                     const std::vector<std::vector<char>>& resident,
                                     int64_t n_expert, int64_t slots, const PlanCosts& c,
                                     double factor, double min_gain, bool discount) {
  const auto n_layer = static_cast<int64_t>(heat.size());
  const int64_t q = PlanningUnit(n_layer, n_expert, slots);
  const int64_t units = slots / q;
  const int64_t options = (n_expert + q - 1) / q;
  std::vector<double> prev(static_cast<size_t>(units) + 1, 0.0), cur(prev.size());
  std::vector<double> cost(static_cast<size_t>(options) + 1);
  for (int64_t l = 0; l < n_layer; ++l) {
    const LayerCurve lc = CurveOf(heat[static_cast<size_t>(l)], resident[static_cast<size_t>(l)],
                                  n_expert, c, factor, min_gain, discount);
    for (int64_t j = 0; j <= options; ++j) {
      cost[static_cast<size_t>(j)] = lc.cost[static_cast<size_t>(std::min(j * q, n_expert))];
    }
    AddLayer(prev.data(), cost, units, cur.data());
    prev.swap(cur);
  }
  std::vector<double> out(static_cast<size_t>(slots) + 1);
  for (int64_t s = 0; s <= slots; ++s) {
    out[static_cast<size_t>(s)] = prev[static_cast<size_t>(s / q)];
  }
  return out;
}

// Moves between `current` (as a mask) and `placement`, and whether it changed.
void Finish(ExpertPlan& plan, const std::vector<std::vector<char>>& resident,
            const common::ExpertPlacement& current) {
  int64_t kept = 0, resident_count = 0;
  for (size_t l = 0; l < resident.size(); ++l) {
    for (char r : resident[l]) resident_count += r != 0 ? 1 : 0;
    for (int32_t e : plan.placement.device[l]) kept += resident[l][static_cast<size_t>(e)] != 0;
  }
  plan.moves_in = plan.placement.size() - kept;
  plan.moves_out = resident_count - kept;
  plan.changed = !(plan.placement == current);
}

}  // namespace

PlanCosts PlanCostsFor(uint64_t expert_bytes, double device_bytes_per_s, double host_bytes_per_s,
                       double layer_sync_s, int64_t k) {
  PlanCosts c;
  c.k = std::max<int64_t>(k, 1);
  const double bytes = expert_bytes > 0 ? static_cast<double>(expert_bytes) : 1.0;
  c.device_expert_s = device_bytes_per_s > 0 ? bytes / device_bytes_per_s : 0.0;
  c.host_expert_s = host_bytes_per_s > 0 ? bytes / host_bytes_per_s : 1.0;
  c.layer_sync_s = expert_bytes > 0 && std::isfinite(layer_sync_s) ? std::max(layer_sync_s, 0.0)
                                                                    : 0.0;
  return c;
}

double AllOnDeviceProbability(double share, int64_t m, int64_t k) {
  if (k <= 0 || share >= 1) return 1;
  if (!(share > 0) || m <= 0) return 0;
  const double r = share / static_cast<double>(m);
  double p = 1;
  for (int64_t i = 0; i < k; ++i) {
    const double taken = static_cast<double>(i) * r;
    const double num = share - taken;  // <= 0 from i = m on: fewer than k device experts
    if (num <= 0) return 0;
    p *= std::min(num / (1 - taken), 1.0);
  }
  return p;
}

double ExpectedStepSeconds(const std::vector<std::vector<double>>& heat,
                           const common::ExpertPlacement& placement, const PlanCosts& costs) {
  const auto n_layer = static_cast<int64_t>(heat.size());
  int64_t n_expert = 0;
  for (const auto& row : heat) n_expert = std::max(n_expert, static_cast<int64_t>(row.size()));
  const std::vector<std::vector<char>> on = ResidentMask(placement, n_layer, n_expert);
  const auto k = static_cast<double>(std::max<int64_t>(costs.k, 1));
  double seconds = 0;
  for (int64_t l = 0; l < n_layer; ++l) {
    const auto& row = heat[static_cast<size_t>(l)];
    double total = 0;
    for (int64_t e = 0; e < static_cast<int64_t>(row.size()); ++e) total += CleanHeat(row[e]);
    double share = 0;
    int64_t m = 0;
    for (int64_t e = 0; e < n_expert; ++e) {
      if (on[static_cast<size_t>(l)][static_cast<size_t>(e)] == 0) continue;
      const double h = e < static_cast<int64_t>(row.size()) ? CleanHeat(row[e]) : 0.0;
      share += total > 0 ? h / total : 1 / static_cast<double>(n_expert);
      ++m;
    }
    const double p = AllOnDeviceProbability(share, m, costs.k);
    seconds += p * k * costs.device_expert_s + k * (1 - std::min(share, 1.0)) * costs.host_expert_s +
               (1 - p) * costs.layer_sync_s;
  }
  return seconds;
}

bool TakeReorganisation(double plan_s, int64_t plan_whole, double candidate_s,
                        int64_t candidate_whole, const PlannerOptions& options) {
  const double gain = std::clamp(
      candidate_whole > plan_whole ? options.structural_gain : options.replan_gain, 0.0, 1.0);
  return candidate_s < plan_s * (1 - gain);
}

int64_t WholeLayers(const common::ExpertPlacement& p) {
  int64_t n = 0;
  for (const auto& l : p.device) {
    n += p.n_expert > 0 && static_cast<int64_t>(l.size()) == p.n_expert;
  }
  return n;
}

std::vector<std::vector<double>> ShrinkCountNoise(const std::vector<std::vector<double>>& heat) {
  std::vector<std::vector<double>> out = heat;
  for (auto& row : out) {
    if (row.size() < 2) continue;
    double mean = 0;
    for (double& h : row) {
      h = CleanHeat(h);
      mean += h;
    }
    mean /= static_cast<double>(row.size());
    double var = 0;
    for (double h : row) var += (h - mean) * (h - mean);
    var /= static_cast<double>(row.size() - 1);
    const double keep = var > mean ? 1 - mean / var : 0.0;
    for (double& h : row) h = mean + keep * (h - mean);
  }
  return out;
}

ExpertPlan PlanDeviceExpertsByCost(const std::vector<std::vector<double>>& heat_in,
                                   const common::ExpertPlacement& current, int64_t n_slots,
                                   const PlanCosts& costs, const PlannerOptions& options) {
  // The counts as they are rank experts for the plan with hysteresis; the reorganisation
  // candidate, the choice between the two and the reported step times weigh the counts with
  // their noise shrunk away (shrink_count_noise): a structure is not chosen on noise.
  std::vector<std::vector<double>> shrunk;
  if (options.shrink_count_noise) shrunk = ShrinkCountNoise(heat_in);
  const std::vector<std::vector<double>>& heat = options.shrink_count_noise ? shrunk : heat_in;
  const internal::HeatShape shape = internal::ShapeOf(heat);
  const int64_t n_layer = shape.n_layer, n_expert = shape.n_expert;
  const double total = shape.total;
  PlanCosts c = costs;
  c.k = std::clamp<int64_t>(c.k, 1, std::max<int64_t>(n_expert, 1));
  auto finish_costs = [&](ExpertPlan& plan) {
    for (const auto& l : plan.placement.device) {
      plan.whole_layers += static_cast<int64_t>(l.size()) == n_expert && n_expert > 0;
    }
    plan.expected_step_s = ExpectedStepSeconds(heat, plan.placement, c);
    plan.current_step_s = ExpectedStepSeconds(heat, current, c);
    return plan;
  };
  // Nothing routed yet: nothing to weigh; keep what is there.
  if (!(total > 0) || n_layer == 0 || n_expert == 0) {
    ExpertPlan plan = PlanDeviceExperts(heat, current, n_slots, options);
    return finish_costs(plan);
  }
  const std::vector<std::vector<char>> resident = ResidentMask(current, n_layer, n_expert);
  const int64_t slots = std::clamp<int64_t>(n_slots, 0, n_layer * n_expert);
  const double factor = 1.0 + std::max(options.hysteresis, 0.0);
  const double min_gain = std::max(options.min_gain, 0.0);

  // The plan with hysteresis; and, when that differs, the reorganisation candidate: the same
  // order of experts within each layer (residents kept unless clearly hotter ones wait), the
  // newcomers credited in full when choosing how many each layer keeps. It is taken when its
  // expected step is clearly shorter: a reorganisation the newcomers' discount would block,
  // such as completing layers on near-uniform traffic, where the gain is structural.
  ExpertPlan plan;
  plan.placement = CostPlacement(heat_in, resident, n_expert, slots, c, factor, min_gain, true);
  if (factor > 1 || min_gain > 0 || options.shrink_count_noise) {
    common::ExpertPlacement free =
        CostPlacement(heat, resident, n_expert, slots, c, factor, min_gain, false);
    if (!(free == plan.placement) &&
        TakeReorganisation(ExpectedStepSeconds(heat, plan.placement, c),
                           WholeLayers(plan.placement), ExpectedStepSeconds(heat, free, c),
                           WholeLayers(free), options)) {
      plan.placement = std::move(free);
      plan.reorganised = true;
    }
  }
  Finish(plan, resident, current);
  return finish_costs(plan);
}

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

namespace {

// `plan_class(sub_heat, sub_current, c)` for each class's layers as a model of their own (see
// the per-class PlanDeviceExpertsByCost in the header), put back together.
template <typename F>
ExpertPlan PlanPerClass(const std::vector<std::vector<double>>& heat,
                        const common::ExpertPlacement& current,
                        const common::ExpertSlotClasses& classes, bool classes_ok, F plan_class) {
  const auto n_layer = static_cast<int64_t>(heat.size());
  const int64_t n_expert = heat.empty() ? 0 : static_cast<int64_t>(heat[0].size());
  const bool current_fits = internal::PlacementFits(current, n_layer, n_expert);
  ExpertPlan plan;
  plan.placement = common::ExpertPlacement::Empty(n_layer, n_expert);
  if (!classes_ok || !classes.Check(n_layer).ok()) {
    if (current_fits && common::ValidateExpertPlacement(current, classes).ok()) {
      plan.placement = current;
    }
    plan.changed = !(current_fits && plan.placement == current);
    return plan;
  }
  for (int32_t c = 0; c < classes.n_class(); ++c) {
    const std::vector<int64_t> layers = classes.LayersOf(c);
    if (layers.empty()) continue;
    const internal::LayerSlice slice =
        internal::SliceLayers(heat, current, current_fits, layers, n_expert);
    const ExpertPlan sub = plan_class(slice.heat, slice.current, c);
    for (size_t i = 0; i < layers.size() && i < sub.placement.device.size(); ++i) {
      plan.placement.device[static_cast<size_t>(layers[i])] = sub.placement.device[i];
    }
    plan.moves_in += sub.moves_in;
    plan.moves_out += sub.moves_out;
    plan.whole_layers += sub.whole_layers;
    plan.expected_step_s += sub.expected_step_s;
    plan.current_step_s += sub.current_step_s;
    plan.reorganised = plan.reorganised || sub.reorganised;
  }
  plan.changed = !(current_fits && plan.placement == current);
  plan.class_slots = classes.slots;
  return plan;
}

}  // namespace

ExpertPlan PlanDeviceExpertsByCost(const std::vector<std::vector<double>>& heat,
                                   const common::ExpertPlacement& current,
                                   const common::ExpertSlotClasses& classes,
                                   const std::vector<PlanCosts>& costs,
                                   const PlannerOptions& options) {
  return PlanPerClass(
      heat, current, classes, static_cast<int64_t>(costs.size()) == classes.n_class(),
      [&](const std::vector<std::vector<double>>& h, const common::ExpertPlacement& cur,
          int32_t c) {
        return PlanDeviceExpertsByCost(h, cur, classes.slots[static_cast<size_t>(c)],
                                       costs[static_cast<size_t>(c)], options);
      });
}

ExpertPlan PlanDeviceExperts(const std::vector<std::vector<double>>& heat,
                             const common::ExpertPlacement& current,
                             const common::ExpertSlotClasses& classes,
                             const PlannerOptions& options) {
  return PlanPerClass(heat, current, classes, true,
                      [&](const std::vector<std::vector<double>>& h,
                          const common::ExpertPlacement& cur, int32_t c) {
                        return PlanDeviceExperts(h, cur, classes.slots[static_cast<size_t>(c)],
                                                 options);
                      });
}

StepBySlots BestStepBySlots(const std::vector<std::vector<double>>& heat_in,
                            const common::ExpertPlacement& current, int64_t max_slots,
                            const PlanCosts& costs, const PlannerOptions& options) {
  std::vector<std::vector<double>> shrunk;
  if (options.shrink_count_noise) shrunk = ShrinkCountNoise(heat_in);
  const std::vector<std::vector<double>>& heat = options.shrink_count_noise ? shrunk : heat_in;
  const internal::HeatShape shape = internal::ShapeOf(heat);
  const int64_t n_layer = shape.n_layer, n_expert = shape.n_expert;
  const double total = shape.total;
  const int64_t slots = std::clamp<int64_t>(max_slots, 0, n_layer * n_expert);
  StepBySlots out;
  if (!(total > 0) || n_layer == 0 || n_expert == 0) {
    out.discounted.assign(static_cast<size_t>(slots) + 1, 0.0);
    out.full = out.discounted;
    return out;
  }
  PlanCosts c = costs;
  c.k = std::clamp<int64_t>(c.k, 1, n_expert);
  const std::vector<std::vector<char>> resident = ResidentMask(current, n_layer, n_expert);
  const double factor = 1.0 + std::max(options.hysteresis, 0.0);
  const double min_gain = std::max(options.min_gain, 0.0);
  out.discounted = LeastCostBySlots(heat_in, resident, n_expert, slots, c, factor, min_gain, true);
  out.full = LeastCostBySlots(heat, resident, n_expert, slots, c, factor, min_gain, false);
  return out;
}

}  // namespace deltaserve::router
