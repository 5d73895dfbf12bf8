// CudaBackend itself (kernels/cuda/cuda_backend_class.h) on a real GPU: its name and device
// properties, memory (zero-filled 256-byte aligned allocations, host<->device round trips from
// pageable and pinned memory, device-to-device copies and their overlap check, ImportWeights),
// errors (out of memory is an empty handle with the CUDA text kept, and the backend keeps
// working; a scratch area that cannot fit and a missing device make no backend), buffers that
// outlive their backend, stream ordering (a chain of ops on one stream without synchronising in
// between reads what the previous op wrote), and CUDA-graph capture (recorded ops do not run
// until the graph launches; a second recording with other arguments updates the cached graph
// in place; another kernel sequence rebuilds it; calls that cannot be captured are refused
// without breaking the capture). Expected values are the bytes the test wrote, or whole-number
// sums that f32 holds exactly. Reports SKIPPED where the machine has no GPU.
#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend_class.h"
#include "tests/gpu/gpu_test_support.h"

namespace deltaserve::kernels::gpu_test {
namespace {

using CudaBackendTest = GpuBackendTest;

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

TEST_F(CudaBackendTest, NameAndDeviceProperties) {
  EXPECT_EQ(gpu_->name(), "cuda:0");
  EXPECT_FALSE(gpu_->host_memory());
  CudaBackend* cuda = AsCudaBackend(gpu_.get());
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(AsCudaBackend(cpu_.get()), nullptr);
  EXPECT_EQ(cuda->device(), 0);
  EXPECT_TRUE(cuda->last_error().empty()) << cuda->last_error();
  CudaDeviceInfo info;
  std::string error;
  ASSERT_TRUE(QueryCudaDevice(0, &info, &error)) << error;
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.total_bytes, 0u);
  EXPECT_LE(info.free_bytes, info.total_bytes);
  EXPECT_GE(info.cc_major, 5);
  EXPECT_GT(info.sm_count, 0);
  EXPECT_EQ(cuda->device_info().name, info.name);
  EXPECT_EQ(cuda->device_info().sm_count, info.sm_count);
  EXPECT_EQ(cuda->scratch_bytes(), CudaBackendOptions{}.scratch_bytes);
}

TEST_F(CudaBackendTest, AllocateIsZeroFilledAndAligned) {
  for (const size_t bytes : {size_t{1}, size_t{255}, size_t{256}, size_t{1000}, size_t{1} << 20}) {
    DeviceBuffer buf = gpu_->Allocate(bytes);
    ASSERT_NE(buf.data(), nullptr) << bytes;
    EXPECT_EQ(buf.bytes(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 256, 0u);
    const std::vector<uint8_t> host = Download<uint8_t>(*gpu_, buf.data(), bytes);
    EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](uint8_t b) { return b == 0; })) << bytes;
  }
  // Zero bytes still gets a handle (an empty handle means out of memory).
  EXPECT_NE(gpu_->Allocate(0).data(), nullptr);
}

TEST_F(CudaBackendTest, HostDeviceRoundTrips) {
  const std::vector<uint8_t> src = Pattern(100003, 3);
  DeviceBuffer buf = gpu_->Allocate(src.size());
  ASSERT_EQ(gpu_->CopyToDevice(buf.data(), src.data(), src.size()), KernelStatus::kOk);
  std::vector<uint8_t> back(src.size());
  // CopyToHost synchronises: no Synchronize() before reading.
  ASSERT_EQ(gpu_->CopyToHost(back.data(), buf.data(), back.size()), KernelStatus::kOk);
  EXPECT_EQ(back, src);
  // Sub-ranges at odd offsets.
  std::vector<uint8_t> part(777);
  ASSERT_EQ(gpu_->CopyToHost(part.data(), static_cast<uint8_t*>(buf.data()) + 4321, part.size()),
            KernelStatus::kOk);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), src.begin() + 4321));
  // Zero bytes and null pointers: the CPU backend's answers.
  EXPECT_EQ(gpu_->CopyToDevice(nullptr, nullptr, 0), KernelStatus::kOk);
  EXPECT_EQ(gpu_->CopyToDevice(buf.data(), nullptr, 4), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu_->CopyToHost(nullptr, buf.data(), 4), KernelStatus::kInvalidArgument);
}

