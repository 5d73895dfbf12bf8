// --parallel auto (worker/sched/parallel_auto.h): the largest count up to the cap whose plan
// fits, checked against ServedModel::Plan of the neighbouring counts (the count chosen fits, one
// more does not); the cap when memory is plenty; one, and fits false, when nothing fits; a MoE
// model on a device keeps at least half its experts there.
#include "worker/sched/parallel_auto.h"

#include "gtest/gtest.h"
#include "tests/support/test_paths.h"
#include "worker/cache/memory_plan.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;

ServingOptions Options(uint64_t budget, const char* budget_name = "RAM") {
  ServingOptions o;
  o.ctx = 512;
  o.n_parallel = kParallelAuto;
  o.parallel_auto_cap = 4;
  o.page_tokens = 32;
  o.step_tokens = 64;
  o.budget_bytes = budget;
  o.budget_name = budget_name;
  o.snapshot_ram_bytes = 0;
  return o;
}

// Bytes the plan of `n` sequences needs (a budget that is never the limit).
uint64_t Needed(const std::string& path, ServingOptions o, int n, bool host_memory) {
  o.n_parallel = n;
  o.budget_bytes = uint64_t{1} << 34;
  absl::StatusOr<PlannedServing> p = ServedModel::Plan(path, o, host_memory);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? BytesNeeded(p->plan, o.ctx, n) : 0;
}

TEST(ParallelAuto, PlentyOfMemoryGivesTheCap) {
  const std::string path = GoldenPath("tiny-dense-f32.gguf");
  absl::StatusOr<ParallelChoice> c = ResolveAutoParallel(path, Options(uint64_t{1} << 34), true);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_parallel, 4);
  EXPECT_FALSE(c->memory_bound);
  EXPECT_TRUE(c->fits);
  EXPECT_NE(c->Describe(Options(1)).find("4 sequences at once"), std::string::npos);
}

TEST(ParallelAuto, TheLargestCountTheBudgetFits) {
  const std::string path = GoldenPath("tiny-dense-f32.gguf");
  const uint64_t two = Needed(path, Options(1), 2, true);
  const uint64_t three = Needed(path, Options(1), 3, true);
  ASSERT_LT(two, three);  // each sequence costs KV pages and a state slot
  for (uint64_t budget : {two, (two + three) / 2, three - 1}) {
    absl::StatusOr<ParallelChoice> c = ResolveAutoParallel(path, Options(budget), true);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->n_parallel, 2) << budget;
    EXPECT_TRUE(c->memory_bound);
    EXPECT_NE(c->Describe(Options(budget)).find("what the RAM budget fits at --ctx 512"),
              std::string::npos);
  }
  absl::StatusOr<ParallelChoice> at_three = ResolveAutoParallel(path, Options(three), true);
  ASSERT_TRUE(at_three.ok());
  EXPECT_EQ(at_three->n_parallel, 3);
}

TEST(ParallelAuto, NothingFitsGivesOneAndSaysSo) {
  const std::string path = GoldenPath("tiny-dense-f32.gguf");
  absl::StatusOr<ParallelChoice> c = ResolveAutoParallel(path, Options(4096), true);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_parallel, 1);
  EXPECT_FALSE(c->fits);
}

TEST(ParallelAuto, AnUnreadableFileIsAnError) {
  absl::StatusOr<ParallelChoice> c =
      ResolveAutoParallel("/nonexistent/model.gguf", Options(uint64_t{1} << 34), true);
  EXPECT_FALSE(c.ok());
}

// The tiny MoE on a device budget: at each count the experts take what is left. A budget that
// holds every expert beside one sequence but only a few beside four: auto stops where at least
// half the experts stay on the device.
TEST(ParallelAuto, MoeOnADeviceKeepsHalfItsExperts) {
  const std::string path = GoldenPath("tiny-moe-f32.gguf");
  // A context long enough that three more sequences cost more than all the experts.
  ServingOptions base = Options(1, "VRAM");
  uint64_t base1 = 0;
  uint64_t base4 = 0;
  uint64_t routed = 0;
  for (base.ctx = 512; base.ctx <= (int64_t{1} << 20); base.ctx *= 2) {
    ServingOptions none = base;
    none.expert_vram_bytes = 0;  // every expert in host memory: the rest of the plan
    base1 = Needed(path, none, 1, false);
    base4 = Needed(path, none, 4, false);
    routed = Needed(path, base, 1, false) - base1;  // auto: every expert on the device
    if (base4 - base1 > routed) break;
  }
  ASSERT_GT(routed, 0u);
  ASSERT_GT(base4 - base1, routed) << "no context makes sequences cost more than the experts";
  // One sequence beside every expert; four would leave no room for them.
  ServingOptions o = base;
  o.budget_bytes = base1 + routed;
  absl::StatusOr<ParallelChoice> c = ResolveAutoParallel(path, o, false);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->fits);
  EXPECT_LT(c->n_parallel, 4);
  ServingOptions chosen = o;
  chosen.n_parallel = c->n_parallel;
  absl::StatusOr<PlannedServing> p = ServedModel::Plan(path, chosen, false);
  ASSERT_TRUE(p.ok()) << p.status();
  const ExpertSplit& e = p->plan.inputs.experts;
  EXPECT_GE(e.device_experts() * 2, e.n_experts()) << c->n_parallel;
  // One more sequence would have cost the experts their half (or not fit at all).
  chosen.n_parallel = c->n_parallel + 1;
  absl::StatusOr<PlannedServing> more = ServedModel::Plan(path, chosen, false);
  if (more.ok()) {
    EXPECT_LT(more->plan.inputs.experts.device_experts() * 2, e.n_experts()) << c->n_parallel;
  }
}

}  // namespace
}  // namespace deltaserve::worker
