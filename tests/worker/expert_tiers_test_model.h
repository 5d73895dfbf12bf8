// A small synthetic qwen35moe model for the expert-tier tests (expert_tiers_test.cc,
// expert_tiers_engine_test.cc, tests/gpu/cuda_expert_tiers_test.cc): the tensor plan of
// worker/synth/synthetic_model.h for a made-up preset (4 layers, the last one attention; 8
// experts, 4 per token; 256-wide everything, so the K-quant mixtures keep their block types),
// written as a GGUF file with deterministic values; and the greedy batched generation the engine
// tests compare placements with.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/gguf_writer.h"
#include "gtest/gtest.h"
#include "kernels/cpu/quants.h"
#include "worker/engine/qwen35.h"
#include "worker/synth/synthetic_model.h"

namespace deltaserve::worker::testing {

inline constexpr int64_t kTestMoeLayers = 4;
inline constexpr int64_t kTestMoeExperts = 8;
inline constexpr int64_t kTestMoeUsed = 4;
inline constexpr int64_t kTestMoeVocab = 320;

inline SynthPreset TestMoePreset() {
  return SynthPreset{.name = "test-moe",
                     .n_embd = 256,
                     .n_layer = kTestMoeLayers,
                     .n_head = 2,
                     .n_head_kv = 1,
                     .ssm_n_k_heads = 1,
                     .ssm_n_v_heads = 2,
                     .n_ff = 0,
                     .n_expert = kTestMoeExperts,
                     .n_expert_used = kTestMoeUsed,
                     .n_ff_expert = 256,
                     .n_ff_shared = 256,
                     .tied = false};
}

// Writes the model with `mixture`'s block types to `path`.
inline absl::Status WriteTestMoe(const std::string& path, WeightMixture mixture, uint64_t seed) {
  absl::StatusOr<ModelPlan> plan = PlanModel(TestMoePreset(), mixture, kTestMoeVocab, 0);
  if (!plan.ok()) return plan.status();
  common::GgufWriter writer;
  if (absl::Status s = AddModelMetadata(*plan, seed, writer); !s.ok()) return s;
  for (const PlannedTensor& t : plan->tensors) {
    const int64_t row = t.ne[0];
    const auto type = static_cast<kernels::WeightType>(t.type);
    const kernels::BlockLayout layout = kernels::BlockLayoutOf(type);
    const size_t row_bytes = static_cast<size_t>(row / layout.block_size * layout.block_bytes);
    std::vector<float> values(static_cast<size_t>(row));
    std::vector<uint8_t> bytes(row_bytes * static_cast<size_t>(t.n_rows()));
    for (int64_t r = 0; r < t.n_rows(); ++r) {
      FillRows(t, seed, r, 1, values.data());
      if (kernels::QuantizeRow(type, values.data(), bytes.data() + r * row_bytes, row) !=
          kernels::KernelStatus::kOk) {
        return absl::InternalError("cannot encode " + t.name);
      }
    }
    if (absl::Status s = writer.AddTensor(t.name, t.type, t.ne, std::move(bytes)); !s.ok()) {
      return s;
    }
  }
  return writer.WriteFile(path);
}

inline constexpr int kDecodeSteps = 10;

// What a generation produced: every logits row in order, and every greedy token.
struct Outcome {
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  float smallest_margin = 1e30f;  // top-1 minus top-2 logit, over all rows
};

inline int32_t Argmax(const float* row, int64_t n, float* margin) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  float second = -1e30f;
  for (int32_t i = 0; i < n; ++i) {
    if (i != best) second = std::max(second, row[i]);
  }
  *margin = row[best] - second;
  return best;
}

// Greedy generation for three sequences in one batch: a prefill pass of the three prompts (their
// last rows), then kDecodeSteps steps of one token each; `between(step)` runs before each decode
// step (placements, moves).
inline Outcome Generate(Qwen35Model& model, const std::function<void(int)>& between = nullptr) {
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 17, 93, 201, 4, 66, 150, 9, 31, 250, 77, 12},
      {300, 2, 48},
      {120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137}};
  Outcome out;
  std::vector<std::unique_ptr<SequenceState>> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto s = model.NewSequence(64);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return out;
    seqs.push_back(std::move(*s));
  }
  std::vector<float> logits;
  std::vector<BatchEntry> batch;
  for (size_t i = 0; i < prompts.size(); ++i) batch.push_back({seqs[i].get(), prompts[i]});
  std::vector<std::vector<int32_t>> next(prompts.size(), std::vector<int32_t>(1));
  const int64_t v = model.n_vocab();
  for (int step = 0; step <= kDecodeSteps; ++step) {
    if (step > 0) {
      if (between) between(step);
      batch.clear();
      for (size_t i = 0; i < prompts.size(); ++i) batch.push_back({seqs[i].get(), next[i]});
    }
    absl::Status s = model.Forward(batch, logits);
    EXPECT_TRUE(s.ok()) << "step " << step << ": " << s;
    if (!s.ok()) return out;
    EXPECT_EQ(logits.size(), prompts.size() * v);
    out.logits.insert(out.logits.end(), logits.begin(), logits.end());
    for (size_t i = 0; i < prompts.size(); ++i) {
      float margin = 0;
      next[i][0] = Argmax(logits.data() + i * v, v, &margin);
      out.smallest_margin = std::min(out.smallest_margin, margin);
      out.tokens.push_back(next[i][0]);
    }
  }
  return out;
}

}  // namespace deltaserve::worker::testing
