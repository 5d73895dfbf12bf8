// The tensors of a Qwen3.5 model (GGUF `qwen35` / `qwen35moe`), checked against the shapes of
// ../shared/docs/GGUF_QWEN35.md and handed to a backend in their GGUF block types. On the CPU
// the weights stay in the memory-mapped file (zero copy); a GPU backend copies them.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf_file.h"
#include "common/qwen35_hparams.h"
#include "kernels/backend.h"

namespace deltaserve::worker {

// Gated DeltaNet mixer (MODEL_SPEC §2.4; GGUF names in comments).
struct DeltaNetWeights {
  kernels::WeightView qkv;      // attn_qkv {d, C}: rows [q | k | v]
  kernels::WeightView z;        // attn_gate {d, nv*dv}
  kernels::WeightView beta;     // ssm_beta {d, nv}
  kernels::WeightView alpha;    // ssm_alpha {d, nv}
  kernels::WeightView out;      // ssm_out {nv*dv, d}
  const float* conv = nullptr;  // ssm_conv1d {K, C}, f32: [C][K]
  kernels::Vec ssm_a;           // {nv}: -exp(A_log)
  kernels::Vec dt_bias;         // ssm_dt.bias {nv}
  kernels::Vec norm;            // ssm_norm {dv}
};

// Gated full attention (MODEL_SPEC §2.3).
struct AttentionWeights {
  kernels::WeightView q;    // attn_q {d, 2*H*hd}: per head hd query rows, then hd gate rows
  kernels::WeightView k;    // attn_k {d, Hk*hd}
  kernels::WeightView v;    // attn_v {d, Hk*hd}
  kernels::WeightView out;  // attn_output {H*hd, d}
  kernels::Vec q_norm;      // {hd}
  kernels::Vec k_norm;      // {hd}
};

// SwiGLU feed-forward (dense models, and the shared expert of MoE ones).
struct FfnWeights {
  kernels::WeightView gate;  // {d, ff}
  kernels::WeightView up;    // {d, ff}
  kernels::WeightView down;  // {ff, d}
};

// Mixture of experts (MODEL_SPEC §2.6). The routed stacks are in backend memory, or in the
// file's mapping when the experts are in two tiers (LoadQwen35Weights' import_routed_experts).
struct MoeWeights {
  kernels::WeightView router;     // ffn_gate_inp {d, E}
  kernels::WeightView gate_exps;  // {d, ff_exp, E}
  kernels::WeightView up_exps;    // {d, ff_exp, E}
  kernels::WeightView down_exps;  // {ff_exp, d, E}
  bool has_shared = false;
  FfnWeights shared;                // ffn_{gate,up,down}_shexp
  kernels::WeightView shared_gate;  // ffn_gate_inp_shexp {d}, as a 1-row matrix
};

// One decoder block.
struct LayerWeights {
  common::LayerKind kind;
  kernels::Vec attn_norm;  // {d}
  kernels::Vec post_norm;  // post_attention_norm {d}
  DeltaNetWeights deltanet;
  AttentionWeights attention;
  FfnWeights ffn;
  MoeWeights moe;
};

// All weights of the forward pass.
struct ModelWeights {
  kernels::WeightView token_embd;  // {d, n_vocab}
  kernels::WeightView output;      // {d, n_vocab}; token_embd when tied
  kernels::Vec output_norm;        // {d}
  std::vector<LayerWeights> layers;
  uint64_t bytes = 0;                          // weight bytes the backend holds or maps
  std::vector<kernels::DeviceBuffer> storage;  // device copies (empty on the CPU)
};

// Binds every tensor of `file` the forward pass needs, checking names, shapes and types; an
// error names the tensor. `file` must outlive the result (CPU weights point into its mapping).
// With import_routed_experts false, the routed expert stacks (ffn_{gate,up,down}_exps) are not
// handed to the backend: their views point into the mapping and `bytes` leaves them out (the
// experts in two tiers of worker/engine/expert_tiers.h).
absl::StatusOr<ModelWeights> LoadQwen35Weights(const common::GgufFile& file,
                                               const common::Qwen35HParams& hp,
                                               kernels::Backend& backend,
                                               bool import_routed_experts = true);

}  // namespace deltaserve::worker
