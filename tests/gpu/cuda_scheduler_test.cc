// The scheduler on the CUDA backend (label gpu; SKIPPED with the reason where no GPU can be used):
// what moves state and KV between sequences, and between device and host, on a real device. The
// reference for every request is the same prompt run cold and alone through the engine on the
// same GPU with a greedy loop (tiny F32 models). Tokens must be identical and each chosen
// token's logprob within 1e-3 (the GPU's decode/prefill tolerance, cuda_engine_golden_test):
// - requests joining a running batch (chunked prefill mixed with decode), with n-gram speculation
//   (state copied into spare slots on the device, restored on rejection) and a cache small enough
//   to preempt;
// - n = 3 greedy choices forked after one prefill (slot copied on the device, pages shared);
// - a conversation resumed from RAM snapshots (state device -> host at capture, host -> device at
//   restore), then from an image on a second scheduler (KV pages out of and into device memory).
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/snapshot_key.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ops.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_paths.h"
#include "worker/cache/device_memory.h"
#include "worker/cache/snapshot_cache.h"
#include "worker/engine/qwen35.h"
#include "worker/sched/scheduler.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;

class Sink : public GenerationSink {
 public:
  void OnTokens(absl::Span<const GeneratedToken> tokens) override {
    for (const GeneratedToken& t : tokens) {
      this->tokens.push_back(t.token);
      logprobs.push_back(t.logprobs ? t.logprobs->logprob : NAN);
    }
  }
  void OnFinish(const GenerationResult& r) override { result = r; }
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<GenerationResult> result;
};

class CudaSchedulerTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::string why;
    if (kernels::CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no GPU on this machine: " << why;
    const std::string path = GoldenPath(std::string(GetParam()) + ".gguf");
    auto file = common::GgufFile::Open(path);
    ASSERT_TRUE(file.ok());
    auto hp = common::ReadQwen35HParams(**file);
    ASSERT_TRUE(hp.ok());
    const DeviceScratchFunctions f{
        &kernels::cuda::MatMulScratchBytes, &kernels::cuda::MoeFfnScratchBytes,
        &kernels::cuda::PagedAttentionScratchBytes, &kernels::cuda::GatedDeltaRuleScratchBytes};
    kernels::CudaBackendOptions o;
    o.scratch_bytes = ForwardPassScratchBytes(*hp, 512, 512, 2048, f);
    backend_ = kernels::MakeCudaBackend(o, &why);
    ASSERT_NE(backend_, nullptr) << why;
    auto m = Qwen35Model::Load(path, *backend_);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    std::ifstream in(GoldenPath(std::string(GetParam()) + ".json"));
    const nlohmann::json doc = nlohmann::json::parse(in);
    for (const auto& s : doc.at("sequences")) {
      prompts_.push_back(s.at("tokens").get<std::vector<int32_t>>());
    }
  }

  // Greedy tokens and logprobs of `prompt` alone, cold.
  std::pair<std::vector<int32_t>, std::vector<double>> Alone(const std::vector<int32_t>& prompt,
                                                             int n) {
    std::pair<std::vector<int32_t>, std::vector<double>> ref;
    auto seq = model_->NewSequence(static_cast<int64_t>(prompt.size()) + n);
    EXPECT_TRUE(seq.ok());
    std::vector<float> logits;
    std::vector<int32_t> feed = prompt;
    const int64_t nv = model_->n_vocab();
    for (int i = 0; i < n; ++i) {
      BatchEntry e{seq->get(), feed, false};
      EXPECT_TRUE(model_->Forward({&e, 1}, logits).ok());
      const int32_t t = Argmax(logits, static_cast<int32_t>(nv));
      double mx = logits[0], sum = 0;
      for (int64_t j = 0; j < nv; ++j) mx = std::max<double>(mx, logits[j]);
      for (int64_t j = 0; j < nv; ++j) sum += std::exp(double{logits[j]} - mx);
      ref.first.push_back(t);
      ref.second.push_back(double{logits[t]} - mx - std::log(sum));
      feed = {t};
    }
    return ref;
  }

  void ExpectAlone(const std::vector<int32_t>& prompt, const Sink& sink, const std::string& what) {
    ASSERT_TRUE(sink.result.has_value()) << what;
    const auto ref = Alone(prompt, static_cast<int>(sink.tokens.size()));
    EXPECT_EQ(sink.tokens, ref.first) << what;
    for (size_t i = 0; i < ref.second.size() && i < sink.logprobs.size(); ++i) {
      EXPECT_NEAR(sink.logprobs[i], ref.second[i], 1e-3) << what << " token " << i;
    }
  }

  struct Caches {
    std::shared_ptr<PagedKvCache> kv;
    std::shared_ptr<RecurrentStateSlots> slots;
    std::shared_ptr<SnapshotCache> snapshots;
    std::unique_ptr<Scheduler> sched;
  };
  Caches MakeScheduler(SchedulerOptions o, int64_t pages, uint64_t snapshot_ram = 0) {
    Caches c;
    KvCacheOptions kv = F32KvCache();
    kv.page_tokens = 16;
    c.kv = *PagedKvCache::Create(*backend_, model_->kv_shape(), kv, pages);
    c.slots = *RecurrentStateSlots::Create(*backend_, model_->state_layout(),
                                           o.max_sequences * (o.speculation ? 2 : 1));
    if (snapshot_ram > 0) {
      common::SnapshotDomain domain;
      domain.model_fingerprint = common::ModelFingerprint(model_->file());
      domain.k_type = domain.v_type = "f32";
      domain.page_tokens = kv.page_tokens;
      c.snapshots = std::make_shared<SnapshotCache>(c.kv, c.slots, domain, snapshot_ram);
    }
    auto s = Scheduler::Create(*model_, c.kv, c.slots, o, {},
                               static_cast<int32_t>(model_->n_vocab()), c.snapshots);
    EXPECT_TRUE(s.ok()) << s.status();
    c.sched = std::move(*s);
    return c;
  }

  static GenerationRequest Greedy(const std::vector<int32_t>& prompt, int max_tokens) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = max_tokens;
    r.logprobs = true;
    return r;
  }
  static void RunToEnd(Scheduler& s) {
    for (int guard = 0; s.busy() && guard < 100000; ++guard) s.Step();
    EXPECT_FALSE(s.busy());
  }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<Qwen35Model> model_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_P(CudaSchedulerTest, BatchingSpeculationAndPreemptionGiveTheLoneTokens) {
  SchedulerOptions o;
  o.max_sequences = 3;
  o.step_tokens = 48;
  o.max_context = 512;
  o.speculation = true;
  Caches c = MakeScheduler(o, /*pages=*/30);
  std::vector<std::pair<std::vector<int32_t>, std::shared_ptr<Sink>>> runs;
  for (const auto& p : prompts_) {
    std::vector<int32_t> prompt = p;
    prompt.insert(prompt.end(), p.begin(), p.begin() + std::min<size_t>(p.size(), 20));
    auto sink = std::make_shared<Sink>();
    ASSERT_TRUE(c.sched->Submit(Greedy(prompt, 32), sink).ok());
    runs.emplace_back(prompt, sink);
    c.sched->Step();
  }
  RunToEnd(*c.sched);
  for (size_t i = 0; i < runs.size(); ++i) {
    ExpectAlone(runs[i].first, *runs[i].second, "request " + std::to_string(i));
  }
}

TEST_P(CudaSchedulerTest, ForkedGreedyChoicesGiveTheLoneTokens) {
  SchedulerOptions o;
  o.max_sequences = 4;
  o.max_context = 512;
  Caches c = MakeScheduler(o, /*pages=*/120);
  std::vector<std::shared_ptr<GenerationSink>> sinks;
  std::vector<std::shared_ptr<Sink>> typed;
  for (int i = 0; i < 3; ++i) {
    typed.push_back(std::make_shared<Sink>());
    sinks.push_back(typed.back());
  }
  ASSERT_TRUE(c.sched->Submit(Greedy(prompts_.back(), 24), sinks).ok());
  RunToEnd(*c.sched);
  EXPECT_EQ(c.sched->stats().forked_sequences, 2);
  for (int i = 0; i < 3; ++i)
    ExpectAlone(prompts_.back(), *typed[i], "choice " + std::to_string(i));
}

