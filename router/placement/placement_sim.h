// The placement simulator's cost model (docs/moe_placement.md, "The placement simulator"): replays
// the routing of recorded decode steps through a model of one machine and reports the decode
// tokens per second each expert placement policy would give. Pure functions, no I/O:
// deltaserve-placement-sim reads the trace and the profiles and prints what these return.
//
// One decode step, per MoE layer l, for the distinct experts U the step's tokens chose there,
// split into device-resident D and host-resident H:
//
//   gpu_pre  = dense_bytes[l] / gpu_bw                 attention or DeltaNet, norms, router
//   gpu_moe  = (shared_bytes[l] + |D| * expert_bytes[l]) / gpu_bw
//   host     = 2 * n_tokens * n_embd * 4 / pcie_bw     activations down, partial sums up (f32)
//            + |H| * expert_bytes[l] / cpu_bw          host experts' weights read once
//            + host_pairs * 2 * expert_params / cpu_flops   their arithmetic
//   layer    = gpu_pre + (H empty ? gpu_moe : max(gpu_moe, host) + layer_sync)
//
// and step = sum of layers + head_bytes / gpu_bw + copy time of expert moves this step
// (bytes / pcie_bw, serial: the worker copies between steps). Decode is memory-bound at these
// batch sizes, so bytes read over bandwidth is the model; the two tiers of a layer run at the same
// time (max, not sum) and a layer with host experts pays one synchronisation. Every policy runs on
// this same executor: the comparison is between placements, not between engines.
//
//   ASSIGN_OR_RETURN(ModelTrace t, MapTrace(trace, shape, {}));
//   SimulationResult r = SimulatePolicies(t, shape, profile, options);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/expert_placement.h"
#include "common/routing_trace.h"
#include "router/placement/expert_planner.h"

namespace deltaserve::router {

// A machine: what the cost model charges for (bytes per second, seconds).
struct MachineProfile {
  std::string name;
  double gpu_bytes_per_s = 0;   // device memory bandwidth the decode kernels reach
  double cpu_bytes_per_s = 0;   // host memory bandwidth the host expert kernels reach
  double cpu_flops = 0;         // host arithmetic for expert matvecs, flop/s
  double pcie_bytes_per_s = 0;  // host <-> device copies, one direction
  double layer_sync_s = 0;      // per layer that has host experts: copy submissions + sync
  std::string source;           // where the figures come from (printed with the results)
};

// A mixture-of-experts model as the cost model sees it: bytes read per step.
struct MoeModelShape {
  std::string name;
  int64_t n_layer = 0;
  int64_t n_expert = 0;
  int64_t k = 0;
  int64_t n_embd = 0;
  int64_t expert_params = 0;           // gate + up + down of one expert (multiply-adds per token)
  std::vector<uint64_t> expert_bytes;  // [n_layer]: one expert's gate + up + down
  std::vector<uint64_t> dense_bytes;   // [n_layer]: read before the MoE (attention/DeltaNet...)
  std::vector<uint64_t> shared_bytes;  // [n_layer]: the shared expert, beside the routed ones
  uint64_t head_bytes = 0;             // output norm and head, once per step

