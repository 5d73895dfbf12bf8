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
#include <chrono>
#include <iostream>
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

SdkPython ResponsesPython() {
  return FindSdkPython("DELTASERVE_OPENAI_PYTHON", DELTASERVE_RESPONSES_DEFAULT_PYTHON,
                       "import openai, jsonschema", "pip install openai==1.109.1 jsonschema");
}

TEST(ResponsesSdkTest, TinyModel) {
  const SdkPython py = ResponsesPython();
  if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;
  RouterService s("", {"--ctx", "2048"});
  ASSERT_GT(s.port(), 0);
  // The script bounds itself (signal.alarm(600)) and says where it stopped; this is the backstop.
  const auto run = RunProcess(
      {py.path, DELTASERVE_RESPONSES_SCRIPT, "--mode", "tiny", "--base-url", s.base_url() + "/v1"},
      std::chrono::seconds(660));
  std::cout << run.out;  // one PASS / FAIL line per check
  EXPECT_EQ(run.exit_code, 0) << run.err << s.Logs();
}

// What the model "says" on each Generate call (two round trips of two turns).
std::vector<std::string> ScriptedOutputs() {
  const std::string call =
      "The user wants the weather; I will call the tool.\n</think>\n\n<tool_call>\n"
      "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\nC\n"
      "</parameter>\n</function>\n</tool_call>";
  const std::string answer = "The tool answered.\n</think>\n\nIt is sunny in Paris, 22 C.";
  return {call, answer, call, answer};
}

TEST(ResponsesSdkTest, FunctionCallRoundTrip) {
  const SdkPython py = ResponsesPython();
  if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;
  RouterService s(ScriptedReplies{ScriptedOutputs(), FixturesPath("templates/qwen3.5.jinja")});
  ASSERT_GT(s.port(), 0);
  const auto run = RunProcess(
      {py.path, DELTASERVE_RESPONSES_SCRIPT, "--mode", "tools", "--base-url", s.base_url() + "/v1"},
      std::chrono::seconds(660));  // the script's alarm: 600 s
  std::cout << run.out;
  EXPECT_EQ(run.exit_code, 0) << run.err << s.Logs();
}

}  // namespace
}  // namespace deltaserve
