// Shared pieces of the gpu tests: a fixture holding a CPU backend (the reference) and a CUDA
// backend, which skips every test with the reason when this machine has no usable GPU, and
// helpers that move host vectors into either backend's memory and back.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace deltaserve::kernels::gpu_test {

class GpuBackendTest : public ::testing::Test {
 public:
  // A buffer in `backend` holding `host`.
  template <typename T>
  static DeviceBuffer Upload(Backend& backend, const std::vector<T>& host) {
    DeviceBuffer buf = backend.Allocate(host.size() * sizeof(T) + 1);
    EXPECT_NE(buf.data(), nullptr);
    if (!host.empty()) {
      EXPECT_EQ(backend.CopyToDevice(buf.data(), host.data(), host.size() * sizeof(T)),
                KernelStatus::kOk);
    }
    return buf;
  }
  // `n` values of type T read back from backend memory at `src` (after a Synchronize).
  template <typename T>
  static std::vector<T> Download(Backend& backend, const void* src, size_t n) {
    std::vector<T> host(n);
    EXPECT_EQ(backend.Synchronize(), KernelStatus::kOk);
    if (n != 0) {
      EXPECT_EQ(backend.CopyToHost(host.data(), src, n * sizeof(T)), KernelStatus::kOk);
    }
    return host;
  }

 protected:
  void SetUp() override {
    std::string why;
    if (CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no GPU on this machine: " << why;
    std::string error;
    gpu_ = MakeCudaBackend(CudaBackendOptions{}, &error);
    ASSERT_NE(gpu_, nullptr) << error;
    cpu_ = MakeCpuBackend(2);
  }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> gpu_;
};

}  // namespace deltaserve::kernels::gpu_test
