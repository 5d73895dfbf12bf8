// The router's placement loop (router/placement/placement_controller.h) with a real
// redis-server (tests/support/redis_server.h) and ScriptedWorker test doubles: a fleet's plan
// pushed and saved, read back by a second controller for fresh workers; Redis down and back;
// workers of other weights planned and stored apart. The clock is fixed, so the stored counts
// decay by exact halves.
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/placement/placement_controller.h"
#include "tests/router/placement_test_fleet.h"
#include "tests/support/redis_server.h"

namespace deltaserve::router {
namespace {

using namespace placement_test;  // NOLINT: the fleet's helpers
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(PlacementControllerTest, PushesTheFleetPlanSavesItAndASecondControllerStartsFromIt) {
  deltaserve::testing::RedisServerProcess redis;
  ASSERT_TRUE(redis.Start());
  Fleet fleet(2);
  // Worker 0 saw experts (0,5) and (1,3) hot, worker 1 (0,6) and (1,2); each keeps experts 0 and
  // 1 of both layers, which saw nothing. The fleet's four hottest replace all four residents.
  fleet[0].SetExpertStats(kModel, Stats(kFp, {{0, 5, 100}, {1, 3, 80}}));
  fleet[1].SetExpertStats(kModel, Stats(kFp, {{0, 6, 70}, {1, 2, 60}}));
  PlacementController controller(&fleet.StartPool(), Settings(redis.url()), [] { return kNowMs; });

  PlacementCycleResult r = controller.RunOnce();
  EXPECT_EQ(r.models, 1);
  EXPECT_EQ(r.workers_answered, 2);
  EXPECT_EQ(r.plans, 2);
  EXPECT_EQ(r.pushes, 2);
  EXPECT_EQ(r.redis_saves, 1);
  const Rows expected = {{5, 6}, {2, 3}};
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(fleet[i].placement_requests().size(), 1u);
    const v1::SetExpertPlacementRequest req = fleet[i].placement_requests()[0];
    EXPECT_EQ(req.model(), kModel);
    EXPECT_EQ(Pushed(req), expected);
    EXPECT_GE(req.generation(), 1u);
    EXPECT_EQ(DeviceOf(fleet[i].expert_stats(kModel)), expected);
  }
  EXPECT_NE(fleet[0].placement_requests()[0].generation(),
            fleet[1].placement_requests()[0].generation());

  std::optional<common::ExpertPlacementRecord> stored = StoredRecord(redis.url(), kFp);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->n_layer, 2);
  EXPECT_EQ(stored->n_expert, 8);
  EXPECT_EQ(stored->updated_unix_ms, kNowMs);
  EXPECT_EQ(stored->half_life_seconds, 300);
  EXPECT_EQ(stored->heat[0], (std::vector<double>{0, 0, 0, 0, 0, 100, 70, 0}));
  EXPECT_EQ(stored->heat[1], (std::vector<double>{0, 0, 60, 80, 0, 0, 0, 0}));
  EXPECT_EQ(stored->device.device, expected);

  // The same counts again: nothing to change.
  r = controller.RunOnce();
  EXPECT_EQ(r.pushes, 0);
  EXPECT_EQ(fleet[0].placement_requests().size(), 1u);
  EXPECT_EQ(WorkerView(controller, fleet[0].address()).outcome, "unchanged");

