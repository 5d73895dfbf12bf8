#include "worker/engine/model_weights.h"

#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/str_util.h"

namespace deltaserve::worker {
namespace {

using common::GgufTensorInfo;
using common::Sv;
using kernels::WeightType;
using kernels::WeightView;

// Looks tensors up by name and checks them before handing them to the backend.
class TensorBinder {
 public:
  TensorBinder(const common::GgufFile& file, kernels::Backend& backend, ModelWeights& weights)
      : file_(file), backend_(backend), weights_(weights) {}

  // A matrix (or a stack of matrices) with GGUF shape `ne`, in any supported block type. With
  // `import` false the view points into the file's mapping (host memory), whatever the backend,
  // and its bytes are not counted as the backend's.
  absl::StatusOr<WeightView> Matrix(const std::string& name, std::initializer_list<int64_t> ne,
                                    bool import = true) {
    absl::StatusOr<const GgufTensorInfo*> t = Find(name, ne);
    if (!t.ok()) return t.status();
    const uint32_t type_id = static_cast<uint32_t>((*t)->type);
    if (!kernels::IsWeightType(type_id)) {
      return absl::UnimplementedError(absl::StrCat(
          file_.name(), ": tensor '", name, "' has type ", Sv(common::GgmlTypeName((*t)->type)),
          ", which DeltaServe cannot compute with (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
          "q5_1, q4_K, q5_K, q6_K)"));
    }
    WeightView v;
    v.type = static_cast<WeightType>(type_id);
    v.in = (*t)->ne[0];
    v.out = (*t)->ne[1];
    v.count = (*t)->ne[2];
    const kernels::BlockLayout layout = kernels::BlockLayoutOf(v.type);
    v.row_bytes = static_cast<size_t>(v.in / layout.block_size * layout.block_bytes);
    if (!import) {
      v.data = file_.TensorData(**t).data();
      return v;
    }
    v.data = Import(**t);
    if (v.data == nullptr) return OutOfMemory(name);
    return v;
  }

  // An f32 vector of `n` elements (norm weights, per-head parameters).
  absl::StatusOr<kernels::Vec> Vector(const std::string& name, int64_t n) {
    absl::StatusOr<const float*> p = F32(name, {n});
    if (!p.ok()) return p.status();
    return kernels::Vec{*p, n};
  }

  // Any f32 tensor of shape `ne`.
  absl::StatusOr<const float*> F32(const std::string& name, std::initializer_list<int64_t> ne) {
    absl::StatusOr<const GgufTensorInfo*> t = Find(name, ne);
    if (!t.ok()) return t.status();
    if ((*t)->type != common::GgmlType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(file_.name(), ": tensor '", name,
                                                     "' must be f32, is ",
                                                     Sv(common::GgmlTypeName((*t)->type))));
    }
    const void* p = Import(**t);
    if (p == nullptr) return OutOfMemory(name);
    return static_cast<const float*>(p);
  }

  bool Has(const std::string& name) const { return file_.FindTensor(name) != nullptr; }

 private:
  absl::StatusOr<const GgufTensorInfo*> Find(const std::string& name,
                                             std::initializer_list<int64_t> ne) {
    const GgufTensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) {
      return absl::NotFoundError(absl::StrCat(file_.name(), ": missing tensor '", name, "'"));
    }
    std::vector<int64_t> want(ne);
    std::vector<int64_t> have(t->ne.begin(), t->ne.begin() + t->n_dims);
    while (want.size() < have.size() && have.back() == 1) have.pop_back();
    while (have.size() < want.size()) have.push_back(1);
    if (have != want) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_.name(), ": tensor '", name, "' has shape ", t->ShapeString(),
                       ", expected {", absl::StrJoin(want, ", "), "}"));
    }
    return t;
  }

  const void* Import(const GgufTensorInfo& t) {
    absl::Span<const uint8_t> bytes = file_.TensorData(t);
    kernels::DeviceBuffer storage;
    const void* p = backend_.ImportWeights(bytes.data(), bytes.size(), storage);
    if (storage.data() != nullptr) weights_.storage.push_back(std::move(storage));
    weights_.bytes += bytes.size();
    return p;
  }

  absl::Status OutOfMemory(const std::string& name) {
    return absl::ResourceExhaustedError(
        absl::StrCat("backend ", Sv(backend_.name()), " has no memory for tensor '", name, "'"));
  }

  const common::GgufFile& file_;
  kernels::Backend& backend_;
  ModelWeights& weights_;
};

#define DS_ASSIGN(lhs, expr)                          \
  do {                                                \
    auto status_or_ = (expr);                         \
    if (!status_or_.ok()) return status_or_.status(); \
    lhs = *std::move(status_or_);                     \
  } while (0)

absl::Status BindDeltaNet(TensorBinder& b, const std::string& p, const common::Qwen35HParams& hp,
                          DeltaNetWeights& w) {
  const int64_t d = hp.n_embd, nv = hp.ssm_n_v_heads, dv = hp.ssm_head_dim;
  const int64_t c = hp.ssm_conv_channels();
  DS_ASSIGN(w.qkv, b.Matrix(p + "attn_qkv.weight", {d, c}));
  DS_ASSIGN(w.z, b.Matrix(p + "attn_gate.weight", {d, nv * dv}));
  DS_ASSIGN(w.beta, b.Matrix(p + "ssm_beta.weight", {d, nv}));
  DS_ASSIGN(w.alpha, b.Matrix(p + "ssm_alpha.weight", {d, nv}));
  DS_ASSIGN(w.out, b.Matrix(p + "ssm_out.weight", {nv * dv, d}));
  DS_ASSIGN(w.conv, b.F32(p + "ssm_conv1d.weight", {hp.ssm_conv_kernel, c}));
  DS_ASSIGN(w.ssm_a, b.Vector(p + "ssm_a", nv));
  DS_ASSIGN(w.dt_bias, b.Vector(p + "ssm_dt.bias", nv));
  DS_ASSIGN(w.norm, b.Vector(p + "ssm_norm.weight", dv));
  return absl::OkStatus();
}

