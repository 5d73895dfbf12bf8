// The reasoning budget in the scheduler (GenerationRequest.reasoning_budget; proto
// GenerateRequest.reasoning_budget) on the F32 golden model, against the engine run alone with a
// plain greedy loop: once the budget is spent inside a reasoning block, the closing tokens are
// emitted instead of the sampled token (logprob 0) and generation continues exactly as a cold
// greedy run of the prompt followed by everything emitted so far. Also: a block the model opens
// itself, a budget of 0, no block (nothing changes), and PromptOpensReasoning.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"
#include "worker/sched/scheduler.h"
#include "worker/sched/served_model.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;

class CollectingSink : public GenerationSink {
 public:
  void OnTokens(absl::Span<const GeneratedToken> tokens) override {
    for (const GeneratedToken& t : tokens) {
      this->tokens.push_back(t.token);
      logprobs.push_back(t.logprobs ? t.logprobs->logprob : 1.0f);
    }
  }
  void OnFinish(const GenerationResult& r) override { result = r; }
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<GenerationResult> result;
};

std::vector<int32_t> GreedyAlone(Qwen35Model& model, const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  auto seq = model.NewSequence(static_cast<int64_t>(prompt.size()) + n);
  EXPECT_TRUE(seq.ok()) << seq.status();
  std::vector<float> logits;
  std::vector<int32_t> feed = prompt;
  for (int i = 0; i < n; ++i) {
    BatchEntry e{seq->get(), feed, false};
    EXPECT_TRUE(model.Forward({&e, 1}, logits).ok());
    out.push_back(Argmax(logits, static_cast<int32_t>(model.n_vocab())));
    feed = {out.back()};
  }
  return out;
}

class ReasoningBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = kernels::MakeCpuBackend(2);
    auto m = Qwen35Model::Load(GoldenPath("tiny-dense-f32.gguf"), *backend_);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    KvCacheOptions kv = F32KvCache();
    kv.page_tokens = 16;
    auto c = PagedKvCache::Create(*backend_, model_->kv_shape(), kv, 64);
    ASSERT_TRUE(c.ok());
    auto slots = RecurrentStateSlots::Create(*backend_, model_->state_layout(), 2);
    ASSERT_TRUE(slots.ok());
    SchedulerOptions o;
    o.max_sequences = 2;
    o.max_context = 512;
    auto s = Scheduler::Create(*model_, std::shared_ptr<PagedKvCache>(std::move(*c)), *slots, o,
                               {}, static_cast<int32_t>(model_->n_vocab()));
    ASSERT_TRUE(s.ok()) << s.status();
    sched_ = std::move(*s);
    for (int32_t i = 0; i < 30; ++i) prompt_.push_back(100 + 37 * i);
  }

  std::shared_ptr<CollectingSink> Run(int max_tokens, int32_t budget, bool open, int32_t start,
                                      const std::vector<int32_t>& end) {
    GenerationRequest r;
    r.prompt = prompt_;
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = max_tokens;
    r.logprobs = true;
    r.reasoning_budget = budget;
    r.reasoning_open = open;
    r.reasoning_start_token = start;
    r.reasoning_end_tokens = end;
    auto sink = std::make_shared<CollectingSink>();
    EXPECT_TRUE(sched_->Submit(std::move(r), sink).ok());
    for (int guard = 0; sched_->busy() && guard < 10000; ++guard) sched_->Step();
    return sink;
  }

  // Two ids the cold greedy output of `n` tokens never contains, as the closing tokens.
  std::vector<int32_t> EndTokensNotIn(const std::vector<int32_t>& greedy) {
    std::vector<int32_t> end;
    for (int32_t id = 3; end.size() < 2; ++id) {
      if (std::find(greedy.begin(), greedy.end(), id) == greedy.end()) end.push_back(id);
    }
    return end;
  }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<Qwen35Model> model_;
  std::unique_ptr<Scheduler> sched_;
  std::vector<int32_t> prompt_;
};

