// A worker's ExpertStats as the placement controller reads them (router/placement/
// worker_expert_stats.h): the current set and heat from good statistics, every kind of bad
// statistics refused with its reason, and a plan as a SetExpertPlacement request.
#include "router/placement/worker_expert_stats.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace deltaserve::router {
namespace {

namespace v1 = ::deltaserve::v1;

// 3 layers of 4 experts; layer 1 is not listed.
v1::ExpertStats Good() {
  v1::ExpertStats s;
  s.set_n_layer(3);
  s.set_n_expert(4);
  s.set_device_slots(4);
  for (int l : {0, 2}) {
    v1::LayerExperts* le = s.add_layers();
    le->set_layer(l);
    for (double h : {1.0, 2.0, 3.0, 4.0}) le->add_decayed_tokens(h * (l + 1));
  }
  s.mutable_layers(0)->add_device_experts(3);
  s.mutable_layers(0)->add_device_experts(1);
  s.mutable_layers(0)->add_device_experts(3);
  return s;
}

std::string Refusal(const v1::ExpertStats& s) {
  common::ExpertPlacement current;
  std::vector<std::vector<double>> heat;
  absl::Status st = ReadWorkerExpertStats(s, current, heat);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  return std::string(st.message());
}

TEST(WorkerExpertStatsTest, GoodStatisticsGiveTheCurrentSetAndHeat) {
  v1::ExpertStats s = Good();
  s.mutable_layers(1)->set_decayed_tokens(0, std::numeric_limits<double>::quiet_NaN());
  s.mutable_layers(1)->set_decayed_tokens(1, -7);
  s.mutable_layers(1)->set_decayed_tokens(2, std::numeric_limits<double>::infinity());
  common::ExpertPlacement current;
  std::vector<std::vector<double>> heat;
  ASSERT_TRUE(ReadWorkerExpertStats(s, current, heat).ok());
  EXPECT_EQ(current.n_layer, 3);
  EXPECT_EQ(current.n_expert, 4);
  EXPECT_EQ(current.device, (std::vector<std::vector<int32_t>>{{1, 3}, {}, {}}));
  EXPECT_EQ(heat, (std::vector<std::vector<double>>{{1, 2, 3, 4}, {0, 0, 0, 0}, {0, 0, 0, 12}}));
  // A layer without any counts reads as all 0.
  s.mutable_layers(0)->clear_decayed_tokens();
  ASSERT_TRUE(ReadWorkerExpertStats(s, current, heat).ok());
  EXPECT_EQ(heat[0], (std::vector<double>{0, 0, 0, 0}));
}

TEST(WorkerExpertStatsTest, BadStatisticsAreRefusedWithTheirReason) {
  v1::ExpertStats s = Good();
  s.set_n_layer(0);
  EXPECT_EQ(Refusal(s), "bad statistics: 0 layers x 4 experts");
  s = Good();
  s.set_n_expert(5000);
  EXPECT_EQ(Refusal(s), "bad statistics: 3 layers x 5000 experts");
  s = Good();
  s.set_n_layer(1024);
  s.set_n_expert(4096);  // each within its bound, the product over the record's
  EXPECT_EQ(Refusal(s), "bad statistics: 1024 layers x 4096 experts");
  s = Good();
  s.set_device_slots(-1);
  EXPECT_EQ(Refusal(s), "bad statistics: device_slots -1");
  s = Good();
  s.mutable_layers(1)->set_layer(3);
  EXPECT_EQ(Refusal(s), "bad statistics: layer 3 (the model has 3)");
  s = Good();
  s.mutable_layers(1)->set_layer(0);
  EXPECT_EQ(Refusal(s), "bad statistics: layer 0 listed twice (the model has 3)");
  s = Good();
  s.mutable_layers(1)->add_decayed_tokens(1);
  EXPECT_EQ(Refusal(s), "bad statistics: layer 2 has 5 counts for 4 experts");
  s = Good();
  s.mutable_layers(0)->add_device_experts(4);
  EXPECT_EQ(Refusal(s), "bad statistics: layer 0 lists device expert 4");
  s = Good();
  s.mutable_layers(0)->add_device_experts(-1);
  EXPECT_EQ(Refusal(s), "bad statistics: layer 0 lists device expert -1");
}

TEST(WorkerExpertStatsTest, SlotClassesFromTheStatisticsOrOneClass) {
  v1::ExpertStats s;
  s.set_n_layer(3);
  s.set_slot_bytes(700);
  s.set_device_slots(10);
  // A worker that does not report classes: one class of device_slots for every layer.
  EXPECT_EQ(SlotClassesOf(s), common::ExpertSlotClasses::Single(3, 10, 700));
  v1::ExpertSlotClass* a = s.add_slot_classes();
  a->set_slot_bytes(600);
  a->set_device_slots(6);
  a->add_layers(0);
  a->add_layers(2);
  v1::ExpertSlotClass* b = s.add_slot_classes();
  b->set_slot_bytes(700);
  b->set_device_slots(4);
  b->add_layers(1);
  const common::ExpertSlotClasses c = SlotClassesOf(s);
  EXPECT_EQ(c.layer_class, (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(c.slot_bytes, (std::vector<uint64_t>{600, 700}));
  EXPECT_EQ(c.slots, (std::vector<int64_t>{6, 4}));
  // Reports that do not add up fall back to the one class.
  v1::ExpertStats twice = s;
  twice.mutable_slot_classes(1)->add_layers(2);
  EXPECT_EQ(SlotClassesOf(twice), common::ExpertSlotClasses::Single(3, 10, 700));
  v1::ExpertStats missing = s;
  missing.mutable_slot_classes(1)->clear_layers();
  EXPECT_EQ(SlotClassesOf(missing), common::ExpertSlotClasses::Single(3, 10, 700));
  v1::ExpertStats out_of_range = s;
  out_of_range.mutable_slot_classes(1)->set_layers(0, 3);
  EXPECT_EQ(SlotClassesOf(out_of_range), common::ExpertSlotClasses::Single(3, 10, 700));
  v1::ExpertStats negative = s;
  negative.mutable_slot_classes(0)->set_device_slots(-1);
  EXPECT_EQ(SlotClassesOf(negative), common::ExpertSlotClasses::Single(3, 10, 700));
}

TEST(WorkerExpertStatsTest, PushRequestListsTheLayersWithExperts) {
  common::ExpertPlacement p = common::ExpertPlacement::Empty(3, 4);
  p.device = {{0, 2}, {}, {3}};
  v1::SetExpertPlacementRequest req = PushRequest("m", p, 42);
  EXPECT_EQ(req.model(), "m");
  EXPECT_EQ(req.generation(), 42u);
  ASSERT_EQ(req.layers_size(), 2);
  EXPECT_EQ(req.layers(0).layer(), 0);
  EXPECT_EQ(std::vector<int32_t>(req.layers(0).device_experts().begin(),
                                 req.layers(0).device_experts().end()),
            (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(req.layers(1).layer(), 2);
  EXPECT_EQ(req.layers(1).device_experts_size(), 1);
}

}  // namespace
}  // namespace deltaserve::router
