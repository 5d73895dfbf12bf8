// The GPU side of the memory plan (worker/cache/device_memory.h, memory_plan.h with a device
// budget): --device parsing, the launcher call shapes one forward pass makes (every weight
// matrix, MoE, attention and the delta rule at decode and prefill sizes), the scratch area as
// the largest of their needs, and the VRAM plan's arithmetic with that scratch and the CUDA
// context reserve, computed here independently from the 9B and 35B-A3B presets.
#include "worker/cache/device_memory.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/cache/memory_plan.h"
#include "worker/cache/model_footprint.h"
#include "worker/synth/synthetic_model.h"

namespace deltaserve::worker {
namespace {

using ::testing::HasSubstr;

common::Qwen35HParams Preset(std::string_view name) {
  absl::StatusOr<SynthPreset> p = FindPreset(name);
  EXPECT_TRUE(p.ok()) << p.status();
  return PresetHParams(*p, kQwen35VocabRows);
}

TEST(ParseDevice, AcceptsCpuAndCudaNumbersAndNamesTheRest) {
  absl::StatusOr<DeviceSpec> d = ParseDevice("cpu");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, DeviceSpec::Kind::kCpu);
  EXPECT_EQ(d->Name(), "cpu");
  d = ParseDevice("cuda");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, DeviceSpec::Kind::kCuda);
  EXPECT_EQ(d->Name(), "cuda:0");
  d = ParseDevice("cuda:12");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->index, 12);
  EXPECT_EQ(d->Name(), "cuda:12");
  EXPECT_TRUE(d->has_device_memory());
  // The test device: a device with memory of its own, like cuda:N.
  d = ParseDevice("sim");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, DeviceSpec::Kind::kSim);
  EXPECT_EQ(d->Name(), "sim");
  EXPECT_TRUE(d->has_device_memory());
  EXPECT_FALSE(ParseDevice("cpu")->has_device_memory());
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "cuda:0:1",
                          "cuda:1234", "CUDA:0", "cpu:0", "sim:0", "SIM"}) {
    d = ParseDevice(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_THAT(d.status().message(),
                HasSubstr("use cpu, cuda or cuda:N (N a device number), or sim (the test device)"))
        << bad;
  }
}

// Fake scratch functions that encode their arguments, so the maximum shows which call won.
size_t FakeMatMul(int64_t n, int64_t in, int64_t out) { return static_cast<size_t>(n * in * out); }
size_t FakeMoe(int64_t n, int64_t k, int64_t e, int64_t in, int64_t ff) {
  return static_cast<size_t>(n * k * e * in * ff);
}
// Decode (1 token) needs the most: flash-decoding splits the context over more blocks.
size_t FakeAttentionDecodeHeavy(int64_t n, int64_t h, int64_t hd, int64_t ctx) {
  return n == 1 ? static_cast<size_t>(h * hd * ctx) : static_cast<size_t>(n);
}
size_t FakeGdn(int64_t n, int64_t nv, int64_t d) { return static_cast<size_t>(n * nv * d * d); }

