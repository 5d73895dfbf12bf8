// The official OpenAI Python SDK against the real router (label integration): starts a worker on
// the tiny golden model and a router with two API keys, then runs
// tests/integration/openai_sdk/openai_sdk_check.py with the SDK's interpreter and requires exit 0
// (the script's output, one PASS / FAIL line per check with the traceback, is printed on failure).
//
// The interpreter is $DELTASERVE_OPENAI_PYTHON, else build/ci-venv/bin/python3 in the source tree
// (tests/run_all.sh creates that venv with `pip install openai==1.x`). Without an interpreter that can
// `import openai` the test is SKIPPED with the reason, so a checkout without the SDK still passes.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/integration/router_service.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

using ::deltaserve::testing::RouterService;
using ::deltaserve::testing::RunProcess;
using ::deltaserve::testing::Sha256HexWithTool;

std::string SdkPython() {
  const char* env = std::getenv("DELTASERVE_OPENAI_PYTHON");
  return env != nullptr && *env != '\0' ? env : DELTASERVE_OPENAI_SDK_DEFAULT_PYTHON;
}

TEST(OpenAiSdkTest, OfficialPythonClientAgainstTheRouter) {
  const std::string python = SdkPython();
  if (::access(python.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "no Python for the OpenAI SDK at " << python
                 << " (set DELTASERVE_OPENAI_PYTHON, or run: python3 -m venv build/ci-venv && "
                    "build/ci-venv/bin/pip install openai==1.109.1)";
  }
  const auto probe = RunProcess({python, "-c", "import openai; print(openai.__version__)"});
  if (probe.exit_code != 0) {
    GTEST_SKIP() << python << " cannot import openai (pip install openai==1.109.1): " << probe.err;
  }

  // "sk-sdk" may use every model; "sk-limited" only a model the worker does not serve, so it gets
  // 403 on "tiny". The digests come from sha256sum, not from the router's own hashing.
  const std::string full = Sha256HexWithTool("sk-sdk");
  const std::string limited = Sha256HexWithTool("sk-limited");
  ASSERT_EQ(full.size(), 64u);
  ASSERT_EQ(limited.size(), 64u);
  std::string config = "api_keys:\n";
  config += "  - name: sdk\n    sha256: " + full + "\n";
  config += "  - name: limited\n    sha256: " + limited + "\n    models: [other-model]\n";
  RouterService s(config);
  ASSERT_GT(s.port(), 0);

  // The script bounds itself (signal.alarm(600)) and says where it stopped; this is the backstop.
  const auto run = RunProcess({python, DELTASERVE_OPENAI_SDK_SCRIPT, "--base-url",
                               "http://127.0.0.1:" + std::to_string(s.port()) + "/v1", "--api-key",
                               "sk-sdk", "--limited-key", "sk-limited"},
                              std::chrono::seconds(660));
  EXPECT_EQ(run.exit_code, 0) << "openai " << probe.out << run.out << run.err
                              << "\n--- router stderr ---\n"
                              << s.router().err();
}

// n > 1 choices (openai_sdk/openai_sdk_choices_check.py): a worker serving "q8"
// (tiny-dense-q8_0.gguf) with 4 parallel sequences and /metrics, the router in front of it.
TEST(OpenAiSdkTest, ChoicesWithTheOfficialClient) {
  const std::string python = SdkPython();
  if (::access(python.c_str(), X_OK) != 0 ||
      RunProcess({python, "-c", "import openai, jsonschema"}).exit_code != 0) {
    GTEST_SKIP() << python << " cannot import openai and jsonschema (tests/run_all.sh)";
  }
  RouterService s("", {"--parallel", "4", "--model",
                       "q8=" + ::deltaserve::testing::GoldenPath("tiny-dense-q8_0.gguf"),
                       "--metrics-port", "0"});
  ASSERT_GT(s.port(), 0);
  const std::string err = s.worker().err();
  const size_t at = err.find("metrics on 127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << err;
  const std::string metrics_port = err.substr(at + 21, err.find('/', at) - (at + 21));
  // Each choice equals its one-choice request token for token where a Q8_0 batch row has the
  // bits of that row alone: the fused batch kernel of AVX-512 VNNI (scheduler_fork_test).
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::stringstream flags;
  flags << cpuinfo.rdbuf();
  const bool exact = flags.str().find(" avx512_vnni") != std::string::npos;
  const std::string script = std::string(DELTASERVE_OPENAI_SDK_SCRIPT);
  const std::string choices_script =
      script.substr(0, script.rfind('/') + 1) + "openai_sdk_choices_check.py";
  std::vector<std::string> argv = {
      python, choices_script, "--base-url",
      "http://127.0.0.1:" + std::to_string(s.port()) + "/v1", "--metrics-url",
      "http://127.0.0.1:" + metrics_port + "/metrics"};
  if (exact) argv.push_back("--exact");
  // The script bounds itself (signal.alarm(600)) and says where it stopped; this is the backstop.
  const auto run = RunProcess(argv, std::chrono::seconds(660));
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err << "\n--- router stderr ---\n"
                              << s.router().err() << "\n--- worker stderr ---\n"
                              << s.worker().err();
}

}  // namespace
}  // namespace deltaserve
