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
#include <optional>
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

// Skewed expert routing for MoE presets (deltaserve-synth --expert-skew, docs/synth.md). Random
// router weights spread tokens evenly over the experts; real routers do not. With a skew, each
// token id belongs to one of `topics` equal ranges of the vocabulary, and in every layer each
// topic prefers its own experts with Zipf-distributed popularity of exponent `exponent`
// (common::ZipfExpertRanks gives each (layer, topic) its ranking), so a conversation whose
// tokens change topic moves the hot experts. Built through the network, not around it:
//   - the first `topics` dimensions of the residual stream carry the token's topic: its
//     embedding row holds kSkewTopicAmplitude in the dimension of its topic and 0 in the others,
//     and no layer writes them (those rows of every output projection are zero), so they reach
//     every layer's router unchanged (the norms' weights there are 1);
//   - each router row (one expert) reads those dimensions with weights that add
//     -exponent * kSkewRankLogits * ln(rank + 1) logits for the token's topic, scaled by the
//     residual stream's growth with depth (kSkewResidualGrowth) so that the deep layers are as
//     skewed as the first;
//   - the output head adds `stickiness` logits to the tokens of the current token's topic, so
//     a generation stays on its prompt's topic.
struct ExpertSkew {
  double exponent = 1.0;     // Zipf exponent S (0: the construction without a preference)
  int64_t topics = 8;        // vocabulary ranges, each with its own hot experts per layer
  double stickiness = 16.0;  // head logits for the current topic's tokens
};

// Value of a token's topic dimension in its embedding row (the other values are N(0, 1)).
inline constexpr double kSkewTopicAmplitude = 4.0;
// Router logits per unit of ln(rank + 1) at exponent 1. The random part of a synth router's
// logits has a spread of 6; under that noise a top-k follows the Zipf law of sampling without
// replacement at offsets of about half the spread (a numerical check of top-8 of 256), and 3.2
// is what makes recorded traces of 35b-a3b q4_k_m match synthetic Zipf traces of the same
// exponent (measured: docs/synth.md).
inline constexpr double kSkewRankLogits = 3.2;
// The residual stream's RMS before layer l's router, relative to the embedding's:
// sqrt(1 + kSkewResidualGrowth * (l + 1/2)); measured on 35b-a3b q4_k_m, where without it the
// realised skew fell by a fifth over 16 layers (docs/synth.md).
inline constexpr double kSkewResidualGrowth = 0.033;

// The topic of token `id` among `topics` equal ranges of an `n_vocab`-token vocabulary.
inline int64_t SkewTopicOf(int64_t id, int64_t topics, int64_t n_vocab) {
  return n_vocab > 0 ? id * topics / n_vocab : 0;
}

// What a tensor's values get from an ExpertSkew on top of its InitRule (see ExpertSkew).
enum class SkewRole {
  kNone,
  kEmbedding,      // token_embd: the topic dimensions
  kZeroTopicRows,  // output projections: rows (output dimensions) < topics are zero
  kTopicNorm,      // post_attention_norm, output_norm: 1 in the topic dimensions
  kRouter,         // ffn_gate_inp: the topics' Zipf preferences
  kHead,           // output: the topic stickiness
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
  SkewRole skew_role = SkewRole::kNone;
  // For skew roles: the topic count, vocabulary rows, the exponent and the value scale
  // (embedding: the amplitude; router: logits per unit of rank preference times the residual's
  // RMS over the amplitude; head: the same for the stickiness).
  int64_t skew_topics = 0;
  int64_t skew_vocab = 0;
  double skew_exponent = 0;
  double skew_scale = 0;

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
  std::optional<ExpertSkew> skew;      // MoE presets only

  std::string_view arch() const { return preset.is_moe() ? "qwen35moe" : "qwen35"; }
};

// The tensors of `preset` with `n_vocab` embedding rows and the types of `mixture`. n_layer > 0
// overrides the preset's layer count (quick tests). Fails on n_vocab < 1 or a bad n_layer. With
// a skew (MoE presets only; InvalidArgument otherwise, or for an exponent outside [0, 8], topics
// outside [1, min(64, n_vocab)] or stickiness outside [0, 64]) the router, embedding, norms,
// output projections and head carry it (ExpertSkew); without one the values are as before.
absl::StatusOr<ModelPlan> PlanModel(const SynthPreset& preset, WeightMixture mixture,
                                    int64_t n_vocab, int64_t n_layer,
                                    const std::optional<ExpertSkew>& skew = std::nullopt);

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
