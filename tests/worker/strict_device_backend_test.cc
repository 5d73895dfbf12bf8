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

// Backend::DeltaNetDecodeStep reaches the states through arrays of pointers in backend memory:
// the arrays and every pointer in them are checked (as a GPU kernel would dereference them), and
// the host copies must hold the same pointers.
TEST(StrictDeviceBackend, DecodeStepChecksThePointersInsideItsArrays) {
  StrictDeviceBackend b(1);
  constexpr int64_t kB = 2, kD = 4, kC = 3 * kD, kKernel = 2;  // n_k = n_v = 1
  auto filled = [](size_t n, float scale) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7) % 11) - 0.4f;
    return v;
  };
  const std::vector<float> qkv = filled(kB * kC, 0.3f), z = filled(kB * kD, 0.2f),
                           ab = filled(kB, 0.5f), w = filled(kC * kKernel, 0.25f), one = {-0.5f},
                           norm = filled(kD, 0.1f), state = filled(kD * kD, 0.05f),
                           conv = filled(kC, 0.1f);
  DeviceBuffer qkv_b = Upload(b, qkv), z_b = Upload(b, z), a_b = Upload(b, ab),
               beta_b = Upload(b, ab), w_b = Upload(b, w), ssm_b = Upload(b, one),
               dt_b = Upload(b, one), norm_b = Upload(b, norm), out_b = b.Allocate(kB * kD * 4);
  DeviceBuffer conv0 = Upload(b, conv), conv1 = Upload(b, conv), delta0 = Upload(b, state),
               delta1 = Upload(b, state), small = b.Allocate(kD * 4);
  std::vector<float*> conv_ptrs = {conv0.floats(), conv1.floats()},
                      delta_ptrs = {delta0.floats(), delta1.floats()};
  auto upload_ptrs = [&](const std::vector<float*>& p) {
    DeviceBuffer buf = b.Allocate(p.size() * sizeof(float*));
    EXPECT_EQ(b.CopyToDevice(buf.data(), p.data(), p.size() * sizeof(float*)), KernelStatus::kOk);
    return buf;
  };
  DeviceBuffer conv_arr = upload_ptrs(conv_ptrs), delta_arr = upload_ptrs(delta_ptrs);
  kernels::DeltaNetStep s;
  s.qkv = {qkv_b.floats(), kB, kC, kC};
  s.z = {z_b.floats(), kB, kD, kD};
  s.alpha = {a_b.floats(), kB, 1, 1};
  s.beta = {beta_b.floats(), kB, 1, 1};
  s.conv_w = w_b.floats();
  s.conv_kernel = kKernel;
  s.conv_states = static_cast<float* const*>(conv_arr.data());
  s.delta_states = static_cast<float* const*>(delta_arr.data());
  s.conv_states_host = conv_ptrs.data();
  s.delta_states_host = delta_ptrs.data();
  s.ssm_a = {ssm_b.floats(), 1};
  s.dt_bias = {dt_b.floats(), 1};
  s.norm = {norm_b.floats(), kD};
  s.l2_eps = s.norm_eps = 1e-6f;
  s.n_k_heads = s.n_v_heads = 1;
  s.head_dim = kD;
  s.out = {out_b.floats(), kB, kD, kD};
  ASSERT_EQ(b.DeltaNetDecodeStep(s), KernelStatus::kOk) << b.Report();
  EXPECT_TRUE(b.violations().empty()) << b.Report();
  // The CPU backend on host copies of the same inputs computes the same bits.
  {
    auto cpu = kernels::MakeCpuBackend(1);
    std::vector<float> hq = qkv, hz = z, ha = ab, hb = ab, hout(kB * kD), hc0 = conv, hc1 = conv,
                       hd0 = state, hd1 = state;
    std::vector<float*> hc = {hc0.data(), hc1.data()}, hd = {hd0.data(), hd1.data()};
    kernels::DeltaNetStep h = s;
    h.qkv.data = hq.data();
    h.z.data = hz.data();
    h.alpha.data = ha.data();
    h.beta.data = hb.data();
    h.conv_w = w.data();
    h.conv_states = h.conv_states_host = hc.data();
    h.delta_states = h.delta_states_host = hd.data();
    h.ssm_a.data = one.data();
    h.dt_bias.data = one.data();
    h.norm.data = norm.data();
    h.out.data = hout.data();
    ASSERT_EQ(cpu->DeltaNetDecodeStep(h), KernelStatus::kOk);
    EXPECT_EQ(Download(b, out_b, kB * kD), hout);
    EXPECT_EQ(Download(b, delta1, kD * kD), hd1);
    EXPECT_EQ(Download(b, conv0, kC), hc0);
  }
  // The device array given as host memory.
  kernels::DeltaNetStep bad = s;
  bad.conv_states = conv_ptrs.data();
  EXPECT_EQ(b.DeltaNetDecodeStep(bad), KernelStatus::kInvalidArgument);
  // A pointer inside the device array that is host memory (the host copy agrees).
  std::vector<float> host_state(kD * kD);
  std::vector<float*> host_inside = {delta0.floats(), host_state.data()};
  DeviceBuffer host_inside_arr = upload_ptrs(host_inside);
  bad = s;
  bad.delta_states = static_cast<float* const*>(host_inside_arr.data());
  bad.delta_states_host = host_inside.data();
  EXPECT_EQ(b.DeltaNetDecodeStep(bad), KernelStatus::kInvalidArgument);
  // A state smaller than [n_v][d][d].
  std::vector<float*> too_small = {delta0.floats(), small.floats()};
  DeviceBuffer small_arr = upload_ptrs(too_small);
  bad = s;
  bad.delta_states = static_cast<float* const*>(small_arr.data());
  bad.delta_states_host = too_small.data();
  EXPECT_EQ(b.DeltaNetDecodeStep(bad), KernelStatus::kInvalidArgument);
  // Stale device arrays: they disagree with the host copies.
  std::vector<float*> swapped = {conv1.floats(), conv0.floats()};
  bad = s;
  bad.conv_states_host = swapped.data();
  EXPECT_EQ(b.DeltaNetDecodeStep(bad), KernelStatus::kInvalidArgument);
  const std::vector<std::string> v = b.violations();
  ASSERT_EQ(v.size(), 5u) << b.Report();  // the swap makes both entries stale
  EXPECT_NE(v[0].find("argument 'conv_states'"), std::string::npos) << v[0];
  EXPECT_NE(v[1].find("argument 'delta_states[1]'"), std::string::npos) << v[1];
  EXPECT_NE(v[2].find("argument 'delta_states[1]'"), std::string::npos) << v[2];
  EXPECT_NE(v[2].find("past the end"), std::string::npos) << v[2];
  EXPECT_NE(v[3].find("state pointer 0 in backend memory differs from its host copy"),
            std::string::npos)
      << v[3];
  EXPECT_NE(v[4].find("state pointer 1"), std::string::npos) << v[4];
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
