// The start-up placement of a tiered MoE model (worker/service/expert_startup.h) with a real
// redis-server: the router's saved record wins (the hottest experts of its heat that this
// budget holds); no record, Redis down, or a record refused (a corrupt blob, another shape or
// model: counted for /metrics) fall back to the warm-up's routing counts; no warm-up falls back
// to the even spread; a model without tiers is "all". The model is the golden tiny MoE on the
// CPU backend and the tiers a RecordingTiers (placements only): what is checked is which
// placement is chosen and reached before serving. The real tiers, end to end, are in
// expert_service_worker_test.cc.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/expert_placement_record.h"
#include "common/redis_client.h"
#include "common/redis_url.h"
#include "gmock/gmock.h"
#include "kernels/backend.h"
#include "tests/support/redis_server.h"
#include "tests/support/test_paths.h"
#include "tests/worker/recording_expert_tiers.h"
#include "worker/sched/served_model.h"
#include "worker/service/expert_service.h"
#include "worker/service/expert_startup.h"
#include "worker/service/metrics_endpoint.h"
#include "worker/service/worker_service.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::RedisServerProcess;
using ::testing::HasSubstr;

constexpr int64_t kLayers = 8, kExperts = 16, kSlots = 40;

class ExpertStartupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = kernels::MakeCpuBackend(2);
    ServingOptions o;
    o.ctx = 512;
    o.n_parallel = 1;
    o.page_tokens = 64;
    o.step_tokens = 128;
    o.budget_bytes = 1ull << 30;
    o.n_threads = 2;
    o.snapshot_ram_bytes = 0;
    auto m = ServedModel::Create(GoldenPath("tiny-moe-f32.gguf"), *backend_, o);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    tiers_ = std::make_unique<RecordingTiers>(kLayers, kExperts, kSlots, 1024);
    experts_ = std::make_unique<ModelExperts>(*model_, tiers_.get(), ModelExpertsOptions{});
  }

  // Redis started, its options for the worker side, a client for the test's side.
  void StartRedis() {
    ASSERT_TRUE(redis_.Start());
    absl::StatusOr<common::RedisOptions> o = common::ParseRedisUrl(redis_.url());
    ASSERT_TRUE(o.ok()) << o.status();
    options_.redis = *o;
    auto c = common::RedisClient::Create(*o, absl::Seconds(5));
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }
  std::string Key() const { return common::ExpertPlacementRecordKey(experts_->fingerprint_hex()); }

  // A record whose heat ranks experts by a pattern no even spread or warm-up would give.
  common::ExpertPlacementRecord Record() const {
    common::ExpertPlacementRecord r;
    r.model_fingerprint = experts_->fingerprint_hex();
    r.n_layer = kLayers;
    r.n_expert = kExperts;
    r.half_life_seconds = 300;
    r.updated_unix_ms = 1795000000000;
    r.heat.assign(kLayers, std::vector<double>(kExperts));
    for (int l = 0; l < kLayers; ++l) {
      for (int e = 0; e < kExperts; ++e) r.heat[l][e] = (l % 2 == 0 ? 10.0 : 1.0) * ((e * 7 + l) % 16);
    }
    r.device = common::ExpertPlacement::Empty(kLayers, kExperts);
    return r;
  }

  // The warm-up's counts, run again: the CPU backend is deterministic and the warm-up starts
  // from a fresh sequence, so they are the counts ApplyStartupPlacement saw.
  std::vector<std::vector<double>> WarmupCounts() {
    absl::StatusOr<std::vector<std::vector<double>>> c =
        WarmupRoutingCounts(*model_, options_.warmup_tokens);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : std::vector<std::vector<double>>{};
  }

  std::string Metrics() {
    WorkerService service("w", "sim", {{"moe", model_.get()}});
    service.SetModelExperts("moe", experts_.get());
    return RenderWorkerMetrics(service);
  }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<ServedModel> model_;
  std::unique_ptr<RecordingTiers> tiers_;
  std::unique_ptr<ModelExperts> experts_;
  RedisServerProcess redis_;
  std::unique_ptr<common::RedisClient> client_;
  StartupPlacementOptions options_;
};

TEST_F(ExpertStartupTest, TheWarmupPrefillsVariedTextAndCountsItsRouting) {
  const std::vector<int32_t> prompt = WarmupPrompt(model_->tokenizer(), 300);
  ASSERT_EQ(prompt.size(), 300u);
  EXPECT_GT(std::set<int32_t>(prompt.begin(), prompt.end()).size(), 100u);
  const std::vector<std::vector<double>> counts = WarmupCounts();
  ASSERT_EQ(counts.size(), static_cast<size_t>(kLayers));
  const double tokens = static_cast<double>(std::min<int64_t>(options_.warmup_tokens, 511));
  for (const auto& layer : counts) {
    ASSERT_EQ(layer.size(), static_cast<size_t>(kExperts));
    double sum = 0;
    for (double c : layer) sum += c;
    EXPECT_EQ(sum, tokens * 4);  // k = 4 experts per token
  }
  // Not counted as serving: the engine's counters start from zero for the first request.
  EXPECT_EQ(model_->model().counters().routed(0, 0) + model_->model().counters().passes(), 0u);
}

