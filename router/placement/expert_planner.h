// The router's MoE expert placement policy (docs/moe_placement.md): from decayed routed-token
// counts ("heat") per (layer, expert), which experts a worker keeps in device memory under its
// slot budget. Pure functions, no I/O: the placement controller (placement_controller.h) feeds
// them the fleet's statistics and pushes the result; deltaserve-placement-sim replays routing
// traces through the same code, so the simulator measures the policy the router runs.
//
// Two planners:
//   PlanDeviceExpertsByCost: what the router runs. Chooses per layer how many of its hottest
//     experts to keep on the device (0 .. n_expert; all of them means the layer never waits for
//     the host) so that the expected decode step is shortest under the budget, weighing a host
//     expert's read against a device expert's and the synchronisation a layer pays in a step
//     where any of its routed experts is on the host.
//   PlanDeviceExperts: hottest experts first, whatever their layer (no cost model). The
//     simulator keeps it as a baseline ("dynamic_per_expert").
//
//   PlanCosts costs = PlanCostsFor(slot_bytes, 1008e9, 37.4e9, 18e-6, /*k=*/8);
//   ExpertPlan plan = PlanDeviceExpertsByCost(heat, current, /*n_slots=*/1024, costs, options);
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
  // PlanDeviceExpertsByCost: the plan made without hysteresis replaces the plan made with it
  // when its expected step is shorter by more than this fraction (2 %): a reorganisation whose
  // gain is structural (fewer layers waiting for the host) rather than a few hotter experts.
  double replan_gain = 0.02;
  // ... or by more than this fraction (0.2 %) when it keeps more layers whole. A whole layer's
  // gain (no synchronisation) does not rest on which experts are hotter, so counting noise does
  // not make it up; on an even load, whole layers beat the same slots spread over every layer
  // by well under 1 % (which is all --n-cpu-moe gains there), and a one-off reorganisation of
  // a steady load pays for its copies within a few intervals.
  double structural_gain = 0.002;
  // PlanDeviceExpertsByCost: make the reorganisation candidate from ShrinkCountNoise(heat),
  // and weigh it against the plan with hysteresis (made from the heat as it is) on those
  // counts, so that counting noise does not pass for skew when a structure is chosen (the
  // router and the simulator set it; the reported step times are then the shrunk counts' too).
  bool shrink_count_noise = false;
};