  // A new router and two fresh workers of the same weights, one half-life later: nothing routed
  // yet, so the plan comes from the stored counts (halved), and the new record holds them.
  Fleet fresh(2);
  for (size_t i = 0; i < 2; ++i) fresh[i].SetExpertStats(kModel, Stats(kFp, {}));
  PlacementController second(&fresh.StartPool(), Settings(redis.url()),
                             [] { return kNowMs + 300'000; });
  r = second.RunOnce();
  EXPECT_EQ(r.pushes, 2);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(fresh[i].placement_requests().size(), 1u);
    EXPECT_EQ(Pushed(fresh[i].placement_requests()[0]), expected);
  }
  ASSERT_EQ(second.Views().size(), 1u);
  EXPECT_EQ(second.Views()[0].prior, "redis (age 300 s)");
  stored = StoredRecord(redis.url(), kFp);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->heat[0], (std::vector<double>{0, 0, 0, 0, 0, 50, 35, 0}));
  EXPECT_EQ(stored->updated_unix_ms, kNowMs + 300'000);
}

TEST(PlacementControllerTest, RedisDownKeepsPlanningAndIsCountedUntilItIsBack) {
  deltaserve::testing::RedisServerProcess redis;
  ASSERT_TRUE(redis.Start());
  const std::string url = redis.url();
  redis.Kill();
  Fleet fleet(2);
  fleet[0].SetExpertStats(kModel, Stats(kFp, {{0, 5, 100}, {1, 3, 80}}));
  fleet[1].SetExpertStats(kModel, Stats(kFp, {{0, 6, 70}, {1, 2, 60}}));
  PlacementController controller(&fleet.StartPool(), Settings(url), [] { return kNowMs; });

  PlacementCycleResult r = controller.RunOnce();
  EXPECT_EQ(r.pushes, 2);
  EXPECT_EQ(r.redis_saves, 0);
  EXPECT_EQ(r.redis_failures, 2);  // the stored record not read, the new one not saved
  ASSERT_EQ(controller.Views().size(), 1u);
  EXPECT_THAT(controller.Views()[0].redis, StartsWith("save failed: "));
  EXPECT_THAT(controller.Views()[0].prior, StartsWith("not read: "));
  std::string metrics = MetricsText(controller);
  EXPECT_THAT(metrics, HasSubstr("deltaserve_router_placement_redis_failures_total{operation="
                                 "\"save\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("deltaserve_router_placement_redis_failures_total{operation="
                                 "\"load\"} 1\n"));

  // Back (empty): the next cycles save again once the client's reconnect backoff has passed.
  ASSERT_TRUE(redis.Restart());
  bool saved = false;
  for (int i = 0; i < 150 && !saved; ++i) {
    saved = controller.RunOnce().redis_saves == 1;
    if (!saved) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE(saved) << "Redis never took the record after it came back";
  EXPECT_EQ(controller.Views()[0].redis, "saved");
  std::optional<common::ExpertPlacementRecord> stored = StoredRecord(url, kFp);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->device.device, (Rows{{5, 6}, {2, 3}}));
}

TEST(PlacementControllerTest, WorkersOfOtherWeightsArePlannedApartAndStoredApart) {
  deltaserve::testing::RedisServerProcess redis;
  ASSERT_TRUE(redis.Start());
  Fleet fleet(2);
  fleet[0].SetExpertStats(kModel, Stats(kFp, {{0, 5, 100}, {1, 3, 80}}));
  fleet[1].SetExpertStats(kModel, Stats(kOtherFp, {{0, 6, 70}, {1, 2, 60}}));
  PlacementController controller(&fleet.StartPool(), Settings(redis.url()), [] { return kNowMs; });
  PlacementCycleResult r = controller.RunOnce();
  EXPECT_EQ(r.pushes, 2);
  EXPECT_EQ(r.redis_saves, 2);
  EXPECT_EQ(Pushed(fleet[0].placement_requests().at(0)), (Rows{{0, 1, 5}, {3}}));
  EXPECT_EQ(Pushed(fleet[1].placement_requests().at(0)), (Rows{{0, 1, 6}, {2}}));
  ASSERT_TRUE(StoredRecord(redis.url(), kFp).has_value());
  ASSERT_TRUE(StoredRecord(redis.url(), kOtherFp).has_value());
  EXPECT_EQ(StoredRecord(redis.url(), kOtherFp)->heat[0][5], 0);
}

}  // namespace
}  // namespace deltaserve::router
