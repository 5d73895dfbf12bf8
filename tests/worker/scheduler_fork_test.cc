// n > 1 choices in the scheduler (scheduler_fork.cc) on the F32 golden models. The reference for
// every choice is independent of forking: the same prompt submitted alone, as a one-choice
// request, with the derived seed (request seed + i) to a scheduler of its own. What is checked:
// - choice i's tokens equal the lone run's with seed + i, chunked prefill or not, and the prompt
//   is computed once (prompt_tokens_computed) with n - 1 forks counted;
// - right after the fork the prompt's KV pages are shared (reference counts, free pages) and
//   every choice's recurrent state is byte-for-byte the parent's;
// - forks preempted under a small cache and recomputed still give the lone runs' tokens;
// - a stop (CancelChoice) ends one choice, Cancel ends all (those not forked yet included), and
//   everything goes back to the pools;
// - admission waits until all n fit and keeps their places for the forks; bad n is refused.
#include <cstring>
#include <fstream>
#include <ostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"
#include "worker/sched/scheduler.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;

std::vector<int32_t> GoldenPrompt(const std::string& model, size_t begin, size_t len) {
  std::ifstream in(GoldenPath(model + ".json"));
  const nlohmann::json doc = nlohmann::json::parse(in);
  const auto all = doc.at("sequences").back().at("tokens").get<std::vector<int32_t>>();
  return std::vector<int32_t>(all.begin() + begin, all.begin() + begin + len);
}

class CollectingSink : public GenerationSink {
 public:
  void OnTokens(absl::Span<const GeneratedToken> tokens) override {
    for (const GeneratedToken& t : tokens) this->tokens.push_back(t.token);
  }
  void OnFinish(const GenerationResult& r) override {
    EXPECT_FALSE(result.has_value()) << "OnFinish twice";
    result = r;
  }
  std::vector<int32_t> tokens;
  std::optional<GenerationResult> result;
};

struct Harness {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<Qwen35Model> model;
  std::shared_ptr<PagedKvCache> cache;
  std::shared_ptr<RecurrentStateSlots> slots;
  std::unique_ptr<Scheduler> sched;

  Harness(const std::string& name, SchedulerOptions o, int64_t pages, int64_t page_tokens = 16) {
    backend = kernels::MakeCpuBackend(2);
    auto m = Qwen35Model::Load(GoldenPath(name + ".gguf"), *backend);
    EXPECT_TRUE(m.ok()) << m.status();
    model = std::move(*m);
    KvCacheOptions kv = F32KvCache();
    kv.page_tokens = page_tokens;
    auto c = PagedKvCache::Create(*backend, model->kv_shape(), kv, pages);
    EXPECT_TRUE(c.ok()) << c.status();
    cache = std::move(*c);
    auto s = RecurrentStateSlots::Create(*backend, model->state_layout(),
                                         o.max_sequences * (o.speculation ? 2 : 1));
    EXPECT_TRUE(s.ok());
    slots = *s;
    auto sc = Scheduler::Create(*model, cache, slots, o, /*eos_token_ids=*/{},
                                static_cast<int32_t>(model->n_vocab()));
    EXPECT_TRUE(sc.ok()) << sc.status();
    sched = std::move(*sc);
  }

  static GenerationRequest Request(const std::vector<int32_t>& prompt, int max_tokens,
                                   uint64_t seed, float temperature = 1.0f) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.sampling.max_tokens = max_tokens;
    return r;
  }

  // Submits a request with n choices; returns its sinks and stores the handle.
  std::vector<std::shared_ptr<CollectingSink>> Submit(const std::vector<int32_t>& prompt,
                                                      int max_tokens, uint64_t seed, int n,
                                                      uint64_t* handle = nullptr,
                                                      float temperature = 1.0f) {
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    std::vector<std::shared_ptr<GenerationSink>> as_sinks;
    for (int i = 0; i < n; ++i) {
      sinks.push_back(std::make_shared<CollectingSink>());
      as_sinks.push_back(sinks.back());
    }
    auto h = sched->Submit(Request(prompt, max_tokens, seed, temperature), as_sinks);
    EXPECT_TRUE(h.ok()) << h.status();
    if (handle != nullptr && h.ok()) *handle = *h;
    return sinks;
  }

  void RunToEnd() {
    for (int guard = 0; sched->busy() && guard < 100000; ++guard) sched->Step();
    EXPECT_FALSE(sched->busy());
  }
  void StepUntilForked() {
    for (int guard = 0; sched->stats().forked_sequences == 0 && guard < 1000; ++guard) {
      sched->Step();
    }
    ASSERT_GT(sched->stats().forked_sequences, 0);
  }
};

