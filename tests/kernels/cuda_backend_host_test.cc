// CudaBackend's host logic (kernels/cuda/cuda_backend.cu, cuda_backend_graph.cu) compiled by the
// host compiler against a simulated CUDA runtime (tests/kernels/cuda_runtime_mock: device
// memory is host memory, errors and the current device are tracked, capture records instead of
// running) with stub launchers, so that without a GPU we check: the probe and the factory
// (missing device, out-of-range device, a scratch area that does not fit, nothing leaked), the
// LaunchContext the launchers get, zero-filled allocations, the copies (overlap refused, pinned
// sources waited for, pageable ones not), ImportWeights, out of memory (an empty handle, the
// CUDA text kept, the runtime's error state cleared so the next op is not blamed), frees on the
// buffer's own device after the backend is gone, two backends on two devices from one thread,
// the errors' texts, and graph capture (recorded ops run only at launch, refusals keep the
// capture valid, update vs rebuild of the cached graph, a broken capture, abort). Expected
// values are the bytes the test wrote or counts of simulated runtime calls.
#include <cuda_runtime.h>  // the mock: this target's include path puts it first

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.cu"        // NOLINT: the backend itself, built against the mock
#include "kernels/cuda/cuda_backend_graph.cu"  // NOLINT
#include "kernels/cuda/elementwise_checks.h"

// --- stub launchers: the checks of the real ones, work as mock stream work --------------------
namespace deltaserve::kernels::cuda {

LaunchContext last_context;
// What a launcher returns after enqueueing: the runtime's error state, as the real ones do.
KernelStatus Launch(const LaunchContext& ctx, KernelStatus check, std::function<void()> work) {
  if (check != KernelStatus::kOk) return check;
  last_context = ctx;
  EXPECT_EQ(mock_cuda::S().current_device, ctx.device) << "launch on another device's stream";
  mock_cuda::Enqueue(ctx.stream, std::move(work));
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kDeviceError;
}

KernelStatus LaunchAdd(const LaunchContext& ctx, Mat& x, const Mat& y) {
  const Mat xv = x, yv = y;
  return Launch(ctx, CheckAdd(x, y), [xv, yv] {
    for (int64_t r = 0; r < xv.rows; ++r) {
      for (int64_t c = 0; c < xv.cols; ++c)
        xv.data[r * xv.stride + c] += yv.data[r * yv.stride + c];
    }
  });
}
KernelStatus LaunchRmsNorm(const LaunchContext& ctx, const Mat& x, Vec w, float, Mat& y) {
  return Launch(ctx, CheckRmsNorm(x, w, y), [] {});
}
// Needs 1 MiB of scratch (to see kOutOfMemory reported).
KernelStatus LaunchMatMul(const LaunchContext& ctx, const WeightView&, const Mat&, Mat&) {
  return ctx.scratch_bytes < (size_t{1} << 20) ? KernelStatus::kOutOfMemory
                                               : Launch(ctx, KernelStatus::kOk, [] {});
}
// A launcher breaking the contract: it allocates (which a capture cannot contain).
KernelStatus LaunchGetRows(const LaunchContext& ctx, const WeightView&, const int32_t*, int64_t,
                           Mat&) {
  void* p = nullptr;
  if (cudaMalloc(&p, 16) == cudaSuccess) cudaFree(p);
  return Launch(ctx, KernelStatus::kOk, [] {});
}
KernelStatus LaunchMatMulGroup(const LaunchContext&, const WeightView*, int, const Mat&, Mat*) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchMoeFfn(const LaunchContext&, const Mat&, const int32_t*, const float*, int64_t,
                          const WeightView&, const WeightView&, const WeightView&, Mat&) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchStoreKv(const LaunchContext&, const Mat&, const Mat&, const PagedKvView&,
                           int64_t) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchPagedAttention(const LaunchContext&, const Mat&, const PagedKvView&, int64_t,
                                  int64_t, int64_t, float, Mat&) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchGatedDeltaRule(const LaunchContext&, const Mat&, const Mat&, const Mat&,
                                  const Mat&, const Mat&, int64_t, int64_t, int64_t, float*, Mat&) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchDeltaNetDecodeStep(const LaunchContext&, const DeltaNetStep&) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchL2Norm(const LaunchContext&, Mat&, int64_t, float) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchCopy(const LaunchContext&, const Mat&, Mat&) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchSwiGlu(const LaunchContext&, const Mat&, const Mat&, Mat&) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchMulSigmoid(const LaunchContext&, Mat&, const Mat&) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchRopeNeox(const LaunchContext&, Mat&, const int32_t*, int64_t, int64_t, float) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchCausalConv1dSilu(const LaunchContext&, const Mat&, const float*, int64_t, float*,
                                    Mat&) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchGatedRmsNorm(const LaunchContext&, const Mat&, Vec, const Mat&, float, Mat&) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchDeltaNetGates(const LaunchContext&, Mat&, Mat&, Vec, Vec) {
  return KernelStatus::kUnsupportedType;
}
KernelStatus LaunchMoeRoute(const LaunchContext&, const Mat&, int64_t, int32_t*, float*) {
  return KernelStatus::kUnsupportedType;
}

}  // namespace deltaserve::kernels::cuda

