// The placement planners (router/placement/expert_planner.h). PlanDeviceExperts: budget,
// free-slot filling, hysteresis, ties, shrinking budgets and inputs that do not fit the heat's
// shape. PlanDeviceExpertsByCost (what the router runs): its cost model on cases computed by
// hand, whole layers against per-expert sets, the budget, hysteresis and reorganisations, ties,
// and the same bad inputs.
#include "router/placement/expert_planner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace deltaserve::router {
namespace {

using common::ExpertPlacement;
using Heat = std::vector<std::vector<double>>;

ExpertPlacement Placement(int64_t n_layer, int64_t n_expert,
                          std::vector<std::vector<int32_t>> device) {
  ExpertPlacement p = ExpertPlacement::Empty(n_layer, n_expert);
  p.device = std::move(device);
  return p;
}

TEST(ExpertPlannerTest, EmptyCurrentFillsEveryFreeSlotWithTheHottest) {
  const Heat heat = {{1, 50, 3, 40}, {60, 2, 30, 4}};
  ExpertPlan plan = PlanDeviceExperts(heat, ExpertPlacement{}, 3, PlannerOptions{});
  EXPECT_EQ(plan.placement, Placement(2, 4, {{1, 3}, {0}}));  // heats 60, 50, 40
  EXPECT_EQ(plan.moves_in, 3);
  EXPECT_EQ(plan.moves_out, 0);
  EXPECT_TRUE(plan.changed);
  EXPECT_TRUE(common::ValidateExpertPlacement(plan.placement, 3).ok());
}

TEST(ExpertPlannerTest, NeverMoreThanTheBudget) {
  Heat heat(4, std::vector<double>(16));
  for (size_t l = 0; l < heat.size(); ++l) {
    for (size_t e = 0; e < heat[l].size(); ++e)
      heat[l][e] = static_cast<double>((l * 7 + e * 13) % 23);
  }
  // A current set larger than the budget (the worker's budget shrank) is cut to it, coldest out.
  ExpertPlacement current = common::EvenExpertPlacement(4, 16, 40);
  for (int64_t slots : {0, 1, 5, 17, 39, 40, 41, 64, 1000}) {
    ExpertPlan plan = PlanDeviceExperts(heat, current, slots, PlannerOptions{});
    EXPECT_LE(plan.placement.size(), slots) << slots;
    EXPECT_EQ(plan.placement.size(), std::min<int64_t>(slots, 64)) << slots;
    EXPECT_TRUE(common::ValidateExpertPlacement(plan.placement, slots).ok()) << slots;
    EXPECT_EQ(plan.placement.size(), current.size() + plan.moves_in - plan.moves_out) << slots;
  }
}

TEST(ExpertPlannerTest, ZeroSlotsEmptiesTheDevice) {
  const Heat heat = {{5, 6}, {7, 8}};
  ExpertPlan plan = PlanDeviceExperts(heat, Placement(2, 2, {{0}, {1}}), 0, PlannerOptions{});
  EXPECT_EQ(plan.placement, Placement(2, 2, {{}, {}}));
  EXPECT_EQ(plan.moves_out, 2);
  EXPECT_EQ(plan.moves_in, 0);
  EXPECT_TRUE(plan.changed);
}

TEST(ExpertPlannerTest, SlotsForEveryExpertHoldEveryExpert) {
  const Heat heat = {{0, 0, 1}, {0, 9, 0}};
  for (int64_t slots : {6, 7, 100}) {
    ExpertPlan plan = PlanDeviceExperts(heat, Placement(2, 3, {{2}, {}}), slots, PlannerOptions{});
    EXPECT_EQ(plan.placement, Placement(2, 3, {{0, 1, 2}, {0, 1, 2}})) << slots;
    EXPECT_EQ(plan.moves_in, 5);
    EXPECT_EQ(plan.moves_out, 0);
  }
}

TEST(ExpertPlannerTest, HysteresisKeepsANearlyEqualResident) {
  // Expert 1 is resident with heat 100; expert 0 is 20 % hotter: under the 25 % hysteresis it
  // stays out. Then the heats trade places back and forth around each other: nothing moves.
  const PlannerOptions opts{.hysteresis = 0.25, .min_gain = 1.0};
  ExpertPlacement current = Placement(1, 2, {{1}});
  for (const Heat& heat : {Heat{{120, 100}}, Heat{{100, 120}}, Heat{{124, 100}}, Heat{{90, 110}}}) {
    ExpertPlan plan = PlanDeviceExperts(heat, current, 1, opts);
    EXPECT_FALSE(plan.changed) << heat[0][0] << " vs " << heat[0][1];
    EXPECT_EQ(plan.moves_in + plan.moves_out, 0);
    current = plan.placement;
  }
  EXPECT_EQ(current, Placement(1, 2, {{1}}));
}

TEST(ExpertPlannerTest, AClearlyHotterCandidateReplacesTheColdestResident) {
  const PlannerOptions opts{.hysteresis = 0.25, .min_gain = 1.0};
  // 127 > 100 * 1.25 + 1: in. Of the residents (experts 1 and 2), 2 is the colder and leaves.
  ExpertPlan plan = PlanDeviceExperts({{127, 150, 100, 5}}, Placement(1, 4, {{1, 2}}), 2, opts);
  EXPECT_EQ(plan.placement, Placement(1, 4, {{0, 1}}));
  EXPECT_EQ(plan.moves_in, 1);
  EXPECT_EQ(plan.moves_out, 1);
  EXPECT_TRUE(plan.changed);
  // Exactly at the threshold (126) is not enough: the candidate must beat it.
  plan = PlanDeviceExperts({{126, 150, 100, 5}}, Placement(1, 4, {{1, 2}}), 2, opts);
  EXPECT_FALSE(plan.changed);
}

TEST(ExpertPlannerTest, MinGainKeepsColdNoiseFromMovingExperts) {
  // 0.3 is 3x 0.1, far beyond 25 %, but 0.2 tokens do not pay for a copy with min_gain 1.
  const PlannerOptions opts{.hysteresis = 0.25, .min_gain = 1.0};
  EXPECT_FALSE(PlanDeviceExperts({{0.3, 0.1}}, Placement(1, 2, {{1}}), 1, opts).changed);
  EXPECT_TRUE(PlanDeviceExperts({{1.2, 0.1}}, Placement(1, 2, {{1}}), 1, opts).changed);
  // Without min_gain and hysteresis, any hotter candidate wins.
  EXPECT_TRUE(PlanDeviceExperts({{0.3, 0.1}}, Placement(1, 2, {{1}}), 1,
                                PlannerOptions{.hysteresis = 0, .min_gain = 0})
                  .changed);
}

TEST(ExpertPlannerTest, SwapsAsManyAsPayAcrossLayers) {
  // Residents (layer, expert): (0,0)=10, (0,1)=20, (1,0)=30. Candidates (1,1)=100, (1,2)=40,
  // (0,2)=26. 100 beats 10, 40 beats 20 (>26), 26 does not beat 30 (<38.5).
  const PlannerOptions opts{.hysteresis = 0.25, .min_gain = 1.0};
  ExpertPlan plan =
      PlanDeviceExperts({{10, 20, 26}, {30, 100, 40}}, Placement(2, 3, {{0, 1}, {0}}), 3, opts);
  EXPECT_EQ(plan.placement, Placement(2, 3, {{}, {0, 1, 2}}));
  EXPECT_EQ(plan.moves_in, 2);
  EXPECT_EQ(plan.moves_out, 2);
}

TEST(ExpertPlannerTest, TiesGoToTheLowerLayerThenTheLowerExpert) {
  const Heat heat = {{5, 5, 5}, {5, 5, 5}};
  EXPECT_EQ(PlanDeviceExperts(heat, ExpertPlacement{}, 4, PlannerOptions{}).placement,
            Placement(2, 3, {{0, 1, 2}, {0}}));
  // The same as the start-up placement from the same counts.
  EXPECT_EQ(PlanDeviceExperts(heat, ExpertPlacement{}, 4, PlannerOptions{}).placement,
            common::HottestExpertPlacement(heat, 4));
  // A shrinking budget over equal residents keeps the lower ids.
  EXPECT_EQ(PlanDeviceExperts(heat, Placement(2, 3, {{0, 1, 2}, {0, 1, 2}}), 2, PlannerOptions{})
                .placement,
            Placement(2, 3, {{0, 1}, {}}));
  // Planning twice from the same input gives the same plan.
  const Heat mixed = {{3, 7, 7, 1}, {7, 3, 1, 7}};
  ExpertPlacement current = Placement(2, 4, {{0}, {2}});
  PlannerOptions none{.hysteresis = 0, .min_gain = 0};
  ExpertPlan a = PlanDeviceExperts(mixed, current, 3, none);
  ExpertPlan b = PlanDeviceExperts(mixed, current, 3, none);
  EXPECT_EQ(a.placement, b.placement);
  // Free slot: (0,1)=7 first; swaps: (0,2)=7 for (1,2)=1, then (1,0)=7 for (0,0)=3.
  EXPECT_EQ(a.placement, Placement(2, 4, {{1, 2}, {0}}));
}

TEST(ExpertPlannerTest, MismatchedCurrentCountsAsNothingResident) {
  const Heat heat = {{1, 9}, {8, 2}};
  // Wrong layer count, wrong expert count, a device list shorter than n_layer.
  for (const ExpertPlacement& current :
       {Placement(3, 2, {{0}, {1}, {}}), Placement(2, 4, {{0}, {1}}), Placement(2, 2, {{0}})}) {
    ExpertPlan plan = PlanDeviceExperts(heat, current, 2, PlannerOptions{});
    EXPECT_EQ(plan.placement, Placement(2, 2, {{1}, {0}}));
    EXPECT_EQ(plan.moves_in, 2);
    EXPECT_EQ(plan.moves_out, 0);
    EXPECT_TRUE(plan.changed);
  }
  // Ids out of range or repeated in an otherwise fitting current set are not resident.
  ExpertPlan plan =
      PlanDeviceExperts(heat, Placement(2, 2, {{1, 1, 7}, {-3}}), 2, PlannerOptions{});
  EXPECT_EQ(plan.placement, Placement(2, 2, {{1}, {0}}));
  EXPECT_EQ(plan.moves_in, 1);
  EXPECT_EQ(plan.moves_out, 0);
}

TEST(ExpertPlannerTest, UnchangedPlanReportsNoChange) {
  const Heat heat = {{9, 1}, {1, 9}};
  ExpertPlacement current = Placement(2, 2, {{0}, {1}});
  ExpertPlan plan = PlanDeviceExperts(heat, current, 2, PlannerOptions{});
  EXPECT_FALSE(plan.changed);
  EXPECT_EQ(plan.placement, current);
}

TEST(ExpertPlannerTest, BadHeatPlansAsZero) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  // NaN, +inf and negative counts are never preferred over a real count.
  const Heat heat = {{nan, inf, -5, 2}};
  ExpertPlan plan = PlanDeviceExperts(heat, ExpertPlacement{}, 1, PlannerOptions{});
  EXPECT_EQ(plan.placement, Placement(1, 4, {{3}}));
  // A resident with NaN heat is replaced by a real, clearly hotter candidate.
  plan = PlanDeviceExperts({{nan, 50}}, Placement(1, 2, {{0}}), 1, PlannerOptions{});
  EXPECT_EQ(plan.placement, Placement(1, 2, {{1}}));
}

