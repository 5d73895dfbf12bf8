// A MoE model's routed experts in the VRAM plan (ServedModel::Plan on a device budget,
// docs/memory_plan.md "MoE experts"), on the golden tiny MoE: 128 experts (8 layers x 16) of
// 98,304 B each (gate, up, down: 3 x 256 x 32 f32), 12 MiB of stacks. --expert-vram auto gives
// the experts what the budget leaves at ctx x n_parallel, every expert when they all fit (the
// stacks as in the file, no split); a size is rounded down to whole slots and refused, naming the
// figures, when it is more than what is left; 0 keeps every expert in RAM; a size beyond every
// expert means every expert. A host budget (the CPU worker) and a dense model have no split.
#include <cstdint>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/sim/sim_backend.h"
#include "tests/support/test_paths.h"
#include "worker/sched/served_model.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kSlot = 3 * 256 * 32 * 4;  // one expert's gate + up + down
constexpr uint64_t kRouted = 128 * kSlot;

ServingOptions DeviceOptions(uint64_t budget) {
  ServingOptions o;
  o.ctx = 512;
  o.n_parallel = 2;
  o.page_tokens = 32;
  o.step_tokens = 64;
  o.budget_bytes = budget;
  o.budget_name = "VRAM";
  o.snapshot_ram_bytes = 0;
  return o;
}

absl::StatusOr<PlannedServing> PlanMoe(const ServingOptions& o, bool host_memory = false) {
  return ServedModel::Plan(GoldenPath("tiny-moe-f32.gguf"), o, host_memory);
}