namespace deltaserve::kernels {
namespace {

class CudaBackendHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mock_cuda::Reset(2);
    current_device = -1;  // the backend's per-thread cache, as on a fresh thread
  }
  void TearDown() override { EXPECT_EQ(mock_cuda::S().frees_on_wrong_device, 0); }

  static std::unique_ptr<CudaBackend> Make(int device = 0, size_t scratch = size_t{1} << 20) {
    CudaBackendOptions options;
    options.device = device;
    options.scratch_bytes = scratch;
    std::string error;
    std::unique_ptr<CudaBackend> backend = CudaBackend::Create(options, &error);
    EXPECT_NE(backend, nullptr) << error;
    return backend;
  }
  static std::vector<float> Floats(const void* p, size_t n) {
    const auto* f = static_cast<const float*>(p);
    return std::vector<float>(f, f + n);
  }
};

TEST_F(CudaBackendHostTest, NoDeviceMissingDeviceAndScratchThatDoesNotFit) {
  mock_cuda::Reset(0);
  std::string why;
  EXPECT_EQ(CudaDeviceCount(&why), 0);
  EXPECT_NE(why.find("cudaErrorNoDevice"), std::string::npos) << why;
  std::string error;
  EXPECT_EQ(MakeCudaBackend(CudaBackendOptions{}, &error), nullptr);
  EXPECT_NE(error.find("cudaErrorNoDevice"), std::string::npos) << error;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the probe left an error behind";

  mock_cuda::Reset(2);
  CudaBackendOptions options;
  options.device = 2;
  EXPECT_EQ(MakeCudaBackend(options, &error), nullptr);
  EXPECT_NE(error.find("cuda:2 does not exist (2 devices)"), std::string::npos) << error;
  options.device = -1;
  EXPECT_EQ(MakeCudaBackend(options, &error), nullptr);

  options.device = 1;
  options.scratch_bytes = size_t{2} << 30;  // the mock device has 1 GiB
  EXPECT_EQ(MakeCudaBackend(options, &error), nullptr);
  EXPECT_NE(error.find("scratch"), std::string::npos) << error;
  EXPECT_NE(error.find("cuda:1"), std::string::npos) << error;
  EXPECT_NE(error.find("cudaErrorMemoryAllocation"), std::string::npos) << error;
  EXPECT_EQ(mock_cuda::S().streams, 0) << "the failed backend's stream leaked";
  EXPECT_TRUE(mock_cuda::S().allocations.empty());
}

