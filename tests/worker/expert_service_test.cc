// The worker's expert RPCs and migration in one process (worker/service/expert_service.h,
// worker/sched/scheduler.h): WorkerService over real gRPC on 127.0.0.1 with the golden tiny MoE
// and dense models served on the CPU backend. Without tiers (the CPU) GetExpertStats reports
// the decayed statistics and refuses placements; the two-tier paths run against a recording
// ExpertTiers that moves experts as the contract says (one Advance: evictions, then copies up to
// the byte limit, at least one), so the scheduler's part is checked on its own: Advance only
// between steps and only while moves are wanted, idle migration, a failed Advance counted and
// not fatal, refusals that change nothing. The real tiers on the `sim` device, end to end, are
// in expert_service_worker_test.cc.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "kernels/backend.h"
#include "tests/support/test_paths.h"
#include "tests/worker/recording_expert_tiers.h"
#include "worker/sched/served_model.h"
#include "worker/service/expert_service.h"
#include "worker/service/metrics_endpoint.h"
#include "worker/service/worker_service.h"

namespace deltaserve::worker {
namespace {

namespace pb = ::deltaserve::v1;
using ::deltaserve::testing::GoldenPath;
using ::testing::HasSubstr;
using ::testing::Not;

// Collects a generation's tokens.
class Collect : public GenerationSink {
 public:
  void OnTokens(absl::Span<const GeneratedToken> tokens) override {
    std::lock_guard<std::mutex> lock(mu);
    for (const GeneratedToken& t : tokens) this->tokens.push_back(t.token);
  }
  void OnFinish(const GenerationResult& r) override {
    std::lock_guard<std::mutex> lock(mu);
    result = r;
  }
  bool done() {
    std::lock_guard<std::mutex> lock(mu);
    return result.has_value();
  }
  std::mutex mu;
  std::vector<int32_t> tokens;
  std::optional<GenerationResult> result;
};

ServingOptions Options() {
  ServingOptions o;
  o.ctx = 256;
  o.n_parallel = 2;
  o.page_tokens = 64;
  o.step_tokens = 64;
  o.budget_bytes = 1ull << 30;
  o.n_threads = 2;
  o.snapshot_ram_bytes = 0;
  return o;
}

// Waits (bounded: a hang fails, it does not block the run) until `done` holds.
template <typename F>
bool WaitFor(F done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

class ExpertServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = kernels::MakeCpuBackend(2);
    auto moe = ServedModel::Create(GoldenPath("tiny-moe-f32.gguf"), *backend_, Options());
    ASSERT_TRUE(moe.ok()) << moe.status();
    moe_ = std::move(*moe);
    auto dense = ServedModel::Create(GoldenPath("tiny-dense-f32.gguf"), *backend_, Options());
    ASSERT_TRUE(dense.ok()) << dense.status();
    dense_ = std::move(*dense);
    // 8 layers x 16 experts; 40 slots of 1 KiB.
    tiers_ = std::make_unique<RecordingTiers>(8, 16, 40, 1024);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
    if (moe_ != nullptr) moe_->scheduler().Stop(false);
  }

  // Serves "moe" (with the recording tiers when `tiered`) and "dense".
  void Serve(bool tiered) {
    ModelExpertsOptions o;
    o.half_life_seconds = 60;
    o.clock = [] { return 0.0; };  // no time passes: decayed counts equal the totals
    experts_ = std::make_unique<ModelExperts>(*moe_, tiered ? tiers_.get() : nullptr, o);
    if (tiered) moe_->scheduler().SetExpertMigration(tiers_.get(), /*max_bytes=*/2048);
    service_ = std::make_unique<WorkerService>(
        "w", "cpu", std::map<std::string, ServedModel*>{{"moe", moe_.get()}, {"dense", dense_.get()}});
    service_->SetModelExperts("moe", experts_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_GT(port, 0);
    stub_ = pb::Worker::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                                    grpc::InsecureChannelCredentials()));
  }

