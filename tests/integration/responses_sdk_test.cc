// POST /v1/responses through the official OpenAI Python SDK (client.responses.create and
// client.responses.stream, openai==1.109.1 in build/ci-venv) against the real router (label
// integration), by tests/integration/responses/responses_check.py:
//  - TinyModel: a worker on the tiny golden model (context 2048); plain and streamed answers
//    equal to each other and to chat completions on the same conversation, instructions, usage
//    with cached_tokens on a repeated prompt, text.format json_schema validated with jsonschema,
//    a Codex-like request (web_search / local_shell tools ignored, named in
//    X-DeltaServe-Warning, counted in /metrics), 400s for previous_response_id and images.
//  - FunctionCallRoundTrip: deltaserve-scripted-worker (TEST DOUBLE: Qwen3.5 template, scripted
//    reasoning + XML call, then an answer) so the call is deterministic; the SDK sends the call
//    and its function_call_output back, non-streamed and streamed.
// Without an interpreter that imports openai and jsonschema the tests are SKIPPED with the
// reason.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
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

std::string SdkPython() {
  const char* env = std::getenv("DELTASERVE_OPENAI_PYTHON");
  return env != nullptr && *env != '\0' ? env : DELTASERVE_RESPONSES_DEFAULT_PYTHON;
}

// Empty when the SDK can run, else why not.
std::string WhyNoSdk(const std::string& python) {
  if (::access(python.c_str(), X_OK) != 0) {
    return "no Python for the OpenAI SDK at " + python +
           " (set DELTASERVE_OPENAI_PYTHON, or run tests/run_all.sh, which makes that venv)";
  }
  const auto probe = RunProcess({python, "-c", "import openai, jsonschema"});
  if (probe.exit_code != 0) {
    return python +
           " cannot import openai and jsonschema (pip install openai==1.109.1 "
           "jsonschema): " +
           probe.err;
  }
  return "";
}

TEST(ResponsesSdkTest, TinyModel) {
  const std::string python = SdkPython();
  if (const std::string why = WhyNoSdk(python); !why.empty()) GTEST_SKIP() << why;
  RouterService s("", {"--ctx", "2048"});
  ASSERT_GT(s.port(), 0);
  // The script bounds itself (signal.alarm(600)) and says where it stopped; this is the backstop.
  const auto run = RunProcess({python, DELTASERVE_RESPONSES_SCRIPT, "--mode", "tiny", "--base-url",
                               "http://127.0.0.1:" + std::to_string(s.port()) + "/v1"},
                              std::chrono::seconds(660));
  std::cout << run.out;  // one PASS / FAIL line per check
  EXPECT_EQ(run.exit_code, 0) << run.err << "\n--- router stderr ---\n" << s.router().err();
}

// What the model "says" on each Generate call (two round trips of two turns).
nlohmann::json ScriptedOutputs() {
  const std::string call =
      "The user wants the weather; I will call the tool.\n</think>\n\n<tool_call>\n"
      "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\nC\n"
      "</parameter>\n</function>\n</tool_call>";
  const std::string answer = "The tool answered.\n</think>\n\nIt is sunny in Paris, 22 C.";
  return nlohmann::json::array({call, answer, call, answer});
}

TEST(ResponsesSdkTest, FunctionCallRoundTrip) {
  const std::string python = SdkPython();
  if (const std::string why = WhyNoSdk(python); !why.empty()) GTEST_SKIP() << why;
  const std::string outputs =
      ::testing::TempDir() + "/responses_outputs_" + std::to_string(::getpid()) + ".json";
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
  const auto run = RunProcess({python, DELTASERVE_RESPONSES_SCRIPT, "--mode", "tools", "--base-url",
                               "http://127.0.0.1:" + std::to_string(port) + "/v1"},
                              std::chrono::seconds(660));  // the script's alarm: 600 s
  std::cout << run.out;
  EXPECT_EQ(run.exit_code, 0) << run.err << "\n--- router stderr ---\n"
                              << router.err() << "\n--- worker stderr ---\n"
                              << worker.err();
  std::remove(outputs.c_str());
}

}  // namespace
}  // namespace deltaserve
