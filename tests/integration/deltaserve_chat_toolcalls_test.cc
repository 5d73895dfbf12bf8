// deltaserve-chat toolcalls run as a real process on ../shared/fixtures/toolcalls.json: one JSON
// line per case, each equal to the case's `expected` (arguments compared as JSON values), exit 0;
// unreadable input is refused with a message and a non-zero exit.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

ProcessResult Toolcalls(const std::string& path) {
  return RunProcess({BinaryPath("router/deltaserve-chat"), "toolcalls", path});
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path =
      (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()))).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(DeltaserveChatToolcalls, EveryFixtureLineEqualsExpected) {
  const std::string path = FixturesPath("toolcalls.json");
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const json cases = json::parse(buffer.str());
  ASSERT_TRUE(cases.is_array());
  ASSERT_FALSE(cases.empty());

  ProcessResult r = Toolcalls(path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<json> lines;
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    json expected = c.at("expected");
    expected["name"] = c.at("name");
    EXPECT_EQ(lines[i], expected) << c.at("name");
  }
}

TEST(DeltaserveChatToolcalls, CaseOptionsReachTheParser) {
  const std::string path = WriteTemp("toolcalls-options.json", R"([
    {"name": "opened", "prompt_opened_think": true, "tools": [], "raw_output": "hmm"},
    {"name": "none", "tool_choice": "none",
     "tools": [{"type": "function", "function": {"name": "f"}}],
     "raw_output": "<tool_call>\n<function=f>\n</function>\n</tool_call>"}])");
  ProcessResult r = Toolcalls(path);
  std::filesystem::remove(path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream out(r.out);
  std::string line;
  ASSERT_TRUE(std::getline(out, line));
  EXPECT_EQ(json::parse(line).at("reasoning_content"), "hmm");
  ASSERT_TRUE(std::getline(out, line));
  EXPECT_EQ(json::parse(line).at("finish"), "stop");
  EXPECT_EQ(json::parse(line).at("content"),
            "<tool_call>\n<function=f>\n</function>\n</tool_call>");
}

TEST(DeltaserveChatToolcalls, UnreadableInputIsRefusedWithAMessage) {
  ProcessResult missing = Toolcalls("/nonexistent/toolcalls.json");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr("cannot read /nonexistent/toolcalls.json"));

  const std::string bad = WriteTemp("toolcalls-bad.json", "[{\"name\": ");
  ProcessResult invalid = Toolcalls(bad);
  std::filesystem::remove(bad);
  EXPECT_NE(invalid.exit_code, 0);
  EXPECT_THAT(invalid.err, HasSubstr("not valid JSON"));

  const std::string object = WriteTemp("toolcalls-object.json", "{}");
  ProcessResult not_array = Toolcalls(object);
  std::filesystem::remove(object);
  EXPECT_NE(not_array.exit_code, 0);
  EXPECT_THAT(not_array.err, HasSubstr("not a JSON array"));

  const std::string no_raw = WriteTemp("toolcalls-noraw.json", R"([{"name": "x"}])");
  ProcessResult missing_field = Toolcalls(no_raw);
  std::filesystem::remove(no_raw);
  EXPECT_NE(missing_field.exit_code, 0);
  EXPECT_THAT(missing_field.out, HasSubstr("raw_output"));
}

TEST(DeltaserveChatToolcalls, BadArgumentsPrintUsage) {
  ProcessResult r = RunProcess({BinaryPath("router/deltaserve-chat"), "toolcalls"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("usage"));
}

}  // namespace
}  // namespace deltaserve::testing
