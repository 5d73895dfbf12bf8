// The plan that divides a worker's slot bytes between expert sizes
// (router/placement/expert_split_planner.h): ChooseSlotSplit on curves by hand (the least sum
// within the bytes, capacities, ties towards the current division, more than two sizes),
// PlanDeviceExpertsWithSplit against the fixed division (whole layers where the fixed division
// leaves two partial ones, the budget, hysteresis, the cases that keep the division), and
// ShrinkCountNoise (expert_planner.h), which keeps counting noise from passing for skew.
#include "router/placement/expert_split_planner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace deltaserve::router {
namespace {

using common::ExpertPlacement;
using common::ExpertSlotClasses;
using Heat = std::vector<std::vector<double>>;

TEST(ChooseSlotSplitTest, TheLeastSumWithinTheBytes) {
  // Class 0: 100-byte slots, class 1: 200-byte ones, 600 bytes. Class 0 gains most from its
  // first two slots, class 1 from its first.
  const std::vector<std::vector<double>> step = {{10, 6, 3, 2.5, 2.2, 2.1, 2.0}, {10, 5, 4.5, 4.4}};
  // (s0, s1) within 600 B: (0, 3) 12.4, (2, 2) 7.5, (4, 1) 7.2, (6, 0) 12.0 and between.
  EXPECT_EQ(ChooseSlotSplit(step, {100, 200}, {6, 3}, {}, 600), (std::vector<int64_t>{4, 1}));
  // Class 0 capped at 3 slots: (3, 1) 7.5 against (2, 2) 7.5: a tie, the current division
  // (2, 2) is nearer.
  EXPECT_EQ(ChooseSlotSplit(step, {100, 200}, {3, 3}, {2, 2}, 600), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ChooseSlotSplit(step, {100, 200}, {3, 3}, {3, 1}, 600), (std::vector<int64_t>{3, 1}));
  // Nothing fits: nothing.
  EXPECT_EQ(ChooseSlotSplit(step, {100, 200}, {6, 3}, {}, 99), (std::vector<int64_t>{0, 0}));
  // One class: as many slots as fit; more than two classes or a size of 0: none chosen.
  EXPECT_EQ(ChooseSlotSplit({{3, 2, 1}}, {100}, {2}, {}, 1000), (std::vector<int64_t>{2}));
  EXPECT_TRUE(ChooseSlotSplit({{1}, {1}, {1}}, {1, 2, 3}, {1, 1, 1}, {}, 10).empty());
  EXPECT_TRUE(ChooseSlotSplit(step, {0, 200}, {6, 3}, {}, 600).empty());
}

// Four layers of 4 experts, k = 2, even heat with a little noise: layers 0 and 2 of 1,000-byte
// experts (class 0), layers 1 and 3 of 2,000-byte ones (class 1). Reading an expert costs 1 on
// the host per 1,000 bytes and a twentieth of that on the device; a layer with host experts
// pays 2 to synchronise.
const Heat kNoisyEven = {
    {101, 99, 100, 100}, {98, 102, 100, 100}, {100, 101, 99, 100}, {100, 100, 103, 97}};

std::vector<PlanCosts> Costs() {
  return {{.device_expert_s = 0.05, .host_expert_s = 1, .layer_sync_s = 2, .k = 2},
          {.device_expert_s = 0.1, .host_expert_s = 2, .layer_sync_s = 2, .k = 2}};
}

ExpertSlotClasses Proportional(uint64_t bytes) {
  return common::SplitExpertBudget({0, 1, 0, 1}, {1000, 2000}, 4, bytes);
}

TEST(SplitPlannerTest, WholeLayersWhereTheFixedDivisionLeavesTwoPartialOnes) {
  // 8,000 bytes: the fixed division is 2 small and 3 large slots (by the bytes' shares), no
  // layer whole in either size. Re-divided, they hold layers 0 and 2 whole (8 small slots).
  const ExpertSlotClasses fixed = Proportional(8000);
  ASSERT_EQ(fixed.slots, (std::vector<int64_t>{2, 3}));
  const PlannerOptions o{.shrink_count_noise = true};
  const ExpertPlan within =
      PlanDeviceExpertsByCost(kNoisyEven, ExpertPlacement{}, fixed, Costs(), o);
  EXPECT_EQ(within.whole_layers, 0);
  const ExpertPlan plan =
      PlanDeviceExpertsWithSplit(kNoisyEven, ExpertPlacement{}, fixed, Costs(), 8000, o);
  EXPECT_EQ(plan.class_slots, (std::vector<int64_t>{8, 0}));
  EXPECT_EQ(plan.placement.device,
            (std::vector<std::vector<int32_t>>{{0, 1, 2, 3}, {}, {0, 1, 2, 3}, {}}));
  EXPECT_EQ(plan.whole_layers, 2);
  // Per even layer: whole 2 x 0.05 = 0.1; empty 2 x 1 + 2 = 4 (small), 2 x 2 + 2 = 6 (large).
  EXPECT_NEAR(plan.expected_step_s, 0.1 + 6 + 0.1 + 6, 1e-9);
  EXPECT_LT(plan.expected_step_s, within.expected_step_s);
  // The worker holds it within its bytes.
  absl::StatusOr<ExpertSlotClasses> split = common::SplitForPlacement(plan.placement, fixed, 8000);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->slots, (std::vector<int64_t>{8, 0}));
  // Planned again from it, with its division, nothing changes.
  const ExpertPlan again =
      PlanDeviceExpertsWithSplit(kNoisyEven, plan.placement, *split, Costs(), 8000, o);
  EXPECT_FALSE(again.changed);
  EXPECT_EQ(again.class_slots, plan.class_slots);
}

