// The router's placement loop (router/placement/placement_controller.h) over real gRPC against
// ScriptedWorker test doubles (scripted_worker.h), without Redis: a worker that vanishes before
// or during a cycle, moves pending, untiered and malformed workers, the off switch,
// GET /admin/placement and its keys (and its slots per expert size), the metrics, the planner's
// machine settings. The clock is fixed. (With a real Redis: placement_controller_redis_test.cc.)
#include "router/placement/placement_controller.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/expert_placement.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/placement/placement_admin.h"
#include "tests/router/placement_test_fleet.h"

namespace deltaserve::router {
namespace {

using namespace placement_test;  // NOLINT: the fleet's helpers
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(PlacementControllerTest, AWorkerThatVanishesBeforeTheCycleIsLeftOutAndCounted) {
  Fleet fleet(2);
  fleet[0].SetExpertStats(kModel, Stats(kFp, {{0, 5, 100}, {1, 3, 80}}));
  fleet[1].SetExpertStats(kModel, Stats(kFp, {{0, 6, 70}, {1, 2, 60}}));
  PlacementController controller(&fleet.StartPool(), Settings(), [] { return kNowMs; });
  fleet[1].Stop();  // still in the pool's last poll

  PlacementCycleResult r = controller.RunOnce();
  EXPECT_EQ(r.workers_answered, 1);
  EXPECT_EQ(r.workers_skipped, 1);
  EXPECT_EQ(r.pushes, 1);
  // Worker 0 plans from its own counts: its two hot experts replace the coldest residents (ties:
  // the higher layer and expert leave first), nothing else beats a resident.
  ASSERT_EQ(fleet[0].placement_requests().size(), 1u);
  EXPECT_EQ(Pushed(fleet[0].placement_requests()[0]), (Rows{{0, 1, 5}, {3}}));
  EXPECT_THAT(WorkerView(controller, fleet[1].address()).outcome, StartsWith("stats failed: "));
  EXPECT_THAT(MetricsText(controller),
              HasSubstr("deltaserve_router_placement_stats_failures_total{model=\"moe\"} 1\n"));
  ASSERT_EQ(controller.Views().size(), 1u);
  EXPECT_THAT(controller.Views()[0].outcome, StartsWith("1 of 2 workers answered; 1 pushed"));

  // Once the pool's health poll has found it gone, it is not even called.
  fleet.pool->PollSoon();
  ASSERT_TRUE(fleet.pool->WaitForFirstPolls(absl::Seconds(30), 2));
  r = controller.RunOnce();
  EXPECT_EQ(r.workers_skipped, 1);
  EXPECT_EQ(WorkerView(controller, fleet[1].address()).outcome,
            "stats failed: unreachable (its last health poll failed)");
  EXPECT_THAT(MetricsText(controller),
              HasSubstr("deltaserve_router_placement_stats_failures_total{model=\"moe\"} 2\n"));
}

TEST(PlacementControllerTest, AWorkerThatVanishesBetweenStatisticsAndPushIsAPushFailure) {
  Fleet fleet(2);
  fleet[0].SetExpertStats(kModel, Stats(kFp, {{0, 5, 100}, {1, 3, 80}}));
  fleet[1].SetExpertStats(kModel, Stats(kFp, {{0, 6, 70}, {1, 2, 60}}));
  fleet[1].SetPlacementRefusal(grpc::StatusCode::UNAVAILABLE);
  PlacementController controller(&fleet.StartPool(), Settings(), [] { return kNowMs; });

  PlacementCycleResult r = controller.RunOnce();
  EXPECT_EQ(r.workers_answered, 2);
  EXPECT_EQ(r.pushes, 1);
  EXPECT_EQ(r.push_failures, 1);
  // Its counts still count for the fleet: worker 0 gets the fleet's plan.
  EXPECT_EQ(Pushed(fleet[0].placement_requests().at(0)), (Rows{{5, 6}, {2, 3}}));
  EXPECT_THAT(WorkerView(controller, fleet[1].address()).outcome,
              StartsWith("push failed: scripted placement refusal"));
  const std::string metrics = MetricsText(controller);
  EXPECT_THAT(metrics,
              HasSubstr("deltaserve_router_placement_push_failures_total{model=\"moe\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("deltaserve_router_placement_pushes_total{model=\"moe\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("deltaserve_router_placement_plans_total{model=\"moe\"} 2\n"));
}

TEST(PlacementControllerTest, PendingMovesAreNotPlannedOverAndUntieredWorkersOnlyCount) {
  Fleet fleet(3);
  fleet[0].SetExpertStats(kModel, Stats(kFp, {{0, 5, 100}, {1, 3, 80}}));
  fleet[0].SetPlacementsPending(true);
  fleet[1].SetExpertStats(kModel, Stats(kFp, {{0, 6, 70}, {1, 2, 60}}, /*tiered=*/false));
  v1::ExpertStats bad = Stats(kFp, {});
  bad.mutable_layers(1)->add_decayed_tokens(5);  // 9 counts for 8 experts
  fleet[2].SetExpertStats(kModel, bad);
  PlacementController controller(&fleet.StartPool(), Settings(), [] { return kNowMs; });

  PlacementCycleResult r = controller.RunOnce();
  EXPECT_EQ(r.workers_answered, 2);
  EXPECT_EQ(r.workers_skipped, 1);
  EXPECT_EQ(r.pushes, 1);
  // The untiered worker's counts are part of the fleet's.
  EXPECT_EQ(Pushed(fleet[0].placement_requests().at(0)), (Rows{{5, 6}, {2, 3}}));
  EXPECT_TRUE(fleet[1].placement_requests().empty());
  EXPECT_EQ(WorkerView(controller, fleet[1].address()).outcome, "not tiered");
  EXPECT_EQ(WorkerView(controller, fleet[2].address()).outcome,
            "stats failed: bad statistics: layer 1 has 9 counts for 8 experts");

  r = controller.RunOnce();
  EXPECT_EQ(r.pushes, 0);
  EXPECT_EQ(fleet[0].placement_requests().size(), 1u);
  EXPECT_EQ(WorkerView(controller, fleet[0].address()).outcome, "moves pending");
}

TEST(PlacementControllerTest, DisabledDoesNothingAndForgetsTheLastCycle) {
  Fleet fleet(1);
  fleet[0].SetExpertStats(kModel, Stats(kFp, {{0, 5, 100}}));
  PlacementSettings off = Settings();
  off.enabled = false;
  PlacementController controller(&fleet.StartPool(), off, [] { return kNowMs; });
  EXPECT_EQ(controller.RunOnce().models, 0);
  EXPECT_TRUE(fleet[0].placement_requests().empty());
  EXPECT_TRUE(controller.Views().empty());
  EXPECT_THAT(MetricsText(controller), HasSubstr("deltaserve_router_placement_enabled 0\n"));

  // Switched on by a reload, then off again: the last cycle's view and hit share go.
  controller.SetSettings(Settings());
  EXPECT_EQ(controller.RunOnce().pushes, 1);
  EXPECT_EQ(controller.Views().size(), 1u);
  EXPECT_THAT(MetricsText(controller), HasSubstr("deltaserve_router_placement_fleet_hit_share"));
  controller.SetSettings(off);
  EXPECT_EQ(controller.RunOnce().models, 0);
  EXPECT_TRUE(controller.Views().empty());
  EXPECT_THAT(MetricsText(controller),
              ::testing::Not(HasSubstr("deltaserve_router_placement_fleet_hit_share")));
  EXPECT_EQ(fleet[0].placement_requests().size(), 1u);
}

TEST(PlacementControllerTest, AdminViewNeedsAnAdminKeyWhereKeysAreConfigured) {
  Fleet fleet(1);
  fleet[0].SetExpertStats(kModel, Stats(kFp, {{0, 5, 100}, {1, 3, 80}}));
  PlacementController controller(&fleet.StartPool(), Settings(), [] { return kNowMs; });
  controller.RunOnce();

  RouterConfig config;
  for (const char* name : {"ops", "app"}) {
    ApiKeyConfig key;
    key.name = name;
    key.sha256_hex = auth::Sha256Hex(absl::StrCat(name, "-key"));
    key.admin = key.name == "ops";
    config.api_keys.push_back(key);
  }
  const auth::ApiKeyAuthority keyed(config);
  http::Request request;
  request.method = "GET";
  request.path = "/admin/placement";
  EXPECT_EQ(PlacementAdminResponse(request, controller, keyed).status, 401);
  request.headers.push_back({"Authorization", "Bearer app-key"});
  http::Response denied = PlacementAdminResponse(request, controller, keyed);
  EXPECT_EQ(denied.status, 403);
  EXPECT_THAT(denied.body, HasSubstr("not an admin key"));
  request.headers.back().value = "Bearer ops-key";
  http::Response ok = PlacementAdminResponse(request, controller, keyed);
  ASSERT_EQ(ok.status, 200);
  // Without keys the router is open (and local): so is the view.
  EXPECT_EQ(
      PlacementAdminResponse(http::Request{}, controller, auth::ApiKeyAuthority(RouterConfig{}))
          .status,
      200);

  const nlohmann::json body = nlohmann::json::parse(ok.body);
  EXPECT_EQ(body["enabled"], true);
  EXPECT_EQ(body["interval_seconds"], 30);
  EXPECT_EQ(body["redis"], "off");
  ASSERT_EQ(body["models"].size(), 1u);
  const nlohmann::json& m = body["models"][0];
  EXPECT_EQ(m["model"], kModel);
  EXPECT_EQ(m["last_plan_unix_ms"], kNowMs);
  EXPECT_EQ(m["last_plan_time"], "2027-01-15T08:00:00Z");
  ASSERT_EQ(m["workers"].size(), 1u);
  const nlohmann::json& w = m["workers"][0];
  EXPECT_EQ(w["address"], fleet[0].address());
  EXPECT_EQ(w["outcome"], "pushed");
  EXPECT_EQ(w["hit_share"], 0.25);  // 250 of 1000 routed pairs
  EXPECT_EQ(w["planned_moves"]["in"], 2);
  EXPECT_EQ(w["planned_moves"]["out"], 2);
  // Layers as the worker reported them in this cycle (before the push): experts 0 and 1, which
  // had none of layer 0's 100 recent tokens.
  EXPECT_EQ(w["layers"][0]["device_experts"], nlohmann::json({0, 1}));
  EXPECT_EQ(w["layers"][0]["recent_hit_share"], 0.0);
  // ?model= of another model: none.
  request.query = "model=other";
  EXPECT_EQ(nlohmann::json::parse(PlacementAdminResponse(request, controller, keyed).body)["models"]
                .size(),
            0u);
}

TEST(PlacementControllerTest, TheSettingsMachineDecidesBetweenWholeLayersAndHotExperts) {
  // Both layers route evenly over their 8 experts (k = 2); the worker holds 8 slots of 2 MB.
  // With the default machine (1008 and 37.4 GB/s, 18 us per synchronisation) a whole layer 0
  // costs 4.0 + 125.0 us per step and 4 experts in each layer 2 x 68.5 us: one whole layer.
  std::vector<std::tuple<int, int, double>> even;
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 8; ++e) even.emplace_back(l, e, 10.0);
  }
  v1::ExpertStats stats = Stats(kFp, even);
  stats.set_device_slots(8);
  stats.set_slot_bytes(2'000'000);
  Fleet fleet(1);
  fleet[0].SetExpertStats(kModel, stats);
  PlacementController controller(&fleet.StartPool(), Settings(), [] { return kNowMs; });
  EXPECT_EQ(controller.RunOnce().pushes, 1);
  ASSERT_EQ(fleet[0].placement_requests().size(), 1u);
  EXPECT_EQ(Pushed(fleet[0].placement_requests()[0]), (Rows{{0, 1, 2, 3, 4, 5, 6, 7}, {}}));
  const PlacementWorkerView view = WorkerView(controller, fleet[0].address());
  EXPECT_EQ(view.planned_whole_layers, 1);
  EXPECT_NEAR(view.planned_moe_step_us, 4.0 + 125.0, 0.1);
  const auto body = PlacementAdminJson(controller, "");
  EXPECT_EQ(body["layer_sync_us"], 18.0);
  EXPECT_EQ(body["models"][0]["workers"][0]["planned_whole_layers"], 1);

  // Without a synchronisation cost the hidden device reads tip it the other way: four experts
  // per layer (the residents 0 and 1 first, then the lower ids).
  PlacementSettings no_sync = Settings();
  no_sync.layer_sync_us = 0;
  controller.SetSettings(no_sync);
  EXPECT_EQ(controller.RunOnce().pushes, 1);
  ASSERT_EQ(fleet[0].placement_requests().size(), 2u);
  EXPECT_EQ(Pushed(fleet[0].placement_requests()[1]), (Rows{{0, 1, 2, 3}, {0, 1, 2, 3}}));
  EXPECT_EQ(WorkerView(controller, fleet[0].address()).planned_whole_layers, 0);
}

TEST(PlacementControllerTest, TheAdminViewShowsTheSlotsPerExpertSize) {
  // Layer 0's experts take 1,000 bytes, layer 1's 1,500; the worker divides 5,000 bytes between
  // them as placements need, two slots each now, experts 0 and 1 of each layer in them. Layer
  // 0's expert 5 is hot, and layer 1's expert 3.
  v1::ExpertStats stats = Stats(kFp, {{0, 5, 100}, {1, 3, 80}});
  stats.set_slot_bytes(1500);
  stats.set_slot_budget_bytes(5000);
  for (int c = 0; c < 2; ++c) {
    v1::ExpertSlotClass* k = stats.add_slot_classes();
    k->set_slot_bytes(c == 0 ? 1000 : 1500);
    k->set_device_slots(2);
    k->add_layers(c);
  }
  Fleet fleet(2);
  fleet[0].SetExpertStats(kModel, stats);
  fleet[1].SetExpertStats(kModel, Stats(kFp, {{0, 5, 100}, {1, 3, 80}}));  // reports no sizes
  PlacementController controller(&fleet.StartPool(), Settings(), [] { return kNowMs; });
  EXPECT_EQ(controller.RunOnce().pushes, 2);

  const nlohmann::json body = PlacementAdminJson(controller, "");
  ASSERT_EQ(body["models"][0]["workers"].size(), 2u);
  nlohmann::json sized, plain;
  for (const nlohmann::json& w : body["models"][0]["workers"]) {
    (w["address"] == fleet[0].address() ? sized : plain) = w;
  }
  EXPECT_EQ(sized["slot_budget_bytes"], 5000);
  const nlohmann::json& classes = sized["slot_classes"];
  ASSERT_EQ(classes.size(), 2u);
  for (int c = 0; c < 2; ++c) {
    EXPECT_EQ(classes[c]["slot_bytes"], c == 0 ? 1000 : 1500);
    EXPECT_EQ(classes[c]["slots"], 2);
    EXPECT_EQ(classes[c]["used"], 2);
    EXPECT_EQ(classes[c]["layers"], nlohmann::json({c}));
  }
  // The plan's division fits the bytes, and the placement pushed fits the division.
  const int64_t planned0 = classes[0]["planned_slots"], planned1 = classes[1]["planned_slots"];
  EXPECT_LE(planned0 * 1000 + planned1 * 1500, 5000);
  ASSERT_EQ(fleet[0].placement_requests().size(), 1u);
  const Rows pushed = Pushed(fleet[0].placement_requests()[0]);
  EXPECT_LE(static_cast<int64_t>(pushed[0].size()), planned0);
  EXPECT_LE(static_cast<int64_t>(pushed[1].size()), planned1);
  EXPECT_TRUE(std::find(pushed[0].begin(), pushed[0].end(), 5) != pushed[0].end());
  EXPECT_TRUE(std::find(pushed[1].begin(), pushed[1].end(), 3) != pushed[1].end());

  // A worker that reports no sizes: one of every layer, its four slots, the division fixed.
  EXPECT_EQ(plain["slot_budget_bytes"], nullptr);
  ASSERT_EQ(plain["slot_classes"].size(), 1u);
  EXPECT_EQ(plain["slot_classes"][0]["slots"], 4);
  EXPECT_EQ(plain["slot_classes"][0]["used"], 4);
  EXPECT_EQ(plain["slot_classes"][0]["planned_slots"], 4);
  EXPECT_EQ(plain["slot_classes"][0]["layers"], nlohmann::json({0, 1}));
}

}  // namespace
}  // namespace deltaserve::router