TEST_F(ReasoningBudgetTest, SpentBudgetEmitsTheClosingTokensAndContinuesFromThem) {
  const std::vector<int32_t> cold = GreedyAlone(*model_, prompt_, 12);
  const std::vector<int32_t> end = EndTokensNotIn(cold);
  auto sink = Run(12, /*budget=*/3, /*open=*/true, /*start=*/-1, end);
  // Three reasoning tokens as sampled, the closing tokens, then what the model says after them.
  std::vector<int32_t> want(cold.begin(), cold.begin() + 3);
  want.insert(want.end(), end.begin(), end.end());
  std::vector<int32_t> context = prompt_;
  context.insert(context.end(), want.begin(), want.end());
  const std::vector<int32_t> after = GreedyAlone(*model_, context, 12 - 5);
  want.insert(want.end(), after.begin(), after.end());
  EXPECT_EQ(sink->tokens, want);
  ASSERT_EQ(sink->logprobs.size(), want.size());
  EXPECT_EQ(sink->logprobs[3], 0.0f);  // written by the worker, not sampled
  EXPECT_EQ(sink->logprobs[4], 0.0f);
  EXPECT_LT(sink->logprobs[0], 0.0f);
  EXPECT_EQ(sink->result->completion_tokens, 12);
}

TEST_F(ReasoningBudgetTest, ZeroBudgetClosesAnOpenBlockAtOnce) {
  const std::vector<int32_t> cold = GreedyAlone(*model_, prompt_, 6);
  const std::vector<int32_t> end = EndTokensNotIn(cold);
  auto sink = Run(6, 0, true, -1, end);
  std::vector<int32_t> context = prompt_;
  context.insert(context.end(), end.begin(), end.end());
  std::vector<int32_t> want = end;
  for (int32_t t : GreedyAlone(*model_, context, 4)) want.push_back(t);
  EXPECT_EQ(sink->tokens, want);
}

TEST_F(ReasoningBudgetTest, ABlockTheModelOpensIsCountedFromItsStartToken) {
  const std::vector<int32_t> cold = GreedyAlone(*model_, prompt_, 12);
  const std::vector<int32_t> end = EndTokensNotIn(cold);
  // The model's second token plays <think>: two tokens inside it, then the closing tokens.
  auto sink = Run(12, 2, /*open=*/false, /*start=*/cold[1], end);
  std::vector<int32_t> want(cold.begin(), cold.begin() + 4);
  want.insert(want.end(), end.begin(), end.end());
  std::vector<int32_t> context = prompt_;
  context.insert(context.end(), want.begin(), want.end());
  for (int32_t t : GreedyAlone(*model_, context, 12 - 6)) want.push_back(t);
  EXPECT_EQ(sink->tokens, want);
}

TEST_F(ReasoningBudgetTest, NoBlockNoChange) {
  const std::vector<int32_t> cold = GreedyAlone(*model_, prompt_, 8);
  const std::vector<int32_t> end = EndTokensNotIn(cold);
  EXPECT_EQ(Run(8, 0, /*open=*/false, /*start=*/-1, end)->tokens, cold);
  // A closing token the model writes itself ends the block within the budget.
  EXPECT_EQ(Run(8, 5, /*open=*/true, -1, {cold[2], end[0]})->tokens, cold);
}

TEST(PromptOpensReasoningTest, LastMarkerDecides) {
  EXPECT_TRUE(PromptOpensReasoning({1, 2, 7, 3}, 7, 8));
  EXPECT_FALSE(PromptOpensReasoning({1, 7, 3, 8, 4}, 7, 8));
  EXPECT_TRUE(PromptOpensReasoning({7, 8, 7}, 7, 8));
  EXPECT_FALSE(PromptOpensReasoning({1, 2, 3}, 7, 8));
  EXPECT_FALSE(PromptOpensReasoning({}, 7, 8));
}

}  // namespace
}  // namespace deltaserve::worker
