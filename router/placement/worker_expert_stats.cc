#include "router/placement/worker_expert_stats.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/expert_placement_record.h"

namespace deltaserve::router {

namespace v1 = ::deltaserve::v1;
using common::ExpertPlacement;

namespace {

// Counts from the network: NaN, infinities and negatives count as nothing.
double Clean(double h) { return std::isfinite(h) && h > 0 ? h : 0.0; }

}  // namespace

absl::Status ReadWorkerExpertStats(const v1::ExpertStats& s, ExpertPlacement& current,
                                   std::vector<std::vector<double>>& heat) {
  const int64_t n_layer = s.n_layer();
  const int64_t n_expert = s.n_expert();
  if (n_layer < 1 || n_layer > common::kMaxPlacementRecordLayers || n_expert < 1 ||
      n_expert > common::kMaxPlacementRecordExperts ||
      n_layer * n_expert > common::kMaxPlacementRecordCells) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad statistics: ", n_layer, " layers x ", n_expert, " experts"));
  }
  if (s.device_slots() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad statistics: device_slots ", s.device_slots()));
  }
  current = ExpertPlacement::Empty(n_layer, n_expert);
  heat.assign(static_cast<size_t>(n_layer), std::vector<double>(static_cast<size_t>(n_expert)));
  std::vector<bool> seen(static_cast<size_t>(n_layer));
  for (const v1::LayerExperts& le : s.layers()) {
    const int64_t l = le.layer();
    if (l < 0 || l >= n_layer || seen[static_cast<size_t>(l)]) {
      return absl::InvalidArgumentError(absl::StrCat("bad statistics: layer ", l,
                                                     l >= 0 && l < n_layer ? " listed twice" : "",
                                                     " (the model has ", n_layer, ")"));
    }
    seen[static_cast<size_t>(l)] = true;
    // No counts at all: nothing routed through the layer yet.
    if (le.decayed_tokens_size() != n_expert && le.decayed_tokens_size() != 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad statistics: layer ", l, " has ",
                                                     le.decayed_tokens_size(), " counts for ",
                                                     n_expert, " experts"));
    }
    for (int64_t e = 0; e < le.decayed_tokens_size(); ++e) {
      heat[static_cast<size_t>(l)][static_cast<size_t>(e)] = Clean(le.decayed_tokens(e));
    }
    auto& d = current.device[static_cast<size_t>(l)];
    for (int32_t e : le.device_experts()) {
      if (e < 0 || e >= n_expert) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad statistics: layer ", l, " lists device expert ", e));
      }
      d.push_back(e);
    }
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
  }
  return absl::OkStatus();
}

v1::SetExpertPlacementRequest PushRequest(const std::string& model, const ExpertPlacement& p,
                                          uint64_t generation) {
  v1::SetExpertPlacementRequest req;
  req.set_model(model);
  req.set_generation(generation);
  for (size_t l = 0; l < p.device.size(); ++l) {
    if (p.device[l].empty()) continue;
    v1::LayerExperts* le = req.add_layers();
    le->set_layer(static_cast<int32_t>(l));
    for (int32_t e : p.device[l]) le->add_device_experts(e);
  }
  return req;
}

common::ExpertSlotClasses SlotClassesOf(const deltaserve::v1::ExpertStats& stats) {
  const int64_t n_layer = std::max<int32_t>(stats.n_layer(), 0);
  const common::ExpertSlotClasses single = common::ExpertSlotClasses::Single(
      n_layer, std::max<int32_t>(stats.device_slots(), 0), stats.slot_bytes());
  if (stats.slot_classes().empty()) return single;
  common::ExpertSlotClasses c;
  c.layer_class.assign(static_cast<size_t>(n_layer), -1);
  for (const deltaserve::v1::ExpertSlotClass& k : stats.slot_classes()) {
    if (k.device_slots() < 0) return single;
    const auto index = static_cast<int32_t>(c.slots.size());
    c.slots.push_back(k.device_slots());
    c.slot_bytes.push_back(k.slot_bytes());
    for (int32_t l : k.layers()) {
      if (l < 0 || l >= n_layer || c.layer_class[static_cast<size_t>(l)] != -1) return single;
      c.layer_class[static_cast<size_t>(l)] = index;
    }
  }
  return c.Check(n_layer).ok() ? c : single;
}

}  // namespace deltaserve::router
