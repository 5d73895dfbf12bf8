// The `sim` device (kernels/sim/sim_backend.h) as deltaserve-worker --device sim makes it: a
// device-memory capacity that refuses what a full GPU would refuse (Allocate: an empty handle;
// ImportWeights: null), with room again once memory is freed; no capacity means no limit; calls
// from several threads (a worker's schedulers share one backend) are not violations unless the
// one-thread check is asked for; and MoeFfn accepts what the expert tiers hand it (stacks over a
// slot arena, matrix_stride apart, and ids < 0 for experts on the other side) while a stack
// whose stride runs past its allocation is still refused. The memory checks themselves are
// tested through the tests' subclass (strict_device_backend_test).
#include "kernels/sim/sim_backend.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace deltaserve::kernels {
namespace {

TEST(SimDeviceBackend, IsADeviceNamedSim) {
  SimDeviceBackend b(SimDeviceOptions{});
  EXPECT_EQ(b.name(), "sim");
  EXPECT_FALSE(b.host_memory());
  EXPECT_EQ(b.capacity_bytes(), 0u);
}

TEST(SimDeviceBackend, AllocationsBeyondTheCapacityAreRefusedLikeAFullGpu) {
  SimDeviceBackend b(SimDeviceOptions{.n_threads = 1, .capacity_bytes = 10000});
  DeviceBuffer a = b.Allocate(6000);
  ASSERT_NE(a.data(), nullptr);
  // 6000 + 5000 > 10000: refused, nothing held for it.
  DeviceBuffer over = b.Allocate(5000);
  EXPECT_EQ(over.data(), nullptr);
  EXPECT_EQ(b.refused_allocations(), 1);
  EXPECT_EQ(b.allocated_bytes(), 6000u);
  // Exactly up to the capacity is fine.
  DeviceBuffer rest = b.Allocate(4000);
  ASSERT_NE(rest.data(), nullptr);
  EXPECT_EQ(b.allocated_bytes(), 10000u);
  EXPECT_EQ(b.Allocate(1).data(), nullptr);
  // Weights beyond it: null and an empty storage handle.
  std::vector<uint8_t> host(64, 7);
  DeviceBuffer storage;
  EXPECT_EQ(b.ImportWeights(host.data(), host.size(), storage), nullptr);
  EXPECT_EQ(storage.data(), nullptr);
  EXPECT_EQ(b.refused_allocations(), 3);
  // A single request beyond the whole capacity (no wrap-around in the check).
  EXPECT_EQ(b.Allocate(SIZE_MAX - 8).data(), nullptr);
  // Freed memory is room again; the peak stays what was held at once.
  a = {};
  EXPECT_EQ(b.allocated_bytes(), 4000u);
  const void* w = b.ImportWeights(host.data(), host.size(), storage);
  ASSERT_NE(w, nullptr);
  std::vector<uint8_t> back(64, 0);
  ASSERT_EQ(b.CopyToHost(back.data(), w, back.size()), KernelStatus::kOk);
  EXPECT_EQ(back, host);
  EXPECT_EQ(b.allocated_bytes(), 4064u);
  EXPECT_EQ(b.peak_allocated_bytes(), 10000u);
  EXPECT_TRUE(b.violations().empty());
}

TEST(SimDeviceBackend, NoCapacityMeansNoLimit) {
  SimDeviceBackend b(SimDeviceOptions{.n_threads = 1, .capacity_bytes = 0});
  DeviceBuffer big = b.Allocate(size_t{1} << 30);  // reserved, not touched (MAP_NORESERVE)
  EXPECT_NE(big.data(), nullptr);
  EXPECT_EQ(b.refused_allocations(), 0);
}

TEST(SimDeviceBackend, CallsFromAnotherThreadAreViolationsOnlyWhenAsked) {
  for (bool single_thread : {false, true}) {
    SimDeviceBackend b(SimDeviceOptions{.n_threads = 1, .single_thread = single_thread});
    DeviceBuffer x = b.Allocate(4 * sizeof(float)), y = b.Allocate(4 * sizeof(float));
    Mat xm{x.floats(), 1, 4, 4}, ym{y.floats(), 1, 4, 4};
    KernelStatus status = KernelStatus::kDeviceError;
    std::thread([&] { status = b.Copy(xm, ym); }).join();
    EXPECT_EQ(status, KernelStatus::kOk);  // recorded, not refused: the op itself is fine
    EXPECT_EQ(b.violation_count(), single_thread ? 1u : 0u) << single_thread;
  }
}

// An f32 stack of `count` matrices [out][in] in one allocation, `stride` bytes apart.
struct Stack {
  DeviceBuffer buf;
  WeightView view;
};
Stack MakeStack(SimDeviceBackend& b, int64_t in, int64_t out, int64_t count, size_t stride,
                float value) {
  const size_t matrix = static_cast<size_t>(in * out) * sizeof(float);
  const size_t bytes = static_cast<size_t>(count - 1) * stride + matrix;
  std::vector<float> host(bytes / sizeof(float), value);
  Stack s;
  s.buf = b.Allocate(bytes);
  EXPECT_EQ(b.CopyToDevice(s.buf.data(), host.data(), bytes), KernelStatus::kOk);
  s.view.data = s.buf.data();
  s.view.type = WeightType::kF32;
  s.view.in = in;
  s.view.out = out;
  s.view.row_bytes = static_cast<size_t>(in) * sizeof(float);
  s.view.count = count;
  s.view.matrix_stride = stride;
  return s;
}

TEST(SimDeviceBackend, MoeFfnTakesArenaStacksAndSkippedIds) {
  SimDeviceBackend b(SimDeviceOptions{.n_threads = 1});
  constexpr int64_t kH = 8, kF = 4, kSlots = 3, kK = 2;
  // Three slots of gate + up + down, the stacks interleaved in the arena as the tiers lay them
  // out: each stack's matrices one slot apart (here each stack in its own allocation, padded).
  const size_t slot = 3 * kH * kF * sizeof(float);
  Stack gate = MakeStack(b, kH, kF, kSlots, slot, 0.01f);
  Stack up = MakeStack(b, kH, kF, kSlots, slot, 0.02f);
  Stack down = MakeStack(b, kF, kH, kSlots, slot, 0.03f);
  const std::vector<float> x(2 * kH, 1.0f);
  const std::vector<int32_t> ids = {0, -1, -1, 2};  // token 0: slot 0; token 1: slot 2
  const std::vector<float> weights = {0.5f, 0.5f, 0.5f, 0.5f};
  DeviceBuffer xb = b.Allocate(x.size() * 4), yb = b.Allocate(x.size() * 4),
               ib = b.Allocate(ids.size() * 4), wb = b.Allocate(weights.size() * 4);
  ASSERT_EQ(b.CopyToDevice(xb.data(), x.data(), x.size() * 4), KernelStatus::kOk);
  ASSERT_EQ(b.CopyToDevice(ib.data(), ids.data(), ids.size() * 4), KernelStatus::kOk);
  ASSERT_EQ(b.CopyToDevice(wb.data(), weights.data(), weights.size() * 4), KernelStatus::kOk);
  Mat xm{xb.floats(), 2, kH, kH}, ym{yb.floats(), 2, kH, kH};
  ASSERT_EQ(b.MoeFfn(xm, static_cast<const int32_t*>(ib.data()), wb.floats(), kK, gate.view,
                     up.view, down.view, ym),
            KernelStatus::kOk);
  EXPECT_TRUE(b.violations().empty()) << b.violations().front();
  // Both tokens went through one expert (the other id skipped) with equal weights: equal rows.
  std::vector<float> y(2 * kH);
  ASSERT_EQ(b.CopyToHost(y.data(), yb.data(), y.size() * 4), KernelStatus::kOk);
  EXPECT_NE(y[0], 0.0f);
  for (int64_t i = 0; i < kH; ++i) EXPECT_EQ(y[i], y[kH + i]) << i;
  // A stride that takes the last matrix past the allocation: refused and named.
  WeightView too_far = gate.view;
  too_far.matrix_stride = slot + 4;
  EXPECT_EQ(b.MoeFfn(xm, static_cast<const int32_t*>(ib.data()), wb.floats(), kK, too_far,
                     up.view, down.view, ym),
            KernelStatus::kInvalidArgument);
  ASSERT_EQ(b.violations().size(), 1u);
  EXPECT_NE(b.violations()[0].find("MoeFfn: argument 'gate_exps'"), std::string::npos)
      << b.violations()[0];
}

}  // namespace
}  // namespace deltaserve::kernels
