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
#include <chrono>
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
using ::deltaserve::testing::FixturesPath;
using ::deltaserve::testing::RouterService;
using ::deltaserve::testing::RunProcess;
using ::deltaserve::testing::ScriptedReplies;
using ::deltaserve::testing::SdkPython;
using ::deltaserve::testing::Sha256HexWithTool;

// What the scripted model "says" on each Generate call: a tool call, then the answer (twice:
// non-streamed and streamed round trips); the last one repeats for the thinking check.
std::vector<std::string> ScriptedOutputs() {
  const std::string call =
      "The user wants the weather; I will call the tool.\n</think>\n\n<tool_call>\n"
      "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\nC\n"
      "</parameter>\n</function>\n</tool_call>";
  const std::string answer = "The tool answered.\n</think>\n\nIt is sunny in Paris, 22 C.";
  return {call, answer, call, answer};
}

TEST(AnthropicSdkTest, OfficialPythonClientAgainstTheRouter) {
  const SdkPython py = FindSdkPython(
      "DELTASERVE_OPENAI_PYTHON", DELTASERVE_ANTHROPIC_SDK_DEFAULT_PYTHON,
      "import anthropic; print(anthropic.__version__)", "pip install anthropic==2.10.0");
  if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;

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
  RouterService scripted(
      ScriptedReplies{ScriptedOutputs(), FixturesPath("templates/qwen3.5.jinja")});
  ASSERT_GT(scripted.port(), 0);

  const auto run = RunProcess(
      {py.path, DELTASERVE_ANTHROPIC_SDK_SCRIPT, "--base-url", s.base_url(), "--api-key", "sk-sdk",
       "--limited-key", "sk-limited", "--scripted-base-url", scripted.base_url()},
      std::chrono::seconds(660));  // the script's own signal.alarm(600) reports first
  EXPECT_EQ(run.exit_code, 0) << "anthropic " << py.probe_out << run.out << run.err << s.Logs()
                              << "\n--- scripted service ---" << scripted.Logs();
}

}  // namespace
}  // namespace deltaserve
