// The official Anthropic Python SDK (PyPI `anthropic`) against the real router (label
// integration): a worker on the tiny golden model behind a router with two API keys and the alias
// claude-test -> tiny (plain and streamed messages, stop sequences, count_tokens, errors as the
// SDK's typed exceptions), and deltaserve-scripted-worker (the ScriptedWorker TEST DOUBLE as a
// process, replaying Qwen3.5-format outputs) behind a second router, for a deterministic tool_use
// round trip and thinking blocks. The script is tests/integration/anthropic_sdk/
// anthropic_sdk_check.py.
//
// The interpreter is $DELTASERVE_OPENAI_PYTHON, else build/ci-venv/bin/python3 (tests/run_all.sh
// installs anthropic there). Without an interpreter that can `import anthropic` the test is
// SKIPPED with the reason.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/router_service.h"
#include "tests/support/child_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

using ::deltaserve::testing::BinaryPath;
using ::deltaserve::testing::ChildProcess;
using ::deltaserve::testing::FixturesPath;
using ::deltaserve::testing::Http;
using ::deltaserve::testing::RouterService;
using ::deltaserve::testing::RunProcess;
using ::deltaserve::testing::Sha256HexWithTool;

std::string SdkPython() {
  const char* env = std::getenv("DELTASERVE_OPENAI_PYTHON");
  return env != nullptr && *env != '\0' ? env : DELTASERVE_ANTHROPIC_SDK_DEFAULT_PYTHON;
}

// What the scripted model "says" on each Generate call: a tool call, then the answer (twice:
// non-streamed and streamed round trips); the last one repeats for the thinking check.
nlohmann::json ScriptedOutputs() {
  const std::string call =
      "The user wants the weather; I will call the tool.\n</think>\n\n<tool_call>\n"
      "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\nC\n"
      "</parameter>\n</function>\n</tool_call>";
  const std::string answer = "The tool answered.\n</think>\n\nIt is sunny in Paris, 22 C.";
  return nlohmann::json::array({call, answer, call, answer});
}

TEST(AnthropicSdkTest, OfficialPythonClientAgainstTheRouter) {
  const std::string python = SdkPython();
  if (::access(python.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "no Python for the Anthropic SDK at " << python
                 << " (set DELTASERVE_OPENAI_PYTHON, or run tests/run_all.sh, which makes it)";
  }
  const auto probe = RunProcess({python, "-c", "import anthropic; print(anthropic.__version__)"});
  if (probe.exit_code != 0) {
    GTEST_SKIP() << python << " cannot import anthropic (pip install anthropic==2.10.0): "
                 << probe.err;
  }

  // "sk-sdk" may use every model; "sk-limited" only one the worker does not serve (403 on tiny).
  // The digests come from sha256sum, not from the router's own hashing.
  const std::string full = Sha256HexWithTool("sk-sdk");
  const std::string limited = Sha256HexWithTool("sk-limited");
  ASSERT_EQ(full.size(), 64u);
  ASSERT_EQ(limited.size(), 64u);
  std::string config = "aliases:\n  claude-test: [tiny]\napi_keys:\n";
  config += "  - name: sdk\n    sha256: " + full + "\n";
  config += "  - name: limited\n    sha256: " + limited + "\n    models: [other-model]\n";
  RouterService s(config);
  ASSERT_GT(s.port(), 0);

  const std::string outputs =
      ::testing::TempDir() + "/anthropic_outputs_" + std::to_string(::getpid()) + ".json";
  std::ofstream(outputs) << ScriptedOutputs().dump();
  ChildProcess worker({BinaryPath("tests/router/deltaserve-scripted-worker"), "--outputs", outputs,
                       "--chat-template", FixturesPath("templates/qwen3.5.jinja"), "--piece-bytes",
                       "5"});
  auto line = worker.WaitForLine("listening on ", std::chrono::seconds(30));
  ASSERT_TRUE(line.has_value()) << worker.err();
  const std::string worker_addr = line->substr(line->find("listening on ") + 13);
  ChildProcess router(
      {BinaryPath("router/deltaserve-router"), "--listen", "127.0.0.1:0", "--worker", worker_addr});
  auto rline = router.WaitForLine("listening on ", std::chrono::seconds(30));
  ASSERT_TRUE(rline.has_value()) << router.err();
  const int port = std::atoi(rline->substr(rline->rfind(':') + 1).c_str());
  bool ready = false;
  for (int i = 0; i < 600 && !ready; ++i) {
    ready = Http(port, "GET", "/ready").status == 200;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(ready) << router.err();

  const auto run = RunProcess(
      {python, DELTASERVE_ANTHROPIC_SDK_SCRIPT, "--base-url",
       "http://127.0.0.1:" + std::to_string(s.port()), "--api-key", "sk-sdk", "--limited-key",
       "sk-limited", "--scripted-base-url", "http://127.0.0.1:" + std::to_string(port)},
      std::chrono::seconds(660));  // the script's own signal.alarm(600) reports first
  EXPECT_EQ(run.exit_code, 0) << "anthropic " << probe.out << run.out << run.err
                              << "\n--- router stderr ---\n"
                              << s.router().err() << "\n--- scripted router stderr ---\n"
                              << router.err();
}

}  // namespace
}  // namespace deltaserve