  grpc::Status Stats(const std::string& model, pb::ExpertStats* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    pb::ExpertStatsRequest req;
    req.set_model(model);
    return stub_->GetExpertStats(&ctx, req, out);
  }
  grpc::Status Place(const pb::SetExpertPlacementRequest& req,
                     pb::SetExpertPlacementResponse* out = nullptr) {
    pb::SetExpertPlacementResponse ignored;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->SetExpertPlacement(&ctx, req, out != nullptr ? out : &ignored);
  }
  // A request putting `experts` of each listed layer on the device.
  static pb::SetExpertPlacementRequest Request(
      const std::vector<std::pair<int, std::vector<int>>>& layers, uint64_t generation = 1) {
    pb::SetExpertPlacementRequest r;
    r.set_model("moe");
    r.set_generation(generation);
    for (const auto& [layer, experts] : layers) {
      pb::LayerExperts* l = r.add_layers();
      l->set_layer(layer);
      for (int e : experts) l->add_device_experts(e);
    }
    return r;
  }
  // Runs one greedy request on the MoE model's scheduler to its end.
  std::vector<int32_t> Generate(const std::vector<int32_t>& prompt, int max_tokens,
                                bool step_here) {
    GenerationRequest g;
    g.prompt = prompt;
    g.sampling.temperature = 0;
    g.sampling.max_tokens = max_tokens;
    g.sampling.ignore_eos = true;
    auto sink = std::make_shared<Collect>();
    EXPECT_TRUE(moe_->scheduler().Submit(std::move(g), sink).ok());
    if (step_here) {
      while (!sink->done()) moe_->scheduler().Step();
    } else {
      EXPECT_TRUE(WaitFor([&] { return sink->done(); }));
    }
    return sink->tokens;
  }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<ServedModel> moe_, dense_;
  std::unique_ptr<RecordingTiers> tiers_;
  std::unique_ptr<ModelExperts> experts_;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<pb::Worker::Stub> stub_;
};

TEST_F(ExpertServiceTest, StatsWithoutTiersHaveTheModelsShapeAndCountsThatRise) {
  Serve(/*tiered=*/false);
  pb::ExpertStats s;
  ASSERT_TRUE(Stats("moe", &s).ok());
  EXPECT_EQ(s.model(), "moe");
  EXPECT_EQ(s.model_fingerprint().size(), 64u);
  EXPECT_EQ(s.model_fingerprint().find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(s.n_layer(), 8);
  EXPECT_EQ(s.n_expert(), 16);
  EXPECT_EQ(s.n_expert_used(), 4);
  EXPECT_FALSE(s.tiered());
  EXPECT_EQ(s.device_slots(), 0);  // the CPU: no expert is in device memory
  EXPECT_EQ(s.startup_source(), "all");
  EXPECT_EQ(s.half_life_seconds(), 60);
  ASSERT_EQ(s.layers_size(), 8);
  for (int l = 0; l < 8; ++l) {
    EXPECT_EQ(s.layers(l).layer(), l);
    EXPECT_EQ(s.layers(l).decayed_tokens_size(), 16);
    EXPECT_EQ(s.layers(l).total_tokens_size(), 16);
    EXPECT_EQ(s.layers(l).device_experts_size(), 0);
  }
  EXPECT_EQ(s.routed_total(), 0u);  // the load's warm-up pass is not counted

  moe_->scheduler().Start();
  const std::vector<int32_t> prompt = {5, 17, 300, 42, 9, 1000, 77, 12, 640, 3};
  const int max_tokens = 6;
  Generate(prompt, max_tokens, /*step_here=*/false);
  pb::ExpertStats after;
  ASSERT_TRUE(Stats("moe", &after).ok());
  // Every position run through the model routes k = 4 tokens in each of the 8 layers: the
  // prompt and the generated tokens but the last (sampled, never fed).
  const uint64_t positions = prompt.size() + max_tokens - 1;
  EXPECT_EQ(after.routed_total(), positions * 4 * 8);
  EXPECT_EQ(after.routed_device(), 0u);
  for (int l = 0; l < 8; ++l) {
    uint64_t total = 0;
    double decayed = 0;
    for (int e = 0; e < 16; ++e) {
      total += after.layers(l).total_tokens(e);
      decayed += after.layers(l).decayed_tokens(e);
    }
    EXPECT_EQ(total, positions * 4) << "layer " << l;
    EXPECT_EQ(decayed, static_cast<double>(total)) << "layer " << l;
  }
  const std::string metrics = RenderWorkerMetrics(*service_);
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("deltaserve_model_expert_routed_total{model=\"moe\"} ",
                                              positions * 32)));
  EXPECT_THAT(metrics, HasSubstr("deltaserve_model_expert_routed_device_total{model=\"moe\"} 0"));
  EXPECT_THAT(metrics, HasSubstr("deltaserve_model_expert_device_slots{model=\"moe\"} 0"));
  EXPECT_THAT(metrics, HasSubstr(
      "deltaserve_model_expert_startup_placement_info{model=\"moe\",source=\"all\"} 1"));
  EXPECT_THAT(metrics, Not(HasSubstr("deltaserve_model_expert_routed_total{model=\"dense\"")));
}