absl::Status BindAttention(TensorBinder& b, const std::string& p, const common::Qwen35HParams& hp,
                           AttentionWeights& w) {
  const int64_t d = hp.n_embd, hd = hp.head_dim;
  DS_ASSIGN(w.q, b.Matrix(p + "attn_q.weight", {d, 2 * hp.n_head * hd}));
  DS_ASSIGN(w.k, b.Matrix(p + "attn_k.weight", {d, hp.n_head_kv * hd}));
  DS_ASSIGN(w.v, b.Matrix(p + "attn_v.weight", {d, hp.n_head_kv * hd}));
  DS_ASSIGN(w.out, b.Matrix(p + "attn_output.weight", {hp.n_head * hd, d}));
  DS_ASSIGN(w.q_norm, b.Vector(p + "attn_q_norm.weight", hd));
  DS_ASSIGN(w.k_norm, b.Vector(p + "attn_k_norm.weight", hd));
  return absl::OkStatus();
}

absl::Status BindFfn(TensorBinder& b, const std::string& p, const std::string& suffix, int64_t d,
                     int64_t ff, FfnWeights& w) {
  DS_ASSIGN(w.gate, b.Matrix(p + "ffn_gate" + suffix + ".weight", {d, ff}));
  DS_ASSIGN(w.up, b.Matrix(p + "ffn_up" + suffix + ".weight", {d, ff}));
  DS_ASSIGN(w.down, b.Matrix(p + "ffn_down" + suffix + ".weight", {ff, d}));
  return absl::OkStatus();
}

absl::Status BindMoe(TensorBinder& b, const std::string& p, const common::Qwen35HParams& hp,
                     bool import_routed, MoeWeights& w) {
  const int64_t d = hp.n_embd, e = hp.n_expert, ff = hp.n_ff_expert;
  if (b.Has(p + "ffn_gate_up_exps.weight")) {
    return absl::UnimplementedError(
        absl::StrCat("tensor '", p,
                     "ffn_gate_up_exps.weight': fused gate/up expert tensors are not supported "
                     "yet; re-convert with separate ffn_gate_exps/ffn_up_exps"));
  }
  DS_ASSIGN(w.router, b.Matrix(p + "ffn_gate_inp.weight", {d, e}));
  DS_ASSIGN(w.gate_exps, b.Matrix(p + "ffn_gate_exps.weight", {d, ff, e}, import_routed));
  DS_ASSIGN(w.up_exps, b.Matrix(p + "ffn_up_exps.weight", {d, ff, e}, import_routed));
  DS_ASSIGN(w.down_exps, b.Matrix(p + "ffn_down_exps.weight", {ff, d, e}, import_routed));
  w.has_shared = hp.n_ff_shared_expert > 0 && b.Has(p + "ffn_up_shexp.weight");
  if (w.has_shared) {
    if (auto s = BindFfn(b, p, "_shexp", d, hp.n_ff_shared_expert, w.shared); !s.ok()) return s;
    DS_ASSIGN(w.shared_gate, b.Matrix(p + "ffn_gate_inp_shexp.weight", {d}));
    w.shared_gate.out = 1;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelWeights> LoadQwen35Weights(const common::GgufFile& file,
                                               const common::Qwen35HParams& hp,
                                               kernels::Backend& backend,
                                               bool import_routed_experts) {
  ModelWeights w;
  TensorBinder b(file, backend, w);
  DS_ASSIGN(w.token_embd, b.Matrix("token_embd.weight", {hp.n_embd, hp.n_vocab}));
  DS_ASSIGN(w.output_norm, b.Vector("output_norm.weight", hp.n_embd));
  if (hp.tied_output) {
    w.output = w.token_embd;
  } else {
    DS_ASSIGN(w.output, b.Matrix("output.weight", {hp.n_embd, hp.n_vocab}));
  }
  w.layers.resize(hp.n_layer);
  for (int64_t i = 0; i < hp.n_layer; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string p = absl::StrCat("blk.", i, ".");
    l.kind = hp.layers[i];
    DS_ASSIGN(l.attn_norm, b.Vector(p + "attn_norm.weight", hp.n_embd));
    DS_ASSIGN(l.post_norm, b.Vector(p + "post_attention_norm.weight", hp.n_embd));
    absl::Status s = l.kind == common::LayerKind::kDeltaNet ? BindDeltaNet(b, p, hp, l.deltanet)
                                                            : BindAttention(b, p, hp, l.attention);
    if (!s.ok()) return s;
    s = hp.is_moe ? BindMoe(b, p, hp, import_routed_experts, l.moe)
                  : BindFfn(b, p, "", hp.n_embd, hp.n_ff, l.ffn);
    if (!s.ok()) return s;
  }
  return w;
}

}  // namespace deltaserve::worker