// The bytes a configuration needs with every routed expert in host memory (--expert-vram 0).
uint64_t NeededWithoutExperts(ServingOptions o) {
  o.expert_vram_bytes = 0;
  o.budget_bytes = uint64_t{1} << 30;
  absl::StatusOr<PlannedServing> p = PlanMoe(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? BytesNeeded(p->plan, o.ctx, o.n_parallel) : 0;
}

TEST(DeviceExpertPlan, AutoGivesEveryExpertWhenAllFit) {
  absl::StatusOr<PlannedServing> p = PlanMoe(DeviceOptions(uint64_t{1} << 30));
  ASSERT_TRUE(p.ok()) << p.status();
  const ExpertSplit& e = p->plan.inputs.experts;
  EXPECT_TRUE(e.applies);
  EXPECT_TRUE(e.all_on_device);
  EXPECT_TRUE(e.auto_sized);
  EXPECT_EQ(e.routed_bytes, kRouted);
  EXPECT_EQ(e.slot_bytes, kSlot);
  EXPECT_EQ(e.device_experts(), 128);
  // Every stack as in the file: the weights are the file's, and Load gets no tiers.
  EXPECT_EQ(p->plan.weight_bytes - e.device_bytes(),
            PlanMoe([] {
              ServingOptions o = DeviceOptions(uint64_t{1} << 30);
              o.expert_vram_bytes = 0;
              return o;
            }())->plan.weight_bytes);
  EXPECT_EQ(ExpertTierOptionsFor(p->plan, DeviceOptions(1)).device_bytes, UINT64_MAX);
  EXPECT_THAT(RenderExpertSplit(p->plan), HasSubstr("(128 of 128 experts, 100 %), all on the"));
}

TEST(DeviceExpertPlan, AutoGivesTheExpertsWhatTheBudgetLeaves) {
  const ServingOptions base = DeviceOptions(0);
  const uint64_t needed = NeededWithoutExperts(base);
  ASSERT_GT(needed, 0u);
  // Room for 10 experts and half of an eleventh.
  ServingOptions o = base;
  o.budget_bytes = needed + 10 * kSlot + kSlot / 2;
  absl::StatusOr<PlannedServing> p = PlanMoe(o);
  ASSERT_TRUE(p.ok()) << p.status();
  const ExpertSplit& e = p->plan.inputs.experts;
  EXPECT_FALSE(e.all_on_device);
  EXPECT_EQ(e.n_slots, 10);
  EXPECT_EQ(e.device_bytes(), 10 * kSlot);
  EXPECT_EQ(BytesNeeded(p->plan, o.ctx, o.n_parallel), needed + 10 * kSlot);
  // Load gets the bytes the split was made of, and splits them into the same slots.
  EXPECT_EQ(ExpertTierOptionsFor(p->plan, o).device_bytes, 10 * kSlot + kSlot / 2);
  EXPECT_THAT(RenderExpertSplit(p->plan),
              HasSubstr("(10 of 128 experts, 8 %), the rest in RAM (computed on the CPU)"));
  // Less than one slot left: every expert in RAM, still served.
  o.budget_bytes = needed + kSlot - 1;
  p = PlanMoe(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->plan.inputs.experts.n_slots, 0);
  EXPECT_FALSE(p->plan.inputs.experts.all_on_device);
}

TEST(DeviceExpertPlan, ASizeIsRoundedToSlotsAndCappedAtEveryExpert) {
  ServingOptions o = DeviceOptions(uint64_t{1} << 30);
  o.expert_vram_bytes = 20 * kSlot + 100;
  absl::StatusOr<PlannedServing> p = PlanMoe(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->plan.inputs.experts.n_slots, 20);
  EXPECT_FALSE(p->plan.inputs.experts.auto_sized);
  EXPECT_THAT(RenderExpertSplit(p->plan), HasSubstr("[--expert-vram 1.88 MiB]"));
  o.expert_vram_bytes = 0;
  p = PlanMoe(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->plan.inputs.experts.device_experts(), 0);
  EXPECT_THAT(RenderExpertSplit(p->plan), HasSubstr("all in RAM"));
  o.expert_vram_bytes = 64 * kMiB;  // more than the 12 MiB of experts: every one
  p = PlanMoe(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->plan.inputs.experts.all_on_device);
}

TEST(DeviceExpertPlan, ASizeBeyondWhatIsLeftIsRefusedWithTheFigures) {
  ServingOptions o = DeviceOptions(0);
  const uint64_t needed = NeededWithoutExperts(o);
  o.budget_bytes = needed + 10 * kSlot;
  o.expert_vram_bytes = 11 * kSlot;
  absl::StatusOr<PlannedServing> p = PlanMoe(o);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
  EXPECT_THAT(p.status().message(), HasSubstr("--expert-vram 1.03 MiB does not fit"));
  EXPECT_THAT(p.status().message(), HasSubstr("at --ctx 512 x --parallel 2"));
  EXPECT_THAT(p.status().message(), HasSubstr("at most 10 of 128 experts of 96.00 KiB"));
  EXPECT_THAT(p.status().message(), HasSubstr("Use --expert-vram auto"));
  // Exactly what is left fits.
  o.expert_vram_bytes = 10 * kSlot;
  EXPECT_TRUE(PlanMoe(o).ok());
  // A budget too small even with every expert in RAM: the plan's refusal, with the split.
  o.budget_bytes = needed - 1;
  p = PlanMoe(o);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
  EXPECT_THAT(p.status().message(), HasSubstr("does not fit in VRAM"));
  EXPECT_THAT(p.status().message(), HasSubstr("experts: 0 B of 12.00 MiB in VRAM"));
}

TEST(DeviceExpertPlan, NoSplitOnAHostBudgetOrForADenseModel) {
  ServingOptions o = DeviceOptions(uint64_t{8} << 30);
  o.expert_vram_bytes = 10 * kSlot;
  o.budget_name = "RAM";
  absl::StatusOr<PlannedServing> p = PlanMoe(o, /*host_memory=*/true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->plan.inputs.experts.applies);
  EXPECT_EQ(RenderExpertSplit(p->plan), "");
  o.budget_name = "VRAM";
  p = ServedModel::Plan(GoldenPath("tiny-dense-f32.gguf"), o, /*host_memory=*/false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->plan.inputs.experts.applies);
}

// Every expert on the sim device as the plan says: Create loads the model within the device's
// capacity (the budget), nothing refused, and the device's peak within the plan.
TEST(DeviceExpertPlan, CreateOnTheSimDeviceStaysWithinTheCapacity) {
  const ServingOptions o = DeviceOptions(256 * kMiB);
  kernels::SimDeviceBackend sim(
      kernels::SimDeviceOptions{.n_threads = 1, .capacity_bytes = o.budget_bytes});
  absl::StatusOr<std::unique_ptr<ServedModel>> m =
      ServedModel::Create(GoldenPath("tiny-moe-f32.gguf"), sim, o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->plan().inputs.experts.all_on_device);
  EXPECT_EQ(sim.refused_allocations(), 0);
  EXPECT_LE(sim.peak_allocated_bytes(), (*m)->planned_bytes());
  EXPECT_EQ(sim.violation_count(), 0u);
}

// A split on the sim device: the engine makes the planned slots and counts the same device
// weights as the plan (Create checks that), the device holds no more than the plan at its peak,
// and the model serves.
TEST(DeviceExpertPlan, ASplitModelIsCreatedWithThePlannedSlots) {
  ServingOptions o = DeviceOptions(0);
  o.budget_bytes = NeededWithoutExperts(o) + 10 * kSlot + kSlot / 2;
  kernels::SimDeviceBackend sim(
      kernels::SimDeviceOptions{.n_threads = 1, .capacity_bytes = o.budget_bytes});
  absl::StatusOr<std::unique_ptr<ServedModel>> m =
      ServedModel::Create(GoldenPath("tiny-moe-f32.gguf"), sim, o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->plan().inputs.experts.n_slots, 10);
  ExpertTiers* tiers = (*m)->model().expert_tiers();
  ASSERT_NE(tiers, nullptr);
  EXPECT_EQ(tiers->n_slots(), 10);
  EXPECT_EQ(tiers->slot_bytes(), kSlot);
  EXPECT_EQ(sim.refused_allocations(), 0);
  EXPECT_LE(sim.peak_allocated_bytes(), (*m)->planned_bytes());
  EXPECT_EQ(sim.violation_count(), 0u);
}

}  // namespace
}  // namespace deltaserve::worker
