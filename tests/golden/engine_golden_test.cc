// The Qwen3.5 engine against llama.cpp's logits in ../shared/golden (see its README for how
// they were made and why these tolerances):
// - F32 models: max |logit - golden| <= 1e-3 and identical argmax on every dumped row; the 32
//   greedy tokens identical. (An independent numpy implementation agrees to 2.8e-5.)
// - Q8_0 / Q4_K_M models: mean |diff| <= 0.1, and on every row the token we rank first has a
//   golden logit within 1.0 of the golden maximum; greedy steps checked teacher-forced against
//   the recorded top-5. (llama.cpp quantizes activations, we keep them f32, so rows differ by
//   up to ~0.2; top-1 agreement is reported, not asserted: ~40% of rows are near-ties.)
// - Decode (token by token) equals prefill within 1e-4; chunked prefill (1, 7, 64, 300) equals
//   one-shot prefill; two sequences batched together equal each alone (F32 models).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/support/golden_logits.h"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"
#include "worker/sampling/sampler.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;

using ::deltaserve::testing::ArgmaxRow;
using ::deltaserve::testing::GoldenGreedy;
using ::deltaserve::testing::GoldenModel;
using ::deltaserve::testing::GoldenSequence;
using ::deltaserve::testing::LoadGolden;
using ::deltaserve::testing::MaxAbsDiff;
using ::deltaserve::testing::RunChunked;

struct Engine {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<Qwen35Model> model;
};

Engine LoadEngine(const std::string& name) {
  Engine e;
  e.backend = kernels::MakeCpuBackend(2);
  auto m = Qwen35Model::Load(GoldenPath(name + ".gguf"), *e.backend);
  EXPECT_TRUE(m.ok()) << m.status();
  if (m.ok()) e.model = std::move(*m);
  return e;
}

struct ModelCase {
  const char* name;
  bool exact;  // F32: bitwise-style tolerances; quantized: statistical ones
};

class EngineGoldenTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    golden_ = LoadGolden(GetParam().name);
    engine_ = LoadEngine(GetParam().name);
    ASSERT_NE(engine_.model, nullptr);
    ASSERT_EQ(engine_.model->n_vocab(), golden_.n_vocab);
  }
  GoldenModel golden_;
  Engine engine_;
};

TEST_P(EngineGoldenTest, PrefillLogitsMatchLlamaCpp) {
  const int64_t nv = golden_.n_vocab;
  double sum_abs = 0, max_abs = 0;
  int64_t n_values = 0, rows = 0, top1_agree = 0;
  for (const GoldenSequence& s : golden_.sequences) {
    const std::vector<float> ours = RunChunked(*engine_.model, s.tokens, s.tokens.size());
    ASSERT_EQ(ours.size(), s.tokens.size() * nv);
    for (size_t r = 0; r < s.positions.size(); ++r) {
      const float* got = ours.data() + s.positions[r] * nv;
      const float* want = golden_.logits.data() + s.offset_floats + r * nv;
      double row_max = 0;
      for (int64_t i = 0; i < nv; ++i) {
        const double d = std::fabs(got[i] - want[i]);
        sum_abs += d;
        row_max = std::max(row_max, d);
      }
      max_abs = std::max(max_abs, row_max);
      n_values += nv;
      ++rows;
      const int ours_top = ArgmaxRow(got, nv), golden_top = ArgmaxRow(want, nv);
      top1_agree += ours_top == golden_top;
      if (GetParam().exact) {
        // Measured: at most 7.8e-6 on both F32 models (f32 summation order against llama.cpp's);
        // 1e-4 leaves a 13x margin and still fails a real error.
        EXPECT_LE(row_max, 1e-4) << s.name << " pos " << s.positions[r];
        EXPECT_EQ(ours_top, golden_top) << s.name << " pos " << s.positions[r];
      } else {
        EXPECT_GE(want[ours_top], want[golden_top] - 1.0f)
            << s.name << " pos " << s.positions[r] << ": our top token " << ours_top
            << " is far below the golden maximum";
      }
    }
  }
  const double mean_abs = sum_abs / n_values;
  std::printf("[ %s ] rows %lld, max |diff| %.3g, mean |diff| %.3g, top-1 agreement %.1f%%\n",
              GetParam().name, static_cast<long long>(rows), max_abs, mean_abs,
              100.0 * top1_agree / rows);
  if (!GetParam().exact) {
    EXPECT_LE(mean_abs, 0.1);
  }
}

