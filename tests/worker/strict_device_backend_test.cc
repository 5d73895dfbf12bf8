// The checking backend of tests/support/strict_device_backend.h on its own: it must compute what
// the CPU backend computes when given backend memory, refuse (and name) every host pointer and
// every range past an allocation, and fault on a host access outside an op. The engine tests
// that rely on it (strict_device_engine_test) are only as good as these checks.
#include "tests/support/strict_device_backend.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace deltaserve::testing {
namespace {

using kernels::DeviceBuffer;
using kernels::KernelStatus;
using kernels::Mat;
using kernels::Vec;

DeviceBuffer Upload(StrictDeviceBackend& b, const std::vector<float>& host) {
  DeviceBuffer buf = b.Allocate(host.size() * sizeof(float));
  EXPECT_NE(buf.data(), nullptr);
  EXPECT_EQ(b.CopyToDevice(buf.data(), host.data(), host.size() * sizeof(float)),
            KernelStatus::kOk);
  return buf;
}

std::vector<float> Download(StrictDeviceBackend& b, const DeviceBuffer& buf, size_t n) {
  std::vector<float> host(n);
  EXPECT_EQ(b.CopyToHost(host.data(), buf.data(), n * sizeof(float)), KernelStatus::kOk);
  return host;
}

TEST(StrictDeviceBackend, OpsOnBackendMemoryComputeWhatTheCpuBackendComputes) {
  StrictDeviceBackend b(1);
  const std::vector<float> x = {1, 2, 3, 4, -1, -2, -3, -4};
  const std::vector<float> w = {1, 1, 2, 2};
  DeviceBuffer xb = Upload(b, x), wb = Upload(b, w), yb = b.Allocate(8 * sizeof(float));
  Mat xm{xb.floats(), 2, 4, 4}, ym{yb.floats(), 2, 4, 4};
  ASSERT_EQ(b.RmsNorm(xm, Vec{wb.floats(), 4}, 1e-6f, ym), KernelStatus::kOk);
  // The same op on the CPU backend, on host memory.
  auto cpu = kernels::MakeCpuBackend(1);
  std::vector<float> want(8), xin = x;
  Mat cx{xin.data(), 2, 4, 4}, cy{want.data(), 2, 4, 4};
  ASSERT_EQ(cpu->RmsNorm(cx, Vec{w.data(), 4}, 1e-6f, cy), KernelStatus::kOk);
  EXPECT_EQ(Download(b, yb, 8), want);
  EXPECT_TRUE(b.violations().empty()) << b.Report();
  EXPECT_EQ(b.live_allocations(), 3u);
}

TEST(StrictDeviceBackend, HostPointersAndOverrunsAreRefusedAndNamed) {
  StrictDeviceBackend b(1);
  DeviceBuffer xb = b.Allocate(8 * sizeof(float)), yb = b.Allocate(8 * sizeof(float));
  std::vector<float> host(8, 1.0f);
  std::vector<int32_t> host_ids = {0, 1};
  // A host matrix as an op argument.
  Mat hx{host.data(), 2, 4, 4}, y{yb.floats(), 2, 4, 4};
  EXPECT_EQ(b.Add(y, hx), KernelStatus::kInvalidArgument);
  // A view whose last row runs past its allocation (stride too large for 2 rows).
  Mat over{xb.floats(), 2, 4, 6};
  EXPECT_EQ(b.Copy(over, y), KernelStatus::kInvalidArgument);
  // Host token ids for GetRows.
  DeviceBuffer table = b.Allocate(4 * 4 * sizeof(float));
  kernels::WeightView tw;
  tw.data = table.data();
  tw.in = 4;
  tw.out = 4;
  tw.row_bytes = 16;
  EXPECT_EQ(b.GetRows(tw, host_ids.data(), 2, y), KernelStatus::kInvalidArgument);
  // A host positions array for RoPE.
  Mat heads{yb.floats(), 2, 4, 4};
  EXPECT_EQ(b.RopeNeox(heads, host_ids.data(), 1, 4, 10000.0f), KernelStatus::kInvalidArgument);
  // Copies: device memory as the host side, host memory as the device side.
  EXPECT_EQ(b.CopyToHost(xb.data(), yb.data(), 16), KernelStatus::kInvalidArgument);
  EXPECT_EQ(b.CopyToDevice(host.data(), host.data() + 4, 16), KernelStatus::kInvalidArgument);
  EXPECT_EQ(b.CopyOnDevice(xb.data(), host.data(), 16), KernelStatus::kInvalidArgument);
  const std::vector<std::string> v = b.violations();
  ASSERT_EQ(v.size(), 7u) << b.Report();
  EXPECT_NE(v[0].find("Add: argument 'y'"), std::string::npos) << v[0];
  EXPECT_NE(v[1].find("Copy: argument 'src'"), std::string::npos) << v[1];
  EXPECT_NE(v[1].find("past the end"), std::string::npos) << v[1];
  EXPECT_NE(v[2].find("GetRows: argument 'ids'"), std::string::npos) << v[2];
  EXPECT_NE(v[3].find("RopeNeox: argument 'positions'"), std::string::npos) << v[3];
  EXPECT_NE(v[4].find("CopyToHost: argument 'dst'"), std::string::npos) << v[4];
  EXPECT_NE(v[5].find("CopyToDevice: argument 'dst'"), std::string::npos) << v[5];
  EXPECT_NE(v[6].find("CopyOnDevice: argument 'src'"), std::string::npos) << v[6];
  // Nothing ran on the refused calls: the destination is still zero.
  std::vector<float> back(8, -1.0f);
  ASSERT_EQ(b.CopyToHost(back.data(), yb.data(), 32), KernelStatus::kOk);
  EXPECT_EQ(back, std::vector<float>(8, 0.0f));
}

TEST(StrictDeviceBackend, ImportedWeightsAreCopiesInBackendMemory) {
  StrictDeviceBackend b(1);
  const std::vector<float> host = {1, 2, 3, 4};
  DeviceBuffer storage;
  const void* p = b.ImportWeights(host.data(), 16, storage);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(p, static_cast<const void*>(host.data()));
  EXPECT_EQ(p, storage.data());
  EXPECT_TRUE(b.IsBackendMemory(p, 16));
  EXPECT_FALSE(b.IsBackendMemory(p, 17));
  EXPECT_EQ(Download(b, storage, 4), host);
  storage = {};
  EXPECT_EQ(b.live_allocations(), 0u);
}

TEST(StrictDeviceBackendDeathTest, HostAccessOutsideAnOpFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        StrictDeviceBackend::InstallFaultReporter();
        StrictDeviceBackend b(1);
        DeviceBuffer buf = b.Allocate(64);
        volatile float* p = buf.floats();
        p[3] = 1.0f;  // what an engine reading device memory on the host would do
      },
      "the host touched backend memory outside an op: address 0x[0-9a-f]+ is byte 12 of an "
      "allocation of 64 bytes");
}

}  // namespace
}  // namespace deltaserve::testing