// The tokens of a one-choice request with `seed`, run alone on a scheduler of its own.
std::vector<int32_t> Alone(const std::string& model, const std::vector<int32_t>& prompt,
                           int max_tokens, uint64_t seed, float temperature = 1.0f) {
  SchedulerOptions o;
  o.max_sequences = 1;
  o.max_context = 512;
  Harness h(model, o, 64);
  auto sinks = h.Submit(prompt, max_tokens, seed, 1, nullptr, temperature);
  h.RunToEnd();
  EXPECT_TRUE(sinks[0]->result.has_value());
  EXPECT_EQ(h.sched->stats().prompt_tokens_computed, static_cast<int64_t>(prompt.size()));
  return sinks[0]->tokens;
}

// A choice equals its lone run token for token where the engine gives each row of a decode
// batch the same bits as that row alone: sampling at temperature 1 over a flat distribution
// turns last-bit differences into other tokens within a few dozen. On the CPU backend Q8_0
// weights on AVX-512 VNNI do (the fused batch kernel, up to 8 rows, matmul_int8.h); f32 weights
// do not (scheduler_test allows 1e-4 on logprobs between batched and lone runs), so for them
// ChoicesEqualOneChoiceRequestsInTheSameBatch is the check: it holds whatever the kernels do.
TEST(SchedulerForkLoneTest, EachChoiceEqualsALoneRunWithItsDerivedSeed) {
  const std::string model = "tiny-dense-q8_0";
  if (!kernels::DetectedCpuFeatures().avx512vnni) {
    GTEST_SKIP() << "Q8_0 batches are bit-identical to one row on AVX-512 VNNI only";
  }
  const std::vector<int32_t> prompt = GoldenPrompt(model, 3, 37);
  constexpr uint64_t kSeed = 1234;
  constexpr int kN = 4, kMax = 20;
  for (int64_t step_tokens : {512, 16}) {  // the prompt in one chunk, and chunked
    SchedulerOptions o;
    o.max_sequences = 4;
    o.max_context = 512;
    o.step_tokens = step_tokens;
    Harness h(model, o, 64);
    auto sinks = h.Submit(prompt, kMax, kSeed, kN);
    h.RunToEnd();
    std::vector<std::vector<int32_t>> outputs;
    for (int i = 0; i < kN; ++i) {
      ASSERT_TRUE(sinks[i]->result.has_value());
      EXPECT_EQ(sinks[i]->result->reason, EndReason::kLength);
      EXPECT_EQ(sinks[i]->result->prompt_tokens, 37);
      EXPECT_EQ(sinks[i]->result->completion_tokens, kMax);
      EXPECT_EQ(sinks[i]->tokens, Alone(model, prompt, kMax, kSeed + i))
          << "choice " << i << ", step_tokens " << step_tokens;
      outputs.push_back(sinks[i]->tokens);
    }
    // Independent samples: at temperature 1 over 20 tokens, not all the same.
    EXPECT_FALSE(outputs[0] == outputs[1] && outputs[1] == outputs[2] && outputs[2] == outputs[3]);
    const SchedulerStats s = h.sched->stats();
    EXPECT_EQ(s.prompt_tokens_computed, 37) << "the prompt is prefilled once";
    EXPECT_EQ(s.forked_sequences, kN - 1);
    EXPECT_EQ(s.completed, kN);
    EXPECT_EQ(s.free_pages, s.total_pages);
    EXPECT_EQ(s.free_slots, 4);
  }
}

class SchedulerForkTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SchedulerForkTest, ChoicesEqualOneChoiceRequestsInTheSameBatch) {
  // Four one-choice requests with seeds s .. s+3 submitted together decode in batches of four,
  // as the four choices do: the same tokens, whatever the kernels' summation order.
  const std::string model = GetParam();
  const std::vector<int32_t> prompt = GoldenPrompt(model, 3, 37);
  SchedulerOptions o;
  o.max_sequences = 4;
  o.max_context = 512;
  Harness lone(model, o, 64);
  std::vector<std::shared_ptr<CollectingSink>> expected;
  for (int i = 0; i < 4; ++i) expected.push_back(lone.Submit(prompt, 20, 1234 + i, 1)[0]);
  lone.RunToEnd();
  EXPECT_EQ(lone.sched->stats().prompt_tokens_computed, 4 * 37);
  Harness forked(model, o, 64);
  auto choices = forked.Submit(prompt, 20, 1234, 4);
  forked.RunToEnd();
  EXPECT_EQ(forked.sched->stats().prompt_tokens_computed, 37);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(choices[i]->result.has_value());
    EXPECT_EQ(choices[i]->tokens, expected[i]->tokens) << "choice " << i;
  }
}

