#include "worker/synth/synthetic_model.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <numbers>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/gguf_writer.h"
#include "common/routing_trace.h"
#include "common/str_util.h"

namespace deltaserve::worker {
namespace {

using common::GgmlType;
using common::GgufMetadataValue;
using common::Sv;

// MODEL_SPEC §1.2. The 2B tie is inferred there (UNVERIFIED); the others are from the configs.
// clang-format off
constexpr std::array<SynthPreset, 7> kPresets = {{
    // name        H     L   nh  nkv Hk  Hv  I      E    k  I_moe I_sh  tied
    {"0.8b",      1024, 24, 8,  2,  16, 16, 3584,  0,   0, 0,    0,    true},
    {"2b",        2048, 24, 8,  2,  16, 16, 6144,  0,   0, 0,    0,    true},
    {"4b",        2560, 32, 16, 4,  16, 32, 9216,  0,   0, 0,    0,    true},
    {"9b",        4096, 32, 16, 4,  16, 32, 12288, 0,   0, 0,    0,    false},
    {"27b",       5120, 64, 24, 4,  16, 48, 17408, 0,   0, 0,    0,    false},
    {"35b-a3b",   2048, 40, 16, 2,  16, 32, 0,     256, 8, 512,  512,  false},
    {"122b-a10b", 3072, 48, 32, 2,  16, 64, 0,     256, 8, 1024, 1024, false},
}};
// clang-format on

struct MixtureInfo {
  WeightMixture mixture;
  std::string_view name;
  uint32_t file_type;  // llama_ftype, written as general.file_type
};
constexpr std::array<MixtureInfo, 6> kMixtures = {{
    {WeightMixture::kF32, "f32", 0},
    {WeightMixture::kF16, "f16", 1},
    {WeightMixture::kQ8_0, "q8_0", 7},
    {WeightMixture::kQ4_K_M, "q4_k_m", 15},
    {WeightMixture::kQ5_K_M, "q5_k_m", 17},
    {WeightMixture::kQ6_K, "q6_k", 18},
}};

const MixtureInfo& InfoOf(WeightMixture m) {
  for (const MixtureInfo& info : kMixtures) {
    if (info.mixture == m) return info;
  }
  return kMixtures[0];
}

// What decides a tensor's block type (see TypeFor).
enum class Role {
  kAlwaysF32,  // 1-D tensors, ssm_conv1d, the router: F32 in every file (GGUF_QWEN35.md)
  kHead,       // output.weight, or token_embd.weight when tied
  kMoreBits,   // attn_v, attn_qkv, ffn_down(_exps, _shexp): Q6_K on UseMoreBits layers
  kOther,
};

// llama-quant.cpp's fallback when a row is not a whole number of 256-value super-blocks.
GgmlType FallbackFor(GgmlType t, int64_t row) {
  if (row % 256 == 0) return t;
  GgmlType f = t == GgmlType::kQ4_K   ? GgmlType::kQ5_0
               : t == GgmlType::kQ5_K ? GgmlType::kQ5_1
               : t == GgmlType::kQ6_K ? GgmlType::kQ8_0
                                      : t;
  return row % 32 == 0 ? f : GgmlType::kF16;
}

// The Q4_K_M / Q5_K_M rule was read off the golden tiny-dense-q4_k_m.gguf, which
// llama-quantize wrote: output Q6_K, attn_qkv / attn_v / ffn_down Q6_K on UseMoreBits layers
// (attn_qkv and attn_v share one counter that runs over all layers), ssm_out not promoted.
GgmlType TypeFor(WeightMixture m, Role role, int64_t layer, int64_t n_layer, int64_t row) {
  if (role == Role::kAlwaysF32) return GgmlType::kF32;
  switch (m) {
    case WeightMixture::kF32:
      return GgmlType::kF32;
    case WeightMixture::kF16:
      return GgmlType::kF16;
    case WeightMixture::kQ8_0:
      return row % 32 == 0 ? GgmlType::kQ8_0 : GgmlType::kF16;
    case WeightMixture::kQ6_K:
      return FallbackFor(GgmlType::kQ6_K, row);
    case WeightMixture::kQ4_K_M:
    case WeightMixture::kQ5_K_M:
      break;
  }
  const GgmlType base = m == WeightMixture::kQ4_K_M ? GgmlType::kQ4_K : GgmlType::kQ5_K;
  const bool promote =
      role == Role::kHead || (role == Role::kMoreBits && UseMoreBits(layer, n_layer));
  return FallbackFor(promote ? GgmlType::kQ6_K : base, row);
}

// Builds the tensor list of one plan.
class PlanBuilder {
 public:
  PlanBuilder(ModelPlan& plan, int64_t n_layer) : plan_(plan), n_layer_(n_layer) {}