TEST_F(CudaBackendHostTest, DeviceInfoAndTheLaunchContext) {
  std::unique_ptr<CudaBackend> gpu = Make(1);
  EXPECT_EQ(gpu->name(), "cuda:1");
  EXPECT_EQ(gpu->device_info().name, "Mock GPU 1");
  EXPECT_EQ(gpu->device_info().sm_count, 132);
  EXPECT_EQ(gpu->device_info().total_bytes, size_t{1} << 30);
  EXPECT_EQ(gpu->device_info().free_bytes, size_t{1} << 30);  // queried before the scratch
  DeviceBuffer a = gpu->Allocate(64 * sizeof(float));
  Mat x{a.floats(), 4, 16, 16};
  ASSERT_EQ(gpu->Add(x, x), KernelStatus::kOk);
  const cuda::LaunchContext& ctx = cuda::last_context;
  EXPECT_EQ(ctx.device, 1);
  EXPECT_EQ(ctx.sm_count, 132);
  EXPECT_EQ(ctx.cc_major, 9);
  EXPECT_EQ(ctx.cc_minor, 0);
  EXPECT_EQ(ctx.scratch_bytes, size_t{1} << 20);
  ASSERT_NE(ctx.scratch, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ctx.scratch) % 256, 0u);
  EXPECT_NE(ctx.stream, nullptr);
}

TEST_F(CudaBackendHostTest, AllocationsAreZeroFilledAndOutOfMemoryIsReportedOnce) {
  std::unique_ptr<CudaBackend> gpu = Make();
  DeviceBuffer a = gpu->Allocate(1000);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.bytes(), 1000u);
  const auto* bytes = static_cast<const uint8_t*>(a.data());
  EXPECT_TRUE(std::all_of(bytes, bytes + 1000, [](uint8_t b) { return b == 0; }));
  EXPECT_NE(gpu->Allocate(0).data(), nullptr);

  DeviceBuffer huge = gpu->Allocate(size_t{2} << 30);
  EXPECT_EQ(huge.data(), nullptr);
  EXPECT_NE(gpu->last_error().find("cudaMalloc(2147483648 bytes): cudaErrorMemoryAllocation"),
            std::string::npos)
      << gpu->last_error();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failed cudaMalloc would blame the next op";
  Mat x{a.floats(), 1, 16, 16};
  EXPECT_EQ(gpu->Add(x, x), KernelStatus::kOk);
  DeviceBuffer storage;
  std::vector<uint8_t> host(16);
  EXPECT_EQ(gpu->ImportWeights(host.data(), size_t{2} << 30, storage), nullptr);
  EXPECT_EQ(storage.data(), nullptr);
}

TEST_F(CudaBackendHostTest, CopiesOverlapPinnedSourcesAndImportWeights) {
  std::unique_ptr<CudaBackend> gpu = Make();
  const std::vector<float> src = {1, 2, 3, 4, 5, 6, 7, 8};
  DeviceBuffer a = gpu->Allocate(src.size() * sizeof(float));
  const int syncs = mock_cuda::S().syncs;
  ASSERT_EQ(gpu->CopyToDevice(a.data(), src.data(), 32), KernelStatus::kOk);
  EXPECT_EQ(mock_cuda::S().syncs, syncs) << "a pageable source needs no wait";
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 32), cudaSuccess);
  std::memcpy(pinned, src.data(), 32);
  ASSERT_EQ(gpu->CopyToDevice(a.data(), pinned, 32), KernelStatus::kOk);
  EXPECT_EQ(mock_cuda::S().syncs, syncs + 1) << "a pinned source must be waited for";
  cudaFreeHost(pinned);
  std::vector<float> back(8);
  ASSERT_EQ(gpu->CopyToHost(back.data(), a.data(), 32), KernelStatus::kOk);
  EXPECT_EQ(back, src);
  EXPECT_EQ(mock_cuda::S().syncs, syncs + 2) << "CopyToHost returns valid data: it waits";

  auto* base = static_cast<uint8_t*>(a.data());
  EXPECT_EQ(gpu->CopyOnDevice(base + 4, base, 8), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu->CopyOnDevice(base, base + 7, 8), KernelStatus::kInvalidArgument);
  ASSERT_EQ(gpu->CopyOnDevice(base + 16, base, 16), KernelStatus::kOk);
  EXPECT_EQ(Floats(a.data(), 8), (std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4}));
  EXPECT_EQ(gpu->CopyToDevice(nullptr, src.data(), 4), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu->CopyToHost(back.data(), nullptr, 4), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu->CopyOnDevice(nullptr, nullptr, 0), KernelStatus::kOk);

  DeviceBuffer storage;
  const void* w = gpu->ImportWeights(src.data(), 32, storage);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w, storage.data());
  EXPECT_NE(w, static_cast<const void*>(src.data()));
  EXPECT_EQ(Floats(w, 8), src);
  DeviceBuffer none;
  EXPECT_EQ(gpu->ImportWeights(nullptr, 8, none), nullptr);
}