TEST_F(CudaBackendTest, CopyToDeviceFromPinnedMemoryMayReuseTheSourceOnReturn) {
  constexpr size_t kBytes = size_t{64} << 20;  // long enough that an unwaited copy would race
  uint8_t* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, kBytes), cudaSuccess);
  std::memset(pinned, 0x5a, kBytes);
  DeviceBuffer buf = gpu_->Allocate(kBytes);
  ASSERT_EQ(gpu_->CopyToDevice(buf.data(), pinned, kBytes), KernelStatus::kOk);
  std::memset(pinned, 0x00, kBytes);  // the caller reuses its buffer at once
  std::vector<uint8_t> back(kBytes);
  ASSERT_EQ(gpu_->CopyToHost(back.data(), buf.data(), kBytes), KernelStatus::kOk);
  EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0x5a; }));
  cudaFreeHost(pinned);
}

TEST_F(CudaBackendTest, CopyOnDeviceAndItsOverlapCheck) {
  const std::vector<uint8_t> src = Pattern(4096, 9);
  DeviceBuffer buf = Upload(*gpu_, src);
  DeviceBuffer dst = gpu_->Allocate(4096);
  auto* base = static_cast<uint8_t*>(buf.data());
  ASSERT_EQ(gpu_->CopyOnDevice(dst.data(), base + 1000, 3000), KernelStatus::kOk);
  const std::vector<uint8_t> back = Download<uint8_t>(*gpu_, dst.data(), 4096);
  EXPECT_TRUE(std::equal(back.begin(), back.begin() + 3000, src.begin() + 1000));
  EXPECT_TRUE(std::all_of(back.begin() + 3000, back.end(), [](uint8_t b) { return b == 0; }));
  // Overlapping ranges are refused, like the CPU backend refuses them.
  EXPECT_EQ(gpu_->CopyOnDevice(base + 10, base, 100), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu_->CopyOnDevice(base, base + 99, 100), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu_->CopyOnDevice(base + 100, base, 100), KernelStatus::kOk);  // adjacent
  EXPECT_EQ(gpu_->CopyOnDevice(base, nullptr, 1), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu_->CopyOnDevice(base, base, 0), KernelStatus::kOk);
}

TEST_F(CudaBackendTest, ImportWeightsCopiesIntoStorage) {
  const std::vector<uint8_t> weights = Pattern(1 << 16, 1);
  DeviceBuffer storage;
  const void* dev = gpu_->ImportWeights(weights.data(), weights.size(), storage);
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev, storage.data());
  EXPECT_NE(dev, static_cast<const void*>(weights.data()));
  EXPECT_EQ(Download<uint8_t>(*gpu_, dev, weights.size()), weights);
  DeviceBuffer empty_storage;
  EXPECT_NE(gpu_->ImportWeights(weights.data(), 0, empty_storage), nullptr);
  DeviceBuffer none;
  EXPECT_EQ(gpu_->ImportWeights(nullptr, 16, none), nullptr);
}

TEST_F(CudaBackendTest, OutOfMemoryIsAnEmptyHandleAndTheBackendGoesOn) {
  CudaBackend* cuda = AsCudaBackend(gpu_.get());
  ASSERT_NE(cuda, nullptr);
  DeviceBuffer huge = gpu_->Allocate(size_t{1} << 50);  // 1 PiB
  EXPECT_EQ(huge.data(), nullptr);
  EXPECT_NE(cuda->last_error().find("cudaMalloc"), std::string::npos) << cuda->last_error();
  DeviceBuffer storage;
  std::vector<uint8_t> tiny(16);
  // ImportWeights of more than the device holds: null (the host bytes are never read).
  EXPECT_EQ(gpu_->ImportWeights(tiny.data(), size_t{1} << 50, storage), nullptr);
  // The failed allocation does not poison the next op.
  const std::vector<float> ones(64, 1.0f);
  DeviceBuffer a = Upload(*gpu_, ones);
  Mat m{a.floats(), 8, 8, 8};
  EXPECT_EQ(gpu_->Add(m, m), KernelStatus::kOk);
  const std::vector<float> twos = Download<float>(*gpu_, a.data(), 64);
  EXPECT_EQ(twos, std::vector<float>(64, 2.0f));
}

TEST_F(CudaBackendTest, InvalidCallsSayWhichOpRefused) {
  CudaBackend* cuda = AsCudaBackend(gpu_.get());
  ASSERT_NE(cuda, nullptr);
  DeviceBuffer a = gpu_->Allocate(1024);
  Mat x{a.floats(), 4, 16, 16};
  Mat y{a.floats(), 4, 8, 16};
  EXPECT_EQ(gpu_->RmsNorm(x, {}, 1e-6f, y), KernelStatus::kInvalidArgument);
  EXPECT_NE(cuda->last_error().find("RmsNorm"), std::string::npos) << cuda->last_error();
  EXPECT_EQ(gpu_->Synchronize(), KernelStatus::kOk);
}