// One planning decision.
struct ExpertPlan {
  common::ExpertPlacement placement;  // the new device set (valid for n_slots)
  int64_t moves_in = 0;               // experts entering device memory vs `current`
  int64_t moves_out = 0;
  bool changed = false;               // placement != current
  // PlanDeviceExpertsByCost only (0 otherwise): layers the plan keeps wholly on the device, and
  // the expected MoE seconds of one single-token step (ExpectedStepSeconds, no hysteresis) of
  // the plan and of `current`.
  int64_t whole_layers = 0;
  double expected_step_s = 0;
  double current_step_s = 0;
  bool reorganised = false;  // the reorganisation candidate was taken (replan_gain)
  // The per-class planners (ExpertSlotClasses): the slots of each class the plan was made
  // within (the classes' own, or the split PlanDeviceExpertsWithSplit chose). Empty otherwise.
  std::vector<int64_t> class_slots;
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

// What a single-token decode step's MoE layers cost, as the cost-aware planner models them
// (seconds; only their ratios matter). Per layer, with S the share of the layer's routes that
// go to device-resident experts (its heat shares) and P the chance that all k experts a token
// picks are on the device:
//
//   layer = P * k * device_expert_s                  every expert on the device: the device's
//         + k * (1 - S) * host_expert_s              experts read by host threads
//         + (1 - P) * layer_sync_s                   any on the host: one synchronisation
//
// When some of a layer's experts are on the host, the host's part is the longer one (a host
// expert read is ~27x a device one on the machines we model) and the device's runs beside it,
// unseen; a layer wholly on the device pays its device reads and nothing else.
struct PlanCosts {
  double device_expert_s = 0;  // one routed expert computed from device memory
  double host_expert_s = 1;    // one routed expert computed by host threads
  double layer_sync_s = 0;     // a layer with host experts in a step: waits and copies
  int64_t k = 1;               // experts each token chooses per layer
};

// The costs of experts of `expert_bytes` on a machine whose device reads experts at
// `device_bytes_per_s`, host threads at `host_bytes_per_s`, with `layer_sync_s` per split layer.
// expert_bytes 0 (unknown): a synchronisation cannot be weighed against a read, so it counts as
// 0 and the reads are per byte (the planner then weighs only reads: each layer's heat shares).
PlanCosts PlanCostsFor(uint64_t expert_bytes, double device_bytes_per_s, double host_bytes_per_s,
                       double layer_sync_s, int64_t k);

// The chance that a token's k distinct experts of a layer are all device-resident, when the m
// device-resident experts hold `share` of the layer's routes. Tokens choose k distinct experts,
// each next one among those not yet chosen in proportion to its share (what a softmax router's
// top-k of noisy logits does); each expert already chosen from the device set is taken to
// remove the device set's mean share r = share / m:
//
//   P = prod_{i < k} (share - i r) / (1 - i r)
//
// This is exactly the hypergeometric C(m, k) / C(n, k) when the n experts are equally used, 1
// when the device set holds every used expert, and 0 when it holds fewer than k equally used
// ones. On Zipf-distributed routes (exponents 0.5 to 1.5, 256 experts, k = 8, device sets of
// 16 to 250 hottest experts) it was within 0.006 of a Monte Carlo count of Gumbel top-k draws,
// and within 5 % wherever the chance exceeded 0.05; share^k was up to 1.7x too high there.
double AllOnDeviceProbability(double share, int64_t m, int64_t k);

// The expected MoE seconds of one single-token step with `placement` when each layer routes in
// proportion to its `heat` row (a layer without heat: uniformly), under `costs`.
double ExpectedStepSeconds(const std::vector<std::vector<double>>& heat,
                           const common::ExpertPlacement& placement, const PlanCosts& costs);

// The cost-aware plan. Per layer the candidates are its experts in order of heat, each layer
// keeping a prefix of that order; a dynamic programme over the layers chooses the prefix
// lengths that minimise the expected step (PlanCosts) within n_slots, which includes keeping a
// layer whole (no synchronisation) or leaving it entirely on the host.
//
// Hysteresis against `current`, as in PlanDeviceExperts: an expert not resident is ranked and
// credited for the host reads it saves at (heat - min_gain) / (1 + hysteresis), so a newcomer
// replaces a resident only when it is clearly hotter (a resident first on ties, then the lower
// id). That discount also blocks reorganisations whose gain is structural rather than in heat
// (completing a layer on near-uniform traffic moves many experts that are each no hotter than
// the ones they displace), so a second plan is made in the same order with the newcomers
// credited in full, and taken instead when its expected step is shorter by more than
// options.replan_gain. Slots the programme leaves unused (experts that save nothing) take the
// hottest remaining experts, residents first. Deterministic: ties (within rounding) give the
// lower layers more experts.
//
// Heat is cleaned as in PlanDeviceExperts; heat that is all zero (nothing routed yet) plans as
// PlanDeviceExperts does (the current set kept, free slots filled). The programme costs
// n_layer * n_slots * n_expert steps; beyond 2e8 it plans in units of several experts (the
// slots left over are then filled by heat), so a huge model still plans in well under a second.
ExpertPlan PlanDeviceExpertsByCost(const std::vector<std::vector<double>>& heat,
                                   const common::ExpertPlacement& current, int64_t n_slots,
                                   const PlanCosts& costs, const PlannerOptions& options);

// The cost-aware plan for a worker whose device slots come per expert size (common::
// ExpertSlotClasses: one arena per size, a layer's experts only in its size's slots). A step's
// cost is a sum over layers and each layer draws on one class's slots, so the plan of the whole
// model is PlanDeviceExpertsByCost of each class's layers on their own, within that class's
// slots and with `costs[c]` (the costs of experts of class c's size: PlanCostsFor its
// slot_bytes), put back together; the ExpertPlan's counts and step times are the classes' sums
// and `reorganised` says whether any class took its reorganisation. `classes` that do not fit
// `heat` (Check fails) or `costs` of another length plan nothing: the current set is kept when
// it fits the classes, else an empty placement.
ExpertPlan PlanDeviceExpertsByCost(const std::vector<std::vector<double>>& heat,
                                   const common::ExpertPlacement& current,
                                   const common::ExpertSlotClasses& classes,
                                   const std::vector<PlanCosts>& costs,
                                   const PlannerOptions& options);
// PlanDeviceExperts within each slot class likewise.
ExpertPlan PlanDeviceExperts(const std::vector<std::vector<double>>& heat,
                             const common::ExpertPlacement& current,
                             const common::ExpertSlotClasses& classes,
                             const PlannerOptions& options);

// Whether a reorganisation candidate (step `candidate_s`, `candidate_whole` whole layers)
// replaces a plan (`plan_s`, `plan_whole`): shorter by more than options.structural_gain when it
// keeps more layers whole, else by more than options.replan_gain.
bool TakeReorganisation(double plan_s, int64_t plan_whole, double candidate_s,
                        int64_t candidate_whole, const PlannerOptions& options);
// Layers of `p` with every one of their n_expert experts on the device.
int64_t WholeLayers(const common::ExpertPlacement& p);

// Routed-token counts are noisy: experts used equally show counts that differ by about the square
// root of their mean, and a plan made from them takes the noise for skew (it keeps the
// "hottest" half of each layer where whole layers would serve better; on an even load that
// costs about 1 %). Per layer this shrinks each count towards the layer's mean by the share of
// the counts' spread that counting noise explains: with m the mean and V the counts' variance
// across experts, h' = m + max(0, 1 - m / V) (h - m), taking the noise as Poisson (variance m;
// decayed counts vary less, so this errs towards even). An even load plans as even; a skewed
// one whose spread is far above the noise keeps its skew (Zipf 0.5 over 256 experts at 100
// tokens per expert: factor 0.99). The order within a layer is kept.
std::vector<std::vector<double>> ShrinkCountNoise(const std::vector<std::vector<double>>& heat);

// What PlanDeviceExpertsByCost's programme finds for `heat`'s layers with at most s slots, for
// every s = 0..max_slots (clamped to all the experts): the least modelled step (PlanCosts), as
// the plan with hysteresis weighs it (`discounted`: newcomers ranked and credited at their
// discounted heat against `current`) and as its reorganisation candidate does (`full`: the same
// order, newcomers credited in full; with shrink_count_noise, of the shrunk counts). Both are
// non-increasing in s. The split planner (expert_split_planner.h) weighs one expert size's
// slots against another's with them. Heat that is all zero gives flat curves.
struct StepBySlots {
  std::vector<double> discounted;
  std::vector<double> full;
};
StepBySlots BestStepBySlots(const std::vector<std::vector<double>>& heat,
                            const common::ExpertPlacement& current, int64_t max_slots,
                            const PlanCosts& costs, const PlannerOptions& options);

}  // namespace deltaserve::router
