// MoE experts in two tiers (docs/moe_placement.md): on a worker whose backend memory is not host
// memory (CUDA, the `sim` test device) and whose expert budget (--expert-vram) holds fewer than
// all experts, each (layer, expert) of a qwen35moe model lives either in a device slot or only in
// host memory (the GGUF mapping). A forward pass runs the device-resident experts of each MoE
// layer on the backend and the host-resident ones on CPU threads at the same time, then adds the
// two partial sums: weights never cross PCIe per token, only the routed tokens' activations and
// outputs do.
//
// Device memory is one arena of `n_slots` slots of `slot_bytes` each (the largest layer's
// gate + up + down of one expert); any slot may hold any layer's expert, so the budget is one
// number for the whole model and the planner may give hot layers more experts than cold ones.
// The backend sees, per layer, expert stacks over the whole arena (WeightView::matrix_stride =
// slot_bytes) and expert ids remapped to slots; ids of experts not on that side are -1 (MoeFfn
// skips them).
//
// Moves: SetTarget records a target placement (any thread); Advance (the engine thread, between
// steps) copies experts into free slots, a bounded number of bytes per call, and switches an
// expert to its device slot only once its copy is complete; evictions take effect at once (the
// next step computes that expert on the host). A placement never changes the model's output
// beyond the backend's rounding: both tiers compute the same function.
//
//   ExpertTiers* tiers = model->expert_tiers();   // null: dense model or no tiers
//   RETURN_IF_ERROR(tiers->SetTarget(placement));  // from SetExpertPlacement
//   ... scheduler, between steps:  tiers->Advance(/*max_bytes=*/64 << 20);
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/expert_placement.h"

namespace deltaserve::worker {

// How Qwen35Model::Load places a qwen35moe model's routed experts (ignored for dense models):
//   Qwen35Model::Load(std::move(file), backend, ExpertTierOptions{...})
// and the model then answers expert_tiers() (null when there are no tiers: a host-memory
// backend, a dense model, or a budget that holds every expert, which loads every expert stack
// onto the device as before).
struct ExpertTierOptions {
  // Device bytes for routed experts (--expert-vram): n_slots = device_bytes / slot_bytes.
  // max(): every expert on the device, no tiers.
  uint64_t device_bytes = std::numeric_limits<uint64_t>::max();
  // The start-up placement (saved, or from warm-up counts); none: EvenExpertPlacement. Its
  // experts are copied into their slots during Load (counted in bytes_moved).
  std::optional<common::ExpertPlacement> initial;
  // CPU threads computing host-resident experts (0: one per core).
  int host_threads = 0;
};

// Called by Forward after each pass with every MoE layer's expert ids, [n_layer][n_tokens][k]
// (the tokens of the pass in batch order), on the engine thread: routing counts and traces
// (--record-routing). Qwen35Model::set_routing_observer.
using RoutingObserver =
    std::function<void(absl::Span<const int32_t> ids, int64_t n_tokens, int64_t k)>;

// Counters since the model was loaded (ExpertStats, the worker's /metrics).
struct ExpertTierStats {
  uint64_t routed_total = 0;   // (token, expert) pairs routed
  uint64_t routed_device = 0;  // of those, to a device-resident expert
  uint64_t moves_in = 0;       // experts whose copy into a slot completed
  uint64_t moves_out = 0;      // experts evicted from a slot
  uint64_t bytes_moved = 0;    // bytes copied into device slots (start-up placement included)
  int64_t moves_pending = 0;   // moves still needed to reach the target
  uint64_t generation = 0;     // the generation passed with the last SetTarget
};

// What SetTarget queued.
struct ExpertMoves {
  int64_t moves_in = 0;
  int64_t moves_out = 0;
  uint64_t bytes_to_copy = 0;
};

// Implemented by worker/engine/expert_tiers.cc; owned by Qwen35Model (expert_tiers()).
class ExpertTiers {
 public:
  virtual ~ExpertTiers() = default;

  virtual int64_t n_layer() const = 0;
  virtual int64_t n_expert() const = 0;
  // Device bytes of one slot, and slots in the arena (experts the budget holds).
  virtual uint64_t slot_bytes() const = 0;
  virtual int64_t n_slots() const = 0;

  // The placement the forward pass uses now (experts whose copy is complete). Any thread.
  virtual common::ExpertPlacement Current() const = 0;
  // The target the moves work towards. Any thread.
  virtual common::ExpertPlacement Target() const = 0;

  // Validates `target` (ValidateExpertPlacement against n_slots(); a shape other than the
  // model's is InvalidArgument) and makes it the target, replacing any earlier one not yet
  // reached; nothing changes on error. Any thread; returns at once.
  virtual absl::StatusOr<ExpertMoves> SetTarget(const common::ExpertPlacement& target,
                                                uint64_t generation) = 0;
  // The engine thread, between forward passes: evicts what the target no longer holds and
  // copies up to `max_bytes` of new experts into free slots (at least one expert per call when
  // one is pending, whatever `max_bytes`); an expert is used from its slot from the next pass
  // on. Returns the bytes copied.
  virtual absl::StatusOr<uint64_t> Advance(uint64_t max_bytes) = 0;

  virtual ExpertTierStats stats() const = 0;
};

}  // namespace deltaserve::worker
