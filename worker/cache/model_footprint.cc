#include "worker/cache/model_footprint.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "common/str_util.h"

namespace deltaserve::worker {
namespace {

using common::GgmlType;
using common::LayerKind;

// Adds `bytes` of `type` to the per-type totals.
void Count(std::map<uint32_t, WeightTypeBytes>& by_type, GgmlType type, uint64_t bytes) {
  WeightTypeBytes& w =
      by_type.try_emplace(static_cast<uint32_t>(type), WeightTypeBytes{type}).first->second;
  ++w.n_tensors;
  w.bytes += bytes;
}

std::vector<WeightTypeBytes> Values(const std::map<uint32_t, WeightTypeBytes>& by_type) {
  std::vector<WeightTypeBytes> out;
  out.reserve(by_type.size());
  for (const auto& [id, w] : by_type) out.push_back(w);
  return out;
}

}  // namespace

std::vector<std::string> ForwardPassTensorNames(const common::GgufFile& file,
                                                const common::Qwen35HParams& hp) {
  std::vector<std::string> names = {"token_embd.weight", "output_norm.weight"};
  if (!hp.tied_output) names.push_back("output.weight");
  for (int64_t i = 0; i < hp.n_layer; ++i) {
    const std::string p = absl::StrCat("blk.", i, ".");
    auto add = [&](std::initializer_list<const char*> suffixes) {
      for (const char* s : suffixes) names.push_back(p + s);
    };
    add({"attn_norm.weight", "post_attention_norm.weight"});
    if (hp.layers[i] == LayerKind::kDeltaNet) {
      add({"attn_qkv.weight", "attn_gate.weight", "ssm_beta.weight", "ssm_alpha.weight",
           "ssm_out.weight", "ssm_conv1d.weight", "ssm_a", "ssm_dt.bias", "ssm_norm.weight"});
    } else {
      add({"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
           "attn_q_norm.weight", "attn_k_norm.weight"});
    }
    if (!hp.is_moe) {
      add({"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"});
      continue;
    }
    add({"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
         "ffn_down_exps.weight"});
    if (hp.n_ff_shared_expert > 0 && file.FindTensor(p + "ffn_up_shexp.weight") != nullptr) {
      add({"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
           "ffn_gate_inp_shexp.weight"});
    }
  }
  return names;
}

absl::StatusOr<ModelWeightBytes> ForwardPassWeightBytes(const common::GgufFile& file,
                                                        const common::Qwen35HParams& hp) {
  std::map<uint32_t, WeightTypeBytes> by_type;
  uint64_t read_bytes = 0;
  int64_t n_read = 0;
  for (const std::string& name : ForwardPassTensorNames(file, hp)) {
    const common::GgufTensorInfo* t = file.FindTensor(name);
    if (t == nullptr) {
      return absl::NotFoundError(absl::StrCat(file.name(), ": missing tensor '", name, "'"));
    }
    Count(by_type, t->type, t->n_bytes);
    read_bytes += t->n_bytes;
    ++n_read;
  }
  ModelWeightBytes w;
  w.read = Values(by_type);
  uint64_t file_bytes = 0;
  for (const common::GgufTensorInfo& t : file.tensors()) file_bytes += t.n_bytes;
  w.n_unread_tensors = static_cast<int64_t>(file.tensors().size()) - n_read;
  w.unread_bytes = file_bytes - read_bytes;
  return w;
}

std::vector<WeightTypeBytes> SynthPlanWeightBytes(const ModelPlan& plan) {
  std::map<uint32_t, WeightTypeBytes> by_type;
  for (const PlannedTensor& t : plan.tensors) {
    const common::GgmlTypeTraits& traits = common::TraitsOf(t.type);
    Count(by_type, t.type,
          static_cast<uint64_t>(t.n_rows()) * (t.ne[0] / traits.block_size) * traits.type_size);
  }
  return Values(by_type);
}

common::Qwen35HParams PresetHParams(const SynthPreset& p, int64_t n_vocab) {
  common::Qwen35HParams hp;
  hp.arch = p.is_moe() ? "qwen35moe" : "qwen35";
  hp.is_moe = p.is_moe();
  hp.n_ctx_train = kSynthContext;
  hp.n_embd = p.n_embd;
  hp.n_block = p.n_layer;
  hp.n_nextn = 0;
  hp.n_layer = p.n_layer;
  hp.n_ff = p.is_moe() ? 0 : p.n_ff;
  hp.n_head = p.n_head;
  hp.n_head_kv = p.n_head_kv;
  hp.head_dim = kSynthHeadDim;
  hp.n_rot = kSynthRotaryDims;
  hp.rope_freq_base = kSynthRopeBase;
  hp.rms_eps = kSynthRmsEps;
  hp.ssm_conv_kernel = kSynthConvKernel;
  hp.ssm_head_dim = kSynthSsmHeadDim;
  hp.ssm_n_v_heads = p.ssm_n_v_heads;
  hp.ssm_n_k_heads = p.ssm_n_k_heads;
  hp.ssm_inner_size = p.ssm_n_v_heads * kSynthSsmHeadDim;
  hp.full_attention_interval = kSynthFullAttentionInterval;
  hp.n_expert = p.n_expert;
  hp.n_expert_used = p.n_expert_used;
  hp.n_ff_expert = p.n_ff_expert;
  hp.n_ff_shared_expert = p.n_ff_shared;
  hp.n_vocab = n_vocab;
  hp.tied_output = p.tied;
  hp.layers.resize(p.n_layer);
  for (int64_t i = 0; i < p.n_layer; ++i) {
    hp.layers[i] = (i + 1) % kSynthFullAttentionInterval != 0 ? LayerKind::kDeltaNet
                                                              : LayerKind::kFullAttention;
  }
  return hp;
}

}  // namespace deltaserve::worker
