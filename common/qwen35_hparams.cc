#include "common/qwen35_hparams.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/gguf_file.h"
#include "common/str_util.h"

namespace deltaserve::common {
namespace {

// Reads `<arch>.<suffix>` keys with messages that name the full key.
class ArchKeys {
 public:
  ArchKeys(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  std::string Key(std::string_view suffix) const { return absl::StrCat(arch_, ".", Sv(suffix)); }

  absl::Status Required(std::string_view suffix, int64_t& out, int64_t min = 1) const {
    absl::StatusOr<int64_t> v = file_.GetInt(Key(suffix));
    if (!v.ok()) return v.status();
    return Check(suffix, *v, min, out);
  }

  absl::Status Optional(std::string_view suffix, int64_t& out, int64_t min = 1) const {
    if (file_.Find(Key(suffix)) == nullptr) return absl::OkStatus();
    return Required(suffix, out, min);
  }

  absl::Status RequiredDouble(std::string_view suffix, double& out) const {
    absl::StatusOr<double> v = file_.GetDouble(Key(suffix));
    if (!v.ok()) return v.status();
    out = *v;
    return absl::OkStatus();
  }

  // A scalar, or a per-layer array whose entries must all be equal here (DeltaServe's engine
  // has one value for all layers).
  absl::Status ScalarOrUniformArray(std::string_view suffix, int64_t& out, int64_t min) const {
    const GgufValue* v = file_.Find(Key(suffix));
    if (v == nullptr) return absl::NotFoundError(Bad(suffix, "missing"));
    if (!v->is_array()) return Required(suffix, out, min);
    // Per-layer arrays put 0 at DeltaNet layers; take the attention layers' value.
    int64_t value = 0;
    for (uint64_t i = 0; i < v->ArraySize(); ++i) {
      std::optional<int64_t> e = v->ArrayInt(i);
      if (!e) return absl::InvalidArgumentError(Bad(suffix, "is not an integer array"));
      if (*e == 0) continue;
      if (value != 0 && *e != value) {
        return absl::UnimplementedError(Bad(suffix, "differs between layers"));
      }
      value = *e;
    }
    return Check(suffix, value, min, out);
  }

  std::string Bad(std::string_view suffix, std::string_view what) const {
    return absl::StrCat(file_.name(), ": key '", Key(suffix), "' ", Sv(what));
  }

 private:
  absl::Status Check(std::string_view suffix, int64_t v, int64_t min, int64_t& out) const {
    if (v < min || v > (int64_t{1} << 40)) {
      return absl::InvalidArgumentError(
          Bad(suffix, absl::StrCat("= ", v, " is out of range (minimum ", min, ")")));
    }
    out = v;
    return absl::OkStatus();
  }

  const GgufFile& file_;
  std::string arch_;
};

}  // namespace

std::vector<int> Qwen35HParams::LayersOf(LayerKind kind) const {
  std::vector<int> out;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] == kind) out.push_back(static_cast<int>(i));
  }
  return out;
}

