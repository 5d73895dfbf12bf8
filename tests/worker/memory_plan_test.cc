// The memory plan (worker/cache/memory_plan.h): KV bytes per token and recurrent state per
// sequence against MODEL_SPEC §4.1 / §4.2, the golden tiny-dense model's plan against figures
// computed here from its tensor list and shapes, page rounding at the edges, the error of a budget
// too small, the parsing of sizes and cache types, and a MoE model's routed experts split between
// device and host memory (the device weights, the line the worker prints).
#include "worker/cache/memory_plan.h"

#include <memory>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/gguf_file.h"
#include "common/qwen35_hparams.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"
#include "worker/cache/model_footprint.h"
#include "worker/engine/qwen35_workspace.h"
#include "worker/synth/synthetic_model.h"

namespace deltaserve::worker {
namespace {

using common::GgmlType;
using ::testing::HasSubstr;

common::Qwen35HParams Preset(std::string_view name) {
  absl::StatusOr<SynthPreset> p = FindPreset(name);
  EXPECT_TRUE(p.ok()) << p.status();
  return PresetHParams(*p, kQwen35VocabRows);
}

// A plan of the 9B preset at q4_k_m with `budget` bytes.
MemoryPlan Plan9b(uint64_t budget, GgmlType k = GgmlType::kQ8_0, GgmlType v = GgmlType::kQ4_0) {
  const SynthPreset p = *FindPreset("9b");
  MemoryPlanInputs in;
  in.hp = PresetHParams(p, kQwen35VocabRows);
  in.weights = SynthPlanWeightBytes(*PlanModel(p, WeightMixture::kQ4_K_M, kQwen35VocabRows, 0));
  in.k_type = k;
  in.v_type = v;
  in.budget_bytes = budget;
  absl::StatusOr<MemoryPlan> plan = PlanMemory(in);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

// 9B: 8 attention layers x 4 KV heads x 256 = 8,192 K values and as many V values per token.
// Raw: 8 bits -> 16,384 B, 4 bits -> 8,192 B (MODEL_SPEC §4.1 gives 16,384 at 8 bits). Block
// scales (GGML layouts): q8_0 34 B per 32 values, q4_0 18 B per 32, i.e. 2 B of scale per 32
// values of either type = 512 B per 8,192 values.
TEST(KvBytesPerToken, NineBMatchesModelSpecRawAndWithBlockScales) {
  const common::Qwen35HParams hp = Preset("9b");
  struct Case {
    GgmlType k, v;
    uint64_t raw, with_scales, k_row, v_row;
  };
  const Case cases[] = {
      {GgmlType::kF16, GgmlType::kF16, 32768, 32768, 2048, 2048},
      {GgmlType::kBF16, GgmlType::kBF16, 32768, 32768, 2048, 2048},
      {GgmlType::kF32, GgmlType::kF32, 65536, 65536, 4096, 4096},
      {GgmlType::kQ8_0, GgmlType::kQ8_0, 16384, 17408, 1088, 1088},
      // 12,288 raw + 512 (q8_0 K scales) + 512 (q4_0 V scales).
      {GgmlType::kQ8_0, GgmlType::kQ4_0, 12288, 13312, 1088, 576},
      {GgmlType::kQ4_0, GgmlType::kQ4_0, 8192, 9216, 576, 576},
      // q4_1: 20 B per 32 (scale and min); q5_0: 22 B per 32 (5-bit values, 2 B scale).
      {GgmlType::kQ4_1, GgmlType::kQ4_1, 8192, 10240, 640, 640},
      {GgmlType::kQ5_0, GgmlType::kQ5_0, 10240, 11264, 704, 704},
  };
  for (const Case& c : cases) {
    absl::StatusOr<KvTokenBytes> kv = KvBytesPerToken(hp, c.k, c.v);
    ASSERT_TRUE(kv.ok()) << kv.status();
    SCOPED_TRACE(common::GgmlTypeName(c.k));
    EXPECT_EQ(kv->raw_bytes, c.raw);
    EXPECT_EQ(kv->bytes, c.with_scales);
    EXPECT_EQ(kv->k_row_bytes, c.k_row);
    EXPECT_EQ(kv->v_row_bytes, c.v_row);
  }
}

// MODEL_SPEC §4.1 table, 16-bit column.
TEST(KvBytesPerToken, EveryPresetMatchesModelSpecSixteenBitColumn) {
  const std::pair<std::string_view, uint64_t> expected[] = {
      {"0.8b", 12288}, {"2b", 12288},      {"4b", 32768},        {"9b", 32768},
      {"27b", 65536},  {"35b-a3b", 20480}, {"122b-a10b", 24576},
  };
  for (const auto& [name, bytes] : expected) {
    absl::StatusOr<KvTokenBytes> kv = KvBytesPerToken(Preset(name), GgmlType::kF16, GgmlType::kF16);
    ASSERT_TRUE(kv.ok());
    EXPECT_EQ(kv->bytes, bytes) << name;
  }
}

// 9B: 24 DeltaNet layers; delta state 32 x 128 x 128 x 4 B = 2,097,152 B a layer; conv window
// 3 x 8,192 values, 98,304 B in f32 and 49,152 B in 16 bits (MODEL_SPEC §4.2: 51,511,296 B with
// a 16-bit window).
TEST(RecurrentBytes, NineBWithF32And16BitConvWindow) {
  const common::Qwen35HParams hp = Preset("9b");
  const RecurrentBytes f32 = RecurrentBytesPerSequence(hp, GgmlType::kF32);
  EXPECT_EQ(f32.n_deltanet_layers, 24);
  EXPECT_EQ(f32.delta_bytes, 50331648u);
  EXPECT_EQ(f32.conv_bytes, 2359296u);
  EXPECT_EQ(f32.total(), 52690944u);
  EXPECT_EQ(RecurrentBytesPerSequence(hp, GgmlType::kF16).total(), 51511296u);
  EXPECT_EQ(RecurrentBytesPerSequence(hp, GgmlType::kBF16).total(), 51511296u);
}

// MODEL_SPEC §4.2 table ("Total", 16-bit conv window).
TEST(RecurrentBytes, EveryPresetMatchesModelSpecWith16BitConv) {
  const std::pair<std::string_view, uint64_t> expected[] = {
      {"0.8b", 19537920}, {"2b", 19537920},      {"4b", 51511296},         {"9b", 51511296},
      {"27b", 153944064}, {"35b-a3b", 64389120}, {"122b-a10b", 153649152},
  };
  for (const auto& [name, bytes] : expected) {
    EXPECT_EQ(RecurrentBytesPerSequence(Preset(name), GgmlType::kF16).total(), bytes) << name;
  }
}

TEST(MemoryPlan, NineBEightGiBTableFollowsTheFormula) {
  const uint64_t budget = uint64_t{8} << 30;
  const MemoryPlan plan = Plan9b(budget);
  EXPECT_EQ(plan.page_bytes, 256u * 13312u);
  const uint64_t fixed = plan.weight_bytes + plan.workspace_bytes + plan.kernel_scratch_bytes;
  EXPECT_EQ(plan.fixed_bytes(), fixed);
  ASSERT_EQ(plan.contexts.size(), 7u);
  for (const ContextFit& f : plan.contexts) {
    const int64_t free =
        static_cast<int64_t>(budget - fixed) - static_cast<int64_t>(f.n_parallel * 52690944ull);
    EXPECT_EQ(f.free_bytes, free);
    const int64_t pages = free > 0 ? free / (256 * 13312) : 0;
    EXPECT_EQ(f.pages, pages);
    EXPECT_EQ(f.max_context, std::min<int64_t>(pages / f.n_parallel * 256, 262144)) << f.n_parallel;
  }
  EXPECT_GT(plan.contexts[0].max_context, 0);
  const std::string text = RenderMemoryPlan(plan);
  for (const char* s : {"17,408", "13,312", "9,216", "16,384", "12,288", "8,192", "52,690,944",
                        "n_parallel", "max context", "q4_K", "q6_K"}) {
    EXPECT_THAT(text, HasSubstr(s));
  }
}

// The golden tiny-dense model (../shared/golden/README.md): 8 layers, 2 attention (3 and 7) with
// 2 KV heads of 64, 6 DeltaNet with 2 k heads / 4 v heads of 32, H = 256, FFN 256, 2,048 vocab,
// all F32, no MTP layers. Expected figures are recomputed here from those shapes.
TEST(MemoryPlan, TinyDenseGoldenPlanMatchesItsTensorList) {
  absl::StatusOr<std::unique_ptr<common::GgufFile>> file =
      common::GgufFile::Open(testing::GoldenPath("tiny-dense-f32.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<common::Qwen35HParams> hp = common::ReadQwen35HParams(**file);
  ASSERT_TRUE(hp.ok()) << hp.status();
  absl::StatusOr<ModelWeightBytes> w = ForwardPassWeightBytes(**file, *hp);
  ASSERT_TRUE(w.ok()) << w.status();

  // Every tensor of the file is read; all are F32: 4 bytes per element.
  uint64_t elements = 0;
  for (const common::GgufTensorInfo& t : (*file)->tensors()) {
    int64_t n = 1;
    for (int d = 0; d < t.n_dims; ++d) n *= t.ne[d];
    elements += static_cast<uint64_t>(n);
  }
  ASSERT_EQ(w->read.size(), 1u);
  EXPECT_EQ(w->read[0].type, GgmlType::kF32);
  EXPECT_EQ(w->read[0].n_tensors, 109);
  EXPECT_EQ(w->read[0].bytes, elements * 4);
  EXPECT_EQ(w->n_unread_tensors, 0);
  EXPECT_EQ(w->unread_bytes, 0u);

  MemoryPlanInputs in;
  in.hp = *hp;
  in.weights = w->read;
  in.k_type = GgmlType::kF32;
  in.v_type = GgmlType::kF32;
  in.page_tokens = 16;
  in.max_batch_tokens = 64;
  in.logits_rows = 8;
  in.n_threads = 2;
  in.budget_bytes = 64ull << 20;
  absl::StatusOr<MemoryPlan> plan = PlanMemory(in);
  ASSERT_TRUE(plan.ok()) << plan.status();

  // KV: 2 layers x (K + V) x 2 heads x 64 x 4 B.
  EXPECT_EQ(plan->kv.bytes, 2u * 2 * 2 * 64 * 4);
  EXPECT_EQ(plan->page_bytes, 16u * 2048);
  // Recurrent: 6 layers x (3 x C + 4 x 32 x 32) x 4 B, C = 2 x 2 x 32 + 4 x 32 = 256.
  EXPECT_EQ(plan->recurrent.total(), 6u * (3 * 256 + 4 * 32 * 32) * 4);
  // Workspace columns per token: x, xn, mix 256 each; qkv 256; z 128; alpha, beta 4; o 128;
  // qg 2 x 4 x 64; k, v 128; qc, ao 256; ff_gate, ff_up 256; router, route_w, shared_g 1;
  // shared_out 256. Logits rows: out_x 256 + logits 2,048. int32: ids, pos, route_ids (k = 1).
  const uint64_t per_token_cols =
      3 * 256 + 256 + 128 + 4 + 4 + 128 + 512 + 128 + 128 + 256 + 256 + 256 + 256 + 1 + 1 + 1 + 256;
  EXPECT_EQ(plan->workspace_bytes, 4 * (64 * per_token_cols + 8 * (256 + 2048) + 64 * 3));
  EXPECT_EQ(plan->kernel_scratch_bytes, 2u * 64 * 64 * 4);
  const uint64_t fixed = elements * 4 + plan->workspace_bytes + plan->kernel_scratch_bytes;
  for (const ContextFit& f : plan->contexts) {
    const uint64_t free = (64ull << 20) - fixed - f.n_parallel * plan->recurrent.total();
    EXPECT_EQ(f.max_context, static_cast<int64_t>(free / (16 * 2048) / f.n_parallel * 16))
        << f.n_parallel;
  }
}

TEST(MemoryPlan, TinyMoeGoldenCountsEveryTensorOnce) {
  absl::StatusOr<std::unique_ptr<common::GgufFile>> file =
      common::GgufFile::Open(testing::GoldenPath("tiny-moe-f32.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<common::Qwen35HParams> hp = common::ReadQwen35HParams(**file);
  ASSERT_TRUE(hp.ok()) << hp.status();
  absl::StatusOr<ModelWeightBytes> w = ForwardPassWeightBytes(**file, *hp);
  ASSERT_TRUE(w.ok()) << w.status();
  uint64_t file_bytes = 0;
  for (const common::GgufTensorInfo& t : (*file)->tensors()) file_bytes += t.n_bytes;
  uint64_t read = 0;
  for (const WeightTypeBytes& t : w->read) read += t.bytes;
  EXPECT_EQ(read, file_bytes);  // tied head: token_embd counted once
  EXPECT_EQ(w->n_unread_tensors, 0);
}

TEST(MemoryPlan, SynthPlanWeightBytesSumToTensorDataBytes) {
  for (const SynthPreset& p : SynthPresets()) {
    for (WeightMixture m : {WeightMixture::kQ4_K_M, WeightMixture::kQ8_0, WeightMixture::kF16}) {
      absl::StatusOr<ModelPlan> plan = PlanModel(p, m, kQwen35VocabRows, 0);
      ASSERT_TRUE(plan.ok());
      uint64_t sum = 0;
      int64_t n = 0;
      for (const WeightTypeBytes& w : SynthPlanWeightBytes(*plan)) {
        sum += w.bytes;
        n += w.n_tensors;
      }
      EXPECT_EQ(sum, TensorDataBytes(*plan)) << p.name;
      EXPECT_EQ(n, static_cast<int64_t>(plan->tensors.size()));
    }
  }
}

// A sequence of ctx tokens holds ceil(ctx / page_tokens) pages: the table's context fits, one
// token more needs a page more per sequence and does not.
TEST(PageRounding, LargestContextFitsAndOneTokenMoreDoesNot) {
  const MemoryPlan plan = Plan9b(uint64_t{8} << 30);
  for (const ContextFit& f : plan.contexts) {
    SCOPED_TRACE(f.n_parallel);
    if (f.max_context == 0) {
      EXPECT_EQ(CheckFits(plan, 1, f.n_parallel).code(), absl::StatusCode::kResourceExhausted);
      continue;
    }
    ASSERT_FALSE(f.capped);
    EXPECT_TRUE(CheckFits(plan, f.max_context, f.n_parallel).ok());
    EXPECT_TRUE(CheckFits(plan, f.max_context - 255, f.n_parallel).ok());
    EXPECT_EQ(CheckFits(plan, f.max_context + 1, f.n_parallel).code(),
              absl::StatusCode::kResourceExhausted);
  }
  EXPECT_EQ(BytesNeeded(plan, 1, 1), BytesNeeded(plan, 256, 1));
  EXPECT_EQ(BytesNeeded(plan, 257, 4) - BytesNeeded(plan, 256, 4), 4 * plan.page_bytes);
}

// A budget of exactly fixed + n x recurrent + k pages gives k pages; one byte less gives k - 1.
TEST(PageRounding, ExactBudgetBoundary) {
  const MemoryPlan probe = Plan9b(uint64_t{8} << 30);
  const uint64_t exact = probe.fixed_bytes() + 2 * probe.recurrent.total() + 10 * probe.page_bytes;
  const ContextFit at = LargestContext(Plan9b(exact), 2);
  EXPECT_EQ(at.pages, 10);
  EXPECT_EQ(at.pages_per_sequence, 5);
  EXPECT_EQ(at.max_context, 5 * 256);
  const ContextFit below = LargestContext(Plan9b(exact - 1), 2);
  EXPECT_EQ(below.pages, 9);
  EXPECT_EQ(below.pages_per_sequence, 4);  // an odd page left over is not split
  EXPECT_EQ(below.max_context, 4 * 256);
  EXPECT_TRUE(CheckFits(Plan9b(exact), 5 * 256, 2).ok());
  EXPECT_FALSE(CheckFits(Plan9b(exact - 1), 5 * 256, 2).ok());
}

TEST(PageRounding, TrainedContextCapsAndIsChecked) {
  const MemoryPlan plan = Plan9b(uint64_t{1} << 40);  // 1 TiB
  EXPECT_TRUE(plan.contexts[0].capped);
  EXPECT_EQ(plan.contexts[0].max_context, 262144);
  EXPECT_TRUE(CheckFits(plan, 262144, 1).ok());
  const absl::Status beyond = CheckFits(plan, 262145, 1);
  EXPECT_EQ(beyond.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(beyond.message(), HasSubstr("trained context 262144"));
  EXPECT_EQ(CheckFits(plan, 0, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckFits(plan, 10, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(PageRounding, OneTokenPagesAndLargePages) {
  const SynthPreset p = *FindPreset("0.8b");
  MemoryPlanInputs in;
  in.hp = PresetHParams(p, kQwen35VocabRows);
  in.budget_bytes = uint64_t{4} << 30;
  for (int64_t page_tokens : {1, 256, 4096}) {
    in.page_tokens = page_tokens;
    absl::StatusOr<MemoryPlan> plan = PlanMemory(in);
    ASSERT_TRUE(plan.ok());
    for (const ContextFit& f : plan->contexts) {
      EXPECT_EQ(f.max_context % page_tokens, 0);
      EXPECT_TRUE(f.max_context == 0 || CheckFits(*plan, f.max_context, f.n_parallel).ok());
    }
  }
}

TEST(CheckFits, BudgetTooSmallNamesTheShortfallAndPrintsTheTable) {
  const MemoryPlan plan = Plan9b(uint64_t{4} << 30);  // below the 5.2 GiB of q4_k_m weights
  for (const ContextFit& f : plan.contexts) {
    EXPECT_EQ(f.max_context, 0);
    EXPECT_LT(f.free_bytes, 0);
  }
  const absl::Status s = CheckFits(plan, 4096, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("context 4096 x 1 sequences does not fit in memory 4.00 GiB"));
  EXPECT_THAT(s.message(), HasSubstr("short by"));
  EXPECT_THAT(s.message(), HasSubstr("weights 5."));
  EXPECT_THAT(s.message(), HasSubstr("n_parallel"));
  EXPECT_THAT(s.message(), HasSubstr("does not fit\n"));
}

TEST(PlanMemory, RefusesInputsOutOfRange) {
  MemoryPlanInputs in;
  in.hp = Preset("9b");
  in.budget_bytes = uint64_t{8} << 30;
  in.page_tokens = 0;
  EXPECT_THAT(PlanMemory(in).status().message(), HasSubstr("page_tokens 0"));
  in.page_tokens = 256;
  in.max_batch_tokens = 0;
  EXPECT_THAT(PlanMemory(in).status().message(), HasSubstr("max_batch_tokens 0"));
  in.max_batch_tokens = 512;
  in.n_threads = 0;
  EXPECT_THAT(PlanMemory(in).status().message(), HasSubstr("n_threads 0"));
  in.n_threads = 1;
  in.budget_bytes = 0;
  EXPECT_FALSE(PlanMemory(in).ok());
  in.budget_bytes = 1;
  in.k_type = GgmlType::kQ4_K;
  EXPECT_THAT(PlanMemory(in).status().message(),
              HasSubstr("K cache type q4_K is not a cache type"));
  in.k_type = GgmlType::kQ8_0;
  in.conv_state_type = GgmlType::kQ8_0;
  EXPECT_THAT(PlanMemory(in).status().message(), HasSubstr("conv state type q8_0"));
  in.conv_state_type = GgmlType::kF16;
  in.hp.head_dim = 48;  // not a whole number of 32-value blocks
  EXPECT_THAT(PlanMemory(in).status().message(), HasSubstr("head_dim 48"));
  in.k_type = in.v_type = GgmlType::kF16;
  EXPECT_TRUE(PlanMemory(in).ok());
}

TEST(Workspace, MirrorsReserveWorkspaceBufferList) {
  const common::Qwen35HParams hp = Preset("35b-a3b");
  const std::vector<WorkspaceBuffer> b = Qwen35WorkspaceBuffers(hp, 100, 3);
  std::vector<std::string_view> names;
  for (const WorkspaceBuffer& x : b) names.push_back(x.name);
  EXPECT_THAT(names, ::testing::ElementsAre("x", "xn", "mix", "qkv", "z", "alpha", "beta", "o",
                                            "qg", "k", "v", "qc", "ao", "ff_gate", "ff_up",
                                            "router", "route_w", "shared_g", "shared_out", "out_x",
                                            "logits", "ids", "pos", "route_ids"));
  EXPECT_EQ(b[3].cols, 8192);          // conv channels 2 x 16 x 128 + 32 x 128
  EXPECT_EQ(b[8].cols, 2 * 16 * 256);  // query and gate
  EXPECT_EQ(b[13].cols, 512);          // shared expert width (MoE: n_ff is 0)
  EXPECT_EQ(b[15].cols, 256);          // experts
  EXPECT_EQ(b[16].cols, 8);            // experts used
  EXPECT_EQ(b[20].rows, 3);
  EXPECT_EQ(b[20].cols, kQwen35VocabRows);
  EXPECT_EQ(b[23].cols, 8);
  EXPECT_EQ(b[23].element, WorkspaceElement::kInt32);
  uint64_t sum = 0;
  for (const WorkspaceBuffer& x : b) sum += static_cast<uint64_t>(x.rows * x.cols) * 4;
  EXPECT_EQ(WorkspaceBytes(b), sum);
}

TEST(ParseByteSize, UnitsAndFractions) {
  struct Case {
    const char* text;
    uint64_t bytes;
  };
  const Case cases[] = {
      {"8GiB", 8ull << 30},
      {"512MiB", 512ull << 20},
      {"64G", 64ull << 30},
      {"1.5GiB", 3ull << 29},
      {"4096", 4096},
      {"100B", 100},
      {"24GB", 24000000000ull},
      {"1.5 GiB", 3ull << 29},
      {"2k", 2048},
      {"2KB", 2000},
      {".5g", 1ull << 29},
      {"1T", 1ull << 40},
      {"0.1KiB", 102},
      {"16gib", 16ull << 30},
      {"3Mi", 3ull << 20},
  };
  for (const Case& c : cases) {
    absl::StatusOr<uint64_t> v = ParseByteSize(c.text);
    ASSERT_TRUE(v.ok()) << c.text << ": " << v.status();
    EXPECT_EQ(*v, c.bytes) << c.text;
  }
}

TEST(ParseByteSize, RefusesMalformedText) {
  for (const char* text :
       {"", "GiB", "-1G", "8XB", "1e9", "8GiBs", "8 G B", "99999999T", ".", "1.2.3G", "+5G"}) {
    absl::StatusOr<uint64_t> v = ParseByteSize(text);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << "'" << text << "'";
    EXPECT_THAT(v.status().message(), HasSubstr(absl::StrCat("size '", text, "'")));
  }
  EXPECT_THAT(ParseByteSize("8XB").status().message(), HasSubstr("unknown unit 'XB'"));
}

TEST(ParseCacheType, NamesAndErrors) {
  EXPECT_EQ(*ParseCacheType("q8_0"), GgmlType::kQ8_0);
  EXPECT_EQ(*ParseCacheType("Q4_0"), GgmlType::kQ4_0);
  EXPECT_EQ(*ParseCacheType("bf16"), GgmlType::kBF16);
  EXPECT_EQ(*ParseCacheType("q5_0"), GgmlType::kQ5_0);
  EXPECT_EQ(*ParseCacheType("q4_1"), GgmlType::kQ4_1);
  const absl::Status bad = ParseCacheType("q4_k").status();
  EXPECT_THAT(
      bad.message(),
      HasSubstr("unknown cache type 'q4_k' (one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0)"));
  EXPECT_EQ(*ParseConvStateType("f16"), GgmlType::kF16);
  EXPECT_EQ(*ParseConvStateType("F32"), GgmlType::kF32);
  EXPECT_THAT(ParseConvStateType("q8_0").status().message(),
              HasSubstr("unknown conv state type 'q8_0' (one of f32, f16, bf16)"));
}

}  // namespace
}  // namespace deltaserve::worker

namespace deltaserve::worker {
namespace {

// The golden tiny MoE: 8 MoE layers of 16 experts; one expert's gate [32][256], up [32][256] and
// down [256][32] in f32 are 3 x 8,192 x 4 = 98,304 B (each a multiple of the slot alignment), so
// the stacks hold 128 x 98,304 B.
constexpr uint64_t kTinyMoeSlot = 3 * 256 * 32 * 4;
constexpr uint64_t kTinyMoeRouted = 8 * 16 * kTinyMoeSlot;

// The plan's device weights: everything but the routed stacks, plus the slot arena (or every
// stack when all experts are on the device).
TEST(ExpertSplit, DeviceWeightsAreTheRestPlusTheExpertsOnTheDevice) {
  absl::StatusOr<std::unique_ptr<common::GgufFile>> file =
      common::GgufFile::Open(testing::GoldenPath("tiny-moe-f32.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<common::Qwen35HParams> hp = common::ReadQwen35HParams(**file);
  ASSERT_TRUE(hp.ok()) << hp.status();
  absl::StatusOr<ModelWeightBytes> w = ForwardPassWeightBytes(**file, *hp);
  ASSERT_TRUE(w.ok()) << w.status();
  uint64_t all = 0;
  for (const WeightTypeBytes& t : w->read) all += t.bytes;
  MemoryPlanInputs in;
  in.hp = *hp;
  in.weights = w->read;
  in.budget_bytes = uint64_t{1} << 30;
  in.budget_name = "VRAM";
  in.device_budget = true;
  in.experts = {.applies = true, .n_moe_layers = 8, .n_expert = 16,
                .routed_bytes = kTinyMoeRouted, .slot_bytes = kTinyMoeSlot,
                .split_bytes = 10 * kTinyMoeSlot + 7, .arena_bytes = 10 * kTinyMoeSlot,
                .all_on_device = false, .n_slots = 10};
  absl::StatusOr<MemoryPlan> plan = PlanMemory(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->weight_bytes, all - kTinyMoeRouted + 10 * kTinyMoeSlot);
  // Load gets the bytes the split was made of (and splits them into the same slots).
  EXPECT_EQ(plan->inputs.experts.tier_device_bytes(), 10 * kTinyMoeSlot + 7);
  EXPECT_EQ(RenderExpertSplit(*plan),
            "experts: 960.0 KiB of 12.00 MiB in VRAM (10 of 128 experts, 8 %), the rest in RAM "
            "(computed on the CPU); slots of 96.00 KiB [--expert-vram auto]");
  EXPECT_THAT(RenderMemoryPlan(*plan), HasSubstr("(10 of 128 experts in slots of 98,304 B)"));

  in.experts.all_on_device = true;
  plan = PlanMemory(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->weight_bytes, all);
  EXPECT_EQ(plan->inputs.experts.tier_device_bytes(), UINT64_MAX);
  in.experts.auto_sized = false;
  in.experts.requested_bytes = uint64_t{1} << 30;
  EXPECT_EQ(RenderExpertSplit(*PlanMemory(in)),
            "experts: 12.00 MiB of 12.00 MiB in VRAM (128 of 128 experts, 100 %), all on the "
            "device [--expert-vram 1.00 GiB]");

  in.experts.all_on_device = false;
  in.experts.n_slots = 0;
  in.experts.split_bytes = in.experts.arena_bytes = 0;
  plan = PlanMemory(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->weight_bytes, all - kTinyMoeRouted);
  EXPECT_THAT(RenderExpertSplit(*plan), HasSubstr("(0 of 128 experts, 0 %), all in RAM"));

  // No split: no line, the plan as before.
  in.experts = {};
  plan = PlanMemory(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->weight_bytes, all);
  EXPECT_EQ(RenderExpertSplit(*plan), "");

  // Routed stacks larger than every weight: inconsistent inputs, refused.
  in.experts = {.applies = true, .routed_bytes = all + 1, .slot_bytes = 1};
  EXPECT_EQ(PlanMemory(in).status().code(), absl::StatusCode::kInvalidArgument);
}

// The start-up line as the worker prints it, at the scale of a 35B-A3B split.
TEST(ExpertSplit, TheLineReadsAsTheSplit) {
  MemoryPlan plan;
  plan.inputs.budget_name = "VRAM";
  plan.inputs.experts = {.applies = true, .n_moe_layers = 40, .n_expert = 64,
                         .routed_bytes = 2560 * (uint64_t{4} << 20),
                         .slot_bytes = uint64_t{4} << 20,
                         .split_bytes = 512 * (uint64_t{4} << 20),
                         .arena_bytes = 512 * (uint64_t{4} << 20), .all_on_device = false,
                         .n_slots = 512};
  EXPECT_EQ(RenderExpertSplit(plan),
            "experts: 2.00 GiB of 10.00 GiB in VRAM (512 of 2,560 experts, 20 %), the rest in RAM "
            "(computed on the CPU); slots of 4.00 MiB [--expert-vram auto]");
}

}  // namespace
}  // namespace deltaserve::worker