  // The largest layer's expert (the slot one arena for every size would need).
  uint64_t slot_bytes() const;
  // All routed experts of layer l, and of the model.
  uint64_t layer_expert_bytes(int64_t layer) const;
  uint64_t all_expert_bytes() const;
};

// InvalidArgument naming the field when a profile or shape cannot be simulated (non-positive or
// non-finite figures, per-layer lists of the wrong length, k out of range).
absl::Status ValidateProfile(const MachineProfile& p);
absl::Status ValidateShape(const MoeModelShape& s);

// A trace mapped onto a model's shape.
struct ModelTrace {
  struct Step {
    int64_t n_tokens = 0;
    bool decode = false;       // timed (n_tokens <= max_decode_tokens); else prefill: heat only
    std::vector<int32_t> ids;  // [n_layer][n_tokens][k] in the model's layers and experts
  };
  int64_t n_layer = 0;
  int64_t n_expert = 0;
  int64_t k = 0;
  std::vector<Step> steps;
  int64_t decode_steps = 0;
  int64_t decode_tokens = 0;
};

struct TraceMapping {
  // Steps of more tokens than this are prefill: their routes count as heat, their time is not
  // modelled (decode tok/s is what the simulator reports).
  int64_t max_decode_tokens = 64;
};

// Maps a recorded trace onto `shape`: model layer l replays trace layer l * n_layer_trace /
// n_layer (a trace of fewer layers repeats each of its layers over a band of model layers);
// when the expert counts differ, trace expert e becomes model expert floor((e + u) * n_expert /
// n_expert_trace) with u in [0, 1) a hash of (step, layer, token, slot), so each trace expert's
// share spreads over the model experts it covers. Ids keep the trace's k. InvalidArgument when
// the trace has no decode step.
absl::StatusOr<ModelTrace> MapTrace(const common::RoutingTrace& trace, const MoeModelShape& shape,
                                    const TraceMapping& mapping);

// What one step costs, and why.
struct StepCost {
  double seconds = 0;
  double gpu_s = 0;   // device work on the critical path (dense parts, head, device MoE)
  double host_s = 0;  // host paths that were longer than the device MoE beside them
  double sync_s = 0;
  double copy_s = 0;   // expert moves
  int64_t routed = 0;  // (token, expert) pairs
  int64_t routed_device = 0;
  int64_t host_layers = 0;  // layers that had host experts
};

// The cost of `step` with `device` ([n_layer * n_expert] flags: expert resident on the device)
// and `copy_bytes` of expert moves before it.
StepCost CostOfStep(const ModelTrace::Step& step, const MoeModelShape& shape,
                    const MachineProfile& profile, const std::vector<uint8_t>& device,
                    uint64_t copy_bytes = 0);

struct SimulationOptions {
  uint64_t expert_vram_bytes = 0;  // device bytes for routed experts (--expert-vram)
  // Decode steps at the start used to learn the static hot list and the dynamic start (both
  // start from these counts); the policies are timed over the rest. 0: a tenth of the decode
  // steps.
  int64_t warmup_steps = 0;
  // The dynamic policy (the router's controller): re-plan every interval of modelled seconds
  // from counts decayed with the half-life, with the planner's hysteresis; the worker copies at
  // most move_bytes_per_step between steps (at least one expert).
  double interval_s = 30;
  double half_life_s = 60;
  PlannerOptions planner{.shrink_count_noise = true};
  uint64_t move_bytes_per_step = uint64_t{64} << 20;
  // The machine the router's placement settings describe (its device and host bandwidths and
  // per-layer synchronisation, from which PlanCostsFor makes the planner's costs with the slot
  // size); none: the simulated machine itself, i.e. a router configured for this machine.
  std::optional<MachineProfile> plan_profile;
};

struct PolicyResult {
  double tok_s = 0;
  double seconds = 0;  // modelled time of the timed steps
  int64_t tokens = 0;
  double device_hit_share = 0;       // routed pairs served by device-resident experts
  double host_layer_share = 0;       // of layer-steps, those with host experts
  uint64_t device_expert_bytes = 0;  // VRAM the placement holds
  int64_t n_cpu_moe = -1;            // n_cpu_moe: the best N
  // dynamic only:
  int64_t plans = 0;          // planner runs
  int64_t plans_changed = 0;  // of those, placements that changed
  int64_t whole_layers = 0;   // layers wholly on the device in the last plan
  int64_t moves_in = 0;
  int64_t moves_out = 0;
  uint64_t bytes_moved = 0;
  double copy_seconds = 0;
  std::vector<int64_t> class_slots;  // the slots per expert size at the end
};

struct SimulationResult {
  int64_t n_slots = 0;       // experts the budget holds in device slots (all sizes)
  int64_t slot_classes = 0;  // distinct expert sizes (one slot arena each)
  int64_t warmup_steps = 0;
  int64_t timed_steps = 0;
  // dynamic is what the router runs (PlanDeviceExpertsWithSplit with the plan profile's costs:
  // the sizes' split follows the plan, within the start-up split's bytes).
  PolicyResult all_cpu, n_cpu_moe, static_hot, dynamic;
  // Every expert in device memory, whatever the budget: the bound the others approach.
  PolicyResult all_gpu;
  // The same loop planning hottest experts first without a cost model (PlanDeviceExperts):
  // what a per-expert cache does, for comparison.
  PolicyResult dynamic_per_expert;
  // The same loop with the sizes' split fixed at start-up (PlanDeviceExpertsByCost within
  // SlotClassesFor's split): what the plan's choice of the split gains.
  PolicyResult dynamic_fixed_split;
  // n_cpu_moe for every N that fits the budget: (N, tok/s).
  std::vector<std::pair<int64_t, double>> n_cpu_moe_sweep;
};

// Runs the four policies over `trace` (mapped onto `shape`). InvalidArgument on a bad profile,
// shape or a trace of another shape.
absl::StatusOr<SimulationResult> SimulatePolicies(const ModelTrace& trace,
                                                  const MoeModelShape& shape,
                                                  const MachineProfile& profile,
                                                  const SimulationOptions& options);

// The worker's device slots for `shape` (worker/engine/expert_tiers.h): one class per distinct
// expert size (expert_bytes), the budget split by common::SplitExpertBudget. The static and
// dynamic policies place experts within these slots.
common::ExpertSlotClasses SlotClassesFor(const MoeModelShape& shape, uint64_t expert_vram_bytes);

// The same policies' placements, exposed for tests: every expert of layers >= n on the device
// (llama.cpp --n-cpu-moe n), and its device bytes.
std::vector<uint8_t> NCpuMoePlacement(const MoeModelShape& shape, int64_t n);
uint64_t NCpuMoeDeviceBytes(const MoeModelShape& shape, int64_t n);

}  // namespace deltaserve::router