  void Add(std::string name, std::vector<int64_t> ne, InitRule init, float std, Role role,
           int64_t layer = -1, bool expert_stack = false) {
    if (ne.size() == 1) role = Role::kAlwaysF32;
    const GgmlType type = TypeFor(plan_.mixture, role, layer, n_layer_, ne[0]);
    plan_.tensors.push_back(
        PlannedTensor{std::move(name), type, std::move(ne), init, std, layer, expert_stack});
  }
  // A projection {in, out} (or a stack {in, out, n}) drawn N(0, (gain / sqrt(in))^2).
  void Proj(std::string name, std::vector<int64_t> ne, double gain, Role role, int64_t layer) {
    const float std = static_cast<float>(gain / std::sqrt(static_cast<double>(ne[0])));
    const bool stack = ne.size() == 3;
    Add(std::move(name), std::move(ne), InitRule::kNormal, std, role, layer, stack);
  }
  void Norm(std::string name, int64_t n, int64_t layer) {
    Add(std::move(name), {n}, InitRule::kNormWeight, 0, Role::kAlwaysF32, layer);
  }

 private:
  ModelPlan& plan_;
  int64_t n_layer_;
};

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman & Vigna): a fast generator, one stream per tensor row.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    for (uint64_t& w : s_) w = SplitMix64(seed);
  }
  uint64_t Next() {
    const uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1), 24 bits.
  float Uniform() { return static_cast<float>(Next() >> 40) * 0x1p-24f; }

 private:
  std::array<uint64_t, 4> s_;
};

uint64_t TensorKey(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  uint64_t x = seed ^ SplitMix64(h);
  return SplitMix64(x);
}

// Box-Muller on batches of kBatch pairs. The draws are sequential, the transform is written
// with branch-free polynomials so the compiler vectorises it: with libm's logf/sinf/cosf one
// value took 14 ns, which made the generator slower than the quantizer (bench on the dev VM).
constexpr int64_t kBatch = 32;

// ln(u) for u in (0, 1]: u = 2^e * m with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(t),
// t = (m - 1) / (m + 1), |t| <= 0.172; the series to t^9 is good to ~1e-9.
inline float LogUnit(uint32_t bits) {
  int32_t e = static_cast<int32_t>(bits >> 23) - 127;
  uint32_t mbits = (bits & 0x7FFFFF) | 0x3F800000;  // m in [1, 2)
  const bool high = mbits > 0x3FB504F3;             // m > sqrt(2)
  mbits = high ? mbits - 0x00800000 : mbits;        // m / 2
  e = high ? e + 1 : e;
  const float m = std::bit_cast<float>(mbits);
  const float t = (m - 1.0f) / (m + 1.0f);
  const float t2 = t * t;
  const float series = 1.0f + t2 * (1.0f / 3 + t2 * (1.0f / 5 + t2 * (1.0f / 7 + t2 * (1.0f / 9))));
  return static_cast<float>(e) * std::numbers::ln2_v<float> + 2.0f * t * series;
}

