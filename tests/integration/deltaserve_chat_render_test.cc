// deltaserve-chat render run as a real process on the shared chat fixtures
// (../shared/fixtures/chat/*.json, templates in ../shared/fixtures/templates): one JSON line per
// case, "prompt" byte-equal to the case's `expected`, or "error" equal to `expected_error` for the
// template's own raise_exception (TemplateError) and present for every other failure. Also the
// per-case "template" field, and clean failures on unreadable input.
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

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

ProcessResult Chat(std::vector<std::string> args) {
  args.insert(args.begin(), BinaryPath("router/deltaserve-chat"));
  return RunProcess(args);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Json> Lines(const std::string& out) {
  std::vector<Json> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) lines.push_back(Json::parse(line));
  return lines;
}

void ExpectLinesMatchFixture(const std::vector<Json>& lines, const Json& fixture,
                             const std::string& label) {
  ASSERT_EQ(lines.size(), fixture.size()) << label;
  for (size_t i = 0; i < fixture.size(); ++i) {
    const Json& c = fixture[i];
    const Json& line = lines[i];
    const std::string where = label + "/" + c.at("name").get<std::string>();
    EXPECT_EQ(line.at("name"), c.at("name")) << where;
    if (c.contains("expected")) {
      ASSERT_TRUE(line.contains("prompt")) << where << ": " << line.dump();
      EXPECT_EQ(line.at("prompt").get<std::string>(), c.at("expected").get<std::string>()) << where;
    } else {
      ASSERT_TRUE(line.contains("error")) << where << ": " << line.dump();
      if (c.at("error_type") == "TemplateError") {
        EXPECT_EQ(line.at("error"), c.at("expected_error")) << where;
      }
    }
  }
}

TEST(DeltaserveChatRender, EveryFixtureFileWithTemplateFlag) {
  const std::string dir = FixturesPath("chat");
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    const std::string name = entry.path().stem().string();
    ProcessResult r = Chat({"render", entry.path().string(), "--template",
                            FixturesPath("templates/" + name + ".jinja")});
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    ExpectLinesMatchFixture(Lines(r.out), Json::parse(ReadFile(entry.path().string())), name);
  }
  EXPECT_EQ(files, 6);
}

TEST(DeltaserveChatRender, TemplateFieldOfEachCaseWins) {
  // Every case carries its own template text; the --template given is one that would fail.
  Json fixture = Json::parse(ReadFile(FixturesPath("chat/llama-3.1.json")));
  const std::string text = ReadFile(FixturesPath("templates/llama-3.1.jinja"));
  for (Json& c : fixture) c["template"] = text;
  const std::string path = ::testing::TempDir() + "/render_cases.json";
  std::ofstream(path) << fixture.dump();
  const std::string other = ::testing::TempDir() + "/raise.jinja";
  std::ofstream(other) << "{{ raise_exception('wrong template') }}";
  ProcessResult r = Chat({"render", path, "--template", other});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectLinesMatchFixture(Lines(r.out), fixture, "llama-3.1 (template field)");
}

TEST(DeltaserveChatRender, BadCasesAreErrorLinesNotFailures) {
  const std::string path = ::testing::TempDir() + "/render_bad_cases.json";
  std::ofstream(path) << R"([{"name": "syntax", "template": "{% if x %}", "messages": []},
                            {"name": "no template", "messages": []},
                            {"name": "ok", "template": "{{ messages|length }}", "messages": [1, 2]},
                            7])";
  ProcessResult r = Chat({"render", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<Json> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_THAT(lines[0].at("error").get<std::string>(), HasSubstr("chat template line 1"));
  EXPECT_THAT(lines[1].at("error").get<std::string>(), HasSubstr("--template"));
  EXPECT_EQ(lines[2].at("prompt"), "2");
  EXPECT_TRUE(lines[3].contains("error"));
}

TEST(DeltaserveChatRender, UnreadableInputFailsWithMessage) {
  ProcessResult missing = Chat({"render", "/nonexistent/cases.json"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr("cannot read"));
  const std::string path = ::testing::TempDir() + "/render_not_json.json";
  std::ofstream(path) << "{not json";
  ProcessResult bad = Chat({"render", path});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("not a JSON list"));
  const std::string tmpl = ::testing::TempDir() + "/bad.jinja";
  std::ofstream(tmpl) << "line one\n{% endfor %}";
  ProcessResult bad_template = Chat({"render", path, "--template", tmpl});
  EXPECT_NE(bad_template.exit_code, 0);
  EXPECT_THAT(bad_template.err, HasSubstr("line 2"));
  EXPECT_NE(Chat({"render"}).exit_code, 0);
}

}  // namespace
}  // namespace deltaserve::testing
