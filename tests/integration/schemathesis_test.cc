// schemathesis against the real router, checked against docs/openapi.yaml (label integration).
// Starts a worker on the tiny golden model and a router that serves it as "qwen3.5-4b" (the model
// named in the description's request examples, so the examples phase reaches real generations,
// JSON and SSE), then runs tests/integration/schemathesis/schemathesis_check.py, which drives the
// schemathesis CLI with a fixed seed, one worker and a bounded number of examples per operation,
// and requires exit 0: no 5xx, every status, content type, header and body (each SSE event
// included) as the description says, invalid bodies refused with 400, 405 with Allow; and the
// statuses each mode is meant to reach actually reached (docs/testing.md, "schemathesis").
//
//   NoApiKeys: a router without keys: 200 on every operation, JSON and SSE, 400, 404.
//   WithApiKeys: a router with a key limited to qwen3.5-4b, 6 requests per minute and 1 request
//     in flight: with the key 200, 403 (other models), 429 with Retry-After; without it 401.
//
// The interpreter is $DELTASERVE_SCHEMATHESIS_PYTHON, else build/ci-venv/bin/python3 in the source
// tree (tests/run_all.sh installs schemathesis==4.32.5 there). Without an interpreter that can
// `import schemathesis` the test is SKIPPED with the reason.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

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
using ::deltaserve::testing::Sha256HexWithTool;

// Examples per operation and phase; with the seed this keeps a run to 10–20 s of requests
// on the 2-core build machine and the schemathesis output reproducible.
constexpr int kMaxExamples = 100;
constexpr int kSeed = 17;

// The description's examples ask for "qwen3.5-4b"; the worker serves the golden model as "tiny".
constexpr char kModels[] = "models:\n  - name: qwen3.5-4b\n    served_name: tiny\n";

SdkPython SchemathesisPython() {
  return FindSdkPython("DELTASERVE_SCHEMATHESIS_PYTHON", DELTASERVE_SCHEMATHESIS_DEFAULT_PYTHON,
                       "import schemathesis; print(schemathesis.__version__)",
                       "pip install schemathesis==4.32.5");
}

void RunCheck(const std::string& python, RouterService& service, const std::string& mode,
              const std::string& api_key) {
  const std::string out =
      ::testing::TempDir() + "/schemathesis_" + mode + "_" + std::to_string(::getpid());
  std::vector<std::string> argv = {
      python,           DELTASERVE_SCHEMATHESIS_SCRIPT,
      "--spec",         DELTASERVE_OPENAPI_SPEC,
      "--url",          "http://127.0.0.1:" + std::to_string(service.port()),
      "--mode",         mode,
      "--out",          out,
      "--max-examples", std::to_string(kMaxExamples),
      "--seed",         std::to_string(kSeed)};
  if (!api_key.empty()) {
    argv.push_back("--api-key");
    argv.push_back(api_key);
  }
  // Up to two schemathesis runs of at most 20 minutes each (schemathesis_check.py); a busy
  // machine has taken 15 for both.
  const auto run = RunProcess(argv, std::chrono::minutes(24));
  EXPECT_FALSE(run.timed_out) << "schemathesis_check.py (" << mode << ") did not finish in 24 min";
  // The figures for the log (docs/testing.md quotes them): test cases, statuses per operation.
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" generated, ") != std::string::npos ||
        line.find("requests, statuses") != std::string::npos) {
      std::cout << line << "\n";
    }
  }
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err << service.Logs();
  // The router is still up after every request (a crash would also show as failed requests).
  EXPECT_EQ(service.router().Wait(std::chrono::milliseconds(0)), std::nullopt)
      << service.router().err();
}

TEST(SchemathesisTest, NoApiKeys) {
  const SdkPython py = SchemathesisPython();
  if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;
  RouterService s(kModels);
  ASSERT_GT(s.port(), 0);
  RunCheck(py.path, s, "open", "");
}

TEST(SchemathesisTest, WithApiKeys) {
  const SdkPython py = SchemathesisPython();
  if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;
  // The digest comes from sha256sum, not from the router's own hashing.
  const std::string digest = Sha256HexWithTool("sk-schemathesis");
  ASSERT_EQ(digest.size(), 64u);
  // 60 a minute: the ~40 s run sends hundreds of valid bodies, so 429s come for sure, while
  // each of the three POST operations still gets some budget whatever order the generated
  // cases take (6 a minute let chat and completions use it all up before /v1/responses).
  std::string config = kModels;
  config += "api_keys:\n  - name: schemathesis\n    sha256: " + digest +
            "\n    models: [qwen3.5-4b]\n    requests_per_minute: 60\n"
            "    max_concurrent_requests: 1\n";
  RouterService s(config);
  ASSERT_GT(s.port(), 0);
  RunCheck(py.path, s, "keyed", "sk-schemathesis");
}

}  // namespace
}  // namespace deltaserve
