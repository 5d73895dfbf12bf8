// Structured outputs end to end (label integration; docs/structured_outputs.md): a worker on the
// tiny random-weight golden model and a router serving it as "tiny" (the model file's Qwen3
// template: JSON tool-call bodies) and as "tiny-xml" (the Qwen3.5 template from
// ../shared/fixtures: Qwen XML calls, <think> opened by the generation prompt), then
// tests/integration/structured_outputs/structured_outputs_check.py with the OpenAI SDK's
// interpreter: json_schema outputs all parse and validate with the `jsonschema` package, forced
// tool calls come back as valid tool_calls, json_object yields one object or "length", thinking
// on and off, streamed and not, 400s naming the keyword. Requires exit 0 (the script prints one
// PASS / FAIL line per check, with the traceback).
//
// The interpreter is $DELTASERVE_OPENAI_PYTHON, else build/ci-venv/bin/python3 (tests/run_all.sh
// installs openai and jsonschema there). Without one that imports both the test is SKIPPED with
// the reason.
#include <chrono>
#include <string>

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
using ::deltaserve::testing::SdkPython;

TEST(StructuredOutputsTest, SchemasAndForcedToolCallsThroughTheSdk) {
  const SdkPython py = FindSdkPython(
      "DELTASERVE_OPENAI_PYTHON", DELTASERVE_STRUCTURED_OUTPUTS_DEFAULT_PYTHON,
      "import openai, jsonschema, pydantic", "pip install openai==1.109.1 jsonschema pydantic");
  if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;
  const std::string config =
      "models:\n"
      "  - name: tiny\n"
      "  - name: tiny-xml\n"
      "    served_name: tiny\n"
      "    chat_template: " +
      FixturesPath("templates/qwen3.5.jinja") + "\n";
  // Room for the longest bounded instance with its whitespace, and 4 sequences per batch.
  RouterService s(config, {"--ctx", "2048", "--parallel", "4"});
  ASSERT_GT(s.port(), 0);
  // The script bounds itself (signal.alarm(1200)) and says where it stopped; this is the backstop.
  const auto run = RunProcess(
      {py.path, DELTASERVE_STRUCTURED_OUTPUTS_SCRIPT, "--base-url", s.base_url() + "/v1"},
      std::chrono::seconds(1260));
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err << s.Logs();
}

}  // namespace
}  // namespace deltaserve
