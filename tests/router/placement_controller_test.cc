// The router's placement loop (router/placement/placement_controller.h) over real gRPC against
// ScriptedWorker test doubles (scripted_worker.h) and a real redis-server
// (tests/support/redis_server.h): a fleet's plan pushed and saved, read back by a second
// controller for fresh workers; a worker that vanishes before or during a cycle; Redis down and
// back; workers of other weights planned apart; moves pending; GET /admin/placement and its
// keys; the metrics. The clock is fixed, so the stored counts decay by exact halves.
#include "router/placement/placement_controller.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/expert_placement_record.h"
#include "common/redis_client.h"
#include "common/redis_url.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/placement/placement_admin.h"
#include "tests/router/scripted_worker.h"
#include "tests/support/redis_server.h"

namespace deltaserve::router {
namespace {

namespace v1 = ::deltaserve::v1;
using ::testing::HasSubstr;
using testing::ScriptedModel;
using testing::ScriptedWorker;
using ::testing::StartsWith;
using Rows = std::vector<std::vector<int32_t>>;

constexpr char kModel[] = "moe";
constexpr char kFp[] = "00112233445566778899aabbccddeeff";
constexpr char kOtherFp[] = "ffeeddccbbaa99887766554433221100";
constexpr int64_t kNowMs = 1'800'000'000'000;

// Statistics of a worker with 2 layers of 8 experts, 4 device slots, experts 0 and 1 of each
// layer resident, and `hot` (layer, expert, decayed tokens) the only counts above zero.
v1::ExpertStats Stats(const std::string& fp, std::vector<std::tuple<int, int, double>> hot,
                      bool tiered = true) {
  v1::ExpertStats s;
  s.set_model_fingerprint(fp);
  s.set_n_layer(2);
  s.set_n_expert(8);
  s.set_n_expert_used(2);
  s.set_tiered(tiered);
  s.set_device_slots(4);
  s.set_half_life_seconds(300);
  s.set_routed_total(1000);
  s.set_routed_device(250);
  s.set_startup_source("even");
  for (int l = 0; l < 2; ++l) {
    v1::LayerExperts* le = s.add_layers();
    le->set_layer(l);
    le->add_device_experts(0);
    le->add_device_experts(1);
    for (int e = 0; e < 8; ++e) {
      double h = 0;
      for (const auto& [hl, he, hv] : hot) h = hl == l && he == e ? hv : h;
      le->add_decayed_tokens(h);
      le->add_total_tokens(static_cast<uint64_t>(h));
    }
  }
  return s;
}

Rows DeviceOf(const v1::ExpertStats& s) {
  Rows out;
  for (const v1::LayerExperts& le : s.layers()) {
    out.emplace_back(le.device_experts().begin(), le.device_experts().end());
  }
  return out;
}

Rows Pushed(const v1::SetExpertPlacementRequest& r) {
  Rows out(2);
  for (const v1::LayerExperts& le : r.layers()) {
    out.at(static_cast<size_t>(le.layer()))
        .assign(le.device_experts().begin(), le.device_experts().end());
  }
  return out;
}

// Two (or more) MoE workers in a worker pool that polls them once (the next poll is an hour
// away, so a worker stopped after it still counts as serving the model).
class Fleet {
 public:
  explicit Fleet(int n) {
    for (int i = 0; i < n; ++i) {
      ScriptedModel m;
      m.name = kModel;
      m.architecture = "qwen35moe";
      ScriptedModel dense;
      dense.name = "dense";  // not MoE: never asked for statistics
      workers.push_back(std::make_unique<ScriptedWorker>(std::vector<ScriptedModel>{m, dense}));
      workers.back()->Start();
    }
  }
  WorkerPool& StartPool() {
    std::vector<WorkerEndpoint> endpoints;
    for (const auto& w : workers) endpoints.push_back({w->address()});
    RoutingSettings settings;
    settings.health_interval_ms = 3600 * 1000;
    settings.connect_timeout_ms = 10'000;
    pool = std::make_unique<WorkerPool>(endpoints, settings);
    pool->Start();
    EXPECT_TRUE(pool->WaitForFirstPolls(absl::Seconds(30)));
    return *pool;
  }
  ScriptedWorker& operator[](size_t i) { return *workers.at(i); }

  std::vector<std::unique_ptr<ScriptedWorker>> workers;
  std::unique_ptr<WorkerPool> pool;
};

PlacementSettings Settings(const std::string& redis_url = "") {
  PlacementSettings s;
  s.redis_url = redis_url;
  s.rpc_timeout_ms = 10'000;
  return s;
}

std::optional<common::ExpertPlacementRecord> StoredRecord(const std::string& url,
                                                          const std::string& fp) {
  auto client = common::RedisClient::Create(*common::ParseRedisUrl(url), absl::Seconds(5));
  EXPECT_TRUE(client.ok());
  absl::StatusOr<std::optional<std::string>> blob =
      (*client)->Get(common::ExpertPlacementRecordKey(fp));
  EXPECT_TRUE(blob.ok()) << blob.status();
  if (!blob.ok() || !blob->has_value()) return std::nullopt;
  absl::StatusOr<common::ExpertPlacementRecord> r = common::ParseExpertPlacementRecord(**blob);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::optional(*r) : std::nullopt;
}

std::string MetricsText(const PlacementController& c) {
  api::PrometheusText out;
  c.WriteMetrics(out);
  return out.Take();
}

PlacementWorkerView WorkerView(const PlacementController& c, const std::string& address) {
  for (const PlacementModelView& m : c.Views()) {
    for (const PlacementWorkerView& w : m.workers) {
      if (w.address == address) return w;
    }
  }
  ADD_FAILURE() << "no view of " << address;
  return PlacementWorkerView{};
}

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

TEST(PlacementControllerTest, DisabledDoesNothing) {
  Fleet fleet(1);
  fleet[0].SetExpertStats(kModel, Stats(kFp, {{0, 5, 100}}));
  PlacementSettings off = Settings();
  off.enabled = false;
  PlacementController controller(&fleet.StartPool(), off, [] { return kNowMs; });
  EXPECT_EQ(controller.RunOnce().models, 0);
  EXPECT_TRUE(fleet[0].placement_requests().empty());
  EXPECT_TRUE(controller.Views().empty());
  EXPECT_THAT(MetricsText(controller), HasSubstr("deltaserve_router_placement_enabled 0\n"));
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

}  // namespace
}  // namespace deltaserve::router
