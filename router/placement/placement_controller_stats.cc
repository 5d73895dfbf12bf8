// The placement loop's gathering (placement_controller.h, steps 1 and 2): per MoE model,
// GetExpertStats from every worker that serves it, the workers' entries of the model's view, the
// fleet's hit share since the previous cycle, and the workers grouped by their weights for
// placement_controller_plan.cc.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/expert_placement.h"
#include "router/placement/internal/placement_cycle.h"
#include "router/placement/placement_controller.h"
#include "router/placement/worker_expert_stats.h"

namespace deltaserve::router {

namespace v1 = ::deltaserve::v1;
using common::ExpertPlacement;

namespace {

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

}  // namespace

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

}  // namespace deltaserve::router
