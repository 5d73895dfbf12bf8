// The test fleet of the placement controller's tests (placement_controller_test.cc,
// placement_controller_redis_test.cc): ScriptedWorker test doubles serving an MoE model in a
// worker pool, their scripted statistics, and readers of what the controller did.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/expert_placement_record.h"
#include "common/redis_client.h"
#include "common/redis_url.h"
#include "gtest/gtest.h"
#include "router/placement/placement_controller.h"
#include "tests/router/scripted_worker.h"

namespace deltaserve::router::placement_test {

namespace v1 = ::deltaserve::v1;
using testing::ScriptedModel;
using testing::ScriptedWorker;
using Rows = std::vector<std::vector<int32_t>>;

inline constexpr char kModel[] = "moe";
inline constexpr char kFp[] = "00112233445566778899aabbccddeeff";
inline constexpr char kOtherFp[] = "ffeeddccbbaa99887766554433221100";
inline constexpr int64_t kNowMs = 1'800'000'000'000;

// Statistics of a worker with 2 layers of 8 experts, 4 device slots, experts 0 and 1 of each
// layer resident, and `hot` (layer, expert, decayed tokens) the only counts above zero.
inline v1::ExpertStats Stats(const std::string& fp, std::vector<std::tuple<int, int, double>> hot,
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

inline Rows DeviceOf(const v1::ExpertStats& s) {
  Rows out;
  for (const v1::LayerExperts& le : s.layers()) {
    out.emplace_back(le.device_experts().begin(), le.device_experts().end());
  }
  return out;
}

inline Rows Pushed(const v1::SetExpertPlacementRequest& r) {
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

inline PlacementSettings Settings(const std::string& redis_url = "") {
  PlacementSettings s;
  s.redis_url = redis_url;
  s.rpc_timeout_ms = 10'000;
  return s;
}

inline std::optional<common::ExpertPlacementRecord> StoredRecord(const std::string& url,
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

inline std::string MetricsText(const PlacementController& c) {
  api::PrometheusText out;
  c.WriteMetrics(out);
  return out.Take();
}

inline PlacementWorkerView WorkerView(const PlacementController& c, const std::string& address) {
  for (const PlacementModelView& m : c.Views()) {
    for (const PlacementWorkerView& w : m.workers) {
      if (w.address == address) return w;
    }
  }
  ADD_FAILURE() << "no view of " << address;
  return PlacementWorkerView{};
}

}  // namespace deltaserve::router::placement_test