TEST_F(CudaBackendHostTest, BuffersAreFreedOnTheirDeviceAfterTheBackendIsGone) {
  std::unique_ptr<CudaBackend> gpu0 = Make(0);
  std::unique_ptr<CudaBackend> gpu1 = Make(1);
  DeviceBuffer a0 = gpu0->Allocate(256);
  DeviceBuffer a1 = gpu1->Allocate(256);
  // One thread alternating between two backends: each launch finds its own device current
  // (checked by the stub launcher).
  Mat x0{a0.floats(), 1, 64, 64}, x1{a1.floats(), 1, 64, 64};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(gpu0->Add(x0, x0), KernelStatus::kOk);
    ASSERT_EQ(gpu1->Add(x1, x1), KernelStatus::kOk);
  }
  gpu1.reset();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  a1 = DeviceBuffer();  // freed on device 1 (TearDown checks), device 0 current again after
  EXPECT_EQ(mock_cuda::S().current_device, 0);
  ASSERT_EQ(gpu0->Add(x0, x0), KernelStatus::kOk);
  a0 = DeviceBuffer();
  gpu0.reset();
  EXPECT_TRUE(mock_cuda::S().allocations.empty()) << "scratch or buffers leaked";
  EXPECT_EQ(mock_cuda::S().streams, 0);
}

TEST_F(CudaBackendHostTest, ErrorTextsNameTheOp) {
  std::unique_ptr<CudaBackend> gpu = Make(0, 1024);  // too little scratch for the stub MatMul
  DeviceBuffer a = gpu->Allocate(1024);
  Mat x{a.floats(), 4, 16, 16}, y{a.floats(), 4, 8, 16};
  EXPECT_EQ(gpu->RmsNorm(x, {}, 1e-6f, y), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu->last_error(), "RmsNorm: invalid argument");
  EXPECT_EQ(gpu->MatMul(WeightView{}, x, x), KernelStatus::kOutOfMemory);
  EXPECT_EQ(gpu->last_error(), "MatMul: out of memory (scratch area too small)");
  EXPECT_EQ(gpu->MoeFfn(x, nullptr, nullptr, 1, {}, {}, {}, x), KernelStatus::kUnsupportedType);
  EXPECT_EQ(gpu->last_error(), "MoeFfn: unsupported weight type");
}