TEST(ForwardPassScratch, QueriesEveryWeightShapeAndEveryPerSequenceSize) {
  const common::Qwen35HParams hp = Preset("9b");
  const std::vector<ScratchQuery> q = ForwardPassScratchQueries(hp, 512, 8, 32768);
  auto has_matmul = [&](int64_t n, int64_t in, int64_t out) {
    return std::any_of(q.begin(), q.end(), [&](const ScratchQuery& s) {
      return s.op == ScratchQuery::Op::kMatMul && s.args[0] == n && s.args[1] == in &&
             s.args[2] == out;
    });
  };
  const int64_t d = 4096;
  EXPECT_TRUE(has_matmul(512, d, hp.ssm_conv_channels()));  // attn_qkv
  EXPECT_TRUE(has_matmul(512, d, 32 * 128));                // attn_gate: 32 v heads x 128
  EXPECT_TRUE(has_matmul(512, d, 32));                      // ssm_beta / ssm_alpha
  EXPECT_TRUE(has_matmul(512, 32 * 128, d));                // ssm_out
  EXPECT_TRUE(has_matmul(512, d, 2 * 16 * 256));            // attn_q (query | gate)
  EXPECT_TRUE(has_matmul(512, d, 4 * 256));                 // attn_k / attn_v
  EXPECT_TRUE(has_matmul(512, 16 * 256, d));                // attn_output
  EXPECT_TRUE(has_matmul(512, d, 12288));                   // ffn_gate / ffn_up
  EXPECT_TRUE(has_matmul(512, 12288, d));                   // ffn_down
  EXPECT_TRUE(has_matmul(8, d, kQwen35VocabRows));          // output head at the logits rows
  // MatMulGroup as one product over the concatenated rows: q|k|v|z|beta|alpha, q|k|v, gate|up.
  EXPECT_TRUE(has_matmul(512, d, hp.ssm_conv_channels() + 32 * 128 + 2 * 32));
  EXPECT_TRUE(has_matmul(512, d, 2 * 16 * 256 + 2 * 4 * 256));
  EXPECT_TRUE(has_matmul(512, d, 2 * 12288));
  // Attention and the delta rule at 1, 2, 4, ..., 256 and 512 tokens of one sequence.
  std::vector<int64_t> attn, gdn;
  for (const ScratchQuery& s : q) {
    if (s.op == ScratchQuery::Op::kPagedAttention) {
      attn.push_back(s.args[0]);
      EXPECT_EQ(s.args[1], 16);
      EXPECT_EQ(s.args[2], 256);
      EXPECT_EQ(s.args[3], 32768);
    }
    if (s.op == ScratchQuery::Op::kGatedDeltaRule) gdn.push_back(s.args[0]);
  }
  const std::vector<int64_t> sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  EXPECT_EQ(attn, sizes);
  EXPECT_EQ(gdn, sizes);
  // A context shorter than the batch caps the per-sequence size.
  std::vector<int64_t> capped;
  for (const ScratchQuery& s : ForwardPassScratchQueries(hp, 512, 8, 100)) {
    if (s.op == ScratchQuery::Op::kGatedDeltaRule) capped.push_back(s.args[0]);
  }
  EXPECT_EQ(capped, (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 100}));
}

TEST(ForwardPassScratch, IsTheLargestNeedOfAnyCall) {
  const common::Qwen35HParams hp = Preset("9b");
  DeviceScratchFunctions f;
  EXPECT_EQ(ForwardPassScratchBytes(hp, 512, 8, 4096, f), 0u) << "no functions: no scratch";
  f.gated_delta_rule = &FakeGdn;
  EXPECT_EQ(ForwardPassScratchBytes(hp, 512, 8, 4096, f), 512u * 32 * 128 * 128);
  f.paged_attention = &FakeAttentionDecodeHeavy;
  // At 32K the delta rule's 512 x 32 x 128 x 128 = 268,435,456 is larger than decode
  // attention's 16 x 256 x 32,768 = 134,217,728; at 128K attention's 536,870,912 wins.
  EXPECT_EQ(ForwardPassScratchBytes(hp, 512, 8, 32768, f), 268435456u);
  EXPECT_EQ(ForwardPassScratchBytes(hp, 512, 8, 131072, f), 536870912u);
  f.matmul = &FakeMatMul;
  // The FFN group (gate | up as one product over 2 x 12,288 rows) at 512 tokens:
  // 512 x 4096 x 24,576 = 51,539,607,552, above the output head at its 8 logits rows
  // (8 x 4096 x 248,320 = 8,136,949,760).
  EXPECT_EQ(ForwardPassScratchBytes(hp, 512, 8, 131072, f), uint64_t{512} * 4096 * 24576);
  // With one token per pass the head is the largest product.
  EXPECT_EQ(ForwardPassScratchBytes(hp, 1, 1, 131072, f), uint64_t{4096} * kQwen35VocabRows);

  const common::Qwen35HParams moe = Preset("35b-a3b");
  DeviceScratchFunctions m;
  m.moe_ffn = &FakeMoe;
  // 64 tokens x 8 used x 40 layers x 256 experts x 2048 x 512: a call may see a slot arena of
  // up to (fewer than) every layer's experts (expert tiers), not only one layer's 256.
  ASSERT_EQ(moe.n_layer, 40);
  EXPECT_EQ(ForwardPassScratchBytes(moe, 64, 4, 4096, m),
            uint64_t{64} * 8 * 40 * 256 * 2048 * 512);
  bool shared = false;
  for (const ScratchQuery& s : ForwardPassScratchQueries(moe, 64, 4, 4096)) {
    shared = shared || (s.op == ScratchQuery::Op::kMatMul && s.args[2] == 1 && s.args[1] == 2048);
  }
  EXPECT_TRUE(shared) << "the shared expert's gate (d -> 1) is queried";
}

