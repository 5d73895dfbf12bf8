// ServedModel's VRAM plan on a device backend. The strict backend of
// tests/support/strict_device_backend.h stands in for a GPU (its memory is not host memory, and
// it counts what it holds): ServedModel::Plan without a backend and Create on the device count
// the same bytes, with the CUDA context reserve and the scratch area and without the host terms;
// a configuration that does not fit is refused before one byte is allocated on the device, with
// the plan's table; and what the device really holds at its peak — weights, KV pages, state
// slots, workspace, page tables — stays within the plan.
#include <cstdint>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/strict_device_backend.h"
#include "tests/support/test_paths.h"
#include "worker/sched/served_model.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::StrictDeviceBackend;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

ServingOptions DeviceOptions(uint64_t budget) {
  ServingOptions o;
  o.ctx = 512;
  o.n_parallel = 3;
  o.k_type = kernels::WeightType::kF16;
  o.v_type = kernels::WeightType::kQ8_0;
  o.page_tokens = 32;
  o.step_tokens = 96;
  o.speculation = true;
  o.budget_bytes = budget;
  o.budget_name = "VRAM";
  o.fixed_overhead_bytes = 1 * kMiB;
  o.device_context_bytes = 64 * kMiB;  // stands in for kCudaContextReserveBytes
  o.device_scratch_bytes = 3 * kMiB;
  o.snapshot_ram_bytes = 0;
  return o;
}

TEST(DevicePlan, PlanWithoutBackendEqualsCreateAndBoundsWhatTheDeviceHolds) {
  for (const char* name : {"tiny-dense-f32", "tiny-moe-f32", "tiny-dense-q4_k_m"}) {
    SCOPED_TRACE(name);
    const std::string path = GoldenPath(std::string(name) + ".gguf");
    const ServingOptions o = DeviceOptions(uint64_t{1} << 30);
    absl::StatusOr<PlannedServing> planned = ServedModel::Plan(path, o, /*host_memory=*/false);
    ASSERT_TRUE(planned.ok()) << planned.status();
    const ServingOverhead& over = planned->overhead;
    EXPECT_FALSE(over.host_counted);
    EXPECT_EQ(over.device_context, 64 * kMiB);
    EXPECT_EQ(planned->plan.kernel_scratch_bytes, 3 * kMiB);
    // Device terms only: --overhead, the context, the speculation slots, the zero slot and the
    // page-table buffer (3 x 3 sequences x 16 pages x 4 B + 128) with the decode step's state
    // pointers (3 x 6 DeltaNet layers x 2 x 3 sequences x 8 B + 128).
    const uint64_t slot = planned->plan.recurrent.total();
    EXPECT_EQ(over.snapshot_slots, 3 * slot);
    EXPECT_EQ(over.zero_slot, slot);
    EXPECT_EQ(over.page_tables, 3u * 3 * 16 * 4 + 128 + 3u * 6 * 2 * 3 * sizeof(float*) + 128);
    EXPECT_EQ(over.total(), 1 * kMiB + 64 * kMiB + 4 * slot + over.page_tables);
    EXPECT_THAT(over.Render(), HasSubstr("CUDA context reserve"));
    EXPECT_THAT(over.Render(), HasSubstr("not in this device's budget"));

    StrictDeviceBackend device(1);
    absl::StatusOr<std::unique_ptr<ServedModel>> m = ServedModel::Create(path, device, o);
    ASSERT_TRUE(m.ok()) << m.status();
    const MemoryPlan& plan = (*m)->plan();
    EXPECT_EQ(plan.fixed_bytes(), planned->plan.fixed_bytes());
    EXPECT_EQ(plan.workspace_bytes, planned->plan.workspace_bytes);
    EXPECT_EQ((*m)->planned_bytes(), BytesNeeded(planned->plan, o.ctx, o.n_parallel));
    // The device's peak (the warm-up passes at the planned batch shape included) within the
    // plan less what a GPU holds outside the allocations this backend sees (context, scratch).
    const uint64_t peak = device.peak_allocated_bytes();
    const uint64_t bound = (*m)->planned_bytes() - 64 * kMiB - 3 * kMiB - 1 * kMiB;
    EXPECT_LE(peak, bound);
    // And not far below it: the plan counts what is there (the slack is the page-table buffer,
    // planned at its regrowth peak).
    EXPECT_GE(peak + over.page_tables, bound) << "planned " << bound << ", held " << peak;
    std::printf("[ %s ] planned device bytes %llu, peak held %llu\n", name,
                static_cast<unsigned long long>(bound), static_cast<unsigned long long>(peak));
    EXPECT_TRUE(device.violations().empty()) << device.Report();
  }
}

TEST(DevicePlan, RefusedBeforeAnythingIsAllocatedOnTheDevice) {
  const std::string path = GoldenPath("tiny-dense-f32.gguf");
  // The context reserve alone exceeds 60 MiB.
  const ServingOptions o = DeviceOptions(60 * kMiB);
  absl::StatusOr<PlannedServing> planned = ServedModel::Plan(path, o, /*host_memory=*/false);
  ASSERT_EQ(planned.status().code(), absl::StatusCode::kResourceExhausted);
  StrictDeviceBackend device(1);
  absl::StatusOr<std::unique_ptr<ServedModel>> m = ServedModel::Create(path, device, o);
  ASSERT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(m.status().message(), planned.status().message());
  EXPECT_THAT(m.status().message(), HasSubstr("does not fit in VRAM 60.00 MiB"));
  EXPECT_THAT(m.status().message(), HasSubstr("max context"));
  EXPECT_THAT(m.status().message(), HasSubstr("CUDA context reserve"));
  EXPECT_EQ(device.peak_allocated_bytes(), 0u) << "no weight was copied to the device";
}

TEST(DevicePlan, HostBudgetCountsNoDeviceTerms) {
  const std::string path = GoldenPath("tiny-dense-f32.gguf");
  ServingOptions o = DeviceOptions(uint64_t{8} << 30);
  o.budget_name = "RAM";
  o.n_threads = 2;
  absl::StatusOr<PlannedServing> planned = ServedModel::Plan(path, o, /*host_memory=*/true);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_TRUE(planned->overhead.host_counted);
  EXPECT_EQ(planned->overhead.device_context, 0u);
  EXPECT_GT(planned->overhead.tokenizer, 0u);
  // The CPU attention kernel's scratch: 2 threads x head_dim 64 x 64 floats.
  EXPECT_EQ(planned->plan.kernel_scratch_bytes, 2u * 64 * 64 * 4);
}

}  // namespace
}  // namespace deltaserve::worker
