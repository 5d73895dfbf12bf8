// The inputs of a memory plan that come from a model: the bytes, by GGML type, of the tensors the
// Qwen3.5 forward pass reads (from a GGUF file's tensor infos, or from a synthetic preset's tensor
// plan at a chosen weight mixture), and the hyperparameters of a preset. Nothing is loaded.
//
//   ASSIGN_OR_RETURN(ModelWeightBytes w, ForwardPassWeightBytes(*file, hp));
//   MemoryPlanInputs in{.hp = hp, .weights = w.read, ...};
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf_file.h"
#include "common/qwen35_hparams.h"
#include "worker/cache/memory_plan.h"
#include "worker/synth/synthetic_model.h"

namespace deltaserve::worker {

// Weight bytes of a model file.
struct ModelWeightBytes {
  std::vector<WeightTypeBytes> read;  // tensors the forward pass reads, by type (ascending id)
  int64_t n_unread_tensors = 0;       // in the file but not read (MTP layers, extras)
  uint64_t unread_bytes = 0;
};

// Names of the tensors the forward pass binds (the list of LoadQwen35Weights in
// worker/engine/model_weights.cc): token_embd, output_norm, output unless tied, then per layer
// its norms, DeltaNet or attention tensors and FFN or MoE tensors (shared expert when the file
// has ffn_up_shexp). MTP layers (index >= n_layer) are not read.
std::vector<std::string> ForwardPassTensorNames(const common::GgufFile& file,
                                                const common::Qwen35HParams& hp);

// Groups the tensors of ForwardPassTensorNames by type. Fails, naming the tensor, when one is
// missing (as loading would).
absl::StatusOr<ModelWeightBytes> ForwardPassWeightBytes(const common::GgufFile& file,
                                                        const common::Qwen35HParams& hp);

// The tensors of a synthetic plan by type (every planned tensor is read: the plan has no MTP).
std::vector<WeightTypeBytes> SynthPlanWeightBytes(const ModelPlan& plan);

// Hyperparameters a checkpoint of `preset` has, with `n_vocab` embedding rows (kQwen35VocabRows
// for the real checkpoints): the values deltaserve-synth writes as metadata, read back the way
// ReadQwen35HParams would.
common::Qwen35HParams PresetHParams(const SynthPreset& preset, int64_t n_vocab);

}  // namespace deltaserve::worker
