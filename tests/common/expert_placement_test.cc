#include "common/expert_placement.h"

#include <gtest/gtest.h>

namespace deltaserve::common {
namespace {

TEST(ExpertPlacementTest, ValidPlacementPasses) {
  ExpertPlacement p = ExpertPlacement::Empty(3, 8);
  p.device[0] = {1, 5};
  p.device[2] = {0, 7};
  EXPECT_TRUE(ValidateExpertPlacement(p, 4).ok());
  EXPECT_EQ(p.size(), 4);
  EXPECT_TRUE(p.Contains(2, 7));
  EXPECT_FALSE(p.Contains(1, 7));
  EXPECT_FALSE(p.Contains(3, 0));
}

TEST(ExpertPlacementTest, RefusalsNameTheLayerAndExpert) {
  ExpertPlacement p = ExpertPlacement::Empty(3, 8);
  p.device[1] = {2, 8};
  absl::Status s = ValidateExpertPlacement(p, 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "layer 1: expert 8 is not in [0, 8)");

  p.device[1] = {-1};
  EXPECT_EQ(ValidateExpertPlacement(p, 10).message(), "layer 1: expert -1 is not in [0, 8)");

  p.device[1] = {3, 3};
  EXPECT_EQ(ValidateExpertPlacement(p, 10).message(), "layer 1: expert 3 is listed twice");

  p.device[1] = {4, 3};
  EXPECT_EQ(ValidateExpertPlacement(p, 10).message(),
            "layer 1: expert 3 is out of ascending order");

  p.device.resize(2);
  EXPECT_EQ(ValidateExpertPlacement(p, 10).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExpertPlacementTest, OverBudgetIsResourceExhausted) {
  ExpertPlacement p = ExpertPlacement::Empty(2, 4);
  p.device[0] = {0, 1, 2};
  p.device[1] = {3};
  absl::Status s = ValidateExpertPlacement(p, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "4 experts in device memory, the budget holds 3");
  EXPECT_TRUE(ValidateExpertPlacement(p, 4).ok());
}

TEST(ExpertPlacementTest, EvenSpreadGivesEarlyLayersTheRemainder) {
  ExpertPlacement p = EvenExpertPlacement(3, 4, 7);  // 7 = 3 + 2 + 2
  EXPECT_EQ(p.device[0], (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p.device[1], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(p.device[2], (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(ValidateExpertPlacement(p, 7).ok());
  // More slots than experts: every expert, no more.
  EXPECT_EQ(EvenExpertPlacement(2, 3, 100).size(), 6);
  EXPECT_EQ(EvenExpertPlacement(2, 3, 0).size(), 0);
}

TEST(ExpertPlacementTest, HottestTakesTheTopPairsAcrossLayersTiesToLowerIds) {
  const std::vector<std::vector<double>> heat = {{5, 1, 9, 0}, {9, 9, 2, 7}};
  ExpertPlacement p = HottestExpertPlacement(heat, 4);
  // 9 (0,2), 9 (1,0), 9 (1,1), then 7 (1,3).
  EXPECT_EQ(p.device[0], (std::vector<int32_t>{2}));
  EXPECT_EQ(p.device[1], (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(HottestExpertPlacement(heat, 5).device[0], (std::vector<int32_t>{0, 2}));
  // Ties at the cut: the lower layer, then the lower expert.
  const std::vector<std::vector<double>> flat = {{3, 3}, {3, 3}};
  EXPECT_EQ(HottestExpertPlacement(flat, 1).device[0], (std::vector<int32_t>{0}));
  EXPECT_EQ(HottestExpertPlacement(flat, 3).device[1], (std::vector<int32_t>{0}));
  EXPECT_EQ(HottestExpertPlacement(heat, 100).size(), 8);
}

TEST(ExpertPlacementTest, DescribeIsShort) {
  ExpertPlacement p = ExpertPlacement::Empty(6, 8);
  p.device[0] = {1, 2};
  EXPECT_EQ(DescribeExpertPlacement(p, 2),
            "layer 0: 2 experts (1, 2); layer 1: 0 experts; ... (2 experts in 6 layers)");
}

// Two sizes sharing 10,000 bytes: layers 0 and 2 of 1,000-byte experts, layer 1 of 2,000-byte
// ones, 8 experts per layer; the division now: 4 small slots, 3 large (4,000 + 6,000 B).
ExpertSlotClasses TwoSizes() {
  ExpertSlotClasses c;
  c.layer_class = {0, 1, 0};
  c.slot_bytes = {1000, 2000};
  c.slots = {4, 3};
  return c;
}

TEST(ExpertPlacementTest, SplitForPlacementKeepsADivisionThatHoldsThePlacement) {
  ExpertPlacement p = ExpertPlacement::Empty(3, 8);
  p.device[0] = {0, 1};
  p.device[1] = {2, 3, 4};
  p.device[2] = {5, 6};
  absl::StatusOr<ExpertSlotClasses> split = SplitForPlacement(p, TwoSizes(), 10'000);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(*split, TwoSizes());
}

TEST(ExpertPlacementTest, SplitForPlacementRedividesTheBytes) {
  // Eight small experts (a whole layer 0) and one large: 10,000 B, more small slots than the
  // division has; the bytes hold it: 8 small slots, 1 large.
  ExpertPlacement p = ExpertPlacement::Empty(3, 8);
  p.device[0] = {0, 1, 2, 3, 4, 5, 6, 7};
  p.device[1] = {0};
  absl::StatusOr<ExpertSlotClasses> split = SplitForPlacement(p, TwoSizes(), 10'000);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->slots, (std::vector<int64_t>{8, 1}));
  EXPECT_EQ(split->layer_class, TwoSizes().layer_class);
  EXPECT_TRUE(ValidateExpertPlacement(p, *split).ok());
  // Six small and one large: 8,000 B, 2,000 left: back towards the old division first (the
  // large class had 3, gets one more), so 6 and 2.
  p.device[0] = {0, 1, 2, 3, 4, 5};
  split = SplitForPlacement(p, TwoSizes(), 10'000);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->slots, (std::vector<int64_t>{6, 2}));
  // Five small and one large, 3,000 left: the large class back to 2 (1,000 left), then one
  // more small slot: 6 and 2, every byte that holds a slot used.
  p.device[0] = {0, 1, 2, 3, 4};
  split = SplitForPlacement(p, TwoSizes(), 10'000);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->slots, (std::vector<int64_t>{6, 2}));
  EXPECT_LE(split->device_bytes(), 10'000u);
}

TEST(ExpertPlacementTest, SplitForPlacementRefusesMoreBytesThanTheBudget) {
  // Nine small and one large: 11,000 B of 10,000.
  ExpertPlacement p = ExpertPlacement::Empty(3, 8);
  p.device[0] = {0, 1, 2, 3, 4, 5, 6, 7};
  p.device[2] = {0};
  p.device[1] = {0};
  absl::StatusOr<ExpertSlotClasses> split = SplitForPlacement(p, TwoSizes(), 10'000);
  EXPECT_EQ(split.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(split.status().message(),
            "10 experts in device memory take 11000 B of slots, the budget holds 10000 B");
  // A bad placement is InvalidArgument, as ValidateExpertPlacement says.
  p.device[1] = {9};
  EXPECT_EQ(SplitForPlacement(p, TwoSizes(), 10'000).status().code(),
            absl::StatusCode::kInvalidArgument);
  // One size: said in experts.
  ExpertPlacement one = ExpertPlacement::Empty(3, 8);
  one.device[0] = {0, 1, 2, 3, 4, 5, 6, 7};
  one.device[1] = {0, 1, 2};
  EXPECT_EQ(
      SplitForPlacement(one, ExpertSlotClasses::Single(3, 10, 1000), 10'500).status().message(),
      "11 experts in device memory, the budget holds 10");
  // Classes of another model too.
  ExpertPlacement four = ExpertPlacement::Empty(4, 8);
  EXPECT_EQ(SplitForPlacement(four, TwoSizes(), 10'000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deltaserve::common