TEST_P(EngineGoldenTest, GreedyContinuationMatchesLlamaCpp) {
  const int64_t nv = golden_.n_vocab;
  for (const GoldenGreedy& g : golden_.greedy) {
    auto seq = engine_.model->NewSequence(static_cast<int64_t>(g.prompt.size() + g.generated.size()));
    ASSERT_TRUE(seq.ok());
    std::vector<float> logits;
    BatchEntry e{seq->get(), g.prompt, false};
    ASSERT_TRUE(engine_.model->Forward({&e, 1}, logits).ok());
    double sum_abs = 0;
    int n = 0;
    for (size_t step = 0; step < g.generated.size(); ++step) {
      const int ours = ArgmaxRow(logits.data(), nv);
      const auto& top = g.step_top[step];
      if (GetParam().exact) {
        ASSERT_EQ(ours, g.generated[step]) << "greedy step " << step;
      } else {
        // Teacher-forced: our ranking must put first a token llama.cpp had near its maximum.
        float ours_golden = -1e30f;
        for (const auto& [id, logit] : top) {
          sum_abs += std::fabs(logits[id] - logit);
          ++n;
          if (id == ours) ours_golden = logit;
        }
        EXPECT_GE(ours_golden, top[0].second - 1.0f) << "greedy step " << step;
      }
      const int32_t next[1] = {g.generated[step]};  // teacher forcing
      BatchEntry step_e{seq->get(), next, false};
      ASSERT_TRUE(engine_.model->Forward({&step_e, 1}, logits).ok());
    }
    if (!GetParam().exact) {
      EXPECT_LE(sum_abs / n, 0.1) << "mean |diff| over the recorded top-5 logits";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GoldenModels, EngineGoldenTest,
                         ::testing::Values(ModelCase{"tiny-dense-f32", true},
                                           ModelCase{"tiny-moe-f32", true},
                                           ModelCase{"tiny-dense-q8_0", false},
                                           ModelCase{"tiny-dense-q4_k_m", false}),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

class EngineConsistencyTest : public ::testing::TestWithParam<const char*> {};

// 1e-4: the same math in a different order (chunked vs per-token delta rule, attention over
// different query blocks) differs in f32 rounding only.
TEST_P(EngineConsistencyTest, DecodeAndChunkedPrefillEqualOneShotPrefill) {
  GoldenModel golden = LoadGolden(GetParam());
  Engine engine = LoadEngine(GetParam());
  ASSERT_NE(engine.model, nullptr);
  const std::vector<int32_t>& tokens = golden.sequences.back().tokens;  // len300
  ASSERT_EQ(tokens.size(), 300u);
  const std::vector<float> whole = RunChunked(*engine.model, tokens, tokens.size());
  // Every chunk size splits the 300 tokens differently from the one-shot pass (299: one token
  // left for a second pass; 150: two halves).
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{64}, size_t{150}, size_t{299}}) {
    EXPECT_LE(MaxAbsDiff(RunChunked(*engine.model, tokens, chunk), whole), 1e-4)
        << "chunk " << chunk;
  }
}

TEST_P(EngineConsistencyTest, TwoSequencesInOneBatchEqualEachAlone) {
  GoldenModel golden = LoadGolden(GetParam());
  Engine engine = LoadEngine(GetParam());
  ASSERT_NE(engine.model, nullptr);
  const std::vector<int32_t>& a = golden.sequences[1].tokens;  // len17
  const std::vector<int32_t>& b = golden.sequences[2].tokens;  // len300
  const std::vector<float> alone_a = RunChunked(*engine.model, a, a.size());
  const std::vector<float> alone_b = RunChunked(*engine.model, b, b.size());
  auto sa = engine.model->NewSequence(64);
  auto sb = engine.model->NewSequence(400);
  ASSERT_TRUE(sa.ok() && sb.ok());
  // Step 1: both prompts in one batch. Step 2: one decode token each, batched again.
  const BatchEntry both[2] = {{sa->get(), absl::Span<const int32_t>(a.data(), a.size() - 1), true},
                              {sb->get(), absl::Span<const int32_t>(b.data(), b.size() - 1), true}};
  std::vector<float> logits;
  ASSERT_TRUE(engine.model->Forward(both, logits).ok());
  const int64_t nv = golden.n_vocab;
  const std::vector<float> got_a(logits.begin(), logits.begin() + (a.size() - 1) * nv);
  const std::vector<float> got_b(logits.begin() + (a.size() - 1) * nv, logits.end());
  EXPECT_LE(MaxAbsDiff(got_a, std::vector<float>(alone_a.begin(), alone_a.end() - nv)), 1e-4);
  EXPECT_LE(MaxAbsDiff(got_b, std::vector<float>(alone_b.begin(), alone_b.end() - nv)), 1e-4);
  const int32_t last_a[1] = {a.back()}, last_b[1] = {b.back()};
  const BatchEntry step[2] = {{sa->get(), last_a, false}, {sb->get(), last_b, false}};
  ASSERT_TRUE(engine.model->Forward(step, logits).ok());
  EXPECT_LE(MaxAbsDiff(std::vector<float>(logits.begin(), logits.begin() + nv),
                       std::vector<float>(alone_a.end() - nv, alone_a.end())),
            1e-4);
  EXPECT_LE(MaxAbsDiff(std::vector<float>(logits.begin() + nv, logits.end()),
                       std::vector<float>(alone_b.end() - nv, alone_b.end())),
            1e-4);
}

INSTANTIATE_TEST_SUITE_P(F32Models, EngineConsistencyTest,
                         ::testing::Values("tiny-dense-f32", "tiny-moe-f32"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(EngineRobustness, BadTokenIdsAndOverflowAreErrorsNotCrashes) {
  Engine engine = LoadEngine("tiny-dense-f32");
  ASSERT_NE(engine.model, nullptr);
  auto seq = engine.model->NewSequence(4);
  ASSERT_TRUE(seq.ok());
  std::vector<float> logits;
  const int32_t bad[1] = {2048};
  BatchEntry e{seq->get(), bad, false};
  EXPECT_EQ(engine.model->Forward({&e, 1}, logits).code(), absl::StatusCode::kInvalidArgument);
  const int32_t five[5] = {1, 2, 3, 4, 5};
  BatchEntry too_long{seq->get(), five, false};
  EXPECT_EQ(engine.model->Forward({&too_long, 1}, logits).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*seq)->n_past, 0);
}

}  // namespace
}  // namespace deltaserve::worker
