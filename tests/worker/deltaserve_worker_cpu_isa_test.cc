// deltaserve-worker and the CPU kernel level (DELTASERVE_CPU_ISA, kernels/cpu/cpu_features.h) as
// a real process: --list-cpu-isas prints the levels this machine supports; a level the machine
// cannot run (or an unknown name) stops the start with exit 2 and the message, before any model
// loads; a started worker logs the level it runs with the CPU's features and exports it on
// /metrics as deltaserve_worker_cpu_isa_info{isa, best}. The variable reaches the child through
// /usr/bin/env, so the test process itself keeps the level it was started with.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "tests/support/child_process.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kEnv = "/usr/bin/env";

// deltaserve-worker serving the tiny golden model on any free port, with DELTASERVE_CPU_ISA set
// to `isa` (unset when nullopt) and `more` arguments.
std::vector<std::string> WorkerArgv(const std::optional<std::string>& isa,
                                    std::vector<std::string> more = {}) {
  std::vector<std::string> argv = {kEnv};
  argv.push_back(isa ? "DELTASERVE_CPU_ISA=" + *isa : "--unset=DELTASERVE_CPU_ISA");
  argv.insert(argv.end(), {BinaryPath("worker/deltaserve-worker"), "--model",
                           "t=" + GoldenPath("tiny-dense-f32.gguf"), "--listen", "127.0.0.1:0",
                           "--ctx", "64", "--ram", "1GiB", "--metrics-port", "0"});
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

std::string Names(const std::vector<kernels::CpuIsa>& isas) {
  std::string out;
  for (kernels::CpuIsa isa : isas) out += std::string(kernels::CpuIsaName(isa)) + "\n";
  return out;
}

TEST(DeltaserveWorkerCpuIsa, ListCpuIsasPrintsTheLevelsThisMachineSupports) {
  const std::string bin = BinaryPath("worker/deltaserve-worker");
  ProcessResult r = RunProcess({bin, "--list-cpu-isas"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, Names(kernels::SupportedIsas()));
  EXPECT_THAT(r.out, ::testing::StartsWith("scalar\n"));
  // Whatever the variable says: it is how a script finds the values it may set.
  r = RunProcess({kEnv, "DELTASERVE_CPU_ISA=avx1024", bin, "--list-cpu-isas"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, Names(kernels::SupportedIsas()));
}

TEST(DeltaserveWorkerCpuIsa, ALevelItCannotRunStopsTheStart) {
  std::vector<std::pair<std::string, std::string>> refused = {
      {"avx1024",
       "deltaserve-worker: DELTASERVE_CPU_ISA=avx1024: unknown CPU kernel level (the levels: "
       "scalar, avx2, avx_vnni, avx512); this machine supports scalar"},
      {"AVX2", "deltaserve-worker: DELTASERVE_CPU_ISA=AVX2: unknown CPU kernel level"}};
  // A level this CPU lacks, where there is one (none on a CPU with AVX-512 and AVX-VNNI).
  for (kernels::CpuIsa isa : kernels::kAllCpuIsas) {
    if (kernels::IsaSupported(isa)) continue;
    const std::string name(kernels::CpuIsaName(isa));
    refused.push_back(
        {name, "deltaserve-worker: DELTASERVE_CPU_ISA=" + name + ": this CPU lacks "});
  }
  for (const auto& [isa, message] : refused) {
    ProcessResult r = RunProcess(WorkerArgv(isa));
    EXPECT_EQ(r.exit_code, 2) << isa << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(message));
    EXPECT_THAT(r.err,
                HasSubstr("(unset: the best, " +
                          std::string(kernels::CpuIsaName(kernels::BestSupportedIsa())) + ")"));
    EXPECT_THAT(r.err, Not(HasSubstr("loading t from")));
    EXPECT_THAT(r.err, Not(HasSubstr("listening on")));
  }
}

// Starts a worker with the variable as given, waits until it listens, and returns its log and
// /metrics.
struct Started {
  std::string log;
  std::string metrics;
};
Started StartAndScrape(const std::optional<std::string>& isa) {
  Started s;
  ChildProcess w(WorkerArgv(isa));
  EXPECT_TRUE(w.started());
  std::optional<std::string> metrics_line = w.WaitForLine("metrics on 127.0.0.1:", seconds(60));
  std::optional<std::string> listening = w.WaitForLine("listening on ", seconds(60));
  EXPECT_TRUE(metrics_line && listening) << w.err();
  if (metrics_line && listening) {
    const std::string port = metrics_line->substr(metrics_line->find("127.0.0.1:") + 10);
    s.metrics = HttpGet(std::stoi(port.substr(0, port.find('/'))), "/metrics");
  }
  s.log = w.err();
  return s;
}

TEST(DeltaserveWorkerCpuIsa, LogsAndExportsTheLevelItRuns) {
  const std::string best(kernels::CpuIsaName(kernels::BestSupportedIsa()));
  const std::string features = kernels::CpuFeatureList(kernels::DetectedCpuFeatures());
  // Unset (and empty): the best level.
  for (const std::optional<std::string>& isa :
       std::vector<std::optional<std::string>>{std::nullopt, std::string()}) {
    const Started s = StartAndScrape(isa);
    EXPECT_THAT(s.log, HasSubstr("deltaserve-worker: CPU kernels: " + best +
                                 " (the best on this CPU; CPU features: " + features + ")\n"));
    EXPECT_THAT(s.metrics, HasSubstr("deltaserve_worker_cpu_isa_info{isa=\"" + best + "\",best=\"" +
                                     best + "\"} 1\n"));
  }
  // Every level this machine supports, by name.
  for (kernels::CpuIsa level : kernels::SupportedIsas()) {
    const std::string name(kernels::CpuIsaName(level));
    const Started s = StartAndScrape(name);
    EXPECT_THAT(s.log, HasSubstr("deltaserve-worker: CPU kernels: " + name +
                                 " (DELTASERVE_CPU_ISA=" + name + "; best on this CPU: " + best +
                                 "; CPU features: " + features + ")\n"));
    EXPECT_THAT(s.metrics, HasSubstr("# TYPE deltaserve_worker_cpu_isa_info gauge\n"
                                     "deltaserve_worker_cpu_isa_info{isa=\"" +
                                     name + "\",best=\"" + best + "\"} 1\n"));
  }
}

}  // namespace
}  // namespace deltaserve::testing