TEST_P(SchedulerForkTest, ForksSharePromptPagesAndCopyTheRecurrentState) {
  const std::string model = GetParam();
  // 40 prompt tokens on 16-token pages: pages 0 and 1 full, page 2 holds 32..39.
  const std::vector<int32_t> prompt = GoldenPrompt(model, 0, 40);
  SchedulerOptions o;
  o.max_sequences = 4;
  o.max_context = 512;
  Harness h(model, o, 32);
  h.Submit(prompt, 8, 99, 4);
  h.StepUntilForked();
  // Forked, first tokens sampled, nothing of them written yet: 3 pages for 4 sequences, each
  // held by all four (a fresh cache hands out pages in id order).
  EXPECT_EQ(h.cache->free_pages(), 32 - 3);
  for (int32_t page = 0; page < 3; ++page) EXPECT_EQ(h.cache->RefCount(page), 4) << page;
  // Every slot is in use (4 sequences, 4 slots) and holds the parent's state at the fork.
  const uint64_t bytes = h.slots->layout().bytes();
  std::vector<std::vector<uint8_t>> states(4, std::vector<uint8_t>(bytes));
  for (int slot = 0; slot < 4; ++slot) {
    ASSERT_TRUE(h.slots->CopyToHost(slot, states[slot].data()).ok());
  }
  const std::vector<uint8_t> zeros(bytes, 0);
  EXPECT_NE(states[0], zeros);
  for (int slot = 1; slot < 4; ++slot) EXPECT_EQ(states[slot], states[0]) << "slot " << slot;
  // The next step writes position 40 in each: page 2 is copied by three of them (the last
  // writer keeps the original), pages 0 and 1 stay shared: 6 pages where 4 lone runs hold 12.
  h.sched->Step();
  EXPECT_EQ(h.cache->free_pages(), 32 - 6);
  EXPECT_EQ(h.cache->RefCount(0), 4);
  EXPECT_EQ(h.cache->RefCount(1), 4);
  h.RunToEnd();
  EXPECT_EQ(h.cache->free_pages(), 32);
}

TEST_P(SchedulerForkTest, PreemptedForksRecomputeAndLoseNothing) {
  const std::string model = GetParam();
  // 10 pages of 16 positions: admission needs 2 + 2 pages, but 3 choices of 30 + 40 tokens
  // need 13 pages at full length (page 0 shared), so choices are preempted and recomputed.
  // Greedy, as in scheduler_test's TinyCachePreemptsAndLosesNothing: a recompute is a prefill,
  // which sums in another order than the decode steps it replays, so only greedy tokens are
  // the same bits-independently; every choice must then be the lone greedy run.
  const std::vector<int32_t> prompt = GoldenPrompt(model, 5, 30);
  SchedulerOptions o;
  o.max_sequences = 3;
  o.max_context = 512;
  Harness h(model, o, 10);
  auto sinks = h.Submit(prompt, 40, 77, 3, nullptr, /*temperature=*/0.0f);
  h.RunToEnd();
  const SchedulerStats s = h.sched->stats();
  EXPECT_GT(s.preemptions, 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(sinks[i]->result.has_value());
    EXPECT_EQ(sinks[i]->result->reason, EndReason::kLength);
    EXPECT_EQ(sinks[i]->tokens, Alone(model, prompt, 40, 0, /*temperature=*/0.0f))
        << "choice " << i;
  }
  EXPECT_EQ(s.free_pages, 10);
  EXPECT_EQ(s.free_slots, 3);
}

