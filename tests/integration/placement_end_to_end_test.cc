// MoE expert placement end to end (label integration): a real deltaserve-router with placement
// on (a one-second cycle, a real redis-server) in front of two real deltaserve-worker processes
// on the `sim` test device, each serving the golden tiny MoE model (8 layers x 16 experts, k = 4)
// with 2 MiB of expert slots, about a sixth of the routed experts. Traffic through the router's
// OpenAI API must lead the router to plan, push (SetExpertPlacement) and store the model's
// placement in Redis; both workers must reach the pushed sets; the admin view must show them;
// a third worker started afterwards with --redis must start from the stored record ("saved");
// and the answers must not change while experts move (greedy, compared with the answers the
// same prompts got before any plan).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/expert_placement.h"
#include "common/expert_placement_record.h"
#include "common/redis_client.h"
#include "common/redis_url.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/router_service.h"
#include "tests/support/child_process.h"
#include "tests/support/redis_server.h"
#include "tests/support/test_paths.h"
#include "tests/worker/snapshot_workers.h"

namespace deltaserve {
namespace {

using ::deltaserve::testing::BinaryPath;
using ::deltaserve::testing::ChildProcess;
using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::Http;
using ::deltaserve::testing::RedisServerProcess;
using ::testing::HasSubstr;
using json = nlohmann::json;
using std::chrono::seconds;
namespace pb = ::deltaserve::v1;
namespace harness = ::deltaserve::worker::harness;

constexpr int kLayers = 8, kExperts = 16;

// A sim worker serving the tiny MoE model as "tiny", with Redis for the start-up placement.
harness::Worker StartSimWorker(const std::string& redis_url) {
  harness::Worker w;
  std::vector<std::string> argv = {BinaryPath("worker/deltaserve-worker"),
                                   "--model", "tiny=" + GoldenPath("tiny-moe-f32.gguf"),
                                   "--listen", "127.0.0.1:0",
                                   "--device", "sim",
                                   "--vram", "2GiB",
                                   "--expert-vram", "2MiB",
                                   "--threads", "1",
                                   "--ctx", "512",
                                   "--parallel", "2",
                                   "--cache-type-k", "f32",
                                   "--cache-type-v", "f32",
                                   "--snapshot-ram", "0",
                                   "--redis", redis_url,
                                   "--metrics-port", "0"};
  w.proc = std::make_unique<ChildProcess>(argv);
  std::optional<std::string> line = w.proc->WaitForLine("listening on ", seconds(120));
  EXPECT_TRUE(line.has_value()) << w.proc->err();
  if (!line) return w;
  w.address = line->substr(line->find("listening on ") + 13);
  w.stub = pb::Worker::NewStub(grpc::CreateChannel(w.address, grpc::InsecureChannelCredentials()));
  return w;
}

pb::ExpertStats Stats(harness::Worker& w) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(30));
  pb::ExpertStatsRequest req;
  req.set_model("tiny");
  pb::ExpertStats s;
  const grpc::Status st = w.stub->GetExpertStats(&ctx, req, &s);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return s;
}

common::ExpertPlacement DeviceSet(const pb::ExpertStats& s) {
  common::ExpertPlacement p = common::ExpertPlacement::Empty(s.n_layer(), s.n_expert());
  for (const pb::LayerExperts& l : s.layers()) {
    if (l.layer() < 0 || l.layer() >= s.n_layer()) continue;
    p.device[static_cast<size_t>(l.layer())].assign(l.device_experts().begin(),
                                                    l.device_experts().end());
  }
  return p;
}