// sin and cos of 2 pi x for x in [0, 1): reduced to a quarter turn q and |r| <= 1/8 turn, where
// Taylor series to degree 9 / 8 are good to ~2e-9.
inline void SinCosTurns(float x, float& s, float& c) {
  // x >= 0, so truncation rounds 4x to nearest (and, unlike nearbyint, vectorises).
  const float q = static_cast<float>(static_cast<int32_t>(4.0f * x + 0.5f));  // NOLINT
  const float a = 2.0f * std::numbers::pi_v<float> * (x - 0.25f * q);
  const float a2 = a * a;
  const float sa = a * (1 - a2 / 6 * (1 - a2 / 20 * (1 - a2 / 42 * (1 - a2 / 72))));
  const float ca = 1 - a2 / 2 * (1 - a2 / 12 * (1 - a2 / 30 * (1 - a2 / 56)));
  const int32_t quadrant = static_cast<int32_t>(q) & 3;
  s = quadrant == 0 ? sa : quadrant == 1 ? ca : quadrant == 2 ? -sa : -ca;
  c = quadrant == 0 ? ca : quadrant == 1 ? -sa : quadrant == 2 ? -ca : sa;
}

// n values N(0, std^2), two per 64-bit draw (24 bits for the radius, 24 for the angle).
void NormalRow(Xoshiro256& rng, float std, float* out, int64_t n) {
  alignas(64) uint32_t u1[kBatch];
  alignas(64) float u2[kBatch];
  alignas(64) float values[2 * kBatch];
  for (int64_t done = 0; done < n; done += 2 * kBatch) {
    for (int64_t i = 0; i < kBatch; ++i) {
      const uint64_t r = rng.Next();
      // (r >> 40) + 1 in [1, 2^24], as the bits of a float in (0, 1].
      u1[i] = std::bit_cast<uint32_t>(static_cast<float>((r >> 40) + 1) * 0x1p-24f);
      u2[i] = static_cast<float>((r >> 8) & 0xFFFFFF) * 0x1p-24f;
    }
    for (int64_t i = 0; i < kBatch; ++i) {
      const float radius = std * std::sqrt(-2.0f * LogUnit(u1[i]));
      float s, c;
      SinCosTurns(u2[i], s, c);
      values[2 * i] = radius * c;
      values[2 * i + 1] = radius * s;
    }
    const int64_t take = std::min(2 * kBatch, n - done);
    std::copy(values, values + take, out + done);
  }
}

// The residual stream's RMS before the router of layer `l` (after its attention or DeltaNet
// block), and before the head (after every layer), relative to the embedding's.
double ResidualRms(double layers_before) {
  return std::sqrt(1.0 + kSkewResidualGrowth * layers_before);
}

void AnnotateSkew(const ExpertSkew& skew, ModelPlan& plan) {
  plan.skew = skew;
  const int64_t n_layer = plan.preset.n_layer;
  for (PlannedTensor& t : plan.tensors) {
    auto ends = [&](std::string_view suffix) { return absl::EndsWith(t.name, Sv(suffix)); };
    if (t.name == "token_embd.weight") {
      t.skew_role = SkewRole::kEmbedding;
      t.skew_scale = kSkewTopicAmplitude;
    } else if (ends("ssm_out.weight") || ends("attn_output.weight") ||
               ends("ffn_down_exps.weight") || ends("ffn_down_shexp.weight")) {
      t.skew_role = SkewRole::kZeroTopicRows;
    } else if (ends("post_attention_norm.weight") || t.name == "output_norm.weight") {
      t.skew_role = SkewRole::kTopicNorm;
    } else if (ends("ffn_gate_inp.weight")) {
      t.skew_role = SkewRole::kRouter;
      t.skew_exponent = skew.exponent;
      t.skew_scale =
          kSkewRankLogits * ResidualRms(static_cast<double>(t.layer) + 0.5) / kSkewTopicAmplitude;
    } else if (t.name == "output.weight") {
      t.skew_role = SkewRole::kHead;
      t.skew_scale =
          skew.stickiness * ResidualRms(static_cast<double>(n_layer)) / kSkewTopicAmplitude;
    } else {
      continue;
    }
    t.skew_topics = skew.topics;
    t.skew_vocab = plan.n_vocab;
  }
}

