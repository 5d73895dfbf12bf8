// The continuous-batching scheduler on the F32 golden models, against an independent reference:
// the same prompt run alone through the engine (Qwen35Model::Forward on a private f32 cache) with
// a plain greedy loop. What is checked:
// - sequences that join and leave a running batch (chunked prefill mixed with decode) produce
//   the tokens they produce alone, and the logprob of every chosen token agrees within 1e-4
//   (batched and single-sequence passes differ only in f32 summation order);
// - n-gram speculation on and off give the same greedy tokens, token for token;
// - under a KV cache far too small for all requests, preemption and recompute lose nothing;
// - cancellation frees pages and the state slot at once; bad requests and a full queue are
//   refused with clear errors; a seeded sampler gives the same tokens whatever else runs.
#include "worker/sched/scheduler.h"

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;

// Token ids of the golden sequences of a model (../shared/golden/NAME.json).
std::vector<std::vector<int32_t>> GoldenTokens(const std::string& name) {
  std::ifstream in(GoldenPath(name + ".json"));
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> out;
  for (const auto& s : doc.at("sequences")) out.push_back(s.at("tokens").get<std::vector<int32_t>>());
  return out;
}

class CollectingSink : public GenerationSink {
 public:
  void OnTokens(absl::Span<const GeneratedToken> tokens) override {
    for (const GeneratedToken& t : tokens) {
      this->tokens.push_back(t.token);
      logprobs.push_back(t.logprobs ? t.logprobs->logprob : NAN);
    }
  }
  void OnFinish(const GenerationResult& r) override {
    EXPECT_FALSE(result.has_value()) << "OnFinish twice";
    result = r;
  }
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<GenerationResult> result;
};

struct Reference {
  std::vector<int32_t> tokens;
  std::vector<double> logprobs;
};

// Greedy generation of `n` tokens for `prompt` alone, with the log-softmax of each choice.
Reference GreedyAlone(Qwen35Model& model, const std::vector<int32_t>& prompt, int n) {
  Reference ref;
  auto seq = model.NewSequence(static_cast<int64_t>(prompt.size()) + n);
  EXPECT_TRUE(seq.ok()) << seq.status();
  std::vector<float> logits;
  std::vector<int32_t> feed = prompt;
  const int64_t nv = model.n_vocab();
  for (int i = 0; i < n; ++i) {
    BatchEntry e{seq->get(), feed, false};
    EXPECT_TRUE(model.Forward({&e, 1}, logits).ok());
    const int32_t t = Argmax(logits, static_cast<int32_t>(nv));
    double mx = logits[0], sum = 0.0;
    for (int64_t j = 0; j < nv; ++j) mx = std::max<double>(mx, logits[j]);
    for (int64_t j = 0; j < nv; ++j) sum += std::exp(double{logits[j]} - mx);
    ref.tokens.push_back(t);
    ref.logprobs.push_back(double{logits[t]} - mx - std::log(sum));
    feed = {t};
  }
  return ref;
}

struct Harness {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<Qwen35Model> model;
  std::unique_ptr<Scheduler> sched;
  std::shared_ptr<PagedKvCache> cache;

  Harness(const std::string& name, SchedulerOptions o, int64_t pages, int64_t page_tokens) {
    backend = kernels::MakeCpuBackend(2);
    auto m = Qwen35Model::Load(GoldenPath(name + ".gguf"), *backend);
    EXPECT_TRUE(m.ok()) << m.status();
    model = std::move(*m);
    KvCacheOptions kv = F32KvCache();
    kv.page_tokens = page_tokens;
    auto c = PagedKvCache::Create(*backend, model->kv_shape(), kv, pages);
    EXPECT_TRUE(c.ok()) << c.status();
    cache = std::move(*c);
    auto slots = RecurrentStateSlots::Create(*backend, model->state_layout(),
                                             o.max_sequences * (o.speculation ? 2 : 1));
    EXPECT_TRUE(slots.ok());
    auto s = Scheduler::Create(*model, cache, *slots, o, /*eos_token_ids=*/{},
                               static_cast<int32_t>(model->n_vocab()));
    EXPECT_TRUE(s.ok()) << s.status();
    sched = std::move(*s);
  }

  std::shared_ptr<CollectingSink> Submit(const std::vector<int32_t>& prompt, int max_tokens,
                                         float temperature = 0.0f, uint64_t seed = 0) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.sampling.max_tokens = max_tokens;
    r.logprobs = true;
    auto sink = std::make_shared<CollectingSink>();
    auto h = sched->Submit(std::move(r), sink);
    EXPECT_TRUE(h.ok()) << h.status();
    return sink;
  }

  void RunToEnd() {
    for (int guard = 0; sched->busy() && guard < 100000; ++guard) sched->Step();
    EXPECT_FALSE(sched->busy());
  }
};