absl::StatusOr<Qwen35HParams> ReadQwen35HParams(const GgufFile& file) {
  absl::StatusOr<std::string_view> arch = file.GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  if (*arch != "qwen35" && *arch != "qwen35moe") {
    return absl::InvalidArgumentError(absl::StrCat(file.name(), ": general.architecture is '",
                                                   Sv(*arch), "', not qwen35 or qwen35moe"));
  }
  Qwen35HParams hp;
  hp.arch = std::string(*arch);
  hp.is_moe = hp.arch == "qwen35moe";
  const ArchKeys k(file, hp.arch);

  if (auto s = k.Required("context_length", hp.n_ctx_train); !s.ok()) return s;
  if (auto s = k.Required("embedding_length", hp.n_embd); !s.ok()) return s;
  if (auto s = k.Required("block_count", hp.n_block); !s.ok()) return s;
  if (auto s = k.Optional("nextn_predict_layers", hp.n_nextn, 0); !s.ok()) return s;
  if (hp.n_nextn >= hp.n_block) {
    return absl::InvalidArgumentError(
        k.Bad("nextn_predict_layers", absl::StrCat("= ", hp.n_nextn, " leaves no main layers of ",
                                                   hp.n_block, " blocks")));
  }
  hp.n_layer = hp.n_block - hp.n_nextn;
  if (auto s = k.RequiredDouble("attention.layer_norm_rms_epsilon", hp.rms_eps); !s.ok()) return s;
  if (!(hp.rms_eps > 0 && hp.rms_eps < 1)) {
    return absl::InvalidArgumentError(k.Bad("attention.layer_norm_rms_epsilon", "must be in (0, 1)"));
  }
  if (auto s = k.Required("ssm.conv_kernel", hp.ssm_conv_kernel); !s.ok()) return s;
  if (auto s = k.Required("ssm.inner_size", hp.ssm_inner_size); !s.ok()) return s;
  if (auto s = k.Required("ssm.state_size", hp.ssm_head_dim); !s.ok()) return s;
  if (auto s = k.Required("ssm.time_step_rank", hp.ssm_n_v_heads); !s.ok()) return s;
  if (auto s = k.Required("ssm.group_count", hp.ssm_n_k_heads); !s.ok()) return s;
  if (hp.ssm_inner_size != hp.ssm_n_v_heads * hp.ssm_head_dim) {
    return absl::InvalidArgumentError(k.Bad(
        "ssm.inner_size", absl::StrCat("= ", hp.ssm_inner_size, " but time_step_rank x state_size = ",
                                       hp.ssm_n_v_heads, " x ", hp.ssm_head_dim)));
  }
  if (hp.ssm_n_v_heads % hp.ssm_n_k_heads != 0) {
    return absl::InvalidArgumentError(k.Bad(
        "ssm.time_step_rank", absl::StrCat("= ", hp.ssm_n_v_heads,
                                           " is not a multiple of ssm.group_count = ",
                                           hp.ssm_n_k_heads)));
  }

  if (auto s = k.Optional("feed_forward_length", hp.n_ff, 0); !s.ok()) return s;
  if (auto s = k.ScalarOrUniformArray("attention.head_count", hp.n_head, 1); !s.ok()) return s;
  hp.n_head_kv = hp.n_head;
  if (file.Find(k.Key("attention.head_count_kv")) != nullptr) {
    if (auto s = k.ScalarOrUniformArray("attention.head_count_kv", hp.n_head_kv, 1); !s.ok()) {
      return s;
    }
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    return absl::InvalidArgumentError(k.Bad(
        "attention.head_count_kv", absl::StrCat("= ", hp.n_head_kv,
                                                " does not divide attention.head_count = ",
                                                hp.n_head)));
  }
  hp.head_dim = hp.n_embd / hp.n_head;
  if (auto s = k.Optional("attention.key_length", hp.head_dim); !s.ok()) return s;
  int64_t value_length = hp.head_dim;
  if (auto s = k.Optional("attention.value_length", value_length); !s.ok()) return s;
  if (value_length != hp.head_dim) {
    return absl::InvalidArgumentError(k.Bad(
        "attention.value_length", absl::StrCat("= ", value_length, " differs from key_length = ",
                                               hp.head_dim)));
  }
  hp.n_rot = hp.head_dim;
  if (auto s = k.Optional("rope.dimension_count", hp.n_rot); !s.ok()) return s;
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
    return absl::InvalidArgumentError(k.Bad(
        "rope.dimension_count", absl::StrCat("= ", hp.n_rot, " must be even and at most the head "
                                             "dim ", hp.head_dim)));
  }
  if (file.Find(k.Key("rope.freq_base")) != nullptr) {
    if (auto s = k.RequiredDouble("rope.freq_base", hp.rope_freq_base); !s.ok()) return s;
    if (!(hp.rope_freq_base > 1)) {
      return absl::InvalidArgumentError(k.Bad("rope.freq_base", "must be > 1"));
    }
  }
  if (const GgufValue* sec = file.Find(k.Key("rope.dimension_sections"))) {
    if (!sec->is_array() || sec->ArraySize() > 4) {
      return absl::InvalidArgumentError(
          k.Bad("rope.dimension_sections", "must be an integer array of at most 4 entries"));
    }
    hp.rope_sections = {0, 0, 0, 0};
    for (uint64_t i = 0; i < sec->ArraySize(); ++i) {
      std::optional<int64_t> v = sec->ArrayInt(i);
      if (!v || *v < 0 || *v > hp.n_rot) {
        return absl::InvalidArgumentError(k.Bad("rope.dimension_sections", "has a bad entry"));
      }
      hp.rope_sections[i] = static_cast<int32_t>(*v);
    }
  } else {
    return absl::NotFoundError(k.Bad("rope.dimension_sections", "missing"));
  }

  // Which layers are recurrent: the per-layer array decides when present, else the interval.
  if (auto s = k.Optional("full_attention_interval", hp.full_attention_interval); !s.ok()) return s;
  hp.layers.resize(hp.n_layer);
  if (const GgufValue* rec = file.Find(k.Key("attention.recurrent_layers"))) {
    if (!rec->is_array() || rec->ArraySize() < static_cast<uint64_t>(hp.n_layer)) {
      return absl::InvalidArgumentError(k.Bad(
          "attention.recurrent_layers", absl::StrCat("must be a bool array of ", hp.n_block,
                                                     " entries")));
    }
    for (int64_t i = 0; i < hp.n_layer; ++i) {
      std::optional<int64_t> r = rec->ArrayInt(i);
      if (!r) return absl::InvalidArgumentError(k.Bad("attention.recurrent_layers", "bad entry"));
      hp.layers[i] = *r ? LayerKind::kDeltaNet : LayerKind::kFullAttention;
    }
  } else {
    for (int64_t i = 0; i < hp.n_layer; ++i) {
      hp.layers[i] = (i + 1) % hp.full_attention_interval != 0 ? LayerKind::kDeltaNet
                                                               : LayerKind::kFullAttention;
    }
  }

  if (hp.is_moe) {
    if (auto s = k.Required("expert_count", hp.n_expert); !s.ok()) return s;
    if (auto s = k.Required("expert_used_count", hp.n_expert_used); !s.ok()) return s;
    if (hp.n_expert_used > hp.n_expert) {
      return absl::InvalidArgumentError(k.Bad(
          "expert_used_count", absl::StrCat("= ", hp.n_expert_used, " exceeds expert_count = ",
                                            hp.n_expert)));
    }
    if (auto s = k.Required("expert_feed_forward_length", hp.n_ff_expert); !s.ok()) return s;
    if (auto s = k.Optional("expert_shared_feed_forward_length", hp.n_ff_shared_expert, 0);
        !s.ok()) {
      return s;
    }
  } else if (hp.n_ff <= 0) {
    return absl::NotFoundError(k.Bad("feed_forward_length", "missing (a dense model needs it)"));
  }

  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd != nullptr) {
    if (embd->ne[0] != hp.n_embd) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.name(), ": tensor 'token_embd.weight' has ", embd->ne[0], " columns but key '",
          k.Key("embedding_length"), "' = ", hp.n_embd));
    }
    hp.n_vocab = embd->ne[1];
  }
  hp.tied_output = file.FindTensor("output.weight") == nullptr;
  return hp;
}

}  // namespace deltaserve::common
