// MoE expert placement on real deltaserve-worker processes with the `sim` test device and the
// golden tiny MoE model (8 layers x 16 experts, k = 4) split by --expert-vram into two tiers:
// GetExpertStats' shape and counts rising with requests; SetExpertPlacement moving experts while
// two greedy generations stream, their tokens equal to an unmoved worker's; refusals that change
// nothing; the start-up placement restored from a real redis-server ("saved"), a corrupt record
// falling back to the warm-up with its metric and log line; --record-routing writing the passes
// it served.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/expert_placement.h"
#include "common/expert_placement_record.h"
#include "common/gguf_file.h"
#include "common/redis_client.h"
#include "common/routing_trace.h"
#include "common/snapshot_key.h"
#include "gmock/gmock.h"
#include "tests/support/child_process.h"
#include "tests/support/redis_server.h"
#include "tests/support/test_paths.h"
#include "tests/worker/snapshot_workers.h"

namespace deltaserve::worker {
namespace {

namespace pb = ::deltaserve::v1;
using ::deltaserve::testing::BinaryPath;
using ::deltaserve::testing::ChildProcess;
using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::RedisServerProcess;
using harness::Worker;
using ::testing::HasSubstr;
using std::chrono::seconds;

constexpr int kLayers = 8, kExperts = 16, kUsed = 4;

// deltaserve-worker on the sim device with the tiny MoE model as "tiny": 2 MiB of expert slots
// (about a sixth of the 12 MiB of routed experts), one expert copied per step, `extra` last.
Worker StartSimWorker(std::vector<std::string> extra) {
  Worker w;
  std::vector<std::string> argv = {BinaryPath("worker/deltaserve-worker"),
                                   "--model", "tiny=" + GoldenPath("tiny-moe-f32.gguf"),
                                   "--listen", "127.0.0.1:0",
                                   "--device", "sim",
                                   "--vram", "2GiB",
                                   "--expert-vram", "2MiB",
                                   "--expert-move-bytes", "1",
                                   "--threads", "1",
                                   "--ctx", "1280",
                                   "--parallel", "2",
                                   "--snapshot-ram", "0",
                                   "--metrics-port", "0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  w.proc = std::make_unique<ChildProcess>(argv);
  EXPECT_TRUE(w.proc->started());
  std::optional<std::string> line = w.proc->WaitForLine("listening on ", seconds(120));
  EXPECT_TRUE(line.has_value()) << w.proc->err();
  if (!line) return w;
  w.address = line->substr(line->find("listening on ") + 13);
  if (auto m = w.proc->WaitForLine("metrics on 127.0.0.1:", seconds(5))) {
    const std::string s = m->substr(m->find("127.0.0.1:") + 10);
    w.metrics_port = std::stoi(s.substr(0, s.find('/')));
  }
  w.stub = pb::Worker::NewStub(grpc::CreateChannel(w.address, grpc::InsecureChannelCredentials()));
  return w;
}

pb::ExpertStats Stats(Worker& w) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(30));
  pb::ExpertStatsRequest req;
  req.set_model("tiny");
  pb::ExpertStats out;
  const grpc::Status st = w.stub->GetExpertStats(&ctx, req, &out);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return out;
}

grpc::Status Place(Worker& w, const common::ExpertPlacement& p, uint64_t generation,
                   pb::SetExpertPlacementResponse* out = nullptr) {
  pb::SetExpertPlacementRequest req;
  req.set_model("tiny");
  req.set_generation(generation);
  for (size_t l = 0; l < p.device.size(); ++l) {
    if (p.device[l].empty()) continue;
    pb::LayerExperts* layer = req.add_layers();
    layer->set_layer(static_cast<int32_t>(l));
    for (int32_t e : p.device[l]) layer->add_device_experts(e);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(30));
  pb::SetExpertPlacementResponse ignored;
  return w.stub->SetExpertPlacement(&ctx, req, out != nullptr ? out : &ignored);
}

common::ExpertPlacement DevicePlacement(const pb::ExpertStats& s) {
  common::ExpertPlacement p = common::ExpertPlacement::Empty(s.n_layer(), s.n_expert());
  for (const pb::LayerExperts& l : s.layers()) {
    p.device[static_cast<size_t>(l.layer())].assign(l.device_experts().begin(),
                                                    l.device_experts().end());
  }
  return p;
}

// The `n` experts of highest (layer, expert) score `score(l, e)`: a placement unlike the
// warm-up's and the even one.
template <typename F>
common::ExpertPlacement Ranked(int64_t n, F score) {
  std::vector<std::vector<double>> heat(kLayers, std::vector<double>(kExperts));
  for (int l = 0; l < kLayers; ++l) {
    for (int e = 0; e < kExperts; ++e) heat[l][e] = score(l, e);
  }
  return common::HottestExpertPlacement(heat, n);
}

// Waits (bounded) until the worker's moves are done.
bool WaitForMoves(Worker& w) {
  const auto give_up = std::chrono::steady_clock::now() + seconds(120);
  while (std::chrono::steady_clock::now() < give_up) {
    if (Stats(w).moves_pending() == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

std::vector<int32_t> Prompt(int seed, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(11 + (seed * 7919 + i * 104729) % 2000);
  return p;
}

TEST(ExpertServiceWorkerTest, StatsHaveTheModelsShapeAndCountsRiseWithRequests) {
  Worker w = StartSimWorker({});
  ASSERT_NE(w.stub, nullptr);
  const pb::ExpertStats s = Stats(w);
  EXPECT_EQ(s.model(), "tiny");
  EXPECT_EQ(s.model_fingerprint().size(), 64u);
  EXPECT_EQ(s.n_layer(), kLayers);
  EXPECT_EQ(s.n_expert(), kExperts);
  EXPECT_EQ(s.n_expert_used(), kUsed);
  EXPECT_TRUE(s.tiered());
  EXPECT_GT(s.slot_bytes(), 0u);
  EXPECT_GT(s.device_slots(), 0);
  EXPECT_LT(s.device_slots(), kLayers * kExperts);
  EXPECT_LE(static_cast<uint64_t>(s.device_slots()) * s.slot_bytes(), 2u << 20);
  EXPECT_EQ(s.device_budget_bytes(), 2u << 20);
  EXPECT_EQ(s.startup_source(), "warmup");  // no --redis
  EXPECT_EQ(s.half_life_seconds(), 60);
  EXPECT_EQ(s.moves_pending(), 0);
  EXPECT_EQ(s.placement_generation(), 0u);
  // Since serving started: the load's and the warm-up's passes are not counted.
  EXPECT_EQ(s.routed_total(), 0u);
  EXPECT_EQ(s.routed_device(), 0u);
  EXPECT_EQ(DevicePlacement(s).size(), s.device_slots());  // the start-up placement fills them
  ASSERT_EQ(s.layers_size(), kLayers);
  for (const pb::LayerExperts& l : s.layers()) {
    EXPECT_EQ(l.decayed_tokens_size(), kExperts);
    ASSERT_EQ(l.total_tokens_size(), kExperts);
    for (uint64_t t : l.total_tokens()) EXPECT_EQ(t, 0u);  // the warm-up is not counted
  }
  EXPECT_THAT(w.proc->err(), HasSubstr("start-up expert placement from warmup"));

  // GetWorkerInfo's memory plan carries the same split (what the router and deltaserve-plan
  // users read): 8 x 16 experts, the slots the budget holds, the arena's bytes, a given size.
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(30));
    pb::WorkerInfo info;
    ASSERT_TRUE(w.stub->GetWorkerInfo(&ctx, pb::WorkerInfoRequest(), &info).ok());
    ASSERT_EQ(info.models_size(), 1);
    const pb::MemoryPlan& mp = info.models(0).memory_plan();
    EXPECT_TRUE(mp.experts_split_planned());
    EXPECT_EQ(mp.n_experts(), kLayers * kExperts);
    EXPECT_EQ(mp.n_device_experts(), s.device_slots());
    EXPECT_EQ(mp.expert_slot_bytes(), s.slot_bytes());
    EXPECT_EQ(mp.expert_device_bytes(), static_cast<uint64_t>(s.device_slots()) * s.slot_bytes());
    EXPECT_GT(mp.expert_routed_bytes(), mp.expert_device_bytes());
    EXPECT_FALSE(mp.expert_vram_auto());  // --expert-vram 2MiB
  }

  const std::vector<int32_t> prompt = Prompt(1, 40);
  const int max_tokens = 9;
  const harness::Streamed r = harness::Call(w, harness::Request(prompt, {}, max_tokens));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  const pb::ExpertStats after = Stats(w);
  const uint64_t positions = prompt.size() + max_tokens - 1;  // the last token is never fed
  for (const pb::LayerExperts& l : after.layers()) {
    uint64_t total = 0;
    double decayed = 0;
    for (int e = 0; e < kExperts; ++e) {
      total += l.total_tokens(e);
      decayed += l.decayed_tokens(e);
    }
    EXPECT_EQ(total, positions * kUsed) << "layer " << l.layer();
    EXPECT_GT(decayed, 0);
    EXPECT_LE(decayed, static_cast<double>(total) + 1e-6);
  }
  // The tiers' own counts: every routed pair of the request, some of them from device memory.
  EXPECT_EQ(after.routed_total(), positions * kUsed * kLayers);
  EXPECT_GT(after.routed_device(), 0u);
  EXPECT_LT(after.routed_device(), positions * kUsed * kLayers);
  EXPECT_EQ(harness::Metric(w, harness::Series("deltaserve_model_expert_routed_total")),
            static_cast<double>(after.routed_total()));
  EXPECT_EQ(harness::Metric(w, harness::Series("deltaserve_model_expert_routed_device_total")),
            static_cast<double>(after.routed_device()));
  EXPECT_EQ(harness::Metric(w, harness::Series("deltaserve_model_expert_device_slots")),
            s.device_slots());
  EXPECT_EQ(harness::Metric(w, harness::Series("deltaserve_model_expert_startup_placement_info",
                                               "source=\"warmup\"")),
            1);
}

// A Generate stream read event by event.
struct Stream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<pb::GenerateEvent>> reader;
  std::vector<int32_t> tokens;

  Stream(Worker& w, const pb::GenerateRequest& req) {
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(300));
    reader = w.stub->Generate(&ctx, req);
  }
  bool Read() {
    pb::GenerateEvent ev;
    if (!reader->Read(&ev)) return false;
    if (ev.has_token_event()) {
      tokens.insert(tokens.end(), ev.token_event().token_ids().begin(),
                    ev.token_event().token_ids().end());
    }
    return true;
  }
};

