// A small synthetic qwen35moe model for the expert-tier tests (expert_tiers_test.cc,
// expert_tiers_engine_test.cc): the tensor plan of worker/synth/synthetic_model.h for a made-up
// preset (4 layers, the last one attention; 8 experts, 4 per token; 256-wide everything, so the
// K-quant mixtures keep their block types), written as a GGUF file with deterministic values.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/gguf_writer.h"
#include "kernels/cpu/quants.h"
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

}  // namespace deltaserve::worker::testing