// Applies the tensor's skew role to rows [first_row, first_row + n_rows) (see ExpertSkew).
void ApplySkew(const PlannedTensor& t, uint64_t seed, int64_t first_row, int64_t n_rows,
               float* out) {
  const int64_t n = t.ne[0];
  const int64_t topics = std::min(t.skew_topics, n);
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = out + r * n;
    const int64_t index = first_row + r;
    switch (t.skew_role) {
      case SkewRole::kNone:
        return;
      case SkewRole::kEmbedding:
      case SkewRole::kHead: {
        const int64_t topic = SkewTopicOf(index, t.skew_topics, t.skew_vocab);
        for (int64_t d = 0; d < topics; ++d) {
          row[d] = d == topic ? static_cast<float>(t.skew_scale) : 0.0f;
        }
        break;
      }
      case SkewRole::kZeroTopicRows:
        if (index % t.ne[1] < topics) std::fill(row, row + n, 0.0f);
        break;
      case SkewRole::kTopicNorm:
        std::fill(row, row + topics, 1.0f);
        break;
      case SkewRole::kRouter: {
        // Row `index` is expert `index`; its weight on topic d's dimension puts the expert's
        // log-popularity (centred over the experts) under that topic into its logit.
        const int64_t n_expert = t.ne[1];
        double mean_log = 0;
        for (int64_t k = 1; k <= n_expert; ++k) mean_log += std::log(static_cast<double>(k));
        mean_log /= static_cast<double>(n_expert);
        for (int64_t d = 0; d < topics; ++d) {
          const int32_t rank = common::ZipfExpertRanks(seed, t.layer, d, n_expert)[index];
          row[d] = static_cast<float>(-t.skew_exponent * (std::log(rank + 1.0) - mean_log) *
                                      t.skew_scale);
        }
        break;
      }
    }
  }
}

}  // namespace

absl::Span<const SynthPreset> SynthPresets() { return kPresets; }