void ExpectMatchesAlone(Qwen35Model& model, const std::vector<int32_t>& prompt, int n,
                        const CollectingSink& sink, const std::string& what) {
  const Reference ref = GreedyAlone(model, prompt, n);
  ASSERT_TRUE(sink.result.has_value()) << what;
  EXPECT_EQ(sink.result->reason, EndReason::kLength) << what;
  EXPECT_EQ(sink.tokens, ref.tokens) << what;
  ASSERT_EQ(sink.logprobs.size(), ref.logprobs.size()) << what;
  for (size_t i = 0; i < ref.logprobs.size(); ++i) {
    EXPECT_NEAR(sink.logprobs[i], ref.logprobs[i], 1e-4) << what << " token " << i;
  }
}

class SchedulerGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SchedulerGoldenTest, JoiningAndLeavingMidBatchEqualsAlone) {
  const std::vector<std::vector<int32_t>> golden = GoldenTokens(GetParam());
  const std::vector<int32_t>& src = golden.back();
  SchedulerOptions o;
  o.max_sequences = 4;
  o.step_tokens = 48;  // prompts are chunked and share steps with decodes
  o.max_context = 512;
  Harness h(GetParam(), o, /*pages=*/64, /*page_tokens=*/16);
  struct Req {
    size_t begin, len;
    int n;
  };
  const Req reqs[] = {{0, 7, 20}, {10, 33, 8}, {3, 100, 16}, {50, 5, 24}, {20, 64, 3}};
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  auto prompt_of = [&](const Req& r) {
    return std::vector<int32_t>(src.begin() + r.begin, src.begin() + r.begin + r.len);
  };
  sinks.push_back(h.Submit(prompt_of(reqs[0]), reqs[0].n));
  sinks.push_back(h.Submit(prompt_of(reqs[1]), reqs[1].n));
  for (int i = 0; i < 3; ++i) h.sched->Step();
  sinks.push_back(h.Submit(prompt_of(reqs[2]), reqs[2].n));
  sinks.push_back(h.Submit(prompt_of(reqs[3]), reqs[3].n));
  for (int i = 0; i < 2; ++i) h.sched->Step();
  sinks.push_back(h.Submit(prompt_of(reqs[4]), reqs[4].n));  // waits for a free slot
  h.RunToEnd();
  for (size_t i = 0; i < sinks.size(); ++i) {
    ExpectMatchesAlone(*h.model, prompt_of(reqs[i]), reqs[i].n, *sinks[i],
                       "request " + std::to_string(i));
  }
  const SchedulerStats s = h.sched->stats();
  EXPECT_EQ(s.free_pages, s.total_pages);
  EXPECT_EQ(s.completed, 5);
}

TEST_P(SchedulerGoldenTest, SpeculationGivesTheSameGreedyTokens) {
  // A prompt that quotes itself three times, so the drafter finds matches; plus a plain one.
  const std::vector<std::vector<int32_t>> golden = GoldenTokens(GetParam());
  std::vector<int32_t> repeating;
  for (int rep = 0; rep < 3; ++rep) {
    repeating.insert(repeating.end(), golden.back().begin(), golden.back().begin() + 40);
  }
  const std::vector<int32_t> plain(golden.back().begin(), golden.back().begin() + 50);
  SchedulerOptions o;
  o.max_sequences = 2;
  o.max_context = 512;
  o.speculation = true;
  o.ngram.ngram_min = 2;
  Harness h(GetParam(), o, 64, 16);
  auto a = h.Submit(repeating, 40);
  auto b = h.Submit(plain, 40);
  h.RunToEnd();
  ExpectMatchesAlone(*h.model, repeating, 40, *a, "repeating");
  ExpectMatchesAlone(*h.model, plain, 40, *b, "plain");
  EXPECT_GT(a->result->drafted_tokens, 0);
  std::printf("speculation on %s: drafted %lld, accepted %lld (repeating prompt)\n",
              GetParam().c_str(), static_cast<long long>(a->result->drafted_tokens),
              static_cast<long long>(a->result->accepted_tokens));
}