TEST_F(CudaBackendTest, ScratchThatCannotFitAndMissingDevicesMakeNoBackend) {
  CudaBackendOptions options;
  options.scratch_bytes = size_t{1} << 50;
  std::string error;
  EXPECT_EQ(MakeCudaBackend(options, &error), nullptr);
  EXPECT_NE(error.find("scratch"), std::string::npos) << error;
  options = CudaBackendOptions{};
  options.device = CudaDeviceCount(nullptr);
  error.clear();
  EXPECT_EQ(MakeCudaBackend(options, &error), nullptr);
  EXPECT_FALSE(error.empty());
  options.device = 0;
  options.scratch_bytes = 0;  // no scratch at all is allowed
  error.clear();
  EXPECT_NE(MakeCudaBackend(options, &error), nullptr) << error;
}

TEST_F(CudaBackendTest, BuffersMayOutliveTheirBackend) {
  std::string error;
  std::unique_ptr<Backend> second = MakeCudaBackend(CudaBackendOptions{}, &error);
  ASSERT_NE(second, nullptr) << error;
  DeviceBuffer buf = second->Allocate(4096);
  ASSERT_NE(buf.data(), nullptr);
  second.reset();
  buf = DeviceBuffer();  // freed after the backend: no crash, no error for the other backend
  DeviceBuffer again = gpu_->Allocate(4096);
  EXPECT_NE(again.data(), nullptr);
  EXPECT_TRUE(AsCudaBackend(gpu_.get())->last_error().empty());
}

TEST_F(CudaBackendTest, OpsRunInCallOrderOnTheStream) {
  // x = 1; 200 times x += x without synchronising: 2^200 overflows f32, so use x += y with
  // y = 1 and check the count: each Add must see the previous one's result.
  const int64_t n = 1 << 16;
  DeviceBuffer xb = Upload(*gpu_, std::vector<float>(n, 0.0f));
  DeviceBuffer yb = Upload(*gpu_, std::vector<float>(n, 1.0f));
  Mat x{xb.floats(), 256, 256, 256};
  const Mat y{yb.floats(), 256, 256, 256};
  for (int i = 0; i < 200; ++i) ASSERT_EQ(gpu_->Add(x, y), KernelStatus::kOk);
  // A device copy, then a host copy, still in order.
  DeviceBuffer zb = gpu_->Allocate(n * sizeof(float));
  ASSERT_EQ(gpu_->CopyOnDevice(zb.data(), xb.data(), n * sizeof(float)), KernelStatus::kOk);
  std::vector<float> back(n);
  ASSERT_EQ(gpu_->CopyToHost(back.data(), zb.data(), n * sizeof(float)), KernelStatus::kOk);
  EXPECT_EQ(back, std::vector<float>(n, 200.0f));
}

// --- CUDA graphs ------------------------------------------------------------------------------

