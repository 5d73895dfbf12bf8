// deltaserve-worker --device as a real process where no GPU can be used: a CPU-only build says it
// has no CUDA backend; a CUDA build on a machine without a usable GPU says the probe's reason
// (never a silent CPU fallback); bad device names and budget flags that belong to the other kind
// of device are refused. Every refusal exits non-zero before anything listens. The GPU side
// (serving on cuda:0, --vram over the free memory, cuda:N past the last device) is in
// tests/gpu/cuda_worker_test.cc.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

#if defined(DELTASERVE_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace deltaserve::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ProcessResult RunWorker(std::vector<std::string> args) {
  args.insert(args.begin(), {BinaryPath("worker/deltaserve-worker"), "--model",
                             "t=" + GoldenPath("tiny-dense-f32.gguf"), "--listen", "127.0.0.1:0"});
  return RunProcess(args);
}

TEST(DeltaserveWorkerDevice, CudaWithoutAUsableGpuIsRefusedWithTheReason) {
#if defined(DELTASERVE_HAVE_CUDA)
  std::string why;
  if (kernels::CudaDeviceCount(&why) > 0) {
    GTEST_SKIP() << "this machine has a GPU: tests/gpu/cuda_worker_test.cc serves on it";
  }
  ProcessResult r = RunWorker({"--device", "cuda:0"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--device cuda:0: " + why));
#else
  ProcessResult r = RunWorker({"--device", "cuda:0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--device cuda:0: this build has no CUDA backend (configure with "
                               "nvcc present)"));
#endif
  EXPECT_THAT(r.err, Not(HasSubstr("listening on")));
  EXPECT_THAT(r.err, Not(HasSubstr("loading t from")));
}

TEST(DeltaserveWorkerDevice, BadDevicesAndMismatchedBudgetsAreRefused) {
  ProcessResult r = RunWorker({"--device", "gpu0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--device gpu0: use cpu, cuda or cuda:N (N a device number)"));
  r = RunWorker({"--device", "cuda:-1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("use cpu, cuda or cuda:N"));
  r = RunWorker({"--device", "cpu", "--vram", "8GiB"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--vram needs --device cuda:N"));
#if defined(DELTASERVE_HAVE_CUDA)
  r = RunWorker({"--device", "cuda:0", "--ram", "8GiB"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err,
              HasSubstr("--ram is the CPU worker's budget; with --device cuda:N use --vram"));
#endif
  r = RunWorker({"--overhead", "lots"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--overhead"));
  r = RunWorker({"--cuda-graphs", "maybe"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--cuda-graphs needs on or off"));
}

}  // namespace
}  // namespace deltaserve::testing