TEST_P(SchedulerGoldenTest, SpeculationAcceptsDraftsTheModelAgreesWith) {
  // A prompt that quotes a passage and the model's own greedy continuation of it, then the
  // passage again: the drafter proposes that continuation, which the model (mostly) repeats, so
  // drafts must be accepted — a verifier that rejected every draft would fail here.
  const std::vector<std::vector<int32_t>> golden = GoldenTokens(GetParam());
  const std::vector<int32_t> passage(golden.back().begin(), golden.back().begin() + 40);
  SchedulerOptions o;
  o.max_sequences = 1;
  o.max_context = 512;
  o.speculation = true;
  o.ngram.ngram_min = 2;
  Harness h(GetParam(), o, 64, 16);
  const Reference continuation = GreedyAlone(*h.model, passage, 24);
  std::vector<int32_t> prompt = passage;
  prompt.insert(prompt.end(), continuation.tokens.begin(), continuation.tokens.end());
  prompt.insert(prompt.end(), passage.begin(), passage.end());
  auto a = h.Submit(prompt, 24);
  h.RunToEnd();
  ExpectMatchesAlone(*h.model, prompt, 24, *a, "quoted continuation");
  std::printf("speculation on %s: drafted %lld, accepted %lld (quoted continuation)\n",
              GetParam().c_str(), static_cast<long long>(a->result->drafted_tokens),
              static_cast<long long>(a->result->accepted_tokens));
  EXPECT_GT(a->result->accepted_tokens, 0);
}

TEST_P(SchedulerGoldenTest, TinyCachePreemptsAndLosesNothing) {
  // 8 pages of 16 tokens (128 positions) for 4 requests of 30 + 30 tokens (4 pages each).
  const std::vector<std::vector<int32_t>> golden = GoldenTokens(GetParam());
  const std::vector<int32_t>& src = golden.back();
  SchedulerOptions o;
  o.max_sequences = 4;
  o.max_context = 512;
  Harness h(GetParam(), o, /*pages=*/8, /*page_tokens=*/16);
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 4; ++i) {
    sinks.push_back(h.Submit(std::vector<int32_t>(src.begin() + 10 * i, src.begin() + 10 * i + 30), 30));
  }
  // Needs 10 pages alone: can never run, ends with an error instead of blocking the queue.
  auto too_big = h.Submit(std::vector<int32_t>(src.begin(), src.begin() + 150), 10);
  h.RunToEnd();
  for (int i = 0; i < 4; ++i) {
    ExpectMatchesAlone(*h.model, std::vector<int32_t>(src.begin() + 10 * i, src.begin() + 10 * i + 30),
                       30, *sinks[i], "request " + std::to_string(i));
  }
  ASSERT_TRUE(too_big->result.has_value());
  EXPECT_EQ(too_big->result->reason, EndReason::kError);
  EXPECT_TRUE(absl::IsResourceExhausted(too_big->result->error)) << too_big->result->error;
  const SchedulerStats s = h.sched->stats();
  EXPECT_GT(s.preemptions, 0);
  EXPECT_EQ(s.free_pages, 8);
}

INSTANTIATE_TEST_SUITE_P(Models, SchedulerGoldenTest,
                         ::testing::Values("tiny-dense-f32", "tiny-moe-f32"));

// A greedy request of the first `prompt_tokens` of tiny-dense-f32's longest golden sequence that
// runs long enough (400 tokens) to be cancelled mid-way.
GenerationRequest LongGreedyRequest(int prompt_tokens) {
  const std::vector<int32_t> prompt = GoldenTokens("tiny-dense-f32").back();
  GenerationRequest r;
  r.prompt = std::vector<int32_t>(prompt.begin(), prompt.begin() + prompt_tokens);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = 400;
  return r;
}

TEST(SchedulerTest, CancelFreesPagesAndSlotAtOnce) {
  SchedulerOptions o;
  o.max_sequences = 2;
  o.max_context = 512;
  Harness h("tiny-dense-f32", o, 32, 16);
  const GenerationRequest r = LongGreedyRequest(40);
  auto sink = std::make_shared<CollectingSink>();
  auto handle = h.sched->Submit(r, sink);
  ASSERT_TRUE(handle.ok());
  for (int i = 0; i < 4; ++i) h.sched->Step();
  EXPECT_LT(h.sched->stats().free_pages, 32);
  h.sched->Cancel(*handle);
  h.sched->Step();
  ASSERT_TRUE(sink->result.has_value());
  EXPECT_EQ(sink->result->reason, EndReason::kCancelled);
  const SchedulerStats s = h.sched->stats();
  EXPECT_EQ(s.free_pages, 32);
  EXPECT_EQ(s.free_slots, 2);
  EXPECT_EQ(s.running, 0);
}

