// The synthetic-model plan: parameter counts against MODEL_SPEC §1.2, shapes against
// GGUF_QWEN35.md, the llama-quantize type mixtures, metadata that ReadQwen35HParams accepts, and
// the random values (deterministic, split-independent, with the golden README's statistics).
#include "worker/synth/synthetic_model.h"

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/gguf_file.h"
#include "common/gguf_writer.h"
#include "common/qwen35_hparams.h"
#include "common/routing_trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::worker {
namespace {

using common::GgmlType;
using ::testing::HasSubstr;

ModelPlan Plan(std::string_view preset, WeightMixture mixture = WeightMixture::kF32,
               int64_t n_vocab = kQwen35VocabRows, int64_t n_layer = 0) {
  absl::StatusOr<SynthPreset> p = FindPreset(preset);
  EXPECT_TRUE(p.ok()) << p.status();
  absl::StatusOr<ModelPlan> plan = PlanModel(*p, mixture, n_vocab, n_layer);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

const PlannedTensor& Find(const ModelPlan& plan, std::string_view name) {
  for (const PlannedTensor& t : plan.tensors) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return plan.tensors.front();
}

bool Has(const ModelPlan& plan, std::string_view name) {
  for (const PlannedTensor& t : plan.tensors) {
    if (t.name == name) return true;
  }
  return false;
}

// Advertised sizes from MODEL_SPEC §1.2 / §4.3 (vocabulary 248,320, no MTP layer).
TEST(SyntheticModelTest, PresetPlansReproduceModelSpecParameterCounts) {
  struct Expect {
    std::string_view preset;
    double total;
    double active;  // 0: dense, active == total
  };
  for (const Expect& e :
       {Expect{"0.8b", 0.75e9, 0}, Expect{"2b", 1.88e9, 0}, Expect{"4b", 4.21e9, 0},
        Expect{"9b", 8.95e9, 0}, Expect{"27b", 26.9e9, 0}, Expect{"35b-a3b", 34.7e9, 3.46e9},
        Expect{"122b-a10b", 122.1e9, 9.77e9}}) {
    SCOPED_TRACE(e.preset);
    const ModelPlan plan = Plan(e.preset);
    const double total = static_cast<double>(TotalParams(plan));
    const double active = static_cast<double>(ActiveParams(plan));
    EXPECT_NEAR(total / e.total, 1.0, 0.01) << total;
    EXPECT_NEAR(active / (e.active > 0 ? e.active : e.total), 1.0, 0.01) << active;
  }
  EXPECT_EQ(SynthPresets().size(), 7u);
}

// Shapes from GGUF_QWEN35.md "Tensors" with the 9B values of MODEL_SPEC §1.2 (H 4096, 32 layers,
// nh/nkv 16/4, Hk/Hv 16/32, I 12288, untied): C = 2*16*128 + 32*128 = 8192.
TEST(SyntheticModelTest, DenseShapesFollowGgufQwen35) {
  const ModelPlan plan = Plan("9b");
  using Ne = std::vector<int64_t>;
  EXPECT_EQ(plan.arch(), "qwen35");
  EXPECT_EQ(Find(plan, "token_embd.weight").ne, (Ne{4096, 248320}));
  EXPECT_EQ(Find(plan, "output.weight").ne, (Ne{4096, 248320}));
  EXPECT_EQ(Find(plan, "blk.0.attn_qkv.weight").ne, (Ne{4096, 8192}));
  EXPECT_EQ(Find(plan, "blk.0.attn_gate.weight").ne, (Ne{4096, 4096}));
  EXPECT_EQ(Find(plan, "blk.0.ssm_conv1d.weight").ne, (Ne{4, 8192}));
  EXPECT_EQ(Find(plan, "blk.0.ssm_a").ne, (Ne{32}));
  EXPECT_EQ(Find(plan, "blk.0.ssm_dt.bias").ne, (Ne{32}));
  EXPECT_EQ(Find(plan, "blk.0.ssm_beta.weight").ne, (Ne{4096, 32}));
  EXPECT_EQ(Find(plan, "blk.0.ssm_norm.weight").ne, (Ne{128}));
  EXPECT_EQ(Find(plan, "blk.0.ssm_out.weight").ne, (Ne{4096, 4096}));
  EXPECT_EQ(Find(plan, "blk.3.attn_q.weight").ne, (Ne{4096, 2 * 16 * 256}));
  EXPECT_EQ(Find(plan, "blk.3.attn_k.weight").ne, (Ne{4096, 4 * 256}));
  EXPECT_EQ(Find(plan, "blk.3.attn_q_norm.weight").ne, (Ne{256}));
  EXPECT_EQ(Find(plan, "blk.3.attn_output.weight").ne, (Ne{16 * 256, 4096}));
  EXPECT_EQ(Find(plan, "blk.31.ffn_down.weight").ne, (Ne{12288, 4096}));
  // Layer i is full attention when (i + 1) % 4 == 0: 8 of 32.
  int attention = 0, deltanet = 0;
  for (const PlannedTensor& t : plan.tensors) {
    attention += absl::EndsWith(t.name, ".attn_q.weight");
    deltanet += absl::EndsWith(t.name, ".attn_qkv.weight");
  }
  EXPECT_EQ(attention, 8);
  EXPECT_EQ(deltanet, 24);
  EXPECT_FALSE(Has(Plan("0.8b"), "output.weight"));  // tied
}

// 35B-A3B: H 2048, 256 experts of 512, shared expert 512; separate gate/up stacks.
TEST(SyntheticModelTest, MoeShapesUseSeparateExpertStacksAndASharedExpert) {
  const ModelPlan plan = Plan("35b-a3b", WeightMixture::kQ4_K_M);
  using Ne = std::vector<int64_t>;
  EXPECT_EQ(plan.arch(), "qwen35moe");
  EXPECT_EQ(Find(plan, "blk.0.ffn_gate_inp.weight").ne, (Ne{2048, 256}));
  EXPECT_EQ(Find(plan, "blk.0.ffn_gate_inp.weight").type, GgmlType::kF32);
  EXPECT_EQ(Find(plan, "blk.0.ffn_gate_exps.weight").ne, (Ne{2048, 512, 256}));
  EXPECT_EQ(Find(plan, "blk.0.ffn_up_exps.weight").ne, (Ne{2048, 512, 256}));
  EXPECT_EQ(Find(plan, "blk.0.ffn_down_exps.weight").ne, (Ne{512, 2048, 256}));
  EXPECT_EQ(Find(plan, "blk.0.ffn_gate_inp_shexp.weight").ne, (Ne{2048}));
  EXPECT_EQ(Find(plan, "blk.0.ffn_gate_inp_shexp.weight").type, GgmlType::kF32);
  EXPECT_EQ(Find(plan, "blk.0.ffn_down_shexp.weight").ne, (Ne{512, 2048}));
  EXPECT_FALSE(Has(plan, "blk.0.ffn_gate_up_exps.weight"));
  EXPECT_FALSE(Has(plan, "blk.0.ffn_up.weight"));
  EXPECT_TRUE(Find(plan, "blk.0.ffn_up_exps.weight").expert_stack);
}

// llama-quant.cpp use_more_bits; the golden tiny-dense-q4_k_m.gguf (8 layers) has Q6_K
// ffn_down and attn_qkv/attn_v exactly at layers 0, 3, 6, 7.
TEST(SyntheticModelTest, UseMoreBitsMatchesLlamaQuantize) {
  std::set<int64_t> eight, twenty_four;
  for (int64_t i = 0; i < 8; ++i) {
    if (UseMoreBits(i, 8)) eight.insert(i);
  }
  for (int64_t i = 0; i < 24; ++i) {
    if (UseMoreBits(i, 24)) twenty_four.insert(i);
  }
  EXPECT_EQ(eight, (std::set<int64_t>{0, 3, 6, 7}));
  EXPECT_EQ(twenty_four, (std::set<int64_t>{0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23}));
}

TEST(SyntheticModelTest, Q4KMMixturePromotesHeadValueAndDownProjections) {
  for (std::string_view preset : {"0.8b", "9b"}) {
    SCOPED_TRACE(preset);
    const ModelPlan plan = Plan(preset, WeightMixture::kQ4_K_M);
    const int64_t n_layer = plan.preset.n_layer;
    for (const PlannedTensor& t : plan.tensors) {
      GgmlType want = GgmlType::kQ4_K;
      const bool value_or_down = absl::EndsWith(t.name, ".attn_qkv.weight") ||
                                 absl::EndsWith(t.name, ".attn_v.weight") ||
                                 absl::EndsWith(t.name, ".ffn_down.weight");
      if (t.ne.size() == 1 || absl::StrContains(t.name, "ssm_conv1d")) {
        want = GgmlType::kF32;
      } else if (t.name == "output.weight" || (plan.preset.tied && t.name == "token_embd.weight")) {
        want = GgmlType::kQ6_K;
      } else if (value_or_down && UseMoreBits(t.layer, n_layer)) {
        want = GgmlType::kQ6_K;
      }
      EXPECT_EQ(t.type, want) << t.name;
    }
  }
  // Untied: the embedding is not the head and stays Q4_K; Q5_K_M uses Q5_K as its base.
  EXPECT_EQ(Find(Plan("9b", WeightMixture::kQ4_K_M), "token_embd.weight").type, GgmlType::kQ4_K);
  const ModelPlan q5 = Plan("35b-a3b", WeightMixture::kQ5_K_M);
  EXPECT_EQ(Find(q5, "blk.0.ffn_down_exps.weight").type, GgmlType::kQ6_K);
  EXPECT_EQ(Find(q5, "blk.0.ffn_down_shexp.weight").type, GgmlType::kQ6_K);
  EXPECT_EQ(Find(q5, "blk.6.ffn_down_exps.weight").type, GgmlType::kQ5_K);
  EXPECT_EQ(Find(q5, "blk.6.ffn_gate_exps.weight").type, GgmlType::kQ5_K);
  EXPECT_EQ(Find(q5, "blk.6.ssm_out.weight").type, GgmlType::kQ5_K);
  EXPECT_EQ(Find(q5, "output.weight").type, GgmlType::kQ6_K);
}

TEST(SyntheticModelTest, UniformMixturesKeepOnlyTheF32Set) {
  const std::map<WeightMixture, GgmlType> want = {{WeightMixture::kF32, GgmlType::kF32},
                                                  {WeightMixture::kF16, GgmlType::kF16},
                                                  {WeightMixture::kQ8_0, GgmlType::kQ8_0},
                                                  {WeightMixture::kQ6_K, GgmlType::kQ6_K}};
  for (const auto& [mixture, type] : want) {
    SCOPED_TRACE(MixtureName(mixture));
    for (const PlannedTensor& t : Plan("35b-a3b", mixture, 1000, 4).tensors) {
      const bool f32 = t.ne.size() == 1 || absl::StrContains(t.name, "ssm_conv1d") ||
                       absl::EndsWith(t.name, "ffn_gate_inp.weight");
      EXPECT_EQ(t.type, f32 ? GgmlType::kF32 : type) << t.name;
    }
  }
}

TEST(SyntheticModelTest, NamesAndArgumentsAreChecked) {
  EXPECT_THAT(std::string(FindPreset("7b").status().message()),
              HasSubstr("unknown preset '7b' (one of 0.8b, 2b, 4b, 9b, 27b, 35b-a3b, 122b-a10b)"));
  EXPECT_THAT(std::string(ParseMixture("q4_0").status().message()),
              HasSubstr("one of f32, f16, q8_0, q4_k_m, q5_k_m, q6_k"));
  EXPECT_EQ(*ParseMixture("q5_k_m"), WeightMixture::kQ5_K_M);
  EXPECT_FALSE(PlanModel(*FindPreset("2b"), WeightMixture::kF32, 0, 0).ok());
  EXPECT_FALSE(PlanModel(*FindPreset("2b"), WeightMixture::kF32, 10, -1).ok());
  EXPECT_EQ(PlanModel(*FindPreset("2b"), WeightMixture::kF32, 10, 3)->preset.n_layer, 3);
}

// The metadata alone (no tensors) read back through ReadQwen35HParams.
TEST(SyntheticModelTest, MetadataReadsBackAsTheRealShapes) {
  for (std::string_view preset : {"4b", "122b-a10b"}) {
    SCOPED_TRACE(preset);
    const ModelPlan plan = Plan(preset);
    common::GgufWriter w;
    ASSERT_TRUE(AddModelMetadata(plan, 7, w).ok());
    absl::StatusOr<std::vector<uint8_t>> image = w.Build();
    ASSERT_TRUE(image.ok());
    absl::StatusOr<std::unique_ptr<common::GgufFile>> f =
        common::GgufFile::FromBuffer(*image, "meta");
    ASSERT_TRUE(f.ok()) << f.status();
    absl::StatusOr<common::Qwen35HParams> hp = common::ReadQwen35HParams(**f);
    ASSERT_TRUE(hp.ok()) << hp.status();
    const SynthPreset& p = plan.preset;
    EXPECT_EQ(hp->arch, plan.arch());
    EXPECT_EQ(hp->n_embd, p.n_embd);
    EXPECT_EQ(hp->n_layer, p.n_layer);
    EXPECT_EQ(hp->n_head, p.n_head);
    EXPECT_EQ(hp->n_head_kv, p.n_head_kv);
    EXPECT_EQ(hp->head_dim, 256);
    EXPECT_EQ(hp->n_rot, 64);
    EXPECT_EQ(hp->rope_freq_base, 1e7);
    EXPECT_EQ(hp->rope_sections, (std::array<int32_t, 4>{11, 11, 10, 0}));
    EXPECT_FLOAT_EQ(static_cast<float>(hp->rms_eps), 1e-6f);
    EXPECT_EQ(hp->n_ctx_train, 262144);
    EXPECT_EQ(hp->ssm_n_k_heads, p.ssm_n_k_heads);
    EXPECT_EQ(hp->ssm_n_v_heads, p.ssm_n_v_heads);
    EXPECT_EQ(hp->ssm_head_dim, 128);
    EXPECT_EQ(hp->ssm_conv_kernel, 4);
    EXPECT_EQ(hp->n_ff, p.n_ff);
    EXPECT_EQ(hp->n_expert, p.n_expert);
    EXPECT_EQ(hp->n_expert_used, p.n_expert_used);
    EXPECT_EQ(hp->n_ff_expert, p.n_ff_expert);
    EXPECT_EQ(hp->n_ff_shared_expert, p.n_ff_shared);
    EXPECT_EQ(hp->LayersOf(common::LayerKind::kFullAttention).size(),
              static_cast<size_t>(p.n_layer / 4));
  }
}

TEST(SyntheticModelTest, ValuesDependOnlyOnSeedNameAndPosition) {
  const ModelPlan plan = Plan("0.8b", WeightMixture::kQ4_K_M, 1000, 4);
  const PlannedTensor& t = Find(plan, "blk.0.attn_gate.weight");  // rows of 1024
  std::vector<float> whole(5 * 1024), pieces(5 * 1024), other_seed(1024), other_name(1024);
  FillRows(t, 42, 10, 5, whole.data());
  for (int r = 4; r >= 0; --r) FillRows(t, 42, 10 + r, 1, pieces.data() + r * 1024);
  EXPECT_EQ(whole, pieces);
  FillRows(t, 43, 10, 1, other_seed.data());
  FillRows(Find(plan, "blk.1.attn_gate.weight"), 42, 10, 1, other_name.data());
  EXPECT_NE(std::vector<float>(whole.begin(), whole.begin() + 1024), other_seed);
  EXPECT_NE(std::vector<float>(whole.begin(), whole.begin() + 1024), other_name);
  EXPECT_NE(std::vector<float>(whole.begin(), whole.begin() + 1024),
            std::vector<float>(whole.begin() + 1024, whole.begin() + 2048));
}

// ../shared/golden/README.md: projections std 1/sqrt(fan_in), norms 1 + 0.1 N(0,1),
// ssm_a = -exp(U[ln 0.1, 0]), dt_bias U[-0.5, 0.5], conv taps std 0.5; tied heads keep logits
// at std ~4, so the 0.8B embedding has std 4 / sqrt(1024) = 0.125.
TEST(SyntheticModelTest, InitialValuesHaveTheGoldenRecipeStatistics) {
  const ModelPlan plan = Plan("0.8b", WeightMixture::kQ4_K_M, 1000, 4);
  auto stats = [&](std::string_view name, int64_t rows) {
    const PlannedTensor& t = Find(plan, name);
    std::vector<float> v(rows * t.ne[0]);
    FillRows(t, 1, 0, rows, v.data());
    double sum = 0, sum2 = 0, lo = v[0], hi = v[0];
    int64_t beyond_2sd = 0;
    for (float x : v) {
      sum += x;
      sum2 += double{x} * x;
      lo = std::min<double>(lo, x);
      hi = std::max<double>(hi, x);
    }
    const double mean = sum / v.size(), sd = std::sqrt(sum2 / v.size() - mean * mean);
    for (float x : v) beyond_2sd += std::abs(x - mean) > 2 * sd;
    return std::array<double, 5>{mean, sd, lo, hi, static_cast<double>(beyond_2sd) / v.size()};
  };
  const auto embd = stats("token_embd.weight", 1000);  // 1.02M values
  EXPECT_NEAR(embd[0], 0.0, 0.001);
  EXPECT_NEAR(embd[1], 0.125, 0.125 * 0.005);
  EXPECT_NEAR(embd[4], 0.0455, 0.002);  // a normal puts 4.55% beyond 2 sd
  const auto qkv = stats("blk.0.attn_qkv.weight", 1000);
  EXPECT_NEAR(qkv[1], 1.0 / 32, 1.0 / 32 * 0.005);
  const auto down = stats("blk.0.ffn_down.weight", 1000);  // 0.25 s / sqrt(3584)
  EXPECT_NEAR(down[1], 0.25 * 0.125 / std::sqrt(3584.0), 0.25 * 0.125 / std::sqrt(3584.0) * 0.01);
  const auto norm = stats("blk.0.attn_norm.weight", 1);
  EXPECT_NEAR(norm[0], 1.0, 0.01);
  EXPECT_NEAR(norm[1], 0.1, 0.01);
  const auto conv = stats("blk.0.ssm_conv1d.weight", 6144);
  EXPECT_NEAR(conv[1], 0.5, 0.01);
  std::vector<float> a(16), dt(16);
  FillRows(Find(plan, "blk.0.ssm_a"), 1, 0, 1, a.data());
  FillRows(Find(plan, "blk.0.ssm_dt.bias"), 1, 0, 1, dt.data());
  for (int i = 0; i < 16; ++i) {
    EXPECT_GE(a[i], -1.0f);
    EXPECT_LE(a[i], -0.1f + 1e-6f);
    EXPECT_GE(dt[i], -0.5f);
    EXPECT_LT(dt[i], 0.5f);
  }
  // Tied output_norm carries random signs.
  const auto out_norm = stats("output_norm.weight", 1);
  EXPECT_LT(out_norm[2], -0.5);
  EXPECT_GT(out_norm[3], 0.5);
}

// --expert-skew (ExpertSkew): which tensors carry it and the values they get.
ModelPlan SkewedPlan(double exponent, int64_t topics = 8) {
  absl::StatusOr<ModelPlan> plan =
      PlanModel(*FindPreset("35b-a3b"), WeightMixture::kQ4_K_M,
                /*n_vocab=*/800, /*n_layer=*/4, ExpertSkew{exponent, topics, 8.0});
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

std::vector<float> Rows(const PlannedTensor& t, int64_t first, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n * t.ne[0]));
  FillRows(t, 7, first, n, v.data());
  return v;
}

TEST(SyntheticModelTest, ExpertSkewIsForMoePresetsWithinItsRanges) {
  EXPECT_THAT(
      PlanModel(*FindPreset("9b"), WeightMixture::kF32, 100, 2, ExpertSkew{}).status().message(),
      HasSubstr("needs a MoE preset"));
  const SynthPreset moe = *FindPreset("35b-a3b");
  EXPECT_THAT(PlanModel(moe, WeightMixture::kF32, 100, 2, ExpertSkew{9, 8, 8}).status().message(),
              HasSubstr("expert skew 9 is not in [0, 8]"));
  EXPECT_THAT(PlanModel(moe, WeightMixture::kF32, 100, 2, ExpertSkew{1, 0, 8}).status().message(),
              HasSubstr("expert topics 0 is not in [1, 64]"));
  EXPECT_THAT(PlanModel(moe, WeightMixture::kF32, 4, 2, ExpertSkew{1, 8, 8}).status().message(),
              HasSubstr("expert topics 8 is not in [1, 4]"));
  EXPECT_THAT(PlanModel(moe, WeightMixture::kF32, 100, 2, ExpertSkew{1, 8, -1}).status().message(),
              HasSubstr("stickiness"));
  // Without a skew nothing is marked, so files are as they were.
  for (const PlannedTensor& t : Plan("35b-a3b", WeightMixture::kQ4_K_M, 800, 4).tensors) {
    EXPECT_EQ(t.skew_role, SkewRole::kNone) << t.name;
  }
}

TEST(SyntheticModelTest, ExpertSkewMarksTheTensorsOnTheTopicPath) {
  const ModelPlan plan = SkewedPlan(1.0);
  ASSERT_TRUE(plan.skew.has_value());
  std::map<SkewRole, int> roles;
  for (const PlannedTensor& t : plan.tensors) ++roles[t.skew_role];
  EXPECT_EQ(roles[SkewRole::kEmbedding], 1);
  EXPECT_EQ(roles[SkewRole::kHead], 1);
  EXPECT_EQ(roles[SkewRole::kRouter], 4);
  EXPECT_EQ(roles[SkewRole::kTopicNorm], 4 + 1);  // post_attention_norm per layer, output_norm
  // Per layer: the attention or DeltaNet output, the experts' and the shared expert's down.
  EXPECT_EQ(roles[SkewRole::kZeroTopicRows], 4 * 3);
  EXPECT_EQ(Find(plan, "blk.3.attn_output.weight").skew_role, SkewRole::kZeroTopicRows);
  EXPECT_EQ(Find(plan, "blk.0.ssm_out.weight").skew_role, SkewRole::kZeroTopicRows);
  EXPECT_EQ(Find(plan, "blk.0.attn_norm.weight").skew_role, SkewRole::kNone);
}

TEST(SyntheticModelTest, ExpertSkewValuesCarryTheTopicToTheRouters) {
  const ModelPlan plan = SkewedPlan(1.5);
  // 800 tokens in 8 topics of 100 ids: token 250 is topic 2.
  const std::vector<float> embd = Rows(Find(plan, "token_embd.weight"), 250, 1);
  for (int d = 0; d < 8; ++d) EXPECT_EQ(embd[d], d == 2 ? kSkewTopicAmplitude : 0.0) << d;
  EXPECT_NE(embd[8], 0.0f);  // the rest is the random embedding
  // No layer writes the topic dimensions: rows 0..7 of an output projection are zero, in every
  // expert of a stack (rows e * 2048 + d).
  const PlannedTensor& down = Find(plan, "blk.1.ffn_down_exps.weight");
  for (int64_t row : {int64_t{0}, int64_t{7}, int64_t{5 * 2048 + 3}}) {
    for (float v : Rows(down, row, 1)) ASSERT_EQ(v, 0.0f) << row;
  }
  EXPECT_NE(Rows(down, 8, 1)[0], 0.0f);
  const std::vector<float> norm = Rows(Find(plan, "blk.2.post_attention_norm.weight"), 0, 1);
  for (int d = 0; d < 8; ++d) EXPECT_EQ(norm[d], 1.0f);
  // Router row e, topic column d: -S * 3.2 * (ln(rank + 1) - mean ln) * rms / amplitude, the rank
  // of expert e for (layer, topic d) from the shared ranking; the topic's hottest expert gets
  // the largest weight.
  const PlannedTensor& router = Find(plan, "blk.1.ffn_gate_inp.weight");
  const std::vector<float> w = Rows(router, 0, 256);
  double mean_log = 0;
  for (int r = 1; r <= 256; ++r) mean_log += std::log(r);
  mean_log /= 256;
  const double scale =
      kSkewRankLogits * std::sqrt(1 + kSkewResidualGrowth * 1.5) / kSkewTopicAmplitude;
  for (int d : {0, 5}) {
    const std::vector<int32_t> rank = common::ZipfExpertRanks(7, 1, d, 256);
    int hottest = 0;
    for (int e = 0; e < 256; ++e) {
      EXPECT_NEAR(w[e * 2048 + d], -1.5 * (std::log(rank[e] + 1.0) - mean_log) * scale, 1e-5);
      if (w[e * 2048 + d] > w[hottest * 2048 + d]) hottest = e;
    }
    EXPECT_EQ(rank[hottest], 0);
  }
  // The head favours the current topic's tokens: token 250's row reads topic 2 only.
  const std::vector<float> head = Rows(Find(plan, "output.weight"), 250, 1);
  const double stick = 8.0 * std::sqrt(1 + kSkewResidualGrowth * 4) / kSkewTopicAmplitude;
  for (int d = 0; d < 8; ++d) EXPECT_NEAR(head[d], d == 2 ? stick : 0.0, 1e-6) << d;
  // Exponent 0 keeps the path (topic dimensions, zero rows) but no preference.
  const ModelPlan flat = SkewedPlan(0);
  const std::vector<float> w0 = Rows(Find(flat, "blk.1.ffn_gate_inp.weight"), 3, 1);
  for (int d = 0; d < 8; ++d) EXPECT_EQ(w0[d], 0.0f);
}

}  // namespace
}  // namespace deltaserve::worker
