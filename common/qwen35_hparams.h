// Typed hyperparameters of Qwen3.5 hybrid models (GGUF architectures `qwen35` and `qwen35moe`),
// read from GGUF metadata and checked against the constraints of ../shared/docs/GGUF_QWEN35.md:
// which layers are Gated DeltaNet and which full attention, head counts and dims, experts.
// An inconsistent file is refused with a message naming the key.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace deltaserve::common {

class GgufFile;

// What a layer computes.
enum class LayerKind {
  kDeltaNet,       // Gated DeltaNet (linear attention with recurrent state)
  kFullAttention,  // gated softmax attention with a KV cache
};

// Hyperparameters of a qwen35 / qwen35moe model (GGUF key suffixes in comments).
struct Qwen35HParams {
  std::string arch;              // general.architecture: "qwen35" or "qwen35moe"
  bool is_moe = false;
  int64_t n_ctx_train = 0;       // context_length
  int64_t n_embd = 0;            // embedding_length
  int64_t n_block = 0;           // block_count (includes MTP layers)
  int64_t n_nextn = 0;           // nextn_predict_layers (MTP layers at the end)
  int64_t n_layer = 0;           // n_block - n_nextn: layers of the main forward pass
  int64_t n_ff = 0;              // feed_forward_length (dense FFN width; 0 if absent)
  int64_t n_head = 0;            // attention.head_count
  int64_t n_head_kv = 0;         // attention.head_count_kv
  int64_t head_dim = 0;          // attention.key_length (= value_length)
  int64_t n_rot = 0;             // rope.dimension_count (rotated dims per head)
  double rope_freq_base = 10000.0;              // rope.freq_base
  std::array<int32_t, 4> rope_sections{11, 11, 10, 0};  // rope.dimension_sections
  double rms_eps = 0;            // attention.layer_norm_rms_epsilon
  int64_t ssm_conv_kernel = 0;   // ssm.conv_kernel
  int64_t ssm_inner_size = 0;    // ssm.inner_size (= v heads x head dim)
  int64_t ssm_head_dim = 0;      // ssm.state_size (DeltaNet head dim dk = dv)
  int64_t ssm_n_v_heads = 0;     // ssm.time_step_rank
  int64_t ssm_n_k_heads = 0;     // ssm.group_count
  int64_t full_attention_interval = 4;  // full_attention_interval
  int64_t n_expert = 0;          // expert_count (MoE)
  int64_t n_expert_used = 0;     // expert_used_count
  int64_t n_ff_expert = 0;       // expert_feed_forward_length
  int64_t n_ff_shared_expert = 0;  // expert_shared_feed_forward_length
  int64_t n_vocab = 0;           // rows of token_embd.weight
  bool tied_output = false;      // no output.weight: the output head is token_embd
  std::vector<LayerKind> layers;  // n_layer entries

  // DeltaNet conv channels C = 2 * nk * dk + nv * dk.
  int64_t ssm_conv_channels() const {
    return 2 * ssm_n_k_heads * ssm_head_dim + ssm_n_v_heads * ssm_head_dim;
  }
  // Indices of the layers of `kind`.
  std::vector<int> LayersOf(LayerKind kind) const;
};

// Reads and validates the hyperparameters of a qwen35 or qwen35moe file.
absl::StatusOr<Qwen35HParams> ReadQwen35HParams(const GgufFile& file);

}  // namespace deltaserve::common