TEST(ExpertServiceWorkerTest, MovesDuringStreamingGenerationsChangeNoToken) {
  Worker moved = StartSimWorker({});
  Worker still = StartSimWorker({});
  ASSERT_NE(moved.stub, nullptr);
  ASSERT_NE(still.stub, nullptr);
  const pb::ExpertStats first = Stats(moved);
  const int64_t slots = first.device_slots();
  // Two placements sharing as little as possible: the start-up one and its opposite.
  const common::ExpertPlacement start = DevicePlacement(first);
  const common::ExpertPlacement other = Ranked(
      slots, [&](int l, int e) { return start.Contains(l, e) ? 0.0 : 1.0 + (e * 5 + l) % 11; });
  // Two generations stream at once on `moved`; a placement arrives after their first tokens and
  // each Advance moves one expert per step (--expert-move-bytes 1). The moves must begin while
  // both still run (the worker says so right after accepting the placement); a machine so busy
  // that a generation ends before the call lands gets another try, longer.
  bool overlapped = false;
  for (int attempt = 0, max_tokens = 500; attempt < 4 && !overlapped;
       ++attempt, max_tokens += 200) {
    SCOPED_TRACE(absl::StrCat("attempt ", attempt, ", ", max_tokens, " tokens"));
    const pb::ExpertStats before = Stats(moved);
    const common::ExpertPlacement target = attempt % 2 == 0 ? other : start;
    const pb::GenerateRequest a = harness::Request(Prompt(2 + attempt, 30), {}, max_tokens);
    const pb::GenerateRequest b = harness::Request(Prompt(9 + attempt, 55), {}, max_tokens);
    Stream sa(moved, a), sb(moved, b);
    while (sa.tokens.empty() && sa.Read()) {
    }
    while (sb.tokens.empty() && sb.Read()) {
    }
    ASSERT_FALSE(sa.tokens.empty());
    ASSERT_FALSE(sb.tokens.empty());
    const uint64_t generation = 10 + attempt;
    pb::SetExpertPlacementResponse resp;
    ASSERT_TRUE(Place(moved, target, generation, &resp).ok());
    EXPECT_GT(resp.moves_in(), 1);
    EXPECT_EQ(resp.bytes_to_copy(), static_cast<uint64_t>(resp.moves_in()) * first.slot_bytes());
    {
      grpc::ClientContext ctx;
      pb::WorkerInfo info;
      ASSERT_TRUE(moved.stub->GetWorkerInfo(&ctx, pb::WorkerInfoRequest(), &info).ok());
      overlapped = info.models(0).load().running_sequences() == 2;
    }
    while (sa.Read()) {
    }
    while (sb.Read()) {
    }
    ASSERT_TRUE(sa.reader->Finish().ok());
    ASSERT_TRUE(sb.reader->Finish().ok());
    ASSERT_TRUE(WaitForMoves(moved));
    const pb::ExpertStats after = Stats(moved);
    EXPECT_EQ(DevicePlacement(after), target);
    EXPECT_EQ(after.placement_generation(), generation);
    EXPECT_EQ(after.moves_in() - before.moves_in(), static_cast<uint64_t>(resp.moves_in()));
    EXPECT_EQ(after.moves_out() - before.moves_out(), static_cast<uint64_t>(resp.moves_out()));
    EXPECT_EQ(after.bytes_moved() - before.bytes_moved(), resp.bytes_to_copy());
    // The same requests, one at a time, on a worker whose experts never moved.
    const harness::Streamed ra = harness::Call(still, a), rb = harness::Call(still, b);
    ASSERT_TRUE(ra.status.ok());
    ASSERT_TRUE(rb.status.ok());
    EXPECT_EQ(sa.tokens.size(), static_cast<size_t>(max_tokens));
    EXPECT_EQ(sa.tokens, ra.tokens);
    EXPECT_EQ(sb.tokens, rb.tokens);
  }
  EXPECT_TRUE(overlapped) << "every generation ended before its placement was accepted";
  EXPECT_EQ(Stats(still).placement_generation(), 0u);
  const pb::ExpertStats end = Stats(moved);
  EXPECT_EQ(harness::Metric(moved, harness::Series("deltaserve_model_expert_moves_total",
                                                   "direction=\"in\"")),
            static_cast<double>(end.moves_in()));
  EXPECT_EQ(harness::Metric(moved, harness::Series("deltaserve_model_expert_moved_bytes_total")),
            static_cast<double>(end.bytes_moved()));
  EXPECT_EQ(harness::Metric(moved, harness::Series("deltaserve_model_expert_moves_pending")), 0);
  EXPECT_EQ(harness::Metric(moved, harness::Series("deltaserve_model_expert_move_failures_total")),
            0);
}

