// The official OpenAI Python SDK against the real router (label integration): starts a worker on
// the tiny golden model and a router with two API keys, then runs
// tests/integration/openai_sdk/openai_sdk_check.py with the SDK's interpreter and requires exit 0
// (the script's output, one PASS / FAIL line per check with the traceback, is printed on failure).
//
// The interpreter is $DELTASERVE_OPENAI_PYTHON, else build/ci-venv/bin/python3 in the source tree
// (tests/run_all.sh creates that venv with `pip install openai==1.x`). Without an interpreter that
// can `import openai` the test is SKIPPED with the reason, so a checkout without the SDK still
// passes.
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/router_service.h"
#include "tests/integration/sdk_python.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

using ::deltaserve::testing::FindSdkPython;
using ::deltaserve::testing::RouterService;
using ::deltaserve::testing::RunProcess;
using ::deltaserve::testing::SdkPython;
using ::deltaserve::testing::Sha256HexWithTool;

SdkPython OpenAiPython(const std::string& probe) {
  return FindSdkPython("DELTASERVE_OPENAI_PYTHON", DELTASERVE_OPENAI_SDK_DEFAULT_PYTHON, probe,
                       "pip install openai==1.109.1 jsonschema");
}

TEST(OpenAiSdkTest, OfficialPythonClientAgainstTheRouter) {
  const SdkPython py = OpenAiPython("import openai; print(openai.__version__)");
  if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;

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
  const auto run =
      RunProcess({py.path, DELTASERVE_OPENAI_SDK_SCRIPT, "--base-url", s.base_url() + "/v1",
                  "--api-key", "sk-sdk", "--limited-key", "sk-limited"},
                 std::chrono::seconds(660));
  EXPECT_EQ(run.exit_code, 0) << "openai " << py.probe_out << run.out << run.err << s.Logs();
}

// n > 1 choices (openai_sdk/openai_sdk_choices_check.py): a worker serving "q8"
// (tiny-dense-q8_0.gguf) with 4 parallel sequences and /metrics, the router in front of it.
TEST(OpenAiSdkTest, ChoicesWithTheOfficialClient) {
  const SdkPython py = OpenAiPython("import openai, jsonschema");
  if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;
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
      py.path,         choices_script,
      "--base-url",    s.base_url() + "/v1",
      "--metrics-url", "http://127.0.0.1:" + metrics_port + "/metrics"};
  if (exact) argv.push_back("--exact");
  // The script bounds itself (signal.alarm(600)) and says where it stopped; this is the backstop.
  const auto run = RunProcess(argv, std::chrono::seconds(660));
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err << s.Logs();
}

}  // namespace
}  // namespace deltaserve
