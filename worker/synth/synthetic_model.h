// Random-weight Qwen3.5 models at the real shapes of each released size (MODEL_SPEC §1.2), for
// load and speed tests of sizes whose real weights are not at hand: the preset table, the
// tensor plan (GGUF names and shapes, the block type each weight mixture gives each tensor, how
// each tensor is initialised), the GGUF metadata, and deterministic random values. The
// deltaserve-synth tool writes a plan to a file (docs/synth.md); nothing here writes files.
//
//   ASSIGN_OR_RETURN(SynthPreset p, FindPreset("9b"));
//   ASSIGN_OR_RETURN(ModelPlan plan, PlanModel(p, WeightMixture::kQ4_K_M, n_vocab, 0));
//   FillRows(plan.tensors[i], seed, first_row, n_rows, floats);  // then quantize to .type
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/ggml_types.h"

namespace deltaserve::common {
class GgufWriter;
}

namespace deltaserve::worker {

// Shared by every Qwen3.5 size (MODEL_SPEC §1.1, §1.2).
inline constexpr int64_t kSynthHeadDim = 256;    // attention head dim
inline constexpr int64_t kSynthRotaryDims = 64;  // rotated dims per head
inline constexpr double kSynthRopeBase = 1e7;
inline constexpr int64_t kSynthSsmHeadDim = 128;  // DeltaNet dk = dv
inline constexpr int64_t kSynthConvKernel = 4;
inline constexpr int64_t kSynthFullAttentionInterval = 4;
inline constexpr double kSynthRmsEps = 1e-6;
inline constexpr int64_t kSynthContext = 262144;
// Embedding rows of the real checkpoints (the padded vocabulary); the parameter counts of
// MODEL_SPEC §1.2 use it. Synthetic files take their row count from the vocabulary file.
inline constexpr int64_t kQwen35VocabRows = 248320;

// One model size (MODEL_SPEC §1.2). Expert fields are 0 for dense sizes, n_ff is 0 for MoE.
struct SynthPreset {
  std::string_view name;  // "0.8b", "35b-a3b"
  int64_t n_embd;
  int64_t n_layer;
  int64_t n_head;
  int64_t n_head_kv;
  int64_t ssm_n_k_heads;  // DeltaNet q/k heads (Hk)
  int64_t ssm_n_v_heads;  // DeltaNet v heads (Hv)
  int64_t n_ff;           // dense SwiGLU width
  int64_t n_expert;
  int64_t n_expert_used;
  int64_t n_ff_expert;
  int64_t n_ff_shared;  // shared expert width
  bool tied;            // no output.weight: the head is token_embd

  bool is_moe() const { return n_expert > 0; }
};

// Every preset, smallest first.
absl::Span<const SynthPreset> SynthPresets();
// The preset called `name`; the error lists the valid names.
absl::StatusOr<SynthPreset> FindPreset(std::string_view name);

// Which block types the 2-D weights get (as llama-quantize's file types do; docs/synth.md).
enum class WeightMixture { kF32, kF16, kQ8_0, kQ4_K_M, kQ5_K_M, kQ6_K };

// "q4_k_m" -> kQ4_K_M; the error lists the valid names.
absl::StatusOr<WeightMixture> ParseMixture(std::string_view name);
std::string_view MixtureName(WeightMixture mixture);

// llama.cpp's rule for the layers whose V-carrying and down projections get more bits in
// Q4_K_M / Q5_K_M (llama-quant.cpp `use_more_bits`): the first and last eighth of the layers
// and every third layer in between.
bool UseMoreBits(int64_t layer, int64_t n_layer);

// How a tensor's values are drawn (../shared/golden/README.md, "Random initialisation").
enum class InitRule {
  kNormal,      // N(0, std^2)
  kNormWeight,  // 1 + 0.1 * N(0, 1)
  kSignedNorm,  // +-(1 + 0.1 * N(0, 1)), random sign (output_norm of tied models)
  kSsmA,        // -exp(U[ln 0.1, 0])
  kDtBias,      // U[-0.5, 0.5]
};

// One tensor of the plan.
struct PlannedTensor {
  std::string name;
  common::GgmlType type;
  std::vector<int64_t> ne;  // GGML order: ne[0] is the row length
  InitRule init;
  float std;          // for kNormal
  int64_t layer;      // -1 for global tensors
  bool expert_stack;  // {in, out, n_expert}: only n_expert_used of ne[2] are active

  int64_t n_elements() const;
  // Rows of ne[0] values (the product of the other dims).
  int64_t n_rows() const { return n_elements() / ne[0]; }
};

// A model to write: the preset (n_layer possibly overridden), its mixture and vocabulary rows.
struct ModelPlan {
  SynthPreset preset;
  WeightMixture mixture;
  int64_t n_vocab;
  std::vector<PlannedTensor> tensors;  // file order

  std::string_view arch() const { return preset.is_moe() ? "qwen35moe" : "qwen35"; }
};

// The tensors of `preset` with `n_vocab` embedding rows and the types of `mixture`. n_layer > 0
// overrides the preset's layer count (quick tests). Fails on n_vocab < 1 or a bad n_layer.
absl::StatusOr<ModelPlan> PlanModel(const SynthPreset& preset, WeightMixture mixture,
                                    int64_t n_vocab, int64_t n_layer);

// Parameters of the text stack (elements of every tensor), and those used per token (routed
// experts counted n_expert_used of n_expert).
int64_t TotalParams(const ModelPlan& plan);
int64_t ActiveParams(const ModelPlan& plan);
// Bytes of tensor data (no header), as the plan's types store them.
uint64_t TensorDataBytes(const ModelPlan& plan);

// Adds general.* and <arch>.* keys (hyperparameters, file type, a description naming `seed`).
absl::Status AddModelMetadata(const ModelPlan& plan, uint64_t seed, common::GgufWriter& writer);

// Writes rows [first_row, first_row + n_rows) of `tensor` (each ne[0] floats) to `out`. A
// value depends only on (seed, tensor name, row, column), never on how rows are split into
// calls or threads.
void FillRows(const PlannedTensor& tensor, uint64_t seed, int64_t first_row, int64_t n_rows,
              float* out);

}  // namespace deltaserve::worker