// The VRAM plan: the kernel scratch is the device scratch area, the CUDA context reserve comes
// in as fixed overhead, and the rest is the CPU plan's arithmetic.
TEST(VramPlan, CountsDeviceScratchAndContextReserve) {
  const SynthPreset p = *FindPreset("9b");
  MemoryPlanInputs in;
  in.hp = PresetHParams(p, kQwen35VocabRows);
  in.model_name = "9b q4_k_m";
  in.weights = SynthPlanWeightBytes(*PlanModel(p, WeightMixture::kQ4_K_M, kQwen35VocabRows, 0));
  in.k_type = in.v_type = common::GgmlType::kF16;
  in.max_batch_tokens = 512;
  in.logits_rows = 4;
  in.budget_bytes = uint64_t{24} << 30;
  in.budget_name = "VRAM";
  in.fixed_overhead_bytes = kCudaContextReserveBytes;
  in.device_budget = true;
  in.device_scratch_bytes = uint64_t{100} << 20;
  in.n_threads = 16;  // a CPU figure: must not count on a device budget
  absl::StatusOr<MemoryPlan> plan = PlanMemory(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kernel_scratch_bytes, uint64_t{100} << 20);
  uint64_t weights = 0;
  for (const WeightTypeBytes& w : in.weights) weights += w.bytes;
  // Workspace, from the buffer list of qwen35_workspace.h: 19 per-token f32 buffers, out_x and
  // logits at 4 rows, 3 int32 buffers.
  const int64_t t = 512, d = 4096, c = in.hp.ssm_conv_channels(), nv = 32, dv = 128, h = 16, hk = 4,
                hd = 256;
  const int64_t ff = 12288;
  const int64_t per_token = d + d + d + c + nv * dv + nv + nv + nv * dv + 2 * h * hd + hk * hd +
                            hk * hd + h * hd + h * hd + ff + ff + 1 + 1 + 1 + d;
  const uint64_t workspace =
      4 * static_cast<uint64_t>(t * per_token + 4 * d + 4 * kQwen35VocabRows + t + t + t);
  EXPECT_EQ(plan->workspace_bytes, workspace);
  EXPECT_EQ(plan->fixed_bytes(),
            weights + workspace + (uint64_t{100} << 20) + kCudaContextReserveBytes);
  // f16 K and V: 8 attention layers x 2 x 4 heads x 256 x 2 B = 32,768 B per token; page 256.
  EXPECT_EQ(plan->page_bytes, uint64_t{32768} * 256);
  // Recurrent state: 24 DeltaNet layers x (3 x conv channels + 32 x 128 x 128) x 4 B.
  const uint64_t recurrent = 24 * (3 * static_cast<uint64_t>(c) + 32 * 128 * 128) * 4;
  EXPECT_EQ(plan->recurrent.total(), recurrent);
  EXPECT_EQ(BytesNeeded(*plan, 32768, 4),
            plan->fixed_bytes() + 4 * (recurrent + 128 * uint64_t{32768} * 256));
  EXPECT_TRUE(CheckFits(*plan, 32768, 4).ok());
  // 64 x 262,144 tokens of KV would need 512 GiB: refused with the figures and the table.
  absl::Status s = CheckFits(*plan, 262144, 64);
  ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("does not fit in VRAM 24.00 GiB"));
  EXPECT_THAT(s.message(), HasSubstr("kernel scratch 100.0 MiB"));
  EXPECT_THAT(s.message(), HasSubstr("fixed overhead 512.0 MiB"));
  EXPECT_THAT(s.message(), HasSubstr("max context"));
  EXPECT_THAT(RenderMemoryPlan(*plan), HasSubstr("device kernel scratch (largest launcher need)"));
  // The same inputs on a host budget count the CPU attention scratch instead.
  in.device_budget = false;
  plan = PlanMemory(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->kernel_scratch_bytes, uint64_t{16} * 256 * 64 * 4);
}

}  // namespace
}  // namespace deltaserve::worker
