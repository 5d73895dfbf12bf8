// bench/deltaserve-bench against real servers (label integration): two routers, each in front of
// its own worker on the tiny golden model (A: context 1024, B: context 512), on kernel-chosen
// ports; then tests/integration/deltaserve_bench/deltaserve_bench_check.py runs every workload at
// small sizes against them, `compare`, the Anthropic API and bad arguments, and checks the
// results against the routers' own token counters (the script's docstring lists the checks). The
// soak's fault hook SIGKILLs B's worker, so B goes last.
//
// The interpreter is $DELTASERVE_BENCH_PYTHON, else build/deltaserve-bench-venv/bin/python3 in the
// source tree (`bench/deltaserve-bench --setup` makes it; tests/run_all.sh installs the same pins).
// Without an interpreter that imports the tool's packages the test is SKIPPED with the reason.
#include <unistd.h>

#include <chrono>
#include <string>

#include "gtest/gtest.h"
#include "tests/integration/router_service.h"
#include "tests/integration/sdk_python.h"
#include "tests/support/subprocess.h"

namespace deltaserve {
namespace {

using ::deltaserve::testing::FindSdkPython;
using ::deltaserve::testing::RouterService;
using ::deltaserve::testing::RunProcess;
using ::deltaserve::testing::SdkPython;

TEST(DeltaServeBenchTest, EveryWorkloadAgainstTwoRealServers) {
  const SdkPython py = FindSdkPython(
      "DELTASERVE_BENCH_PYTHON", DELTASERVE_BENCH_DEFAULT_PYTHON,
      "import httpx, matplotlib, numpy, tqdm",
      "bench/deltaserve-bench --setup installs bench/deltaserve_bench/requirements.txt");
  if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;
  const std::string& python = py.path;
  // --snapshot-ram: the multi-turn checks expect cached tokens on later turns.
  RouterService a("", {"--ctx", "1024", "--parallel", "4", "--snapshot-ram", "256MiB"});
  ASSERT_GT(a.port(), 0);
  RouterService b("", {"--ctx", "512", "--parallel", "2"});
  ASSERT_GT(b.port(), 0);

  const std::string out = ::testing::TempDir() + "/deltaserve_bench_" + std::to_string(::getpid());
  // The script bounds itself (signal.alarm(300)) and says where it stopped; this is the backstop.
  const auto run = RunProcess(
      {python, DELTASERVE_BENCH_CHECK_SCRIPT, "--bench", DELTASERVE_BENCH_PROGRAM, "--url-a",
       "http://127.0.0.1:" + std::to_string(a.port()), "--url-b",
       "http://127.0.0.1:" + std::to_string(b.port()), "--ctx-a", "1024", "--worker-b-pid",
       std::to_string(b.worker().pid()), "--out", out},
      std::chrono::seconds(360));
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err << "\n--- router A stderr ---\n"
                              << a.router().err() << "\n--- router B stderr ---\n"
                              << b.router().err();
  if (run.exit_code == 0) RunProcess({"rm", "-rf", out});
}

}  // namespace
}  // namespace deltaserve
