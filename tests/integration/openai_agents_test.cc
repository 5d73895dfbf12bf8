// The openai-agents Python SDK (PyPI `openai-agents`) runs an agent loop with a function tool
// against the real deltaserve-router (label integration), in front of deltaserve-scripted-worker
// (the ScriptedWorker TEST DOUBLE as a process: it reports a chat template of ../shared/fixtures
// and replays scripted outputs through the real gRPC contract, one per Generate call, in 5-byte
// pieces), once per fixture template. Each run: a tool call (in the template's format, after
// reasoning where the template opens a think block), the SDK calls the tool and sends the call
// back with content null beside tool_calls, the tool result, then the final answer; non-streamed,
// streamed and forced (tool_choice "required"). The script is
// tests/integration/openai_agents/agents_check.py.
//
// The interpreter is $DELTASERVE_OPENAI_PYTHON, else build/ci-venv/bin/python3 (tests/run_all.sh
// installs openai-agents there). Without an interpreter that can `import agents` the test is
// SKIPPED with the reason.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <ostream>
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
using ::deltaserve::testing::FixturesDir;
using ::deltaserve::testing::FixturesPath;
using ::deltaserve::testing::RouterService;
using ::deltaserve::testing::RunProcess;
using ::deltaserve::testing::ScriptedReplies;
using ::deltaserve::testing::SdkPython;

// A fixture template and what a model using it writes.
struct TemplateCase {
  const char* name;  // ../shared/fixtures/templates/NAME.jinja
  // The generation prompt ends inside an open <think> block: the output starts as reasoning.
  bool opens_think;
  bool xml_calls;  // Qwen3.5's <function=...><parameter=...> calls, else JSON in <tool_call>
};

const TemplateCase kTemplates[] = {
    {"llama-3.1", false, false}, {"qwen3", false, false}, {"qwen3-2504", false, false},
    {"qwen3.5", true, true},     {"qwen3.6", true, true}, {"qwen3.5-nothink", false, true},
};

// What the model "says" on each of the six Generate calls (three runs of two turns).
std::vector<std::string> ScriptedOutputs(const TemplateCase& t) {
  std::string call =
      t.xml_calls ? "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                    "<parameter=unit>\nC\n</parameter>\n</function>\n</tool_call>"
                  : "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                    "\"Paris\", \"unit\": \"C\"}}\n</tool_call>";
  std::string answer = "It is sunny in Paris, 22 C.";
  if (t.opens_think) {
    call = "The user wants the weather; I will call the tool.\n</think>\n\n" + call;
    answer = "The tool answered.\n</think>\n\n" + answer;
  }
  return {call, answer, call, answer, call, answer};
}

void PrintTo(const TemplateCase& t, std::ostream* os) { *os << t.name; }

class OpenAiAgentsTest : public ::testing::TestWithParam<TemplateCase> {};

// Every template of the fixtures is a case here: a new one must say how its model writes.
TEST(OpenAiAgentsTemplates, EveryFixtureTemplateIsACase) {
  std::vector<std::string> names;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(FixturesDir()) / "templates")) {
    if (entry.path().extension() == ".jinja") names.push_back(entry.path().stem().string());
  }
  std::vector<std::string> cases;
  for (const TemplateCase& t : kTemplates) cases.push_back(t.name);
  std::sort(names.begin(), names.end());
  std::sort(cases.begin(), cases.end());
  EXPECT_EQ(names, cases);
}

TEST_P(OpenAiAgentsTest, AgentLoopWithAFunctionToolStreamedForcedAndNot) {
  const TemplateCase& t = GetParam();
  const SdkPython py = FindSdkPython(
      "DELTASERVE_OPENAI_PYTHON", DELTASERVE_OPENAI_AGENTS_DEFAULT_PYTHON,
      "import agents, openai; print(openai.__version__)", "pip install openai-agents==0.3.3");
  if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;
  RouterService s(ScriptedReplies{ScriptedOutputs(t),
                                  FixturesPath(std::string("templates/") + t.name + ".jinja")});
  ASSERT_GT(s.port(), 0);

  const auto run =
      RunProcess({py.path, DELTASERVE_OPENAI_AGENTS_SCRIPT, "--base-url", s.base_url() + "/v1"});
  EXPECT_EQ(run.exit_code, 0) << "openai " << py.probe_out << run.out << run.err << s.Logs();
}

INSTANTIATE_TEST_SUITE_P(FixtureTemplates, OpenAiAgentsTest, ::testing::ValuesIn(kTemplates),
                         [](const ::testing::TestParamInfo<TemplateCase>& info) {
                           std::string name = info.param.name;
                           std::replace_if(
                               name.begin(), name.end(), [](char c) { return !std::isalnum(c); },
                               '_');
                           return name;
                         });

}  // namespace
}  // namespace deltaserve
