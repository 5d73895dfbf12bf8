// The openai-agents Python SDK (PyPI `openai-agents`) runs an agent loop with a function tool
// against the real deltaserve-router (label integration), in front of deltaserve-scripted-worker
// (the ScriptedWorker TEST DOUBLE as a process: it reports the Qwen3.5 chat template of
// ../shared/fixtures and replays scripted outputs through the real gRPC contract, one per
// Generate call, in 5-byte pieces). Each run: a tool call (reasoning, then Qwen's XML call), the
// SDK calls the tool, then the final answer; non-streamed and streamed. The script is
// tests/integration/openai_agents/agents_check.py.
//
// The interpreter is $DELTASERVE_OPENAI_PYTHON, else build/ci-venv/bin/python3 (tests/run_all.sh installs
// openai-agents there). Without an interpreter that can `import agents` the test is SKIPPED
// with the reason.
#include <unistd.h>

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
using ::deltaserve::testing::RunProcess;

std::string SdkPython() {
  const char* env = std::getenv("DELTASERVE_OPENAI_PYTHON");
  return env != nullptr && *env != '\0' ? env : DELTASERVE_OPENAI_AGENTS_DEFAULT_PYTHON;
}

// What the model "says" on each of the four Generate calls (two runs of two turns).
nlohmann::json ScriptedOutputs() {
  const std::string call =
      "The user wants the weather; I will call the tool.\n</think>\n\n<tool_call>\n"
      "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\nC\n"
      "</parameter>\n</function>\n</tool_call>";
  const std::string answer = "The tool answered.\n</think>\n\nIt is sunny in Paris, 22 C.";
  return nlohmann::json::array({call, answer, call, answer});
}

TEST(OpenAiAgentsTest, AgentLoopWithAFunctionToolStreamedAndNot) {
  const std::string python = SdkPython();
  if (::access(python.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "no Python for openai-agents at " << python
                 << " (set DELTASERVE_OPENAI_PYTHON, or run tests/run_all.sh, which makes that venv)";
  }
  const auto probe = RunProcess({python, "-c", "import agents, openai; print(openai.__version__)"});
  if (probe.exit_code != 0) {
    GTEST_SKIP() << python
                 << " cannot import agents (pip install openai-agents==0.3.3): " << probe.err;
  }
  const std::string outputs =
      ::testing::TempDir() + "/agents_outputs_" + std::to_string(::getpid()) + ".json";
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

  const auto run = RunProcess({python, DELTASERVE_OPENAI_AGENTS_SCRIPT, "--base-url",
                               "http://127.0.0.1:" + std::to_string(port) + "/v1"});
  EXPECT_EQ(run.exit_code, 0) << "openai " << probe.out << run.out << run.err
                              << "\n--- router stderr ---\n"
                              << router.err() << "\n--- worker stderr ---\n"
                              << worker.err();
}

}  // namespace
}  // namespace deltaserve