TEST_F(CudaBackendHostTest, GraphCaptureUpdateRebuildReplayAndAbort) {
  std::unique_ptr<CudaBackend> gpu = Make();
  DeviceBuffer xb = gpu->Allocate(16 * sizeof(float));
  DeviceBuffer ob = gpu->Allocate(16 * sizeof(float));
  Mat x{xb.floats(), 1, 16, 16};
  Mat one{ob.floats(), 1, 16, 16};
  std::fill(ob.floats(), ob.floats() + 16, 1.0f);

  ASSERT_EQ(gpu->BeginCapture(), KernelStatus::kOk);
  EXPECT_EQ(gpu->BeginCapture(), KernelStatus::kInvalidArgument);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(gpu->Add(x, one), KernelStatus::kOk);
  EXPECT_EQ(xb.floats()[0], 0.0f) << "a recorded op ran";
  std::vector<float> host(16);
  EXPECT_EQ(gpu->Synchronize(), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu->CopyToHost(host.data(), xb.data(), 64), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu->CopyToDevice(xb.data(), host.data(), 64), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu->Allocate(64).data(), nullptr);
  DeviceBuffer storage;
  EXPECT_EQ(gpu->ImportWeights(host.data(), 64, storage), nullptr);
  EXPECT_EQ(gpu->last_error(), "ImportWeights: not allowed while capturing a graph");
  ASSERT_EQ(gpu->EndCaptureAndLaunch(3), KernelStatus::kOk) << gpu->last_error();
  EXPECT_EQ(Floats(xb.data(), 16), std::vector<float>(16, 3.0f));
  EXPECT_EQ(gpu->graph_stats().instantiated, 1);

  // Same sequence: updated in place; a device-to-device copy is capturable.
  ASSERT_EQ(gpu->BeginCapture(), KernelStatus::kOk);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(gpu->Add(x, x), KernelStatus::kOk);
  ASSERT_EQ(gpu->EndCaptureAndLaunch(3), KernelStatus::kOk);
  EXPECT_EQ(Floats(xb.data(), 16), std::vector<float>(16, 24.0f));
  EXPECT_EQ(gpu->graph_stats().updated, 1);
  EXPECT_EQ(gpu->graph_stats().instantiated, 1);
  ASSERT_EQ(gpu->ReplayGraph(3), KernelStatus::kOk);
  EXPECT_EQ(Floats(xb.data(), 16), std::vector<float>(16, 192.0f));

  ASSERT_EQ(gpu->BeginCapture(), KernelStatus::kOk);
  ASSERT_EQ(gpu->CopyOnDevice(xb.data(), ob.data(), 64), KernelStatus::kOk);
  ASSERT_EQ(gpu->EndCaptureAndLaunch(3), KernelStatus::kOk);  // 1 node instead of 3: rebuilt
  EXPECT_EQ(Floats(xb.data(), 16), std::vector<float>(16, 1.0f));
  EXPECT_EQ(gpu->graph_stats().instantiated, 2);
  EXPECT_EQ(gpu->graph_stats().launched, 4);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failed update was left in the error state";

  // Aborted: nothing runs, nothing is cached.
  ASSERT_EQ(gpu->BeginCapture(), KernelStatus::kOk);
  ASSERT_EQ(gpu->Add(x, one), KernelStatus::kOk);
  gpu->AbortCapture();
  EXPECT_FALSE(gpu->capturing());
  EXPECT_EQ(Floats(xb.data(), 16), std::vector<float>(16, 1.0f));
  EXPECT_EQ(gpu->ReplayGraph(4), KernelStatus::kInvalidArgument);
  EXPECT_EQ(gpu->EndCaptureAndLaunch(4), KernelStatus::kInvalidArgument);

  // A launcher that does something uncapturable breaks the capture: EndCaptureAndLaunch says
  // so, nothing runs, and the next capture works.
  ASSERT_EQ(gpu->BeginCapture(), KernelStatus::kOk);
  ASSERT_EQ(gpu->Add(x, one), KernelStatus::kOk);
  Mat rows{xb.floats(), 0, 16, 16};
  gpu->GetRows(WeightView{}, nullptr, 0, rows);
  EXPECT_EQ(gpu->EndCaptureAndLaunch(5), KernelStatus::kDeviceError);
  EXPECT_NE(gpu->last_error().find("cudaStreamEndCapture"), std::string::npos) << gpu->last_error();
  EXPECT_FALSE(gpu->HasGraph(5));
  EXPECT_EQ(Floats(xb.data(), 16), std::vector<float>(16, 1.0f));
  ASSERT_EQ(gpu->BeginCapture(), KernelStatus::kOk);
  ASSERT_EQ(gpu->Add(x, one), KernelStatus::kOk);
  ASSERT_EQ(gpu->EndCaptureAndLaunch(5), KernelStatus::kOk);
  EXPECT_EQ(Floats(xb.data(), 16), std::vector<float>(16, 2.0f));
  gpu->DropGraphs();
  EXPECT_FALSE(gpu->HasGraph(3));

  // Destroyed mid-capture: the capture is ended (buffers are freed after it: a free during a
  // capture would break it), nothing leaks.
  ASSERT_EQ(gpu->BeginCapture(), KernelStatus::kOk);
  gpu.reset();
  EXPECT_EQ(mock_cuda::S().capturing, nullptr);
  EXPECT_EQ(mock_cuda::S().streams, 0);
  xb = DeviceBuffer();
  ob = DeviceBuffer();
  EXPECT_TRUE(mock_cuda::S().allocations.empty());
}