TEST(SplitPlannerTest, TheDivisionIsKeptWhereItCannotBeChosen) {
  const ExpertSlotClasses fixed = Proportional(8000);
  const PlannerOptions o;
  const ExpertPlan within =
      PlanDeviceExpertsByCost(kNoisyEven, ExpertPlacement{}, fixed, Costs(), o);
  // No shared bytes (a worker whose division is fixed), nothing routed yet, a size unknown.
  EXPECT_EQ(
      PlanDeviceExpertsWithSplit(kNoisyEven, ExpertPlacement{}, fixed, Costs(), 0, o).placement,
      within.placement);
  const Heat cold(4, std::vector<double>(4, 0));
  EXPECT_EQ(
      PlanDeviceExpertsWithSplit(cold, ExpertPlacement{}, fixed, Costs(), 8000, o).class_slots,
      fixed.slots);
  ExpertSlotClasses unsized = fixed;
  unsized.slot_bytes[1] = 0;
  EXPECT_EQ(PlanDeviceExpertsWithSplit(kNoisyEven, ExpertPlacement{}, unsized, Costs(), 8000, o)
                .class_slots,
            fixed.slots);
  // Three sizes: planned within their division.
  ExpertSlotClasses three;
  three.layer_class = {0, 1, 2, 1};
  three.slot_bytes = {1000, 2000, 1500};
  three.slots = {1, 2, 1};
  const std::vector<PlanCosts> costs3 = {Costs()[0], Costs()[1], Costs()[0]};
  const ExpertPlan plan3 =
      PlanDeviceExpertsWithSplit(kNoisyEven, ExpertPlacement{}, three, costs3, 6500, o);
  EXPECT_EQ(plan3.class_slots, three.slots);
  EXPECT_TRUE(common::ValidateExpertPlacement(plan3.placement, three).ok());
}

TEST(SplitPlannerTest, NeverMoreBytesThanTheBudget) {
  // Skewed heat over every budget up to all the experts: the plan's slots fit the bytes and the
  // placement fills them.
  const Heat skewed = {{50, 20, 5, 1}, {40, 30, 2, 1}, {9, 8, 7, 6}, {70, 1, 1, 1}};
  for (uint64_t bytes = 0; bytes <= 12'000; bytes += 500) {
    const ExpertPlan plan = PlanDeviceExpertsWithSplit(skewed, ExpertPlacement{},
                                                       Proportional(bytes), Costs(), bytes, {});
    ASSERT_EQ(plan.class_slots.size(), 2u) << bytes;
    EXPECT_LE(plan.class_slots[0] * 1000 + plan.class_slots[1] * 2000, static_cast<int64_t>(bytes));
    absl::StatusOr<ExpertSlotClasses> split =
        common::SplitForPlacement(plan.placement, Proportional(bytes), bytes);
    EXPECT_TRUE(split.ok()) << bytes << ": " << split.status();
  }
}

TEST(ShrinkCountNoiseTest, NoiseShrinksAwaySkewStays) {
  // Spread below the Poisson noise (variance 2/3 against a mean of 100): all at the mean.
  const Heat even = ShrinkCountNoise({{101, 99, 100, 100}});
  for (double h : even[0]) EXPECT_DOUBLE_EQ(h, 100);
  // Variance 1,000 (2 x 1,500 / 3) against a mean of 50: 95 % of each count's distance from the
  // mean is kept.
  const Heat skew = ShrinkCountNoise({{50 + std::sqrt(1500.0), 50 - std::sqrt(1500.0), 50, 50}});
  EXPECT_NEAR(skew[0][0], 50 + 0.95 * std::sqrt(1500.0), 1e-9);
  EXPECT_NEAR(skew[0][1], 50 - 0.95 * std::sqrt(1500.0), 1e-9);
  // A row without counts, one expert, bad values: left as they are (bad ones as 0).
  EXPECT_EQ(ShrinkCountNoise({{0, 0}, {7}}), (Heat{{0, 0}, {7}}));
  EXPECT_EQ(ShrinkCountNoise({{NAN, -1}})[0], (std::vector<double>{0, 0}));
}

TEST(ShrinkCountNoiseTest, NoisyEvenCountsPlanAsWholeLayers) {
  // Two layers of 4 experts used equally, 4 slots, counts with noise within the Poisson spread
  // (experts 0 and 1 a little ahead in both). At face value the two "hotter" experts of each
  // layer hold 53.5 % of its routes: 2 x (0.02 + 0.93 + 0.16) = 2.22 against a whole layer and
  // an empty one, 0.1 + 2.2 = 2.3. As even counts they hold half: 2 x 1.18 = 2.37, so one whole
  // layer is the shorter step.
  const Heat noisy = {{108, 106, 94, 92}, {107, 107, 93, 93}};
  const PlanCosts c{.device_expert_s = 0.05, .host_expert_s = 1, .layer_sync_s = 0.2, .k = 2};
  PlannerOptions o;
  const ExpertPlan face_value = PlanDeviceExpertsByCost(noisy, ExpertPlacement{}, 4, c, o);
  EXPECT_EQ(face_value.whole_layers, 0);
  o.shrink_count_noise = true;
  const ExpertPlan shrunk = PlanDeviceExpertsByCost(noisy, ExpertPlacement{}, 4, c, o);
  EXPECT_EQ(shrunk.whole_layers, 1);
}

}  // namespace
}  // namespace deltaserve::router