TEST_P(CudaSchedulerTest, SnapshotsFromRamAndFromAnImageGiveTheColdTokens) {
  SchedulerOptions o;
  o.max_sequences = 2;
  o.step_tokens = 64;
  o.max_context = 1024;
  o.snapshot_interval = 40;
  Caches c = MakeScheduler(o, /*pages=*/160, /*snapshot_ram=*/64 << 20);
  std::vector<std::shared_ptr<const LocalSnapshot>> published;
  c.sched->SetSnapshotPublisher([&](std::vector<std::shared_ptr<const LocalSnapshot>> s, int64_t) {
    published.insert(published.end(), s.begin(), s.end());
  });
  const std::vector<int32_t> turn_end = {7, 8};
  std::vector<int32_t> history, boundaries;
  for (int turn = 0; turn < 3; ++turn) {
    for (int i = 0; i < 40 + 10 * turn; ++i) history.push_back(11 + (i * 41 + turn) % 1900);
    history.insert(history.end(), turn_end.begin(), turn_end.end());
    boundaries.push_back(static_cast<int32_t>(history.size()));
    std::vector<int32_t> prompt = history;
    prompt.insert(prompt.end(), {9, 10});
    GenerationRequest r = Greedy(prompt, 12);
    r.message_boundaries = boundaries;
    r.turn_end_tokens = turn_end;
    auto sink = std::make_shared<Sink>();
    ASSERT_TRUE(c.sched->Submit(std::move(r), sink).ok());
    RunToEnd(*c.sched);
    ExpectAlone(prompt, *sink, "turn " + std::to_string(turn));
    if (turn > 0) {
      EXPECT_EQ(sink->result->cached_from, SnapshotSource::kRam) << "turn " << turn;
      EXPECT_GT(sink->result->cached_prompt_tokens, 0) << "turn " << turn;
    }
    history.insert(history.end(), {9, 10});
    history.insert(history.end(), sink->tokens.begin(), sink->tokens.end());
    history.insert(history.end(), turn_end.begin(), turn_end.end());
    boundaries.push_back(static_cast<int32_t>(history.size()));
  }
  ASSERT_FALSE(published.empty());
  const std::shared_ptr<const LocalSnapshot> last = published.back();
  absl::StatusOr<std::vector<uint8_t>> kv = c.snapshots->CopyKv(*last);
  ASSERT_TRUE(kv.ok()) << kv.status();
  auto image = std::make_shared<SnapshotImage>();
  image->key = last->key();
  image->tokens.assign(last->tokens().begin(), last->tokens().end());
  auto state = std::make_shared<std::vector<uint8_t>>(last->state().begin(), last->state().end());
  auto kv_bytes = std::make_shared<std::vector<uint8_t>>(std::move(*kv));
  image->state = *state;
  image->kv = *kv_bytes;
  image->owner = std::make_shared<std::pair<decltype(state), decltype(kv_bytes)>>(state, kv_bytes);
  Caches other = MakeScheduler(o, /*pages=*/160, /*snapshot_ram=*/64 << 20);
  std::vector<int32_t> prompt = image->tokens;
  for (int i = 0; i < 20; ++i) prompt.push_back(300 + i);
  GenerationRequest r = Greedy(prompt, 12);
  r.remote_snapshot = image;
  auto sink = std::make_shared<Sink>();
  ASSERT_TRUE(other.sched->Submit(std::move(r), sink).ok());
  RunToEnd(*other.sched);
  ExpectAlone(prompt, *sink, "from the image");
  EXPECT_EQ(sink->result->cached_from, SnapshotSource::kRemote);
  published.clear();
}

INSTANTIATE_TEST_SUITE_P(F32Models, CudaSchedulerTest,
                         ::testing::Values("tiny-dense-f32", "tiny-moe-f32"), [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace deltaserve::worker