TEST(ExpertPlannerTest, EmptyHeatPlansNothing) {
  ExpertPlan plan = PlanDeviceExperts({}, ExpertPlacement{}, 10, PlannerOptions{});
  EXPECT_EQ(plan.placement.size(), 0);
  EXPECT_FALSE(plan.changed);
  plan = PlanDeviceExpertsByCost({}, ExpertPlacement{}, 10, PlanCosts{}, PlannerOptions{});
  EXPECT_EQ(plan.placement.size(), 0);
  EXPECT_FALSE(plan.changed);
}

// ---- PlanDeviceExpertsByCost ----

// Round numbers: a device expert 0.1, a host expert 1, a synchronisation 2 (k = 2).
constexpr PlanCosts kCosts{.device_expert_s = 0.1, .host_expert_s = 1, .layer_sync_s = 2, .k = 2};
constexpr PlannerOptions kNoHysteresis{.hysteresis = 0, .min_gain = 0};

TEST(CostPlannerTest, AllOnDeviceProbabilityIsHypergeometricOnEvenRoutes) {
  // 16 experts used equally, 8 on the device, k = 3: C(8, 3) / C(16, 3) = 56 / 560.
  EXPECT_NEAR(AllOnDeviceProbability(0.5, 8, 3), 0.1, 1e-12);
  // 4 experts, 2 on the device, k = 2: C(2, 2) / C(4, 2) = 1 / 6.
  EXPECT_NEAR(AllOnDeviceProbability(0.5, 2, 2), 1.0 / 6, 1e-12);
  // Fewer device experts than k (used equally): never all on the device; all: always.
  EXPECT_EQ(AllOnDeviceProbability(0.25, 1, 2), 0);
  EXPECT_EQ(AllOnDeviceProbability(1, 4, 2), 1);
  EXPECT_EQ(AllOnDeviceProbability(0, 0, 2), 0);
  // k = 1: the device share itself.
  EXPECT_NEAR(AllOnDeviceProbability(0.3, 5, 1), 0.3, 1e-15);
}