TEST_F(ExpertServiceTest, UnknownDenseAndUntieredModelsAreRefused) {
  Serve(/*tiered=*/false);
  pb::ExpertStats s;
  grpc::Status st = Stats("nope", &s);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("'nope' is not served here"));
  st = Stats("dense", &s);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("dense"));
  pb::SetExpertPlacementRequest r = Request({{0, {1, 2}}});
  r.set_model("dense");
  EXPECT_EQ(Place(r).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  r.set_model("nope");
  EXPECT_EQ(Place(r).error_code(), grpc::StatusCode::NOT_FOUND);
  st = Place(Request({{0, {1, 2}}}));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("nothing to place"));
}

TEST_F(ExpertServiceTest, BadPlacementsAreRefusedAndChangeNothing) {
  Serve(/*tiered=*/true);
  const common::ExpertPlacement before = tiers_->Target();
  const struct {
    pb::SetExpertPlacementRequest request;
    grpc::StatusCode code;
    const char* message;
  } cases[] = {
      {Request({{8, {1}}}), grpc::StatusCode::INVALID_ARGUMENT, "layer 8 is not in [0, 8)"},
      {Request({{-1, {1}}}), grpc::StatusCode::INVALID_ARGUMENT, "layer -1 is not in [0, 8)"},
      {Request({{2, {1}}, {2, {3}}}), grpc::StatusCode::INVALID_ARGUMENT, "layer 2 is listed twice"},
      {Request({{3, {16}}}), grpc::StatusCode::INVALID_ARGUMENT, "layer 3: expert 16 is not in [0, 16)"},
      {Request({{3, {4, 4}}}), grpc::StatusCode::INVALID_ARGUMENT, "layer 3: expert 4 is listed twice"},
      // 41 experts, 40 slots.
      {Request({{0, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
                {1, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
                {2, {0, 1, 2, 3, 4, 5, 6, 7, 8}}}),
       grpc::StatusCode::RESOURCE_EXHAUSTED, "41 experts in device memory, the budget holds 40"},
  };
  for (const auto& c : cases) {
    grpc::Status st = Place(c.request);
    EXPECT_EQ(st.error_code(), c.code) << c.message << ": " << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(c.message));
  }
  EXPECT_EQ(tiers_->Target(), before);
  EXPECT_EQ(tiers_->Current(), before);
  EXPECT_EQ(tiers_->stats().generation, 0u);
  EXPECT_EQ(tiers_->advances(), 0);
}

TEST_F(ExpertServiceTest, MovesAdvanceBetweenStepsOnlyWhileWantedWithinTheByteLimit) {
  Serve(/*tiered=*/true);
  // Even placement of 40 slots over 8 layers: experts 0..4 of every layer. The target swaps
  // layer 0's experts for 11..15 and empties layer 1: 5 in, 10 out.
  std::vector<std::pair<int, std::vector<int>>> layers = {{0, {11, 12, 13, 14, 15}}};
  for (int l = 2; l < 8; ++l) layers.push_back({l, {0, 1, 2, 3, 4}});
  pb::SetExpertPlacementResponse resp;
  ASSERT_TRUE(Place(Request(layers, /*generation=*/7), &resp).ok());
  EXPECT_EQ(resp.moves_in(), 5);
  EXPECT_EQ(resp.moves_out(), 10);
  EXPECT_EQ(resp.bytes_to_copy(), 5u * 1024);
  // Nothing moves until a step boundary.
  EXPECT_EQ(tiers_->advances(), 0);
  EXPECT_EQ(tiers_->stats().moves_pending, 15);
  // The scheduler is not started: each Step() is one boundary, with one Advance of 2 KiB
  // (two experts), evictions first.
  moe_->scheduler().Step();
  EXPECT_EQ(tiers_->advances(), 1);
  EXPECT_EQ(tiers_->stats().moves_out, 10u);
  EXPECT_EQ(tiers_->stats().moves_in, 2u);
  moe_->scheduler().Step();
  moe_->scheduler().Step();
  EXPECT_EQ(tiers_->advances(), 3);
  EXPECT_EQ(tiers_->stats().moves_pending, 0);
  EXPECT_EQ(tiers_->Current(), tiers_->Target());
  // Done: later steps, with traffic or without, leave the tiers alone.
  Generate({1, 2, 3, 4, 5}, 3, /*step_here=*/true);
  moe_->scheduler().Step();
  EXPECT_EQ(tiers_->advances(), 3);
  pb::ExpertStats s;
  ASSERT_TRUE(Stats("moe", &s).ok());
  EXPECT_TRUE(s.tiered());
  EXPECT_EQ(s.device_slots(), 40);
  EXPECT_EQ(s.slot_bytes(), 1024u);
  EXPECT_EQ(s.device_budget_bytes(), 40u * 1024);
  EXPECT_EQ(s.placement_generation(), 7u);
  EXPECT_EQ(s.moves_in(), 5u);
  EXPECT_EQ(s.moves_out(), 10u);
  EXPECT_EQ(s.bytes_moved(), 5u * 1024);
  EXPECT_EQ(s.moves_pending(), 0);
  EXPECT_EQ(s.routed_total(), 1000u);  // the tiers' own counters
  EXPECT_EQ(s.routed_device(), 250u);
  EXPECT_EQ(s.startup_source(), "even");
  ASSERT_EQ(s.layers_size(), 8);
  EXPECT_THAT(s.layers(0).device_experts(), ::testing::ElementsAre(11, 12, 13, 14, 15));
  EXPECT_EQ(s.layers(1).device_experts_size(), 0);
  const std::string metrics = RenderWorkerMetrics(*service_);
  for (const char* series : {
           "deltaserve_model_expert_moves_total{model=\"moe\",direction=\"in\"} 5",
           "deltaserve_model_expert_moves_total{model=\"moe\",direction=\"out\"} 10",
           "deltaserve_model_expert_moved_bytes_total{model=\"moe\"} 5120",
           "deltaserve_model_expert_moves_pending{model=\"moe\"} 0",
           "deltaserve_model_expert_device_slots{model=\"moe\"} 40",
           "deltaserve_model_expert_routed_total{model=\"moe\"} 1000",
           "deltaserve_model_expert_routed_device_total{model=\"moe\"} 250",
           "deltaserve_model_expert_placement_generation{model=\"moe\"} 7",
           "deltaserve_model_expert_move_failures_total{model=\"moe\"} 0",
       }) {
    EXPECT_THAT(metrics, HasSubstr(series));
  }
}

TEST_F(ExpertServiceTest, AnIdleSchedulerFinishesTheMovesAndAFailedAdvanceIsNotFatal) {
  Serve(/*tiered=*/true);
  moe_->scheduler().Start();
  const std::vector<int32_t> prompt = {8, 99, 1500, 23, 4};
  const std::vector<int32_t> reference = Generate(prompt, 5, /*step_here=*/false);
  // No traffic: the moves still complete (two experts per boundary), and are no engine steps.
  const int64_t steps = moe_->scheduler().stats().steps;
  ASSERT_TRUE(Place(Request({{0, {10, 11, 12, 13, 14, 15}}, {5, {6, 7, 8, 9}}})).ok());
  ASSERT_TRUE(WaitFor([&] { return tiers_->stats().moves_pending == 0; }));
  EXPECT_EQ(tiers_->Current(), tiers_->Target());
  EXPECT_GE(tiers_->advances(), 5);  // 10 experts in, at most 2 per Advance
  EXPECT_EQ(moe_->scheduler().stats().steps, steps);
  // An Advance that fails is counted; the moves wait for the next placement; serving goes on.
  tiers_->FailNextAdvance();
  ASSERT_TRUE(Place(Request({{1, {0, 1, 2}}}, 2)).ok());
  ASSERT_TRUE(WaitFor([&] { return moe_->scheduler().stats().expert_move_failures == 1; }));
  EXPECT_GT(tiers_->stats().moves_pending, 0);
  EXPECT_EQ(Generate(prompt, 5, /*step_here=*/false), reference);
  EXPECT_THAT(RenderWorkerMetrics(*service_),
              HasSubstr("deltaserve_model_expert_move_failures_total{model=\"moe\"} 1"));
  ASSERT_TRUE(Place(Request({{1, {0, 1, 2}}}, 3)).ok());
  ASSERT_TRUE(WaitFor([&] { return tiers_->stats().moves_pending == 0; }));
  EXPECT_EQ(tiers_->stats().generation, 3u);
}

}  // namespace
}  // namespace deltaserve::worker
