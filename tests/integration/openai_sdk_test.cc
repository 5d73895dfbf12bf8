// The official OpenAI Python SDK against the real router (label integration): starts a worker on
// the tiny golden model and a router with two API keys, then runs
// tests/integration/openai_sdk/openai_sdk_check.py with the SDK's interpreter and requires exit 0
// (the script's output, one PASS / FAIL line per check with the traceback, is printed on failure).
//
// The interpreter is $DELTASERVE_OPENAI_PYTHON, else build/ci-venv/bin/python3 in the source tree
// (tests/run_all.sh creates that venv with `pip install openai==1.x`). Without an interpreter that can
// `import openai` the test is SKIPPED with the reason, so a checkout without the SDK still passes.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "gtest/gtest.h"
#include "tests/integration/router_service.h"
#include "tests/support/subprocess.h"

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

  const auto run = RunProcess({python, DELTASERVE_OPENAI_SDK_SCRIPT, "--base-url",
                               "http://127.0.0.1:" + std::to_string(s.port()) + "/v1", "--api-key",
                               "sk-sdk", "--limited-key", "sk-limited"});
  EXPECT_EQ(run.exit_code, 0) << "openai " << probe.out << run.out << run.err
                              << "\n--- router stderr ---\n"
                              << s.router().err();
}

}  // namespace
}  // namespace deltaserve