TEST(CostPlannerTest, ExpectedStepSecondsByHand) {
  const Heat heat = {{10, 10, 10, 10}, {40, 40, 10, 10}};
  // Layer 0 whole: 2 device experts, 0.2 s. Layer 1 experts 0 and 1 (80 % of its routes):
  // all on the device with P = 0.8 * (0.8 - 0.4) / (1 - 0.4) = 8/15; host reads 2 * 0.2 * 1;
  // a synchronisation with 1 - P.
  const double p = 0.8 * 0.4 / 0.6;
  EXPECT_NEAR(ExpectedStepSeconds(heat, Placement(2, 4, {{0, 1, 2, 3}, {0, 1}}), kCosts),
              0.2 + (p * 0.2 + 0.4 + (1 - p) * 2), 1e-12);
  // Nothing on the device: k host reads and a synchronisation per layer.
  EXPECT_NEAR(ExpectedStepSeconds(heat, Placement(2, 4, {{}, {}}), kCosts), 2 * (2 + 2), 1e-12);
}

TEST(CostPlannerTest, EvenHeatKeepsWholeLayers) {
  // Two layers of 4 experts used equally, 4 slots. By hand (kCosts):
  //   (4, 0): layer 0 whole 0.2; layer 1 on the host 2 + 2             = 4.2
  //   (3, 1): P = 0.5: 0.1 + 0.5 + 1;  P = 0: 1.5 + 2                 = 5.1
  //   (2, 2): P = 1/6 each: 1/30 + 1 + 5/3, twice                     = 5.4
  const Heat even = {{10, 10, 10, 10}, {10, 10, 10, 10}};
  for (const PlannerOptions& o : {kNoHysteresis, PlannerOptions{}}) {
    ExpertPlan plan = PlanDeviceExpertsByCost(even, ExpertPlacement{}, 4, kCosts, o);
    EXPECT_EQ(plan.placement, Placement(2, 4, {{0, 1, 2, 3}, {}}));
    EXPECT_EQ(plan.whole_layers, 1);
    EXPECT_NEAR(plan.expected_step_s, 4.2, 1e-12);
    EXPECT_EQ(plan.moves_in, 4);
  }
  // Without a synchronisation cost the device reads of a whole layer are what counts (beside
  // host work they are hidden): (2, 2) = 2 * (0.2 / 6 + 1) = 2.067 beats (4, 0) = 2.2.
  PlanCosts no_sync = kCosts;
  no_sync.layer_sync_s = 0;
  ExpertPlan plan = PlanDeviceExpertsByCost(even, ExpertPlacement{}, 4, no_sync, kNoHysteresis);
  EXPECT_EQ(plan.placement, Placement(2, 4, {{0, 1}, {0, 1}}));
  EXPECT_EQ(plan.whole_layers, 0);
}