INSTANTIATE_TEST_SUITE_P(Models, SchedulerForkTest,
                         ::testing::Values("tiny-dense-f32", "tiny-moe-f32", "tiny-dense-q8_0"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST(SchedulerForkCancelTest, StopOneChoiceCancelAllIncludingUnforked) {
  // The step budget is at least max_sequences * (1 + draft_max) = 36 tokens: a prompt of 100
  // takes three steps.
  const std::vector<int32_t> prompt = GoldenPrompt("tiny-dense-f32", 0, 100);
  SchedulerOptions o;
  o.max_sequences = 4;
  o.max_context = 512;
  o.step_tokens = 8;
  Harness h("tiny-dense-f32", o, 64);
  uint64_t a = 0, b = 0;
  auto first = h.Submit(prompt, 50, 5, 3, &a);
  h.StepUntilForked();
  h.sched->CancelChoice(a, 1);
  h.sched->Step();
  ASSERT_TRUE(first[1]->result.has_value());
  EXPECT_EQ(first[1]->result->reason, EndReason::kCancelled);
  EXPECT_FALSE(first[0]->result.has_value());
  EXPECT_FALSE(first[2]->result.has_value());
  h.sched->Cancel(a);
  // A second request cancelled while its prompt is still being prefilled: its forks never
  // existed, yet each choice ends once.
  auto second = h.Submit(prompt, 50, 6, 3, &b);
  h.sched->Step();  // the first request's choices leave
  h.sched->Step();  // the second is admitted, a chunk of its prompt computed
  EXPECT_EQ(h.sched->stats().running, 1);
  EXPECT_EQ(h.sched->stats().forked_sequences, 2);
  h.sched->Cancel(b);
  h.RunToEnd();
  for (const auto& sinks : {first, second}) {
    for (const auto& s : sinks) {
      ASSERT_TRUE(s->result.has_value());
      EXPECT_EQ(s->result->reason, EndReason::kCancelled);
    }
  }
  for (const auto& s : second) EXPECT_TRUE(s->tokens.empty());
  const SchedulerStats s = h.sched->stats();
  EXPECT_EQ(s.forked_sequences, 2);
  EXPECT_EQ(s.free_pages, 64);
  EXPECT_EQ(s.free_slots, 4);
  EXPECT_EQ(s.running, 0);
}

TEST(SchedulerForkAdmissionTest, WaitsForRoomForAllChoicesAndKeepsTheirPlaces) {
  // The step budget is at least max_sequences * (1 + draft_max) = 27 tokens: a prompt of 60
  // takes three steps.
  const std::vector<int32_t> prompt = GoldenPrompt("tiny-dense-f32", 0, 60);
  SchedulerOptions o;
  o.max_sequences = 3;
  o.max_context = 512;
  o.step_tokens = 8;
  Harness h("tiny-dense-f32", o, 64);
  auto lone = h.Submit(prompt, 6, 1, 1);
  auto group = h.Submit(prompt, 6, 2, 3);
  h.sched->Step();
  // One sequence runs: the group needs all three places and waits, first in line.
  EXPECT_EQ(h.sched->stats().running, 1);
  EXPECT_EQ(h.sched->stats().waiting, 1);
  h.RunToEnd();
  // Admitted after the lone request: its forks' places are kept while it prefills, so a lone
  // request queued behind it waits for the whole group, not only for its first sequence.
  auto group2 = h.Submit(prompt, 6, 3, 3);
  auto behind = h.Submit(prompt, 6, 4, 1);
  h.sched->Step();
  EXPECT_EQ(h.sched->stats().running, 1);
  EXPECT_EQ(h.sched->stats().waiting, 1);
  h.RunToEnd();
  for (const auto& s : {lone[0], group[0], group[1], group[2], group2[0], behind[0]}) {
    ASSERT_TRUE(s->result.has_value());
    EXPECT_EQ(s->result->reason, EndReason::kLength);
    EXPECT_EQ(s->tokens.size(), 6u);
  }
  EXPECT_EQ(group[1]->tokens, Alone("tiny-dense-f32", prompt, 6, 3));
  EXPECT_EQ(h.sched->stats().free_pages, 64);
}

TEST(SchedulerForkAdmissionTest, RefusesBadNNamingIt) {
  SchedulerOptions o;
  o.max_sequences = 4;
  o.max_context = 512;
  Harness h("tiny-dense-f32", o, 8);  // 128 positions
  auto submit = [&](int n, int max_tokens) {
    std::vector<std::shared_ptr<GenerationSink>> sinks;
    for (int i = 0; i < n; ++i) sinks.push_back(std::make_shared<CollectingSink>());
    return h.sched->Submit(Harness::Request({1, 2, 3, 4}, max_tokens, 1), sinks).status();
  };
  for (const absl::Status& st : {submit(0, 4), submit(17, 4), submit(5, 4), submit(4, 40)}) {
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_EQ(st.message().substr(0, 3), "n: ") << st;
  }
  EXPECT_TRUE(submit(4, 31).ok());  // 4 + 4 * 31 = 128 positions
  h.RunToEnd();
}

}  // namespace
}  // namespace deltaserve::worker