// A greedy completion through the router: its text.
std::string Complete(int port, const std::string& prompt) {
  const json body = {{"model", "tiny"}, {"prompt", prompt}, {"temperature", 0},
                     {"max_tokens", 12}};
  const testing::RawHttpReply r = Http(port, "POST", "/v1/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  const json doc = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.contains("choices")) return "<no answer: " + r.body + ">";
  return doc["choices"][0].value("text", "");
}

std::vector<std::string> Prompts() {
  std::vector<std::string> p;
  for (int i = 0; i < 6; ++i) {
    p.push_back("Request " + std::to_string(i) + ": summarise step " + std::to_string(i * 17) +
                " of the migration plan, then list the tables it touches and why.");
  }
  return p;
}

TEST(PlacementEndToEndTest, RouterPlansPushesAndStoresAndANewWorkerStartsFromIt) {
  RedisServerProcess redis;
  ASSERT_TRUE(redis.Start());
  harness::Worker a = StartSimWorker(redis.url());
  harness::Worker b = StartSimWorker(redis.url());
  ASSERT_FALSE(a.address.empty());
  ASSERT_FALSE(b.address.empty());
  const pb::ExpertStats a0 = Stats(a), b0 = Stats(b);
  ASSERT_TRUE(a0.tiered());
  ASSERT_EQ(a0.n_layer(), kLayers);
  ASSERT_EQ(a0.n_expert(), kExperts);
  ASSERT_GT(a0.device_slots(), 0);
  ASSERT_LT(a0.device_slots(), kLayers * kExperts);
  // No record in Redis yet: both start from their warm-up's routing counts.
  EXPECT_EQ(a0.startup_source(), "warmup");
  EXPECT_EQ(a0.placement_generation(), 0u);

  const std::string config_path = ::testing::TempDir() + "/placement_e2e_" +
                                  std::to_string(::getpid()) + ".yaml";
  std::ofstream(config_path) << "placement:\n  enabled: true\n  interval_seconds: 1\n"
                             << "  hysteresis: 0.1\n  min_gain: 0\n  redis: " << redis.url()
                             << "\n";
  ChildProcess router({BinaryPath("router/deltaserve-router"), "--listen", "127.0.0.1:0",
                       "--worker", a.address, "--worker", b.address, "--config", config_path});
  std::optional<std::string> rline = router.WaitForLine("listening on ", seconds(30));
  ASSERT_TRUE(rline.has_value()) << router.err();
  const int port = std::atoi(rline->substr(rline->rfind(':') + 1).c_str());
  bool ready = false;
  for (int i = 0; i < 600 && !ready; ++i) {
    ready = Http(port, "GET", "/ready").status == 200;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(ready) << router.err();

  // The answers before any plan: the reference for every later answer.
  std::vector<std::string> before;
  for (const std::string& p : Prompts()) before.push_back(Complete(port, p));

  // Traffic until the router has pushed a plan to both workers and saved the record.
  json view;
  bool pushed = false;
  const auto deadline = std::chrono::steady_clock::now() + seconds(90);
  while (!pushed && std::chrono::steady_clock::now() < deadline) {
    for (const std::string& p : Prompts()) Complete(port, p);
    const testing::RawHttpReply r = Http(port, "GET", "/admin/placement");
    ASSERT_EQ(r.status, 200) << r.body;
    view = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(view.is_discarded()) << r.body;
    const pb::ExpertStats sa = Stats(a), sb = Stats(b);
    pushed = sa.placement_generation() > 0 && sb.placement_generation() > 0 &&
             sa.moves_pending() == 0 && sb.moves_pending() == 0;
    if (!pushed) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_TRUE(pushed) << "no plan reached both workers in 90 s; admin view: " << view.dump()
                      << "\nrouter: " << router.err();

  // Without traffic the heat only decays (every expert by the same factor), so the next plans
  // are the sets the workers hold: a cycle whose outcome is "unchanged" for both. The admin view
  // shows the sets as the workers reported them at the start of that cycle.
  auto find_model = [](const json& v) -> const json* {
    if (!v.contains("models")) return nullptr;
    for (const json& m : v["models"]) {
      if (m.value("model", "") == "tiny") return &m;
    }
    return nullptr;
  };
  const json* model = nullptr;
  bool settled = false;
  const auto settle_deadline = std::chrono::steady_clock::now() + seconds(60);
  while (!settled && std::chrono::steady_clock::now() < settle_deadline) {
    const testing::RawHttpReply r = Http(port, "GET", "/admin/placement");
    ASSERT_EQ(r.status, 200) << r.body;
    view = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(view.is_discarded()) << r.body;
    model = find_model(view);
    settled = model != nullptr && (*model)["workers"].size() == 2;
    if (settled) {
      for (const json& w : (*model)["workers"]) settled &= w.value("outcome", "") == "unchanged";
    }
    if (!settled) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  ASSERT_TRUE(settled) << "the plans did not settle in 60 s without traffic: " << view.dump();
  EXPECT_EQ(model->value("redis", ""), "saved") << model->dump();
  ASSERT_EQ((*model)["workers"].size(), 2u) << model->dump();

  // The record in Redis: the fingerprint both workers report, the model's shape, heat
  // accumulated from the traffic.
  absl::StatusOr<common::RedisOptions> ro = common::ParseRedisUrl(redis.url());
  ASSERT_TRUE(ro.ok()) << ro.status();
  auto client = common::RedisClient::Create(*ro, absl::Seconds(5));
  ASSERT_TRUE(client.ok()) << client.status();
  const pb::ExpertStats sa = Stats(a), sb = Stats(b);
  ASSERT_EQ(sa.model_fingerprint(), sb.model_fingerprint());
  const std::string key = common::ExpertPlacementRecordKey(sa.model_fingerprint());
  auto blob = (*client)->Get(key);
  ASSERT_TRUE(blob.ok()) << blob.status();
  ASSERT_TRUE(blob->has_value()) << "no record at " << key;
  absl::StatusOr<common::ExpertPlacementRecord> record =
      common::ParseExpertPlacementRecord(**blob);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->model_fingerprint, sa.model_fingerprint());
  EXPECT_EQ(record->n_layer, kLayers);
  EXPECT_EQ(record->n_expert, kExperts);
  double heat = 0;
  for (const auto& l : record->heat) {
    for (double h : l) heat += h;
  }
  EXPECT_GT(heat, 0.0);

  // Each worker holds what the admin view says it holds, within its budget.
  for (const json& w : (*model)["workers"]) {
    const pb::ExpertStats& s = w.value("address", "") == a.address ? sa : sb;
    const common::ExpertPlacement held = DeviceSet(s);
    EXPECT_TRUE(common::ValidateExpertPlacement(held, s.device_slots()).ok());
    ASSERT_EQ(w["layers"].size(), static_cast<size_t>(kLayers)) << w.dump();
    for (const json& l : w["layers"]) {
      const int layer = l.value("layer", -1);
      ASSERT_GE(layer, 0);
      ASSERT_LT(layer, kLayers);
      EXPECT_EQ(l["device_experts"].get<std::vector<int32_t>>(),
                held.device[static_cast<size_t>(layer)])
          << "worker " << w.value("address", "") << " layer " << layer;
    }
  }

  // The answers did not change while experts moved and after.
  const std::vector<std::string> prompts = Prompts();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(Complete(port, prompts[i]), before[i]) << prompts[i];
  }

  // A worker started now begins from the stored record: the hottest experts of its heat that
  // its own slots hold.
  harness::Worker c = StartSimWorker(redis.url());
  ASSERT_FALSE(c.address.empty());
  const pb::ExpertStats sc = Stats(c);
  EXPECT_EQ(sc.startup_source(), "saved") << c.proc->err();
  auto blob_now = (*client)->Get(key);  // the record the worker read (the router may rewrite it)
  ASSERT_TRUE(blob_now.ok() && blob_now->has_value());
  absl::StatusOr<common::ExpertPlacementRecord> read_back =
      common::ParseExpertPlacementRecord(**blob_now);
  ASSERT_TRUE(read_back.ok()) << read_back.status();
  const common::ExpertPlacement from_record = common::HottestExpertPlacement(
      read_back->heat, sc.device_slots());
  const common::ExpertPlacement from_first = common::HottestExpertPlacement(
      record->heat, sc.device_slots());
  const common::ExpertPlacement held = DeviceSet(sc);
  EXPECT_TRUE(held == from_record || held == from_first)
      << "worker c holds " << common::DescribeExpertPlacement(held, 8) << "\nrecord says "
      << common::DescribeExpertPlacement(from_record, 8);
  EXPECT_THAT(c.proc->err(), HasSubstr("start-up expert placement from saved"));
}

}  // namespace
}  // namespace deltaserve
