// The forward pass's counters for /metrics (worker/engine/forward_counters.h) on the golden tiny
// models: prefill and decode tokens and passes as fed, batch histograms, and for the MoE model
// the tokens routed per layer summing to tokens x expert_used_count (the GGUF's own value) with
// no expert getting a token twice.

#include "worker/engine/forward_counters.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "kernels/backend.h"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"

namespace deltaserve::worker {
namespace {

using deltaserve::testing::GoldenPath;

TEST(ForwardCountersTest, BucketsAndReset) {
  ForwardCounters c(2, 0);
  c.CountPass(1, 10, 0);
  c.CountPass(3, 0, 3);
  EXPECT_EQ(c.passes(), 2u);
  EXPECT_EQ(c.prefill_tokens(), 10u);
  EXPECT_EQ(c.decode_tokens(), 3u);
  // Sequences: 1 -> bucket le=1, 3 -> le=4. Tokens: 10 -> le=16, 3 -> le=4.
  std::vector<uint64_t> seq = c.sequence_buckets(), tok = c.token_buckets();
  EXPECT_EQ(seq[0], 1u);
  EXPECT_EQ(seq[2], 1u);
  EXPECT_EQ(tok[1], 1u);
  EXPECT_EQ(tok[2], 1u);
  EXPECT_EQ(std::accumulate(seq.begin(), seq.end(), uint64_t{0}), 2u);
  EXPECT_EQ(c.sequences_sum(), 4u);
  EXPECT_EQ(c.tokens_sum(), 13u);
  EXPECT_EQ(c.routed(0, 0), 0u);  // dense: no experts
  c.Reset();
  EXPECT_EQ(c.passes(), 0u);
  EXPECT_EQ(c.sequences_sum(), 0u);
}

class ForwardCountersModelTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ForwardCountersModelTest, CountsWhatWasFed) {
  std::unique_ptr<kernels::Backend> backend = kernels::MakeCpuBackend(2);
  auto m = Qwen35Model::Load(GoldenPath(std::string(GetParam()) + ".gguf"), *backend);
  ASSERT_TRUE(m.ok()) << m.status();
  Qwen35Model& model = **m;
  auto a = model.NewSequence(64), b = model.NewSequence(64);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> logits;
  const std::vector<int32_t> prompt_a = {1, 2, 3, 4, 5, 6, 7}, prompt_b = {9, 8, 7};
  // One pass with both prompts (prefill: 10 tokens, 2 sequences), then 4 decode passes of one
  // token each for both (8 decode tokens).
  BatchEntry first[] = {{a->get(), prompt_a, false}, {b->get(), prompt_b, false}};
  ASSERT_TRUE(model.Forward(first, logits).ok());
  const std::vector<int32_t> next = {11};
  for (int i = 0; i < 4; ++i) {
    BatchEntry step[] = {{a->get(), next, false}, {b->get(), next, false}};
    ASSERT_TRUE(model.Forward(step, logits).ok());
  }
  const ForwardCounters& c = model.counters();
  EXPECT_EQ(c.passes(), 5u);
  EXPECT_EQ(c.prefill_tokens(), 10u);
  EXPECT_EQ(c.decode_tokens(), 8u);
  EXPECT_EQ(c.sequence_buckets()[1], 5u);  // every pass had 2 sequences: le=2
  const common::Qwen35HParams& hp = model.hparams();
  if (!hp.is_moe) {
    EXPECT_EQ(c.n_expert(), 0);
    return;
  }
  ASSERT_EQ(c.n_expert(), hp.n_expert);
  ASSERT_GT(hp.n_expert_used, 0);
  for (int64_t layer = 0; layer < hp.n_layer; ++layer) {
    uint64_t sum = 0;
    for (int64_t e = 0; e < hp.n_expert; ++e) {
      EXPECT_LE(c.routed(layer, e), 18u) << "a token routed twice to one expert";
      sum += c.routed(layer, e);
    }
    EXPECT_EQ(sum, 18u * static_cast<uint64_t>(hp.n_expert_used)) << "layer " << layer;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, ForwardCountersModelTest,
                         ::testing::Values("tiny-dense-f32", "tiny-moe-f32"));

}  // namespace
}  // namespace deltaserve::worker