TEST(ExpertServiceWorkerTest, RefusedPlacementsChangeNothing) {
  Worker w = StartSimWorker({});
  ASSERT_NE(w.stub, nullptr);
  const pb::ExpertStats before = Stats(w);
  const int64_t slots = before.device_slots();
  auto score = [](int l, int e) { return 1.0 + (l * 3 + e) % 13; };
  // One more expert than the budget holds.
  grpc::Status st = Place(w, Ranked(slots + 1, score), 1);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr(absl::StrCat("the budget holds ", slots)));
  pb::SetExpertPlacementRequest bad;
  bad.set_model("tiny");
  bad.add_layers()->set_layer(kLayers);
  grpc::ClientContext ctx;
  pb::SetExpertPlacementResponse resp;
  st = w.stub->SetExpertPlacement(&ctx, bad, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("layer 8 is not in [0, 8)"));
  common::ExpertPlacement unknown = Ranked(slots - 1, score);
  unknown.device[2].push_back(kExperts);
  st = Place(w, unknown, 2);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("layer 2: expert 16 is not in [0, 16)"));
  bad.set_model("nope");
  grpc::ClientContext ctx2;
  EXPECT_EQ(w.stub->SetExpertPlacement(&ctx2, bad, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  const pb::ExpertStats after = Stats(w);
  EXPECT_EQ(DevicePlacement(after), DevicePlacement(before));
  EXPECT_EQ(after.placement_generation(), 0u);
  EXPECT_EQ(after.moves_pending(), 0);
  EXPECT_EQ(after.moves_in(), before.moves_in());
  EXPECT_EQ(after.bytes_moved(), before.bytes_moved());
}

TEST(ExpertServiceWorkerTest, TheSavedPlacementIsRestoredAtStartAndACorruptOneFallsBack) {
  RedisServerProcess redis;
  ASSERT_TRUE(redis.Start());
  std::unique_ptr<common::RedisClient> client = harness::Client(redis.url());
  // The record the router would write: the fleet's heat, for this file's fingerprint.
  std::string fingerprint;
  {
    auto file = common::GgufFile::Open(GoldenPath("tiny-moe-f32.gguf"));
    ASSERT_TRUE(file.ok());
    for (uint8_t b : common::ModelFingerprint(**file)) {
      absl::StrAppendFormat(&fingerprint, "%02x", b);
    }
  }
  common::ExpertPlacementRecord r;
  r.model_fingerprint = fingerprint;
  r.n_layer = kLayers;
  r.n_expert = kExperts;
  r.half_life_seconds = 60;
  r.updated_unix_ms = 1795000000000;
  r.heat.assign(kLayers, std::vector<double>(kExperts));
  for (int l = 0; l < kLayers; ++l) {
    for (int e = 0; e < kExperts; ++e) r.heat[l][e] = (l < 4 ? 100.0 : 1.0) * ((e * 11 + l) % 16);
  }
  r.device = common::ExpertPlacement::Empty(kLayers, kExperts);
  const std::string key = common::ExpertPlacementRecordKey(fingerprint);
  ASSERT_TRUE(client->Set(key, common::SerializeExpertPlacementRecord(r)).ok());

  Worker w = StartSimWorker({"--redis", redis.url()});
  ASSERT_NE(w.stub, nullptr);
  const pb::ExpertStats s = Stats(w);
  EXPECT_EQ(s.model_fingerprint(), fingerprint);
  EXPECT_EQ(s.startup_source(), "saved");
  EXPECT_EQ(DevicePlacement(s), common::HottestExpertPlacement(r.heat, s.device_slots()));
  EXPECT_EQ(harness::Metric(w, harness::Series("deltaserve_model_expert_startup_placement_info",
                                               "source=\"saved\"")),
            1);

  ASSERT_TRUE(client->Set(key, "{\"format\":\"deltaserve-expert-placement\",\"version\":1,").ok());
  Worker c = StartSimWorker({"--redis", redis.url()});
  ASSERT_NE(c.stub, nullptr);
  EXPECT_EQ(Stats(c).startup_source(), "warmup");
  EXPECT_EQ(harness::Metric(c, harness::Series("deltaserve_model_expert_saved_placement_errors_total",
                                               "reason=\"invalid\"")),
            1);
  EXPECT_EQ(harness::Metric(c, harness::Series("deltaserve_model_expert_saved_placement_errors_total",
                                               "reason=\"redis\"")),
            0);
  EXPECT_THAT(c.proc->err(), HasSubstr("tiny: saved expert placement refused: " + key));
  // It serves all the same.
  EXPECT_TRUE(harness::Call(c, harness::Request(Prompt(4, 12), {}, 4)).status.ok());
}

TEST(ExpertServiceWorkerTest, RecordRoutingWritesTheServedPasses) {
  char dir[] = "/tmp/deltaserve-routing-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/run.trace";
  Worker w = StartSimWorker({"--record-routing", path});
  ASSERT_NE(w.stub, nullptr);
  const std::vector<int32_t> prompt = Prompt(5, 20);
  ASSERT_TRUE(harness::Call(w, harness::Request(prompt, {}, 6)).status.ok());
  w.proc->Signal(SIGTERM);
  ASSERT_EQ(w.proc->Wait(std::chrono::milliseconds(60000)), 0);
  absl::StatusOr<common::RoutingTrace> t = common::ReadRoutingTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->header.n_layer, kLayers);
  EXPECT_EQ(t->header.n_expert, kExperts);
  EXPECT_EQ(t->header.k, kUsed);
  EXPECT_EQ(t->header.model_name, "tiny");
  int64_t tokens = 0;
  for (const common::RoutingStep& step : t->steps) tokens += step.n_tokens;
  // Only the request's passes (not the load's or the warm-up's): its prompt and fed tokens.
  EXPECT_EQ(tokens, static_cast<int64_t>(prompt.size()) + 6 - 1);
  std::remove(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace deltaserve::worker
