// The engine on memory that behaves like a GPU's (tests/support/strict_device_backend.h): every
// op's pointers must be backend memory, and the host faults on any read or write of backend
// memory outside an op. What runs on it is what runs on a GPU worker: prefill, token-by-token
// decode, chunked prefill, two sequences in one batch, the continuous-batching scheduler with
// small pages, speculation and preemption, n > 1 forks, session snapshots restored from RAM and
// from an image and through a real Redis (the tier's writer thread encodes device-memory KV from
// the copy Publish makes on the engine thread), and ServedModel with its warm-up. Each scenario
// runs twice, on the plain CPU backend and on the strict one; since the strict backend runs the
// very same CPU kernels on the same data with the same threads, the logits and the tokens must
// be identical (bit for bit), and the strict backend must have recorded no violation. A
// difference or a violation is a place where the engine would read host memory on a GPU, or
// device memory from the host.
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/redis_client.h"
#include "common/snapshot_key.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "tests/support/redis_server.h"
#include "tests/support/strict_device_backend.h"
#include "tests/support/test_paths.h"
#include "worker/cache/redis_snapshot_tier.h"
#include "worker/cache/snapshot_cache.h"
#include "worker/engine/qwen35.h"
#include "worker/sched/scheduler.h"
#include "worker/sched/served_model.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::StrictDeviceBackend;

std::vector<std::vector<int32_t>> GoldenTokens(const std::string& name) {
  std::ifstream in(GoldenPath(name + ".json"));
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> out;
  for (const auto& s : doc.at("sequences")) {
    out.push_back(s.at("tokens").get<std::vector<int32_t>>());
  }
  return out;
}

// What one scenario produced: every logits row and every token, in order.
struct Outcome {
  std::vector<float> values;
  std::vector<int32_t> tokens;
};

// Runs `scenario` on the CPU backend and on a strict one and checks they agree exactly.
void ExpectSameOnStrictBackend(const std::function<void(kernels::Backend&, Outcome&)>& scenario) {
  StrictDeviceBackend::InstallFaultReporter();
  Outcome cpu_out, strict_out;
  {
    std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend(2);
    scenario(*cpu, cpu_out);
  }
  auto strict = std::make_unique<StrictDeviceBackend>(2);
  scenario(*strict, strict_out);
  EXPECT_TRUE(strict->violations().empty()) << strict->Report();
  EXPECT_GT(strict->ops_run(), 0);
  EXPECT_EQ(strict->live_allocations(), 0u) << "buffers outlived the scenario";
  ASSERT_FALSE(cpu_out.values.empty() && cpu_out.tokens.empty()) << "the scenario produced nothing";
  EXPECT_EQ(strict_out.tokens, cpu_out.tokens);
  ASSERT_EQ(strict_out.values.size(), cpu_out.values.size());
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < cpu_out.values.size(); ++i) {
    // Bitwise (NaN included): the same kernels on the same bytes.
    if (std::memcmp(&cpu_out.values[i], &strict_out.values[i], sizeof(float)) != 0) {
      if (differ++ == 0) first = i;
    }
  }
  EXPECT_EQ(differ, 0u) << "first at value " << first << ": cpu " << cpu_out.values[first]
                        << ", strict " << strict_out.values[first];
}