TEST_F(ExpertStartupTest, ASavedRecordIsUsedForThisBudget) {
  StartRedis();
  const common::ExpertPlacementRecord r = Record();
  ASSERT_TRUE(client_->Set(Key(), common::SerializeExpertPlacementRecord(r)).ok());
  EXPECT_EQ(ApplyStartupPlacement("moe", *experts_, options_), kStartupSaved);
  EXPECT_EQ(experts_->startup_source(), "saved");
  EXPECT_EQ(tiers_->Current(), common::HottestExpertPlacement(r.heat, kSlots));
  EXPECT_EQ(tiers_->stats().moves_pending, 0);
  EXPECT_EQ(model_->scheduler().stats().steps, 0);  // no warm-up ran
  EXPECT_EQ(experts_->saved_invalid() + experts_->saved_redis_errors(), 0u);
  // What the tiers counted before serving (RecordingTiers: 1000 / 250) is not reported.
  EXPECT_EQ(experts_->routed_total(), 0u);
  EXPECT_EQ(experts_->routed_device(), 0u);
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("deltaserve_model_expert_startup_placement_info{model=\"moe\","
                                 "source=\"saved\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("deltaserve_model_expert_routed_total{model=\"moe\"} 0"));
}

TEST_F(ExpertStartupTest, RefusedRecordsFallBackToTheWarmupAndAreCounted) {
  StartRedis();
  common::ExpertPlacementRecord other_shape = Record();
  other_shape.n_expert = 8;
  for (auto& l : other_shape.heat) l.resize(8);
  other_shape.device = common::ExpertPlacement::Empty(kLayers, 8);
  common::ExpertPlacementRecord other_model = Record();
  other_model.model_fingerprint = std::string(64, 'a');
  const std::string blobs[] = {
      "{not json",
      std::string("\x28\xb5\x2f\xfd garbage", 12),
      common::SerializeExpertPlacementRecord(other_shape),
      common::SerializeExpertPlacementRecord(other_model),
  };
  uint64_t refused = 0;
  for (const std::string& blob : blobs) {
    ASSERT_TRUE(client_->Set(Key(), blob).ok());
    EXPECT_EQ(ApplyStartupPlacement("moe", *experts_, options_), kStartupWarmup);
    EXPECT_EQ(experts_->saved_invalid(), ++refused);
    EXPECT_EQ(tiers_->Current(), common::HottestExpertPlacement(WarmupCounts(), kSlots));
  }
  EXPECT_EQ(experts_->saved_redis_errors(), 0u);
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("deltaserve_model_expert_saved_placement_errors_total{model="
                                 "\"moe\",reason=\"invalid\"} 4"));
  EXPECT_THAT(metrics, HasSubstr("deltaserve_model_expert_saved_placement_errors_total{model="
                                 "\"moe\",reason=\"redis\"} 0"));
  EXPECT_THAT(metrics, HasSubstr("source=\"warmup\"} 1"));
}

TEST_F(ExpertStartupTest, NoRecordOrNoRedisUsesTheWarmup) {
  StartRedis();
  EXPECT_EQ(ApplyStartupPlacement("moe", *experts_, options_), kStartupWarmup);
  EXPECT_EQ(experts_->saved_invalid() + experts_->saved_redis_errors(), 0u);  // none yet: fine
  const common::ExpertPlacement warm = common::HottestExpertPlacement(WarmupCounts(), kSlots);
  EXPECT_EQ(tiers_->Current(), warm);
  // Redis gone: the same, counted as a Redis failure.
  redis_.Kill();
  EXPECT_EQ(ApplyStartupPlacement("moe", *experts_, options_), kStartupWarmup);
  EXPECT_EQ(experts_->saved_redis_errors(), 1u);
  EXPECT_EQ(tiers_->Current(), warm);
  // No Redis configured at all.
  options_.redis.reset();
  EXPECT_EQ(ApplyStartupPlacement("moe", *experts_, options_), kStartupWarmup);
  EXPECT_EQ(experts_->saved_redis_errors(), 1u);
}

TEST_F(ExpertStartupTest, WithoutWarmupTheExpertsAreSpreadEvenlyAndWithoutTiersAllIsReported) {
  options_.warmup_tokens = 0;
  ASSERT_TRUE(tiers_->SetTarget(common::HottestExpertPlacement(Record().heat, kSlots), 0).ok());
  while (tiers_->stats().moves_pending > 0) ASSERT_TRUE(tiers_->Advance(1 << 20).ok());
  EXPECT_EQ(ApplyStartupPlacement("moe", *experts_, options_), kStartupEven);
  EXPECT_EQ(tiers_->Current(), common::EvenExpertPlacement(kLayers, kExperts, kSlots));
  ModelExperts untiered(*model_, nullptr, ModelExpertsOptions{});
  EXPECT_EQ(ApplyStartupPlacement("moe", untiered, options_), kStartupAll);
  EXPECT_EQ(untiered.startup_source(), "all");
}

}  // namespace
}  // namespace deltaserve::worker
