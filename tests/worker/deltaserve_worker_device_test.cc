// deltaserve-worker --device as a real process where no GPU can be used: a CPU-only build says it
// has no CUDA backend; a CUDA build on a machine without a usable GPU says the probe's reason
// (never a silent CPU fallback); bad device names and budget flags that belong to the other kind
// of device are refused. Every refusal exits non-zero before anything listens. --check-args checks
// a GPU command line without opening the device (or reading a file). The GPU side
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
  // In every build: the command line's mistake comes before what the build lacks.
  r = RunWorker({"--device", "cuda:0", "--ram", "8GiB"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err,
              HasSubstr("--ram is the CPU worker's budget; with --device cuda:N use --vram"));
  r = RunWorker({"--overhead", "lots"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--overhead"));
  r = RunWorker({"--cuda-graphs", "maybe"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--cuda-graphs needs on or off"));
}

// --check-args: the worker's own checks of the command line, nothing after them. The files it
// names do not exist here and the device cannot be opened, yet a valid line exits 0; a line the
// worker would refuse exits 2 with the worker's message.
TEST(DeltaserveWorkerDevice, CheckArgsChecksTheCommandLineOnly) {
  const std::string bin = BinaryPath("worker/deltaserve-worker");
  // clang-format off
  const std::vector<std::string> base = {
      bin, "--model", "big=/nonexistent/model.gguf", "--listen", "0.0.0.0:1",
      "--tls-cert", "/nonexistent/tls.crt", "--tls-key", "/nonexistent/tls.key",
      "--auth-secret-file", "/nonexistent/secret", "--check-args"};
  // clang-format on
  auto with = [&base](std::vector<std::string> more) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), more.begin(), more.end());
    return RunProcess(argv);
  };
  ProcessResult r = with({"--device", "cpu", "--ram", "12GiB", "--snapshot-ram", "2GiB"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("the command line is valid (1 model(s) on cpu"));
  EXPECT_THAT(r.err, Not(HasSubstr("loading")));
  // A GPU pool's line: checked on a machine without a GPU, the device never opened.
  r = with({"--device", "cuda:0", "--vram", "70GiB", "--snapshot-ram", "8GiB"});
#if defined(DELTASERVE_HAVE_CUDA)
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("on cuda:0"));
#else
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--device cuda:0: this build has no CUDA backend"));
#endif
  // What the worker refuses, --check-args refuses with the same message.
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--device", "cuda:0", "--ram", "12GiB"},
       "deltaserve-worker: --ram is the CPU worker's budget; with --device cuda:N use --vram"},
      {{"--vram", "8GiB"}, "deltaserve-worker: --vram needs --device cuda:N"},
      {{"--ram", "12 gigs"}, "deltaserve-worker: --ram: size '12 gigs'"},
      {{"--snapshot-ram", "lots"}, "deltaserve-worker: --snapshot-ram: size 'lots'"},
      {{"--redis", "http://r:6379"}, "deltaserve-worker: --redis: "},
      {{"--metrics-port", "70000"}, "deltaserve-worker: --metrics-port needs a port"},
      {{"--parallel", "0"}, "deltaserve-worker: --parallel needs a count >= 1"},
  };
  for (const auto& [more, message] : refused) {
    r = with(more);
    EXPECT_EQ(r.exit_code, 2) << more[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(message));
    EXPECT_THAT(r.out, Not(HasSubstr("valid")));
  }
}

}  // namespace
}  // namespace deltaserve::testing