// With max_sequences 1, a request waiting behind one that is cancelled starts in the very step
// that takes the cancel: the cancelled sequence gave its slot and pages back there and no longer
// holds a place (it used to, until the step's end, so the waiting one started a step late).
TEST(SchedulerTest, ACancelledSequencesPlaceIsTakenInTheSameStep) {
  SchedulerOptions o;
  o.max_sequences = 1;
  o.max_context = 512;
  Harness h("tiny-dense-f32", o, 32, 16);
  const GenerationRequest r = LongGreedyRequest(20);
  auto first = std::make_shared<CollectingSink>();
  auto handle = h.sched->Submit(r, first);
  ASSERT_TRUE(handle.ok());
  for (int i = 0; i < 3; ++i) h.sched->Step();
  auto second = std::make_shared<CollectingSink>();
  ASSERT_TRUE(h.sched->Submit(r, second).ok());
  h.sched->Step();
  ASSERT_EQ(h.sched->stats().waiting, 1);  // behind the running one
  h.sched->Cancel(*handle);
  h.sched->Step();
  ASSERT_TRUE(first->result.has_value());
  EXPECT_EQ(first->result->reason, EndReason::kCancelled);
  const SchedulerStats s = h.sched->stats();
  EXPECT_EQ(s.running, 1);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.free_slots, 0);
  // The second request runs to its end as it would alone.
  for (int i = 0; i < 1000 && !second->result.has_value(); ++i) h.sched->Step();
  ASSERT_TRUE(second->result.has_value());
  EXPECT_EQ(second->result->reason, EndReason::kLength);
  EXPECT_EQ(second->tokens.size(), 400u);
}

TEST(SchedulerTest, RefusesBadRequestsAndAFullQueue) {
  SchedulerOptions o;
  o.max_sequences = 1;
  o.max_context = 100;
  o.max_waiting = 2;
  Harness h("tiny-dense-f32", o, 16, 16);
  auto submit = [&](std::vector<int32_t> prompt, int max_tokens) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.sampling.max_tokens = max_tokens;
    return h.sched->Submit(std::move(r), std::make_shared<CollectingSink>());
  };
  EXPECT_TRUE(absl::IsInvalidArgument(submit({}, 4).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(submit({1, 2, 99999}, 4).status()));
  auto over = submit(std::vector<int32_t>(90, 5), 20);
  EXPECT_TRUE(absl::IsOutOfRange(over.status()));
  EXPECT_NE(std::string(over.status().message()).find("exceeds the context of 100"),
            std::string::npos)
      << over.status();
  GenerationRequest bad;
  bad.prompt = {1, 2};
  bad.sampling.top_p = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(
      h.sched->Submit(std::move(bad), std::make_shared<CollectingSink>()).status()));
  EXPECT_TRUE(submit({1, 2, 3}, 4).ok());
  EXPECT_TRUE(submit({1, 2, 3}, 4).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(submit({1, 2, 3}, 4).status()));
  h.RunToEnd();
  EXPECT_TRUE(submit({1, 2, 3}, 4).ok());  // room again
}

TEST(SchedulerTest, SeededSamplingDoesNotDependOnTheBatch) {
  SchedulerOptions o;
  o.max_sequences = 4;
  o.max_context = 256;
  const std::vector<int32_t> prompt = GoldenTokens("tiny-dense-f32").back();
  const std::vector<int32_t> p(prompt.begin(), prompt.begin() + 20);
  Harness alone("tiny-dense-f32", o, 32, 16);
  auto a = alone.Submit(p, 24, 0.9f, 7);
  alone.RunToEnd();
  Harness crowd("tiny-dense-f32", o, 32, 16);
  auto x = crowd.Submit(std::vector<int32_t>(prompt.begin() + 5, prompt.begin() + 30), 24, 0.9f, 1);
  auto b = crowd.Submit(p, 24, 0.9f, 7);
  auto y = crowd.Submit(std::vector<int32_t>(prompt.begin() + 9, prompt.begin() + 12), 24, 1.0f, 2);
  crowd.RunToEnd();
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->tokens.size(), 24u);
}

TEST(SchedulerTest, ThreadDrainsEveryRequestOnStop) {
  SchedulerOptions o;
  o.max_sequences = 2;
  o.max_context = 256;
  Harness h("tiny-dense-f32", o, 32, 16);
  const std::vector<int32_t> prompt = GoldenTokens("tiny-dense-f32").back();
  h.sched->Start();
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 3; ++i) {
    sinks.push_back(h.Submit(std::vector<int32_t>(prompt.begin() + i, prompt.begin() + i + 10), 12));
  }
  h.sched->Stop(/*drain=*/true);
  for (const auto& s : sinks) {
    ASSERT_TRUE(s->result.has_value());
    EXPECT_EQ(s->result->reason, EndReason::kLength);
    EXPECT_EQ(s->tokens.size(), 12u);
  }
}

}  // namespace
}  // namespace deltaserve::worker