std::unique_ptr<Qwen35Model> Load(const std::string& name, kernels::Backend& backend) {
  auto m = Qwen35Model::Load(GoldenPath(name + ".gguf"), backend);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// Logits of every token of `tokens` fed in chunks of `chunk` tokens, appended to `out`.
void RunChunked(Qwen35Model& model, const std::vector<int32_t>& tokens, size_t chunk,
                Outcome& out) {
  auto seq = model.NewSequence(static_cast<int64_t>(tokens.size()));
  ASSERT_TRUE(seq.ok()) << seq.status();
  std::vector<float> part;
  for (size_t i = 0; i < tokens.size(); i += chunk) {
    const size_t n = std::min(chunk, tokens.size() - i);
    const BatchEntry e{seq->get(), absl::Span<const int32_t>(tokens.data() + i, n), true};
    absl::Status s = model.Forward({&e, 1}, part);
    ASSERT_TRUE(s.ok()) << s;
    out.values.insert(out.values.end(), part.begin(), part.end());
  }
}

class StrictEngineTest : public ::testing::TestWithParam<const char*> {};

// Every golden sequence in one pass, token by token, and in chunks of 7 and 64.
TEST_P(StrictEngineTest, PrefillDecodeAndChunksMatchTheCpuBackend) {
  const std::string name = GetParam();
  const auto sequences = GoldenTokens(name);
  ExpectSameOnStrictBackend([&](kernels::Backend& backend, Outcome& out) {
    std::unique_ptr<Qwen35Model> model = Load(name, backend);
    ASSERT_NE(model, nullptr);
    for (const auto& tokens : sequences) {
      for (size_t chunk : {tokens.size(), size_t{1}, size_t{7}, size_t{64}}) {
        RunChunked(*model, tokens, chunk, out);
      }
    }
  });
}

// Two sequences prefilled in one batch, then decoded together with only their last rows wanted,
// then a batch where one entry asks for no logits at all.
TEST_P(StrictEngineTest, BatchedSequencesMatchTheCpuBackend) {
  const std::string name = GetParam();
  const auto sequences = GoldenTokens(name);
  ExpectSameOnStrictBackend([&](kernels::Backend& backend, Outcome& out) {
    std::unique_ptr<Qwen35Model> model = Load(name, backend);
    ASSERT_NE(model, nullptr);
    const std::vector<int32_t>& a = sequences[1];
    const std::vector<int32_t>& b = sequences.back();
    auto sa = model->NewSequence(static_cast<int64_t>(a.size()) + 8);
    auto sb = model->NewSequence(static_cast<int64_t>(b.size()) + 8);
    ASSERT_TRUE(sa.ok() && sb.ok());
    std::vector<float> logits;
    const BatchEntry both[2] = {{sa->get(), a, true}, {sb->get(), b, false}};
    ASSERT_TRUE(model->Forward(both, logits).ok());
    out.values.insert(out.values.end(), logits.begin(), logits.end());
    for (int step = 0; step < 4; ++step) {
      const int32_t ta[1] = {static_cast<int32_t>(11 + step)};
      const int32_t tb[2] = {static_cast<int32_t>(20 + step), static_cast<int32_t>(30 + step)};
      BatchEntry e[2] = {{sa->get(), ta, false}, {sb->get(), tb, false}};
      e[1].no_logits = step == 2;
      e[1].last_logits = step == 3 ? 2 : 0;
      ASSERT_TRUE(model->Forward(e, logits).ok());
      out.values.insert(out.values.end(), logits.begin(), logits.end());
    }
  });
}

// On a GPU every copy to the host waits for the device, and none may happen inside a pass (a
// decode step must be capturable as a CUDA graph): one pass copies the logits back, and a MoE
// model's expert ids of all layers in one more copy.
TEST_P(StrictEngineTest, APassCopiesToTheHostOnlyAtItsEnd) {
  const std::string name = GetParam();
  const auto sequences = GoldenTokens(name);
  StrictDeviceBackend backend(2);
  std::unique_ptr<Qwen35Model> model = Load(name, backend);
  ASSERT_NE(model, nullptr);
  auto seq = model->NewSequence(64);
  ASSERT_TRUE(seq.ok());
  std::vector<float> logits;
  const int64_t per_pass = model->hparams().is_moe ? 2 : 1;
  for (size_t n : {size_t{9}, size_t{1}, size_t{1}}) {
    const int64_t before = backend.copies_to_host();
    BatchEntry e{seq->get(), absl::Span<const int32_t>(sequences.back().data(), n), false};
    absl::Status s = model->Forward({&e, 1}, logits);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(backend.copies_to_host() - before, per_pass) << n << " tokens";
  }
  EXPECT_TRUE(backend.violations().empty()) << backend.Report();
}

INSTANTIATE_TEST_SUITE_P(GoldenModels, StrictEngineTest,
                         ::testing::Values("tiny-dense-f32", "tiny-moe-f32", "tiny-dense-q8_0",
                                           "tiny-dense-q4_k_m"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Collects a stream's tokens and logprobs.
class Sink : public GenerationSink {
 public:
  void OnTokens(absl::Span<const GeneratedToken> tokens) override {
    for (const GeneratedToken& t : tokens) {
      this->tokens.push_back(t.token);
      logprobs.push_back(t.logprobs ? t.logprobs->logprob : NAN);
    }
  }
  void OnFinish(const GenerationResult& r) override { result = r; }
  void AppendTo(Outcome& out) const {
    out.tokens.insert(out.tokens.end(), tokens.begin(), tokens.end());
    out.values.insert(out.values.end(), logprobs.begin(), logprobs.end());
    out.tokens.push_back(result.has_value() ? static_cast<int32_t>(result->reason) : -1);
    out.tokens.push_back(result.has_value() ? static_cast<int32_t>(result->cached_prompt_tokens)
                                            : -1);
  }
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<GenerationResult> result;
};

// A scheduler on a paged f32 cache of `pages` pages of 16 tokens, optionally with snapshots.
struct Harness {
  std::unique_ptr<Qwen35Model> model;
  std::shared_ptr<PagedKvCache> cache;
  std::shared_ptr<RecurrentStateSlots> slots;
  std::shared_ptr<SnapshotCache> snapshots;
  std::unique_ptr<Scheduler> sched;
  std::vector<std::shared_ptr<const LocalSnapshot>> published;

  Harness(kernels::Backend& backend, const std::string& name, SchedulerOptions o, int64_t pages,
          uint64_t snapshot_ram = 0) {
    model = Load(name, backend);
    if (model == nullptr) return;
    KvCacheOptions kv = F32KvCache();
    kv.page_tokens = 16;  // page boundaries and copy-on-write everywhere
    auto c = PagedKvCache::Create(backend, model->kv_shape(), kv, pages);
    EXPECT_TRUE(c.ok()) << c.status();
    cache = std::move(*c);
    auto s = RecurrentStateSlots::Create(backend, model->state_layout(),
                                         o.max_sequences * (o.speculation ? 2 : 1));
    EXPECT_TRUE(s.ok());
    slots = *s;
    if (snapshot_ram > 0) {
      common::SnapshotDomain domain;
      domain.model_fingerprint = common::ModelFingerprint(model->file());
      domain.k_type = domain.v_type = "f32";
      domain.page_tokens = kv.page_tokens;
      snapshots = std::make_shared<SnapshotCache>(cache, slots, domain, snapshot_ram);
    }
    auto sc = Scheduler::Create(*model, cache, slots, o, /*eos_token_ids=*/{},
                                static_cast<int32_t>(model->n_vocab()), snapshots);
    EXPECT_TRUE(sc.ok()) << sc.status();
    sched = std::move(*sc);
    sched->SetSnapshotPublisher(
        [this](std::vector<std::shared_ptr<const LocalSnapshot>> s, int64_t) {
          published.insert(published.end(), s.begin(), s.end());
        });
  }
  ~Harness() {
    // Snapshots hold pages of the cache; they go before it, the scheduler before both.
    published.clear();
    sched.reset();
    snapshots.reset();
  }

  std::vector<std::shared_ptr<Sink>> Submit(GenerationRequest r, int n = 1) {
    std::vector<std::shared_ptr<Sink>> sinks;
    std::vector<std::shared_ptr<GenerationSink>> as_sinks;
    for (int i = 0; i < n; ++i) {
      sinks.push_back(std::make_shared<Sink>());
      as_sinks.push_back(sinks.back());
    }
    auto h = sched->Submit(std::move(r), as_sinks);
    EXPECT_TRUE(h.ok()) << h.status();
    return sinks;
  }
  void RunToEnd() {
    for (int guard = 0; sched->busy() && guard < 100000; ++guard) sched->Step();
    EXPECT_FALSE(sched->busy());
  }
};

GenerationRequest Request(std::vector<int32_t> prompt, int max_tokens, float temperature,
                          uint64_t seed) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.sampling.max_tokens = max_tokens;
  r.logprobs = true;
  return r;
}

// Requests joining a running batch (chunked prefill mixed with decode), greedy and sampled, with
// n-gram speculation (state snapshots into spare slots, restored on rejection) and a cache too
// small for all of them at once (preemption and recompute).
TEST(StrictScheduler, BatchingSpeculationAndPreemptionMatchTheCpuBackend) {
  for (const char* name : {"tiny-dense-f32", "tiny-moe-f32"}) {
    SCOPED_TRACE(name);
    const auto sequences = GoldenTokens(name);
    ExpectSameOnStrictBackend([&](kernels::Backend& backend, Outcome& out) {
      SchedulerOptions o;
      o.max_sequences = 3;
      o.step_tokens = 48;
      o.max_context = 512;
      o.speculation = true;
      Harness h(backend, name, o, /*pages=*/30);
      ASSERT_NE(h.sched, nullptr);
      std::vector<std::shared_ptr<Sink>> sinks;
      for (size_t i = 0; i < sequences.size(); ++i) {
        // A repeated prompt gives the n-gram drafter something to propose.
        std::vector<int32_t> prompt = sequences[i];
        prompt.insert(prompt.end(), sequences[i].begin(),
                      sequences[i].begin() + std::min<size_t>(sequences[i].size(), 20));
        const float temperature = i % 2 == 0 ? 0.0f : 0.8f;
        for (auto& s : h.Submit(Request(prompt, 40, temperature, 7 + i))) sinks.push_back(s);
        h.sched->Step();
      }
      h.RunToEnd();
      for (const auto& s : sinks) s->AppendTo(out);
    });
  }
}

// n = 3 choices forked after one prefill (state slot copied on the device, pages shared
// copy-on-write), under a cache small enough that forks get preempted.
TEST(StrictScheduler, ForkedChoicesMatchTheCpuBackend) {
  for (const char* name : {"tiny-dense-f32", "tiny-moe-f32"}) {
    SCOPED_TRACE(name);
    const auto sequences = GoldenTokens(name);
    ExpectSameOnStrictBackend([&](kernels::Backend& backend, Outcome& out) {
      SchedulerOptions o;
      o.max_sequences = 4;
      o.step_tokens = 64;
      o.max_context = 512;
      Harness h(backend, name, o, /*pages=*/40);
      ASSERT_NE(h.sched, nullptr);
      auto a = h.Submit(Request(sequences.back(), 30, 1.0f, 42), 3);
      auto b = h.Submit(Request(sequences[1], 24, 0.0f, 5), 2);
      h.RunToEnd();
      for (const auto& s : a) s->AppendTo(out);
      for (const auto& s : b) s->AppendTo(out);
    });
  }
}

// A conversation whose turns resume from RAM snapshots (state copied device -> host at capture,
// host -> device at restore; pages shared), then the same turns on a second scheduler given the
// first one's snapshot as an image (KV pages copied out of and into backend memory).
TEST(StrictScheduler, SnapshotsFromRamAndImagesMatchTheCpuBackend) {
  const std::vector<int32_t> turn_end = {7, 8};
  for (const char* name : {"tiny-dense-f32", "tiny-moe-f32"}) {
    SCOPED_TRACE(name);
    ExpectSameOnStrictBackend([&](kernels::Backend& backend, Outcome& out) {
      SchedulerOptions o;
      o.max_sequences = 2;
      o.step_tokens = 64;
      o.max_context = 1024;
      o.snapshot_interval = 40;
      Harness h(backend, name, o, /*pages=*/160, /*snapshot_ram=*/64 << 20);
      ASSERT_NE(h.sched, nullptr);
      std::vector<int32_t> history, boundaries;
      std::shared_ptr<const LocalSnapshot> last;
      for (int turn = 0; turn < 4; ++turn) {
        for (int i = 0; i < 30 + 20 * turn; ++i) history.push_back(11 + (i * 37 + turn) % 1900);
        history.insert(history.end(), turn_end.begin(), turn_end.end());
        boundaries.push_back(static_cast<int32_t>(history.size()));
        std::vector<int32_t> prompt = history;
        prompt.insert(prompt.end(), {9, 10});
        GenerationRequest r = Request(prompt, 12, 0.0f, 0);
        r.message_boundaries = boundaries;
        r.turn_end_tokens = turn_end;
        auto sinks = h.Submit(std::move(r));
        h.RunToEnd();
        sinks[0]->AppendTo(out);
        // The reply goes back verbatim, so the next turn resumes where this one's snapshot is.
        history.insert(history.end(), {9, 10});
        history.insert(history.end(), sinks[0]->tokens.begin(), sinks[0]->tokens.end());
        history.insert(history.end(), turn_end.begin(), turn_end.end());
        boundaries.push_back(static_cast<int32_t>(history.size()));
      }
      ASSERT_FALSE(h.published.empty());
      // Boundaries inside 64-token chunks: some snapshots came from state taps (copies from
      // device memory in the middle of a pass).
      EXPECT_GT(h.sched->stats().snapshot_tapped_captures, 0);
      last = h.published.back();
      for (const auto& s : h.published) {
        // What the Redis tier encodes: the state copy and the KV pages read back to the host.
        out.values.insert(
            out.values.end(), reinterpret_cast<const float*>(s->state().data()),
            reinterpret_cast<const float*>(s->state().data()) + s->state().size() / sizeof(float));
      }
      absl::StatusOr<std::vector<uint8_t>> kv = h.snapshots->CopyKv(*last);
      ASSERT_TRUE(kv.ok()) << kv.status();
      out.values.insert(out.values.end(), reinterpret_cast<const float*>(kv->data()),
                        reinterpret_cast<const float*>(kv->data()) + kv->size() / sizeof(float));
      // The image on a second scheduler with caches of its own.
      auto state =
          std::make_shared<std::vector<uint8_t>>(last->state().begin(), last->state().end());
      auto kv_bytes = std::make_shared<std::vector<uint8_t>>(std::move(*kv));
      auto image = std::make_shared<SnapshotImage>();
      image->key = last->key();
      image->tokens.assign(last->tokens().begin(), last->tokens().end());
      image->state = *state;
      image->kv = *kv_bytes;
      image->owner =
          std::make_shared<std::pair<decltype(state), decltype(kv_bytes)>>(state, kv_bytes);
      Harness other(backend, name, o, /*pages=*/160, /*snapshot_ram=*/64 << 20);
      std::vector<int32_t> prompt(last->tokens().begin(), last->tokens().end());
      for (int i = 0; i < 25; ++i) prompt.push_back(100 + i);
      GenerationRequest r = Request(prompt, 12, 0.0f, 0);
      r.remote_snapshot = image;
      auto sinks = other.Submit(std::move(r));
      other.RunToEnd();
      sinks[0]->AppendTo(out);
      EXPECT_EQ(sinks[0]->result->cached_from, SnapshotSource::kRemote);
    });
  }
}

// Through a real Redis: a turn's snapshots published to the tier (on device memory the KV is
// copied to the host in Publish, on the engine thread; the writer thread encodes that copy), and
// the next turn on a second scheduler resumed from the blob the tier fetches.
TEST(StrictRedisTier, PublishedSnapshotsResumeOnAnotherScheduler) {
  deltaserve::testing::RedisServerProcess redis;
  ASSERT_TRUE(redis.Start());
  const std::vector<int32_t> turn_end = {7, 8};
  ExpectSameOnStrictBackend([&](kernels::Backend& backend, Outcome& out) {
    SchedulerOptions o;
    o.max_sequences = 2;
    o.step_tokens = 64;
    o.max_context = 1024;
    o.snapshot_interval = 40;
    RedisTierOptions ro;
    absl::StatusOr<common::RedisOptions> url = common::ParseRedisUrl(redis.url());
    ASSERT_TRUE(url.ok()) << url.status();
    ro.redis = *url;
    ro.timeout = absl::Seconds(5);
    auto make_tier = [&](Harness& h) {
      auto t = RedisSnapshotTier::Create(ro, h.snapshots, h.cache,
                                         SnapshotLayoutOf(*h.cache, h.model->state_layout()),
                                         o.max_context, o.snapshot_interval, "strict");
      EXPECT_TRUE(t.ok()) << t.status();
      RedisSnapshotTier* tier = t->get();
      h.sched->SetSnapshotPublisher([tier](std::vector<std::shared_ptr<const LocalSnapshot>> s,
                                           int64_t n) { tier->Publish(std::move(s), n); });
      return std::move(*t);
    };
    std::vector<int32_t> history, boundaries;
    for (int i = 0; i < 90; ++i) history.push_back(11 + (i * 53) % 1900);
    history.insert(history.end(), turn_end.begin(), turn_end.end());
    boundaries.push_back(static_cast<int32_t>(history.size()));
    std::vector<int32_t> prompt = history;
    prompt.insert(prompt.end(), {9, 10});
    {
      Harness h(backend, "tiny-dense-f32", o, /*pages=*/160, /*snapshot_ram=*/64 << 20);
      ASSERT_NE(h.sched, nullptr);
      std::unique_ptr<RedisSnapshotTier> tier = make_tier(h);
      GenerationRequest r = Request(prompt, 12, 0.0f, 0);
      r.message_boundaries = boundaries;
      r.turn_end_tokens = turn_end;
      auto sinks = h.Submit(std::move(r));
      h.RunToEnd();
      sinks[0]->AppendTo(out);
      history.insert(history.end(), {9, 10});
      history.insert(history.end(), sinks[0]->tokens.begin(), sinks[0]->tokens.end());
      history.insert(history.end(), turn_end.begin(), turn_end.end());
      boundaries.push_back(static_cast<int32_t>(history.size()));
      for (int i = 0; i < 200 && tier->stats().written < 2; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      EXPECT_EQ(tier->stats().written, 2) << "the end-of-output and the prompt's snapshot";
    }
    // The next turn on a second scheduler, from Redis.
    Harness other(backend, "tiny-dense-f32", o, /*pages=*/160, /*snapshot_ram=*/64 << 20);
    ASSERT_NE(other.sched, nullptr);
    std::unique_ptr<RedisSnapshotTier> tier = make_tier(other);
    // This turn's own snapshots stay out of Redis: the run on the other backend must find only
    // the first turn's there.
    other.sched->SetSnapshotPublisher([](auto, int64_t) {});
    for (int i = 0; i < 30; ++i) history.push_back(500 + i);
    history.insert(history.end(), turn_end.begin(), turn_end.end());
    boundaries.push_back(static_cast<int32_t>(history.size()));
    prompt = history;
    prompt.insert(prompt.end(), {9, 10});
    std::optional<RedisLookupPlan> plan = tier->PlanLookup(prompt, boundaries);
    ASSERT_TRUE(plan.has_value());
    std::promise<std::shared_ptr<const SnapshotImage>> fetched;
    tier->FetchAsync(*plan, [&fetched](std::shared_ptr<const SnapshotImage> image) {
      fetched.set_value(std::move(image));
    });
    std::shared_ptr<const SnapshotImage> image = fetched.get_future().get();
    ASSERT_NE(image, nullptr);
    GenerationRequest r = Request(prompt, 12, 0.0f, 0);
    r.message_boundaries = boundaries;
    r.turn_end_tokens = turn_end;
    r.remote_snapshot = image;
    auto sinks = other.Submit(std::move(r));
    other.RunToEnd();
    sinks[0]->AppendTo(out);
    ASSERT_TRUE(sinks[0]->result.has_value());
    EXPECT_EQ(sinks[0]->result->cached_from, SnapshotSource::kRemote);
    EXPECT_EQ(sinks[0]->result->cached_prompt_tokens, static_cast<int64_t>(image->tokens.size()));
  });
}

// ServedModel as the worker builds it: the plan, the caches, the warm-up passes at the planned
// batch shape, then requests through its scheduler.
TEST(StrictServedModel, CreateWarmUpAndServeMatchTheCpuBackend) {
  const auto sequences = GoldenTokens("tiny-moe-f32");
  ExpectSameOnStrictBackend([&](kernels::Backend& backend, Outcome& out) {
    ServingOptions o;
    o.ctx = 512;
    o.n_parallel = 2;
    o.k_type = o.v_type = kernels::WeightType::kF16;
    o.page_tokens = 32;
    o.step_tokens = 96;
    o.speculation = true;
    o.budget_bytes = uint64_t{8} << 30;
    o.snapshot_ram_bytes = 32 << 20;
    auto m = ServedModel::Create(GoldenPath("tiny-moe-f32.gguf"), backend, o);
    ASSERT_TRUE(m.ok()) << m.status();
    std::vector<std::shared_ptr<Sink>> sinks;
    for (size_t i = 0; i < sequences.size(); ++i) {
      auto sink = std::make_shared<Sink>();
      auto h = (*m)->scheduler().Submit(Request(sequences[i], 20, 0.5f, 3 + i), sink);
      ASSERT_TRUE(h.ok()) << h.status();
      sinks.push_back(sink);
    }
    for (int guard = 0; (*m)->scheduler().busy() && guard < 100000; ++guard) {
      (*m)->scheduler().Step();
    }
    for (const auto& s : sinks) s->AppendTo(out);
  });
}

}  // namespace
}  // namespace deltaserve::worker
