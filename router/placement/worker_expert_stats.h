// A worker's ExpertStats as the placement controller uses them (placement_controller.h): checked
// against the bounds of a placement record, since they come over the network, and turned into the
// worker's current device set and its heat; and a plan as a SetExpertPlacement request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/expert_placement.h"
#include "deltaserve/v1/worker.pb.h"

namespace deltaserve::router {

// `current` and `heat` ([n_layer][n_expert]) from `stats`; NaN, infinite or negative counts read
// as 0, device expert lists are sorted and made unique, a layer not listed is empty. An
// InvalidArgument starting "bad statistics: " when the shape is out of the record's bounds
// (common/expert_placement_record.h), a layer index is out of range or repeated, a layer has
// neither n_expert counts nor none (none: all 0), or a device expert id is out of range.
absl::Status ReadWorkerExpertStats(const deltaserve::v1::ExpertStats& stats,
                                   common::ExpertPlacement& current,
                                   std::vector<std::vector<double>>& heat);

// The worker's device slots per expert size (stats.slot_classes) when they cover every one of
// stats.n_layer layers exactly once with non-negative slots; otherwise (a worker that predates
// them, or a report that does not add up) one class of device_slots slots of slot_bytes for
// every layer, the budget such a worker enforces.
common::ExpertSlotClasses SlotClassesOf(const deltaserve::v1::ExpertStats& stats);

// The request that makes `placement` the worker's target: every layer with device experts
// (a layer not listed keeps none), with `generation`.
deltaserve::v1::SetExpertPlacementRequest PushRequest(const std::string& model,
                                                      const common::ExpertPlacement& placement,
                                                      uint64_t generation);

}  // namespace deltaserve::router