// The Backend interface's step capture (what the engine calls): End builds or updates the graph
// without running it, Launch runs it, the stats are graph_stats(); a spoilt capture ends
// without a graph and the same ops then run uncaptured.
TEST_F(CudaBackendHostTest, StepCaptureThroughTheBackendInterface) {
  std::unique_ptr<CudaBackend> gpu = Make();
  Backend& b = *gpu;
  DeviceBuffer xb = b.Allocate(16 * sizeof(float));
  DeviceBuffer ob = b.Allocate(16 * sizeof(float));
  Mat x{xb.floats(), 1, 16, 16};
  Mat one{ob.floats(), 1, 16, 16};
  std::fill(ob.floats(), ob.floats() + 16, 1.0f);
  EXPECT_TRUE(b.SupportsStepCapture());
  EXPECT_EQ(b.LaunchStepGraph(1), KernelStatus::kInvalidArgument);  // no graph yet

  ASSERT_EQ(b.BeginStepCapture(), KernelStatus::kOk);
  ASSERT_EQ(b.Add(x, one), KernelStatus::kOk);
  ASSERT_EQ(b.Add(x, one), KernelStatus::kOk);
  ASSERT_EQ(b.EndStepCapture(1), KernelStatus::kOk) << gpu->last_error();
  EXPECT_EQ(Floats(xb.data(), 16), std::vector<float>(16, 0.0f)) << "End ran the graph";
  ASSERT_EQ(b.LaunchStepGraph(1), KernelStatus::kOk);
  EXPECT_EQ(Floats(xb.data(), 16), std::vector<float>(16, 2.0f));
  ASSERT_EQ(b.BeginStepCapture(), KernelStatus::kOk);
  ASSERT_EQ(b.Add(x, x), KernelStatus::kOk);
  ASSERT_EQ(b.Add(x, one), KernelStatus::kOk);
  ASSERT_EQ(b.EndStepCapture(1), KernelStatus::kOk);
  ASSERT_EQ(b.LaunchStepGraph(1), KernelStatus::kOk);
  EXPECT_EQ(Floats(xb.data(), 16), std::vector<float>(16, 5.0f));
  Backend::StepGraphStats s = b.step_graph_stats();
  EXPECT_EQ(s.instantiated, 1);
  EXPECT_EQ(s.updated, 1);
  EXPECT_EQ(s.launched, 2);

  // Spoilt by an uncapturable launcher (the stub GetRows allocates): no graph, nothing ran.
  ASSERT_EQ(b.BeginStepCapture(), KernelStatus::kOk);
  ASSERT_EQ(b.Add(x, one), KernelStatus::kOk);
  Mat rows{xb.floats(), 0, 16, 16};
  b.GetRows(WeightView{}, nullptr, 0, rows);
  EXPECT_EQ(b.EndStepCapture(2), KernelStatus::kDeviceError);
  EXPECT_FALSE(gpu->capturing());
  EXPECT_EQ(b.LaunchStepGraph(2), KernelStatus::kInvalidArgument);
  EXPECT_EQ(Floats(xb.data(), 16), std::vector<float>(16, 5.0f));
  // Aborted: nothing runs; the uncaptured op does.
  ASSERT_EQ(b.BeginStepCapture(), KernelStatus::kOk);
  ASSERT_EQ(b.Add(x, one), KernelStatus::kOk);
  b.AbortStepCapture();
  ASSERT_EQ(b.Add(x, one), KernelStatus::kOk);
  ASSERT_EQ(b.Synchronize(), KernelStatus::kOk);
  EXPECT_EQ(Floats(xb.data(), 16), std::vector<float>(16, 6.0f));
  EXPECT_EQ(b.step_graph_stats().launched, 2);
}

}  // namespace
}  // namespace deltaserve::kernels