TEST(CostPlannerTest, SlotsPerExpertSizeArePlannedClassByClass) {
  // Four layers of 4 experts used equally; layers 0 and 2 have small experts (class 0, 4 slots),
  // layers 1 and 3 large ones (class 1, 5 slots, dearer to read on the host). Each class keeps
  // one layer whole (4.2 by hand above, per class); class 1's fifth slot takes an expert of a
  // layer on the host, as the plain planner fills free slots.
  const Heat even(4, std::vector<double>{10, 10, 10, 10});
  common::ExpertSlotClasses classes;
  classes.layer_class = {0, 1, 0, 1};
  classes.slot_bytes = {1000, 2000};
  classes.slots = {4, 5};
  PlanCosts large = kCosts;
  large.host_expert_s *= 2;
  const ExpertPlan plan =
      PlanDeviceExpertsByCost(even, ExpertPlacement{}, classes, {kCosts, large}, kNoHysteresis);
  EXPECT_TRUE(common::ValidateExpertPlacement(plan.placement, classes).ok());
  // Each class as a model of its own gives the same experts.
  const ExpertPlan small_alone = PlanDeviceExpertsByCost({even[0], even[2]}, ExpertPlacement{},
                                                         4, kCosts, kNoHysteresis);
  const ExpertPlan large_alone = PlanDeviceExpertsByCost({even[1], even[3]}, ExpertPlacement{},
                                                         5, large, kNoHysteresis);
  EXPECT_EQ(plan.placement.device[0], small_alone.placement.device[0]);
  EXPECT_EQ(plan.placement.device[2], small_alone.placement.device[1]);
  EXPECT_EQ(plan.placement.device[1], large_alone.placement.device[0]);
  EXPECT_EQ(plan.placement.device[3], large_alone.placement.device[1]);
  EXPECT_EQ(plan.placement.size(), 9);
  EXPECT_EQ(plan.placement.device[0], (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(plan.placement.device[1], (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(plan.whole_layers, 2);
  EXPECT_NEAR(plan.expected_step_s, small_alone.expected_step_s + large_alone.expected_step_s,
              1e-12);
  EXPECT_EQ(plan.moves_in, 9);
  EXPECT_TRUE(plan.changed);
  // Planned again from its own result: nothing changes.
  const ExpertPlan again =
      PlanDeviceExpertsByCost(even, plan.placement, classes, {kCosts, large}, PlannerOptions{});
  EXPECT_FALSE(again.changed);
  EXPECT_EQ(again.moves_in, 0);
  // The hottest-first planner per class respects the classes too: 9 slots, but never 5 of the
  // small class however hot its layers are.
  Heat hot_small = even;
  hot_small[0] = {90, 80, 70, 60};
  hot_small[2] = {95, 85, 75, 65};
  const ExpertPlan hottest = PlanDeviceExperts(hot_small, ExpertPlacement{}, classes, kNoHysteresis);
  EXPECT_TRUE(common::ValidateExpertPlacement(hottest.placement, classes).ok());
  EXPECT_EQ(hottest.placement.device[0].size() + hottest.placement.device[2].size(), 4u);
  EXPECT_EQ(hottest.placement.size(), 9);
  // One class of every layer is the plain planner.
  const common::ExpertSlotClasses one = common::ExpertSlotClasses::Single(4, 9, 1000);
  EXPECT_EQ(PlanDeviceExpertsByCost(even, ExpertPlacement{}, one, {kCosts}, kNoHysteresis).placement,
            PlanDeviceExpertsByCost(even, ExpertPlacement{}, 9, kCosts, kNoHysteresis).placement);
  // Classes that do not fit the heat, or costs of another length, plan nothing new.
  const ExpertPlan bad = PlanDeviceExpertsByCost(even, plan.placement, classes, {kCosts},
                                                 kNoHysteresis);
  EXPECT_EQ(bad.placement, plan.placement);
  EXPECT_FALSE(bad.changed);
  common::ExpertSlotClasses short_classes = classes;
  short_classes.layer_class.pop_back();
  EXPECT_EQ(PlanDeviceExpertsByCost(even, ExpertPlacement{}, short_classes, {kCosts, large},
                                    kNoHysteresis)
                .placement.size(),
            0);
}

TEST(CostPlannerTest, SkewedHeatKeepsEachLayersHotExperts) {
  // 80 % of each layer's routes on two experts. (2, 2): P = 8/15 each, so per layer
  // 8/15 * 0.2 + 2 * 0.2 + 7/15 * 2 = 1.44, 2.88 in all; (4, 0) is still 4.2.
  const Heat skewed = {{40, 10, 40, 10}, {10, 40, 10, 40}};
  ExpertPlan plan = PlanDeviceExpertsByCost(skewed, ExpertPlacement{}, 4, kCosts, kNoHysteresis);
  EXPECT_EQ(plan.placement, Placement(2, 4, {{0, 2}, {1, 3}}));
  EXPECT_NEAR(plan.expected_step_s, 2 * (8.0 / 15 * 0.2 + 0.4 + 7.0 / 15 * 2), 1e-12);
  EXPECT_EQ(plan.whole_layers, 0);
}

TEST(CostPlannerTest, NeverMoreThanTheBudgetAndFreeSlotsAreFilled) {
  Heat heat(5, std::vector<double>(12));
  for (size_t l = 0; l < heat.size(); ++l) {
    for (size_t e = 0; e < heat[l].size(); ++e) {
      heat[l][e] = static_cast<double>((l * 7 + e * 13) % 23);
    }
  }
  heat[2].assign(12, 0);  // a layer nothing was routed through
  const ExpertPlacement current = common::EvenExpertPlacement(5, 12, 30);
  for (int64_t slots : {0, 1, 5, 11, 12, 13, 29, 30, 31, 59, 60, 61, 1000}) {
    for (const PlannerOptions& o : {kNoHysteresis, PlannerOptions{}}) {
      ExpertPlan plan = PlanDeviceExpertsByCost(heat, current, slots, kCosts, o);
      EXPECT_EQ(plan.placement.size(), std::min<int64_t>(slots, 60)) << slots;
      EXPECT_TRUE(common::ValidateExpertPlacement(plan.placement, slots).ok()) << slots;
      EXPECT_EQ(plan.placement.size(), current.size() + plan.moves_in - plan.moves_out) << slots;
      if (slots >= current.size()) {
        EXPECT_LE(plan.expected_step_s, ExpectedStepSeconds(heat, current, kCosts) + 1e-12)
            << "with room for the current set, the plan is never slower: " << slots;
      }
    }
  }
}

TEST(CostPlannerTest, TheProgrammeFindsTheBestPrefixesOfEachLayer) {
  // Every combination of per-layer prefix lengths (in heat order) within the budget, costed
  // with ExpectedStepSeconds: none is cheaper than the plan.
  const Heat heat = {{9, 1, 5, 3}, {4, 4, 4, 4}, {12, 2, 1, 1}};
  for (const PlanCosts& c : {kCosts, PlanCosts{.device_expert_s = 0.05, .host_expert_s = 1,
                                               .layer_sync_s = 0.3, .k = 2}}) {
    for (int64_t slots = 0; slots <= 12; ++slots) {
      const ExpertPlan plan = PlanDeviceExpertsByCost(heat, ExpertPlacement{}, slots, c,
                                                      kNoHysteresis);
      double best = 1e300;
      for (int a = 0; a <= 4; ++a) {
        for (int b = 0; b <= 4; ++b) {
          for (int d = 0; d <= 4 && a + b + d <= slots; ++d) {
            ExpertPlacement p = Placement(3, 4, {{}, {}, {}});
            const std::vector<std::vector<int32_t>> order = {{0, 2, 3, 1}, {0, 1, 2, 3},
                                                             {0, 1, 2, 3}};
            const int counts[] = {a, b, d};
            for (int l = 0; l < 3; ++l) {
              p.device[l].assign(order[l].begin(), order[l].begin() + counts[l]);
              std::sort(p.device[l].begin(), p.device[l].end());
            }
            best = std::min(best, ExpectedStepSeconds(heat, p, c));
          }
        }
      }
      EXPECT_NEAR(plan.expected_step_s, best, 1e-12) << slots;
    }
  }
}

TEST(CostPlannerTest, HysteresisKeepsANearlyEqualResident) {
  // One layer, k = 1, one slot, no synchronisation: the plan is the hottest expert unless the
  // resident is within the hysteresis, exactly as PlanDeviceExperts decides.
  const PlanCosts one{.device_expert_s = 0, .host_expert_s = 1, .layer_sync_s = 0, .k = 1};
  const PlannerOptions opts{.hysteresis = 0.25, .min_gain = 1.0};
  const ExpertPlacement current = Placement(1, 3, {{1}});
  for (const Heat& heat : {Heat{{120, 100, 5}}, Heat{{124, 100, 5}}, Heat{{126, 100, 5}}}) {
    ExpertPlan plan = PlanDeviceExpertsByCost(heat, current, 1, one, opts);
    EXPECT_FALSE(plan.changed) << heat[0][0];
    EXPECT_EQ(plan.placement, current);
  }
  // 127 > 100 * 1.25 + 1: in.
  ExpertPlan plan = PlanDeviceExpertsByCost({{127, 100, 5}}, current, 1, one, opts);
  EXPECT_EQ(plan.placement, Placement(1, 3, {{0}}));
  EXPECT_EQ(plan.moves_in, 1);
  EXPECT_EQ(plan.moves_out, 1);
  // Without hysteresis the hotter one wins at once.
  EXPECT_TRUE(PlanDeviceExpertsByCost({{101, 100, 5}}, current, 1, one, kNoHysteresis).changed);
}

TEST(CostPlannerTest, AWholeLayerStaysWholeOnEvenHeatAndTiesGoToTheLowerLayer) {
  const Heat even = {{10, 10, 10, 10}, {10, 10, 10, 10}};
  // Layer 1 is whole now. Making layer 0 whole instead gains nothing: with hysteresis it stays.
  const ExpertPlacement layer1 = Placement(2, 4, {{}, {0, 1, 2, 3}});
  ExpertPlan plan = PlanDeviceExpertsByCost(even, layer1, 4, kCosts, PlannerOptions{});
  EXPECT_FALSE(plan.changed);
  EXPECT_FALSE(plan.reorganised);
  // Slightly more heat in layer 0 (5 %, within the hysteresis) does not move it either.
  plan = PlanDeviceExpertsByCost({{10.5, 10.5, 10.5, 10.5}, {10, 10, 10, 10}}, layer1, 4, kCosts,
                                 PlannerOptions{});
  EXPECT_FALSE(plan.changed);
  // Without hysteresis an exact tie gives the lower layer the experts, and the same input always
  // gives the same plan.
  plan = PlanDeviceExpertsByCost(even, layer1, 4, kCosts, kNoHysteresis);
  EXPECT_EQ(plan.placement, Placement(2, 4, {{0, 1, 2, 3}, {}}));
  EXPECT_EQ(PlanDeviceExpertsByCost(even, layer1, 4, kCosts, kNoHysteresis).placement,
            plan.placement);
  // Ties within a layer (one slot, equal heat): the lower expert id.
  EXPECT_EQ(PlanDeviceExpertsByCost({{3, 3, 3}}, ExpertPlacement{}, 1,
                                    {.host_expert_s = 1, .k = 1}, kNoHysteresis)
                .placement,
            Placement(1, 3, {{0}}));
}

TEST(CostPlannerTest, AStructuralGainTheHysteresisWouldBlockIsTaken) {
  // Even heat (100 per expert); each layer holds half its experts, as a per-expert plan of noisy
  // counts leaves it. k = 2, a device expert 0.05, a host one 1, a synchronisation 0.3. By hand:
  //   halves:          4 x (P 0.1 + 2 x 0.5 + (1 - P) 0.3), P = 0.5 x 0.375 / 0.875  = 5.029
  //   layers 0, 1 whole: 2 x 0.1 + 2 x (2 + 0.3)                                      = 4.8
  // With hysteresis each newcomer is credited (100 - 1) / 1.25 = 79.2 of its 100, which makes
  // the whole layers cost 2 x (0.1 + 2 x 0.104) + 4.6 = 5.216 > 5.029: blocked. The plan
  // without it is 4.5 % shorter (more than replan_gain, 2 %, and than structural_gain, the bar
  // of a plan with more whole layers, 0.2 %): taken.
  const Heat even(4, std::vector<double>(8, 100));
  const ExpertPlacement halves = Placement(4, 8, {{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3},
                                                  {0, 1, 2, 3}});
  const PlanCosts c{.device_expert_s = 0.05, .host_expert_s = 1, .layer_sync_s = 0.3, .k = 2};
  const ExpertPlan plan = PlanDeviceExpertsByCost(even, halves, 16, c, PlannerOptions{});
  EXPECT_TRUE(plan.reorganised);
  EXPECT_EQ(plan.placement, Placement(4, 8, {{0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7},
                                             {}, {}}));
  EXPECT_NEAR(plan.expected_step_s, 4.8, 1e-12);
  EXPECT_NEAR(plan.current_step_s, 4 * (0.5 * 0.375 / 0.875 * 0.1 + 1 +
                                        (1 - 0.5 * 0.375 / 0.875) * 0.3), 1e-12);
  // Planned again from its result, it stays.
  const ExpertPlan again = PlanDeviceExpertsByCost(even, plan.placement, 16, c, PlannerOptions{});
  EXPECT_FALSE(again.changed);
  // A structural_gain above the 4.5 % keeps the halves; replan_gain alone does not (the whole
  // layers are a structural gain).
  PlannerOptions strict;
  strict.replan_gain = 0.05;
  EXPECT_TRUE(PlanDeviceExpertsByCost(even, halves, 16, c, strict).changed);
  strict.structural_gain = 0.05;
  EXPECT_FALSE(PlanDeviceExpertsByCost(even, halves, 16, c, strict).changed);
  // With a bar of 4 % either way it is still taken; at 5 % not.
  EXPECT_TRUE(TakeReorganisation(5.029, 0, 4.8, 2, {.replan_gain = 0.04, .structural_gain = 0.04}));
  EXPECT_FALSE(TakeReorganisation(5.029, 2, 4.8, 2, {.replan_gain = 0.05, .structural_gain = 0}));
  EXPECT_TRUE(TakeReorganisation(5.029, 2, 4.8, 2, {.replan_gain = 0.04, .structural_gain = 0.5}));
}

TEST(CostPlannerTest, MismatchedCurrentAndBadHeatAsInPlanDeviceExperts) {
  const Heat heat = {{1, 9}, {8, 2}};
  const PlanCosts one{.host_expert_s = 1, .k = 1};
  for (const ExpertPlacement& current :
       {Placement(3, 2, {{0}, {1}, {}}), Placement(2, 4, {{0}, {1}}), Placement(2, 2, {{0}})}) {
    ExpertPlan plan = PlanDeviceExpertsByCost(heat, current, 2, one, PlannerOptions{});
    EXPECT_EQ(plan.placement, Placement(2, 2, {{1}, {0}}));
    EXPECT_EQ(plan.moves_in, 2);
    EXPECT_EQ(plan.moves_out, 0);
    EXPECT_TRUE(plan.changed);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  ExpertPlan plan =
      PlanDeviceExpertsByCost({{nan, inf, -5, 2}}, ExpertPlacement{}, 1, one, PlannerOptions{});
  EXPECT_EQ(plan.placement, Placement(1, 4, {{3}}));
  // Nothing routed at all: the current set is kept, free slots filled, as PlanDeviceExperts.
  const Heat zero = {{0, 0, 0}, {0, 0, 0}};
  plan = PlanDeviceExpertsByCost(zero, Placement(2, 3, {{}, {2}}), 3, kCosts, PlannerOptions{});
  EXPECT_EQ(plan.placement, PlanDeviceExperts(zero, Placement(2, 3, {{}, {2}}), 3,
                                              PlannerOptions{})
                                .placement);
  EXPECT_EQ(plan.placement.size(), 3);
}

TEST(CostPlannerTest, AHugeModelPlansInCoarserUnitsWithinTheBudget) {
  // 512 layers x 512 experts and 200,000 slots: 5e10 steps for the exact programme, far beyond
  // its bound; it plans in units of several experts and fills the rest by heat.
  Heat heat(512, std::vector<double>(512));
  for (size_t l = 0; l < heat.size(); ++l) {
    for (size_t e = 0; e < heat[l].size(); ++e) heat[l][e] = 1.0 / static_cast<double>(1 + e);
  }
  const ExpertPlan plan = PlanDeviceExpertsByCost(heat, ExpertPlacement{}, 200'000,
                                                  PlanCostsFor(1 << 20, 1e12, 4e10, 2e-5, 8),
                                                  PlannerOptions{});
  EXPECT_EQ(plan.placement.size(), 200'000);
  EXPECT_TRUE(common::ValidateExpertPlacement(plan.placement, 200'000).ok());
  // Each layer keeps its hottest experts (here the lowest ids).
  for (const auto& layer : plan.placement.device) {
    ASSERT_FALSE(layer.empty());
    EXPECT_EQ(layer.back(), static_cast<int32_t>(layer.size()) - 1);
  }
}

TEST(CostPlannerTest, CostsFromBytesAndBandwidths) {
  const PlanCosts c = PlanCostsFor(2'000'000, 1e12, 4e10, 18e-6, 8);
  EXPECT_DOUBLE_EQ(c.device_expert_s, 2e-6);
  EXPECT_DOUBLE_EQ(c.host_expert_s, 5e-5);
  EXPECT_DOUBLE_EQ(c.layer_sync_s, 18e-6);
  EXPECT_EQ(c.k, 8);
  // An unknown expert size cannot be weighed against a synchronisation.
  const PlanCosts unknown = PlanCostsFor(0, 1e12, 4e10, 18e-6, 8);
  EXPECT_EQ(unknown.layer_sync_s, 0);
  EXPECT_GT(unknown.host_expert_s, unknown.device_expert_s);
}

}  // namespace
}  // namespace deltaserve::router
