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

}  // namespace
}  // namespace deltaserve::common