absl::StatusOr<SynthPreset> FindPreset(std::string_view name) {
  std::vector<absl::string_view> names;
  for (const SynthPreset& p : kPresets) {
    if (p.name == name) return p;
    names.push_back(Sv(p.name));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown preset '", Sv(name), "' (one of ", absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<WeightMixture> ParseMixture(std::string_view name) {
  std::vector<absl::string_view> names;
  for (const MixtureInfo& info : kMixtures) {
    if (info.name == name) return info.mixture;
    names.push_back(Sv(info.name));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown weight type '", Sv(name), "' (one of ",
                                                 absl::StrJoin(names, ", "), ")"));
}

std::string_view MixtureName(WeightMixture mixture) { return InfoOf(mixture).name; }

bool UseMoreBits(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

int64_t PlannedTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

absl::StatusOr<ModelPlan> PlanModel(const SynthPreset& preset, WeightMixture mixture,
                                    int64_t n_vocab, int64_t n_layer,
                                    const std::optional<ExpertSkew>& skew) {
  if (n_vocab < 1) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary of ", n_vocab, " tokens"));
  }
  if (skew.has_value()) {
    if (!preset.is_moe()) {
      return absl::InvalidArgumentError(
          absl::StrCat("an expert skew needs a MoE preset ('", Sv(preset.name), "' is dense)"));
    }
    if (!(skew->exponent >= 0 && skew->exponent <= 8)) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert skew ", skew->exponent, " is not in [0, 8]"));
    }
    if (skew->topics < 1 || skew->topics > std::min<int64_t>(64, n_vocab)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expert topics ", skew->topics, " is not in [1, ", std::min<int64_t>(64, n_vocab), "]"));
    }
    if (!(skew->stickiness >= 0 && skew->stickiness <= 64)) {
      return absl::InvalidArgumentError(
          absl::StrCat("topic stickiness ", skew->stickiness, " is not in [0, 64]"));
    }
  }
  if (n_layer < 0 || n_layer > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer count ", n_layer, " is out of range (1..1024, 0 for the preset's)"));
  }
  ModelPlan plan{preset, mixture, n_vocab, {}, std::nullopt};
  if (n_layer > 0) plan.preset.n_layer = n_layer;
  const SynthPreset& p = plan.preset;
  const int64_t h = p.n_embd, hd = kSynthHeadDim, dk = kSynthSsmHeadDim;
  const int64_t conv_channels = 2 * p.ssm_n_k_heads * dk + p.ssm_n_v_heads * dk;
  const int64_t inner = p.ssm_n_v_heads * dk;
  // s: the embedding's std. Tied heads keep logits at std ~4 (4 / sqrt(H), 0.25 at the golden
  // H = 256); out-projections scale with s so every layer adds about the same to the residual.
  const double s = p.tied ? 4.0 / std::sqrt(static_cast<double>(h)) : 1.0;

  PlanBuilder b(plan, p.n_layer);
  b.Add("token_embd.weight", {h, n_vocab}, InitRule::kNormal, static_cast<float>(s),
        p.tied ? Role::kHead : Role::kOther);
  for (int64_t il = 0; il < p.n_layer; ++il) {
    const std::string blk = absl::StrCat("blk.", il, ".");
    auto name = [&](std::string_view t) { return absl::StrCat(blk, Sv(t)); };
    b.Norm(name("attn_norm.weight"), h, il);
    if ((il + 1) % kSynthFullAttentionInterval != 0) {  // Gated DeltaNet
      b.Proj(name("attn_qkv.weight"), {h, conv_channels}, 1.0, Role::kMoreBits, il);
      b.Proj(name("attn_gate.weight"), {h, inner}, 1.0, Role::kOther, il);
      b.Add(name("ssm_conv1d.weight"), {kSynthConvKernel, conv_channels}, InitRule::kNormal, 0.5f,
            Role::kAlwaysF32, il);
      b.Add(name("ssm_dt.bias"), {p.ssm_n_v_heads}, InitRule::kDtBias, 0, Role::kAlwaysF32, il);
      b.Add(name("ssm_a"), {p.ssm_n_v_heads}, InitRule::kSsmA, 0, Role::kAlwaysF32, il);
      b.Proj(name("ssm_beta.weight"), {h, p.ssm_n_v_heads}, 1.0, Role::kOther, il);
      b.Proj(name("ssm_alpha.weight"), {h, p.ssm_n_v_heads}, 1.0, Role::kOther, il);
      b.Norm(name("ssm_norm.weight"), dk, il);
      b.Proj(name("ssm_out.weight"), {inner, h}, 0.25 * s, Role::kOther, il);
    } else {  // gated full attention
      b.Proj(name("attn_q.weight"), {h, 2 * p.n_head * hd}, 1.0, Role::kOther, il);
      b.Proj(name("attn_k.weight"), {h, p.n_head_kv * hd}, 1.0, Role::kOther, il);
      b.Proj(name("attn_v.weight"), {h, p.n_head_kv * hd}, 1.0, Role::kMoreBits, il);
      b.Norm(name("attn_q_norm.weight"), hd, il);
      b.Norm(name("attn_k_norm.weight"), hd, il);
      b.Proj(name("attn_output.weight"), {p.n_head * hd, h}, 0.5 * s, Role::kOther, il);
    }
    b.Norm(name("post_attention_norm.weight"), h, il);
    if (!p.is_moe()) {
      b.Proj(name("ffn_gate.weight"), {h, p.n_ff}, 1.0, Role::kOther, il);
      b.Proj(name("ffn_up.weight"), {h, p.n_ff}, 1.0, Role::kOther, il);
      b.Proj(name("ffn_down.weight"), {p.n_ff, h}, 0.25 * s, Role::kMoreBits, il);
      continue;
    }
    b.Proj(name("ffn_gate_inp.weight"), {h, p.n_expert}, 6.0, Role::kAlwaysF32, il);
    b.Proj(name("ffn_gate_exps.weight"), {h, p.n_ff_expert, p.n_expert}, 1.0, Role::kOther, il);
    b.Proj(name("ffn_up_exps.weight"), {h, p.n_ff_expert, p.n_expert}, 1.0, Role::kOther, il);
    b.Proj(name("ffn_down_exps.weight"), {p.n_ff_expert, h, p.n_expert}, 0.25 * s, Role::kMoreBits,
           il);
    b.Proj(name("ffn_gate_inp_shexp.weight"), {h}, 1.0, Role::kAlwaysF32, il);
    b.Proj(name("ffn_gate_shexp.weight"), {h, p.n_ff_shared}, 1.0, Role::kOther, il);
    b.Proj(name("ffn_up_shexp.weight"), {h, p.n_ff_shared}, 1.0, Role::kOther, il);
    b.Proj(name("ffn_down_shexp.weight"), {p.n_ff_shared, h}, 0.25 * s, Role::kMoreBits, il);
  }
  // A tied head with all-positive norm weights mostly predicts the input token back.
  b.Add("output_norm.weight", {h}, p.tied ? InitRule::kSignedNorm : InitRule::kNormWeight, 0,
        Role::kAlwaysF32);
  if (!p.tied) b.Proj("output.weight", {h, n_vocab}, 4.0, Role::kHead, -1);
  if (skew.has_value()) AnnotateSkew(*skew, plan);
  return plan;
}

int64_t TotalParams(const ModelPlan& plan) {
  int64_t n = 0;
  for (const PlannedTensor& t : plan.tensors) n += t.n_elements();
  return n;
}

int64_t ActiveParams(const ModelPlan& plan) {
  int64_t n = 0;
  for (const PlannedTensor& t : plan.tensors) {
    n += t.expert_stack ? t.n_elements() / t.ne[2] * plan.preset.n_expert_used : t.n_elements();
  }
  return n;
}

uint64_t TensorDataBytes(const ModelPlan& plan) {
  uint64_t n = 0;
  for (const PlannedTensor& t : plan.tensors) {
    const common::GgmlTypeTraits& traits = common::TraitsOf(t.type);
    n += static_cast<uint64_t>(t.n_rows()) * (t.ne[0] / traits.block_size) * traits.type_size;
  }
  return n;
}

absl::Status AddModelMetadata(const ModelPlan& plan, uint64_t seed, common::GgufWriter& w) {
  const SynthPreset& p = plan.preset;
  const std::string arch(plan.arch());
  std::vector<std::pair<std::string, GgufMetadataValue>> kv;
  auto u32 = [&](std::string_view key, int64_t v) {
    kv.emplace_back(absl::StrCat(arch, ".", Sv(key)),
                    GgufMetadataValue::Uint32(static_cast<uint32_t>(v)));
  };
  kv.emplace_back("general.architecture", GgufMetadataValue::String(arch));
  kv.emplace_back("general.name",
                  GgufMetadataValue::String(absl::StrCat("synthetic-qwen3.5-", Sv(p.name))));
  kv.emplace_back(
      "general.description",
      GgufMetadataValue::String(absl::StrCat(
          "random weights written by deltaserve-synth: preset ", Sv(p.name), ", ", p.n_layer,
          " layers, ", Sv(MixtureName(plan.mixture)), ", seed ", seed,
          plan.skew.has_value()
              ? absl::StrCat(", expert skew ", plan.skew->exponent, " over ", plan.skew->topics,
                             " topics, stickiness ", plan.skew->stickiness)
              : "")));
  kv.emplace_back("general.file_type", GgufMetadataValue::Uint32(InfoOf(plan.mixture).file_type));
  if (plan.mixture != WeightMixture::kF32 && plan.mixture != WeightMixture::kF16) {
    kv.emplace_back("general.quantization_version", GgufMetadataValue::Uint32(2));
  }
  u32("context_length", kSynthContext);
  u32("embedding_length", p.n_embd);
  u32("block_count", p.n_layer);
  if (!p.is_moe()) u32("feed_forward_length", p.n_ff);
  u32("attention.head_count", p.n_head);
  u32("attention.head_count_kv", p.n_head_kv);
  u32("attention.key_length", kSynthHeadDim);
  u32("attention.value_length", kSynthHeadDim);
  u32("rope.dimension_count", kSynthRotaryDims);
  const std::array<int32_t, 4> sections = {11, 11, 10, 0};
  kv.emplace_back(absl::StrCat(arch, ".rope.dimension_sections"),
                  GgufMetadataValue::Int32Array(sections));
  kv.emplace_back(absl::StrCat(arch, ".rope.freq_base"),
                  GgufMetadataValue::Float32(static_cast<float>(kSynthRopeBase)));
  kv.emplace_back(absl::StrCat(arch, ".attention.layer_norm_rms_epsilon"),
                  GgufMetadataValue::Float32(static_cast<float>(kSynthRmsEps)));
  u32("ssm.conv_kernel", kSynthConvKernel);
  u32("ssm.state_size", kSynthSsmHeadDim);
  u32("ssm.group_count", p.ssm_n_k_heads);
  u32("ssm.time_step_rank", p.ssm_n_v_heads);
  u32("ssm.inner_size", p.ssm_n_v_heads * kSynthSsmHeadDim);
  u32("full_attention_interval", kSynthFullAttentionInterval);
  if (p.is_moe()) {
    u32("expert_count", p.n_expert);
    u32("expert_used_count", p.n_expert_used);
    u32("expert_feed_forward_length", p.n_ff_expert);
    u32("expert_shared_feed_forward_length", p.n_ff_shared);
  }
  for (auto& [key, value] : kv) {
    if (absl::Status s = w.AddMetadata(key, std::move(value)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void FillRows(const PlannedTensor& t, uint64_t seed, int64_t first_row, int64_t n_rows,
              float* out) {
  const uint64_t key = TensorKey(seed, t.name);
  const int64_t n = t.ne[0];
  for (int64_t r = 0; r < n_rows; ++r) {
    Xoshiro256 rng(key ^ (static_cast<uint64_t>(first_row + r) * 0xD1B54A32D192ED03ull));
    float* row = out + r * n;
    switch (t.init) {
      case InitRule::kNormal:
        NormalRow(rng, t.std, row, n);
        break;
      case InitRule::kNormWeight:
      case InitRule::kSignedNorm:
        NormalRow(rng, 0.1f, row, n);
        for (int64_t i = 0; i < n; ++i) {
          row[i] += 1.0f;
          if (t.init == InitRule::kSignedNorm && (rng.Next() >> 63) != 0) row[i] = -row[i];
        }
        break;
      case InitRule::kSsmA: {
        const float lo = std::log(0.1f);
        for (int64_t i = 0; i < n; ++i) row[i] = -std::exp(lo * (1.0f - rng.Uniform()));
        break;
      }
      case InitRule::kDtBias:
        for (int64_t i = 0; i < n; ++i) row[i] = rng.Uniform() - 0.5f;
        break;
    }
  }
  if (t.skew_role != SkewRole::kNone) ApplySkew(t, seed, first_row, n_rows, out);
}

}  // namespace deltaserve::worker