TEST_F(CudaBackendTest, CapturedOpsRunOnlyWhenTheGraphLaunches) {
  CudaBackend* cuda = AsCudaBackend(gpu_.get());
  ASSERT_NE(cuda, nullptr);
  const int64_t n = 4096;
  DeviceBuffer xb = Upload(*gpu_, std::vector<float>(n, 0.0f));
  DeviceBuffer ones = Upload(*gpu_, std::vector<float>(n, 1.0f));
  DeviceBuffer twos = Upload(*gpu_, std::vector<float>(n, 2.0f));
  Mat x{xb.floats(), 16, 256, 256};
  const Mat one{ones.floats(), 16, 256, 256};
  const Mat two{twos.floats(), 16, 256, 256};

  ASSERT_EQ(cuda->BeginCapture(), KernelStatus::kOk);
  EXPECT_TRUE(cuda->capturing());
  EXPECT_EQ(cuda->BeginCapture(), KernelStatus::kInvalidArgument);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(gpu_->Add(x, one), KernelStatus::kOk);
  // Not capturable: refused, and the capture goes on.
  std::vector<float> host(n);
  EXPECT_EQ(gpu_->Synchronize(), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu_->CopyToHost(host.data(), xb.data(), 16), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu_->CopyToDevice(xb.data(), host.data(), 16), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu_->Allocate(64).data(), nullptr);
  EXPECT_NE(cuda->last_error().find("capturing"), std::string::npos) << cuda->last_error();
  ASSERT_EQ(cuda->EndCaptureAndLaunch(7), KernelStatus::kOk) << cuda->last_error();
  EXPECT_FALSE(cuda->capturing());
  EXPECT_TRUE(cuda->HasGraph(7));
  EXPECT_EQ(Download<float>(*gpu_, xb.data(), n), std::vector<float>(n, 3.0f));
  EXPECT_EQ(cuda->graph_stats().instantiated, 1);

  // The same kernels with another argument (two instead of one): an in-place update.
  ASSERT_EQ(cuda->BeginCapture(), KernelStatus::kOk);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(gpu_->Add(x, two), KernelStatus::kOk);
  ASSERT_EQ(cuda->EndCaptureAndLaunch(7), KernelStatus::kOk) << cuda->last_error();
  EXPECT_EQ(Download<float>(*gpu_, xb.data(), n), std::vector<float>(n, 9.0f));
  EXPECT_EQ(cuda->graph_stats().instantiated, 1);
  EXPECT_EQ(cuda->graph_stats().updated, 1);

  // Replayed unchanged: + 3 * 2 again.
  ASSERT_EQ(cuda->ReplayGraph(7), KernelStatus::kOk);
  EXPECT_EQ(Download<float>(*gpu_, xb.data(), n), std::vector<float>(n, 15.0f));

  // Another kernel sequence under the same key (four kernels instead of three: another
  // topology, which no update can take): rebuilt, and still right.
  ASSERT_EQ(cuda->BeginCapture(), KernelStatus::kOk);
  ASSERT_EQ(gpu_->Add(x, one), KernelStatus::kOk);
  ASSERT_EQ(gpu_->RmsNorm(x, {}, 0.0f, x), KernelStatus::kOk);  // every value 16: rms 16 -> 1
  ASSERT_EQ(gpu_->Add(x, two), KernelStatus::kOk);
  ASSERT_EQ(gpu_->Add(x, one), KernelStatus::kOk);
  ASSERT_EQ(cuda->EndCaptureAndLaunch(7), KernelStatus::kOk) << cuda->last_error();
  EXPECT_EQ(Download<float>(*gpu_, xb.data(), n), std::vector<float>(n, 4.0f));
  EXPECT_EQ(cuda->graph_stats().instantiated, 2);
  EXPECT_EQ(cuda->graph_stats().launched, 4);

  // A second bucket next to the first.
  ASSERT_EQ(cuda->BeginCapture(), KernelStatus::kOk);
  ASSERT_EQ(gpu_->Add(x, one), KernelStatus::kOk);
  ASSERT_EQ(cuda->EndCaptureAndLaunch(8), KernelStatus::kOk);
  EXPECT_TRUE(cuda->HasGraph(7));
  EXPECT_TRUE(cuda->HasGraph(8));
  EXPECT_EQ(Download<float>(*gpu_, xb.data(), n), std::vector<float>(n, 5.0f));
  cuda->DropGraphs();
  EXPECT_FALSE(cuda->HasGraph(7));
}

TEST_F(CudaBackendTest, AnAbortedCaptureRunsNothing) {
  CudaBackend* cuda = AsCudaBackend(gpu_.get());
  ASSERT_NE(cuda, nullptr);
  DeviceBuffer xb = Upload(*gpu_, std::vector<float>(256, 5.0f));
  Mat x{xb.floats(), 1, 256, 256};
  ASSERT_EQ(cuda->BeginCapture(), KernelStatus::kOk);
  ASSERT_EQ(gpu_->Add(x, x), KernelStatus::kOk);
  // A refused op (bad shape) inside a capture: nothing was recorded for it.
  Mat bad{xb.floats(), 1, 256, 128};
  EXPECT_EQ(gpu_->Add(x, bad), KernelStatus::kInvalidArgument);
  cuda->AbortCapture();
  EXPECT_FALSE(cuda->capturing());
  EXPECT_EQ(Download<float>(*gpu_, xb.data(), 256), std::vector<float>(256, 5.0f));
  EXPECT_EQ(cuda->EndCaptureAndLaunch(1), KernelStatus::kInvalidArgument);
  EXPECT_EQ(cuda->ReplayGraph(1), KernelStatus::kInvalidArgument);
  EXPECT_FALSE(cuda->HasGraph(1));
  // The backend is usable after the abort.
  ASSERT_EQ(gpu_->Add(x, x), KernelStatus::kOk);
  EXPECT_EQ(Download<float>(*gpu_, xb.data(), 256), std::vector<float>(256, 10.0f));
}

}  // namespace
}  // namespace deltaserve::kernels::gpu_test
