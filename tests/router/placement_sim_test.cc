// The placement simulator's cost model (router/placement/placement_sim.h) on cases small enough
// to compute by hand, the four policies on traces built to favour or defeat each, the trace
// mapping, synthetic Zipf traces and the built-in inputs (profiles, model shapes).
#include "router/placement/placement_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "absl/strings/match.h"
#include "router/placement/placement_sim_inputs.h"
#include "router/placement/placement_sim_trace.h"

namespace deltaserve::router {
namespace {

// Bandwidths and sizes chosen so each term is a round number of seconds:
//   dense 1000 B at 1000 B/s = 1 s per layer; an expert 100 B: 0.1 s on the GPU, 1 s on the
//   host (100 B/s); a host (token, expert) pair 2 * 5 / 10 = 1 s of arithmetic; activations
//   2 * tokens * 1 * 4 B / 8 B/s = 1 s per token; sync 0.5 s; head 500 B = 0.5 s.
MachineProfile HandProfile() {
  MachineProfile p;
  p.name = "hand";
  p.gpu_bytes_per_s = 1000;
  p.cpu_bytes_per_s = 100;
  p.cpu_flops = 10;
  p.pcie_bytes_per_s = 8;
  p.layer_sync_s = 0.5;
  return p;
}

MoeModelShape HandShape(int64_t n_layer = 2, int64_t n_expert = 4, int64_t k = 2) {
  MoeModelShape s;
  s.name = "hand";
  s.n_layer = n_layer;
  s.n_expert = n_expert;
  s.k = k;
  s.n_embd = 1;
  s.expert_params = 5;
  s.expert_bytes.assign(n_layer, 100);
  s.dense_bytes.assign(n_layer, 1000);
  s.shared_bytes.assign(n_layer, 0);
  s.head_bytes = 500;
  return s;
}

ModelTrace::Step Step(std::vector<int32_t> ids, int64_t n_tokens = 1) {
  return {n_tokens, true, std::move(ids)};
}

std::vector<uint8_t> Device(const MoeModelShape& s, std::initializer_list<std::pair<int, int>> on) {
  std::vector<uint8_t> d(s.n_layer * s.n_expert, 0);
  for (auto [l, e] : on) d[l * s.n_expert + e] = 1;
  return d;
}

TEST(PlacementCostTest, AllOnDeviceIsDenseExpertsAndHead) {
  const MoeModelShape s = HandShape();
  // Layer 0 chose experts 0 and 1, layer 1 experts 2 and 3.
  const StepCost c = CostOfStep(Step({0, 1, 2, 3}), s, HandProfile(), NCpuMoePlacement(s, 0));
  // Per layer 1 s dense + 2 experts * 0.1 s; head 0.5 s.
  EXPECT_DOUBLE_EQ(c.seconds, 2 * (1 + 0.2) + 0.5);
  EXPECT_EQ(c.routed, 4);
  EXPECT_EQ(c.routed_device, 4);
  EXPECT_EQ(c.host_layers, 0);
  EXPECT_DOUBLE_EQ(c.sync_s, 0);
}

TEST(PlacementCostTest, AHostExpertCostsItsPathAndOneSync) {
  const MoeModelShape s = HandShape();
  // Layer 1: expert 2 on the device (0.1 s on the GPU), expert 3 on the host: activations 1 s
  // + weights 1 s + one pair 1 s = 3 s, longer than the device side, then 0.5 s of sync.
  const StepCost c =
      CostOfStep(Step({0, 1, 2, 3}), s, HandProfile(), Device(s, {{0, 0}, {0, 1}, {1, 2}}));
  EXPECT_DOUBLE_EQ(c.seconds, 1.2 + (1 + 3 + 0.5) + 0.5);
  EXPECT_DOUBLE_EQ(c.host_s, 3);
  EXPECT_DOUBLE_EQ(c.sync_s, 0.5);
  EXPECT_DOUBLE_EQ(c.gpu_s, 1.2 + 1 + 0.5);
  EXPECT_EQ(c.routed_device, 3);
  EXPECT_EQ(c.host_layers, 1);
}

TEST(PlacementCostTest, TheTiersOverlapTheLongerOneCounts) {
  // The device side made longer than the host side: big shared expert (2000 B = 2 s).
  MoeModelShape s = HandShape();
  s.shared_bytes = {2000, 2000};
  const StepCost c =
      CostOfStep(Step({0, 1, 2, 3}), s, HandProfile(), Device(s, {{0, 0}, {0, 1}, {1, 2}}));
  // Layer 0: 1 + 2 + 0.2; layer 1: 1 + max(2 + 0.1, 3) + 0.5; head 0.5.
  EXPECT_DOUBLE_EQ(c.seconds, 3.2 + 4.5 + 0.5);
  s.shared_bytes = {5000, 5000};
  const StepCost d =
      CostOfStep(Step({0, 1, 2, 3}), s, HandProfile(), Device(s, {{0, 0}, {0, 1}, {1, 2}}));
  // Layer 1's device side (5.1 s) is now the longer: the host path adds only the sync.
  EXPECT_DOUBLE_EQ(d.seconds, 6.2 + (1 + 5.1 + 0.5) + 0.5);
  EXPECT_DOUBLE_EQ(d.host_s, 0);
}

TEST(PlacementCostTest, AnExpertSharedByTokensIsReadOnceButComputedPerToken) {
  const MoeModelShape s = HandShape();
  // Two tokens, both on experts 0 and 1 in layer 0 (host), 2 and 3 in layer 1 (host).
  const StepCost c =
      CostOfStep(Step({0, 1, 0, 1, 2, 3, 2, 3}, 2), s, HandProfile(), NCpuMoePlacement(s, 2));
  // Per layer: activations 2 s + 2 experts read 2 s + 4 pairs 4 s = 8 s, + 0.5 sync + 1 dense.
  EXPECT_DOUBLE_EQ(c.seconds, 2 * (1 + 8 + 0.5) + 0.5);
  EXPECT_EQ(c.routed, 8);
}

TEST(PlacementCostTest, CopiesAreChargedOverPcie) {
  const MoeModelShape s = HandShape();
  const StepCost c = CostOfStep(Step({0, 1, 2, 3}), s, HandProfile(), NCpuMoePlacement(s, 0), 16);
  EXPECT_DOUBLE_EQ(c.copy_s, 2);
  EXPECT_DOUBLE_EQ(c.seconds, 2.9 + 2);
}

TEST(PlacementCostTest, NCpuMoeKeepsTheFirstLayersOnTheHost) {
  MoeModelShape s = HandShape(3, 4, 2);
  s.expert_bytes = {100, 200, 300};
  const std::vector<uint8_t> d = NCpuMoePlacement(s, 1);
  EXPECT_EQ(std::accumulate(d.begin(), d.begin() + 4, 0), 0);
  EXPECT_EQ(std::accumulate(d.begin() + 4, d.end(), 0), 8);
  EXPECT_EQ(NCpuMoeDeviceBytes(s, 1), 4u * 200 + 4u * 300);
  EXPECT_EQ(NCpuMoeDeviceBytes(s, 3), 0u);
  EXPECT_EQ(s.slot_bytes(), 300u);
}

// A trace of decode steps: in each layer, every step chooses `ids_per_layer(step)`.
ModelTrace TraceOf(const MoeModelShape& s, int64_t steps,
                   const std::function<std::vector<int32_t>(int64_t step)>& ids_per_layer) {
  ModelTrace t;
  t.n_layer = s.n_layer;
  t.n_expert = s.n_expert;
  t.k = s.k;
  for (int64_t i = 0; i < steps; ++i) {
    std::vector<int32_t> ids;
    for (int64_t l = 0; l < s.n_layer; ++l) {
      const std::vector<int32_t> chosen = ids_per_layer(i);
      ids.insert(ids.end(), chosen.begin(), chosen.end());
    }
    t.steps.push_back(Step(ids));
    ++t.decode_steps;
    ++t.decode_tokens;
  }
  return t;
}

// Uniform routing (2,000 steps over 4 layers of 8 experts, k = 2) on shape `s`, simulated where
// a synchronisation (4 s) costs more than a whole layer's device reads, copies are nearly free
// (these tests are about placements) and the counts are learnt over 1,000 steps (about 1,000
// routes per expert: a short warm-up's noise looks like skew to any planner), with
// `expert_vram_bytes` of expert slots.
absl::StatusOr<SimulationResult> SimulateUniform4x8(const MoeModelShape& s,
                                                    uint64_t expert_vram_bytes) {
  absl::StatusOr<common::RoutingTrace> rec = SyntheticRoutingTrace(
      {.n_layer = 4, .n_expert = 8, .k = 2, .skew = 0, .topics = 1, .steps = 2000});
  if (!rec.ok()) return rec.status();
  absl::StatusOr<ModelTrace> t = MapTrace(*rec, s, {});
  if (!t.ok()) return t.status();
  MachineProfile p = HandProfile();
  p.layer_sync_s = 4;
  p.pcie_bytes_per_s = 8e6;
  SimulationOptions o;
  o.warmup_steps = 1000;
  o.interval_s = 100;
  o.half_life_s = 1e6;
  o.expert_vram_bytes = expert_vram_bytes;
  return SimulatePolicies(*t, s, p, o);
}

TEST(PlacementPoliciesTest, HandCaseAllCpuAndTheBestNCpuMoeWithinTheBudget) {
  const MoeModelShape s = HandShape(2, 4, 2);
  const ModelTrace t = TraceOf(s, 10, [](int64_t) { return std::vector<int32_t>{0, 1}; });
  SimulationOptions o;
  o.expert_vram_bytes = 500;  // one layer's 4 experts (400 B), not two
  o.warmup_steps = 2;
  absl::StatusOr<SimulationResult> r = SimulatePolicies(t, s, HandProfile(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->timed_steps, 8);
  // All host: per layer 1 + (1 act + 2 read + 2 pairs) + 0.5 = 6.5 s; 13.5 s per token.
  EXPECT_DOUBLE_EQ(r->all_cpu.tok_s, 1 / 13.5);
  // --n-cpu-moe 1 (layer 1's experts on the GPU, 400 B): 6.5 + 1.2 + 0.5 = 8.2 s.
  EXPECT_EQ(r->n_cpu_moe.n_cpu_moe, 1);
  EXPECT_DOUBLE_EQ(r->n_cpu_moe.tok_s, 1 / 8.2);
  EXPECT_EQ(r->n_cpu_moe.device_expert_bytes, 400u);
  EXPECT_DOUBLE_EQ(r->n_cpu_moe.device_hit_share, 0.5);
  // 500 B holds 5 slots of 100 B: the hot list is experts 0 and 1 of both layers and one more
  // (ties to the lower layer and id): every route hits, 2 * 1.2 + 0.5 s per token.
  EXPECT_EQ(r->n_slots, 5);
  EXPECT_DOUBLE_EQ(r->static_hot.device_hit_share, 1.0);
  EXPECT_DOUBLE_EQ(r->static_hot.tok_s, 1 / 2.9);
  EXPECT_DOUBLE_EQ(r->all_gpu.tok_s, 1 / 2.9);
}

TEST(PlacementPoliciesTest, DynamicFollowsAHotSetThatMovesAndStaticDoesNot) {
  const MoeModelShape s = HandShape(2, 8, 2);
  // Experts {0, 1} for 20 steps, then {6, 7}: the warm-up (5 steps) only sees the first set.
  const ModelTrace t = TraceOf(s, 200, [](int64_t i) {
    return i < 20 ? std::vector<int32_t>{0, 1} : std::vector<int32_t>{6, 7};
  });
  SimulationOptions o;
  o.expert_vram_bytes = 400;  // 4 slots: two experts per layer
  o.warmup_steps = 5;
  o.interval_s = 10;  // a plan every few steps of ~3-14 s
  o.half_life_s = 5;
  absl::StatusOr<SimulationResult> r = SimulatePolicies(t, s, HandProfile(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(r->static_hot.device_hit_share, 0.1);  // 15 of 195 steps hit
  EXPECT_GT(r->dynamic.device_hit_share, 0.8);
  EXPECT_GT(r->dynamic.tok_s, 2 * r->static_hot.tok_s);
  // It moved the four experts of the new set in and the old ones out, once.
  EXPECT_EQ(r->dynamic.moves_in, 4);
  EXPECT_EQ(r->dynamic.moves_out, 4);
  EXPECT_EQ(r->dynamic.bytes_moved, 400u);
  EXPECT_DOUBLE_EQ(r->dynamic.copy_seconds, 400.0 / 8);
  EXPECT_GE(r->dynamic.plans, r->dynamic.plans_changed);
  EXPECT_EQ(r->dynamic.plans_changed, 1);
}

TEST(PlacementPoliciesTest, OnAUniformTraceNoPolicyBeatsAllOnTheDevice) {
  const MoeModelShape s = HandShape(4, 8, 2);
  // Uniform random routing (ties in the counts would make even per-expert plans whole layers).
  absl::StatusOr<common::RoutingTrace> rec = SyntheticRoutingTrace(
      {.n_layer = 4, .n_expert = 8, .k = 2, .skew = 0, .topics = 1, .steps = 400});
  ASSERT_TRUE(rec.ok());
  absl::StatusOr<ModelTrace> mapped = MapTrace(*rec, s, {});
  ASSERT_TRUE(mapped.ok());
  const ModelTrace& t = *mapped;
  SimulationOptions o;
  o.expert_vram_bytes = 1600;  // half of the 32 experts
  o.interval_s = 1;            // plan from the second step on
  o.half_life_s = 1e6;         // counts over the whole trace: little noise to mistake for skew
  MachineProfile p = HandProfile();
  p.pcie_bytes_per_s = 8e6;  // moves nearly free: this is about placements, not copies
  p.layer_sync_s = 4;        // a synchronisation costs more than a host expert
  absl::StatusOr<SimulationResult> r = SimulatePolicies(t, s, p, o);
  ASSERT_TRUE(r.ok());
  for (const PolicyResult* p : {&r->all_cpu, &r->n_cpu_moe, &r->static_hot, &r->dynamic}) {
    EXPECT_LE(p->tok_s, r->all_gpu.tok_s);
    EXPECT_GE(p->tok_s, r->all_cpu.tok_s);
    EXPECT_LE(p->device_expert_bytes, o.expert_vram_bytes);
  }
  EXPECT_EQ(r->n_cpu_moe.n_cpu_moe, 2);
  // Per-expert plans leave host experts (and a sync) in every layer; whole layers do not. The
  // router's cost-aware plan keeps whole layers here and matches --n-cpu-moe (equal expert
  // sizes); its first step still runs on the warm-up's per-expert placement (one of 360).
  EXPECT_LT(r->dynamic_per_expert.tok_s, r->n_cpu_moe.tok_s);
  EXPECT_EQ(r->dynamic.whole_layers, 2);
  EXPECT_GT(r->dynamic.tok_s, r->dynamic_per_expert.tok_s);
  EXPECT_GT(r->dynamic.tok_s, 0.97 * r->n_cpu_moe.tok_s);
}

TEST(PlacementPoliciesTest, OnAUniformTraceTheRoutersPlanIsNeverBelowNCpuMoe) {
  // 4 layers of 8 equally sized experts, uniform routing; a synchronisation (4 s) costs more
  // than a whole layer's device reads (0.2 s), so whole layers are worth keeping. The counts
  // are learnt over 1,000 steps (about 1,000 routes per expert): a short warm-up's noise looks
  // like skew to any planner.
  const MoeModelShape s = HandShape(4, 8, 2);
  // Two layers' worth: the plan keeps two whole layers, as --n-cpu-moe 2 does: the same cost
  // per step but for the copies of its first plan (at most 16 experts, 0.2 ms in all).
  absl::StatusOr<SimulationResult> r = SimulateUniform4x8(s, 1600);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->n_cpu_moe.n_cpu_moe, 2);
  EXPECT_EQ(r->dynamic.whole_layers, 2);
  EXPECT_DOUBLE_EQ(r->dynamic.host_layer_share, 0.5);
  EXPECT_GE(r->dynamic.seconds, r->n_cpu_moe.seconds);
  EXPECT_LE(r->dynamic.seconds, r->n_cpu_moe.seconds + r->dynamic.copy_seconds + 1e-9);
  // Hottest experts first, whatever their layer, leaves host experts in every layer.
  EXPECT_LT(r->dynamic_per_expert.tok_s, r->n_cpu_moe.tok_s);
  // Two and a half layers' worth: --n-cpu-moe still holds two layers; the plan adds four
  // experts to a third, which then reads 1 host expert per step on average instead of 2.
  r = SimulateUniform4x8(s, 2000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->n_cpu_moe.n_cpu_moe, 2);
  EXPECT_EQ(r->dynamic.whole_layers, 2);
  EXPECT_GT(r->dynamic.tok_s, r->n_cpu_moe.tok_s);
  EXPECT_LE(r->dynamic.tok_s, r->all_gpu.tok_s);
}

TEST(PlacementPoliciesTest, TwoExpertSizesHoldExactlyTheirBytesOnAUniformTrace) {
  // As above, but layers 1 and 3 have experts of 150 bytes (Q4_K_M's Q6_K down projections):
  // 2,000 bytes hold layers 2 and 3 whole (800 + 1,200), as --n-cpu-moe 2 does. Slots per size
  // hold 8 + 8 experts (each class its share: 800 and 1,200 bytes); one slot size for every
  // layer (150) would hold 13, not two whole layers.
  MoeModelShape s = HandShape(4, 8, 2);
  s.expert_bytes = {100, 150, 100, 150};
  const common::ExpertSlotClasses classes = SlotClassesFor(s, 2000);
  EXPECT_EQ(classes.layer_class, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(classes.slot_bytes, (std::vector<uint64_t>{100, 150}));
  EXPECT_EQ(classes.slots, (std::vector<int64_t>{8, 8}));
  absl::StatusOr<SimulationResult> r = SimulateUniform4x8(s, 2000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n_slots, 16);
  EXPECT_EQ(r->slot_classes, 2);
  EXPECT_EQ(r->n_cpu_moe.n_cpu_moe, 2);
  // Within those slots the plan holds the same two layers whole, as --n-cpu-moe 2 does.
  EXPECT_EQ(r->dynamic_fixed_split.whole_layers, 2);
  EXPECT_EQ(r->dynamic_fixed_split.device_expert_bytes, 2000u);
  EXPECT_DOUBLE_EQ(r->dynamic_fixed_split.host_layer_share, 0.5);
  EXPECT_LE(r->dynamic_fixed_split.seconds,
            r->n_cpu_moe.seconds + r->dynamic_fixed_split.copy_seconds + 1e-9);
  // Dividing the bytes itself, it does better: the small layers 0 and 2 whole (1,600 bytes)
  // and two large experts of layer 1 or 3 in the 400 left (300 of them used).
  EXPECT_EQ(r->dynamic.class_slots, (std::vector<int64_t>{16, 2}));
  EXPECT_EQ(r->dynamic.whole_layers, 2);
  EXPECT_EQ(r->dynamic.device_expert_bytes, 1900u);
  EXPECT_GT(r->dynamic.tok_s, r->n_cpu_moe.tok_s);
}

TEST(PlacementPoliciesTest, ThePlanDividesTheSlotBytesBetweenSizesLikeWholeLayers) {
  // Layers 0 and 1 of 150-byte experts, 2 and 3 of 100-byte ones; 1,600 bytes: --n-cpu-moe 2
  // holds layers 2 and 3 whole. The start-up division (each size its share of the bytes)
  // gives 6 large and 7 small slots, no whole layer in either size; the plan re-divides the
  // bytes into 16 small slots and holds the same two layers whole.
  MoeModelShape s = HandShape(4, 8, 2);
  s.expert_bytes = {150, 150, 100, 100};
  const common::ExpertSlotClasses classes = SlotClassesFor(s, 1600);
  EXPECT_EQ(classes.slots, (std::vector<int64_t>{6, 7}));
  absl::StatusOr<SimulationResult> r = SimulateUniform4x8(s, 1600);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n_cpu_moe.n_cpu_moe, 2);
  EXPECT_EQ(r->dynamic.class_slots, (std::vector<int64_t>{0, 16}));
  EXPECT_EQ(r->dynamic.whole_layers, 2);
  EXPECT_DOUBLE_EQ(r->dynamic.host_layer_share, 0.5);
  EXPECT_LE(r->dynamic.seconds, r->n_cpu_moe.seconds + r->dynamic.copy_seconds + 1e-9);
  // Within the start-up division no layer can be whole: below --n-cpu-moe.
  EXPECT_EQ(r->dynamic_fixed_split.class_slots, (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(r->dynamic_fixed_split.whole_layers, 0);
  EXPECT_LT(r->dynamic_fixed_split.tok_s, r->n_cpu_moe.tok_s);
}

TEST(PlacementPoliciesTest, BadInputsAreRefused) {
  const MoeModelShape s = HandShape();
  const ModelTrace t = TraceOf(s, 4, [](int64_t) { return std::vector<int32_t>{0, 1}; });
  MachineProfile p = HandProfile();
  p.cpu_bytes_per_s = 0;
  EXPECT_TRUE(absl::StrContains(SimulatePolicies(t, s, p, {}).status().message(),
                                "cpu_bandwidth must be > 0"));
  MoeModelShape bad = s;
  bad.expert_bytes.pop_back();
  EXPECT_TRUE(absl::StrContains(SimulatePolicies(t, bad, HandProfile(), {}).status().message(),
                                "one per layer"));
  const MoeModelShape other = HandShape(3);
  EXPECT_FALSE(SimulatePolicies(t, other, HandProfile(), {}).ok());
}

common::RoutingTrace RecordedTrace(int64_t n_layer, int64_t n_expert, int64_t k,
                                   std::vector<std::pair<int64_t, std::vector<int32_t>>> steps) {
  common::RoutingTrace t;
  t.header = {n_layer, n_expert, k, {}, "test"};
  for (auto& [n_tokens, ids] : steps) {
    common::RoutingStep st;
    st.n_tokens = n_tokens;
    st.ids = std::move(ids);
    t.steps.push_back(std::move(st));
  }
  return t;
}

TEST(MapTraceTest, LayersRepeatOverBandsAndPrefillIsNotTimed) {
  const MoeModelShape s = HandShape(4, 4, 2);
  // Trace of 2 layers: layer 0 chose {0, 1}, layer 1 {2, 3}; a 3-token pass is prefill here.
  const common::RoutingTrace rec =
      RecordedTrace(2, 4, 2, {{1, {0, 1, 2, 3}}, {3, {0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3}}});
  absl::StatusOr<ModelTrace> t = MapTrace(rec, s, {.max_decode_tokens = 2});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->steps.size(), 2u);
  EXPECT_EQ(t->steps[0].ids, (std::vector<int32_t>{0, 1, 0, 1, 2, 3, 2, 3}));
  EXPECT_TRUE(t->steps[0].decode);
  EXPECT_FALSE(t->steps[1].decode);
  EXPECT_EQ(t->decode_steps, 1);
  // Only prefill: nothing to time.
  const common::RoutingTrace only_prefill =
      RecordedTrace(2, 4, 2, {{3, std::vector<int32_t>(12, 0)}});
  EXPECT_TRUE(absl::StrContains(
      MapTrace(only_prefill, s, {.max_decode_tokens = 2}).status().message(), "no decode step"));
}

TEST(MapTraceTest, ExpertIdsScaleOntoAnotherExpertCount) {
  const MoeModelShape s = HandShape(1, 256, 2);
  std::vector<std::pair<int64_t, std::vector<int32_t>>> steps;
  for (int i = 0; i < 400; ++i) steps.push_back({1, {0, 7}});
  absl::StatusOr<ModelTrace> t = MapTrace(RecordedTrace(1, 8, 2, steps), s, {});
  ASSERT_TRUE(t.ok());
  // Trace expert 0 covers model experts [0, 32), expert 7 covers [224, 256), spread evenly.
  std::set<int32_t> low, high;
  for (const auto& st : t->steps) {
    EXPECT_GE(st.ids[0], 0);
    EXPECT_LT(st.ids[0], 32);
    EXPECT_GE(st.ids[1], 224);
    EXPECT_LT(st.ids[1], 256);
    low.insert(st.ids[0]);
    high.insert(st.ids[1]);
  }
  EXPECT_GT(low.size(), 28u);
  EXPECT_GT(high.size(), 28u);
}

TEST(SyntheticTraceTest, SkewConcentratesRoutesAndTheSeedFixesTheTrace) {
  auto top_share = [](const common::RoutingTrace& t, int64_t n_top) {
    std::vector<int64_t> count(t.header.n_expert, 0);
    for (const auto& st : t.steps) {
      for (int64_t j = 0; j < t.header.k; ++j) ++count[st.ids[j]];  // layer 0
    }
    std::sort(count.rbegin(), count.rend());
    return static_cast<double>(std::accumulate(count.begin(), count.begin() + n_top, int64_t{0})) /
           static_cast<double>(std::accumulate(count.begin(), count.end(), int64_t{0}));
  };
  SyntheticTraceOptions o{
      .n_layer = 2, .n_expert = 64, .k = 4, .skew = 0, .topics = 1, .steps = 4000};
  absl::StatusOr<common::RoutingTrace> uniform = SyntheticRoutingTrace(o);
  ASSERT_TRUE(uniform.ok());
  // 16 of 64 experts: a quarter of the routes when uniform.
  EXPECT_NEAR(top_share(*uniform, 16), 0.25, 0.04);
  o.skew = 1.2;
  absl::StatusOr<common::RoutingTrace> skewed = SyntheticRoutingTrace(o);
  ASSERT_TRUE(skewed.ok());
  EXPECT_GT(top_share(*skewed, 16), 0.6);
  // Same options, same trace; the k ids of a token are distinct.
  EXPECT_EQ(SyntheticRoutingTrace(o)->steps, skewed->steps);
  for (const auto& st : skewed->steps) {
    std::set<int32_t> distinct(st.ids.begin(), st.ids.begin() + 4);
    EXPECT_EQ(distinct.size(), 4u);
  }
  o.topics = 0;
  EXPECT_FALSE(SyntheticRoutingTrace(o).ok());
}

TEST(PlacementInputsTest, PresetShapesAreTheQ4KMBytesOfTheirTensors) {
  absl::StatusOr<MoeModelShape> s = LoadModelShape("35b-a3b");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->n_layer, 40);
  EXPECT_EQ(s->n_expert, 256);
  EXPECT_EQ(s->k, 8);
  // gate and up: 2048 x 512 in Q4_K (144 bytes per 256 values) = 589,824 bytes each; down
  // 512 x 2048 in Q6_K (210 per 256) = 860,160 on layers with more bits (layer 0: the first
  // eighth), else Q4_K.
  EXPECT_EQ(s->expert_bytes[0], 2 * 589824u + 860160u);
  EXPECT_EQ(s->expert_bytes[5], 3 * 589824u);
  EXPECT_EQ(s->slot_bytes(), 2 * 589824u + 860160u);
  EXPECT_EQ(s->expert_params, 3 * 2048 * 512);
  // Shared expert (512 wide) plus its 2048-value gate in f32: 589,824 * 2 + 860,160 + 8,192.
  EXPECT_EQ(s->shared_bytes[0], 2 * 589824u + 860160u + 2048u * 4);
  absl::StatusOr<MoeModelShape> big = LoadModelShape("122b-a10b");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->n_layer, 48);
  EXPECT_TRUE(absl::StrContains(LoadModelShape("9b").status().message(), "unknown model"));
}

TEST(PlacementInputsTest, ProfilesFromJsonOverrideABuiltInOrStandAlone) {
  absl::StatusOr<MachineProfile> p =
      ParseProfileJson(R"({"base": "rtx4090", "cpu_bandwidth_gbs": 50})", "mine.json");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->cpu_bytes_per_s, 50e9);
  EXPECT_DOUBLE_EQ(p->gpu_bytes_per_s, 1008e9);
  EXPECT_TRUE(absl::StrContains(
      ParseProfileJson(R"({"gpu_bandwidth_gbs": 100})", "x.json").status().message(),
      "cpu_bandwidth must be > 0"));
  EXPECT_TRUE(absl::StrContains(
      ParseProfileJson(R"({"base": "rtx4090", "layer_sync_us": "fast"})", "x.json")
          .status()
          .message(),
      "\"layer_sync_us\" must be a number"));
  EXPECT_TRUE(absl::StrContains(ParseProfileJson("[1, 2", "x.json").status().message(),
                                "not a JSON object"));
  EXPECT_EQ(LoadProfile("a100").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadProfile("/no/such/profile.json").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<MoeModelShape> m = ParseModelShapeJson(
      R"({"base": "35b-a3b", "n_layer": 2, "expert_bytes": [10, 20]})", "m.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->expert_bytes, (std::vector<uint64_t>{10, 20}));
  EXPECT_EQ(m->dense_bytes.size(), 2u);
  EXPECT_TRUE(absl::StrContains(
      ParseModelShapeJson(R"({"base": "35b-a3b", "expert_bytes": [1, 2]})", "m.json")
          .status()
          .message(),
      "list of 40"));
}

// The host efficiency of the built-in profiles comes from one published measurement: Qwen3.5-
// 122B-A10B with every routed expert on a Ryzen 9 7950X beside an RTX 4090 decoded 15.65 tok/s.
// Any single-token trace gives the model's all_cpu figure (8 distinct experts per layer).
TEST(PlacementInputsTest, TheRtx4090ProfileReproducesItsPublishedAllCpuMeasurement) {
  absl::StatusOr<MoeModelShape> s = LoadModelShape("122b-a10b");
  absl::StatusOr<MachineProfile> p = LoadProfile("rtx4090");
  ASSERT_TRUE(s.ok() && p.ok());
  absl::StatusOr<common::RoutingTrace> rec =
      SyntheticRoutingTrace({.n_layer = 48, .n_expert = 256, .k = 8, .skew = 0, .steps = 50});
  ASSERT_TRUE(rec.ok());
  absl::StatusOr<ModelTrace> t = MapTrace(*rec, *s, {});
  ASSERT_TRUE(t.ok());
  absl::StatusOr<SimulationResult> r = SimulatePolicies(*t, *s, *p, SimulationOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->all_cpu.tok_s, 15.65, 0.15);
}

}  // namespace
}  // namespace deltaserve::router
