// PlanDeviceExperts (router/placement/expert_planner.h): budget, free-slot filling, hysteresis,
// ties, shrinking budgets and inputs that do not fit the heat's shape.
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
}

}  // namespace
}  // namespace deltaserve::router
