// deltaserve-grammar as a real process (issue 13 item 4) on the golden Qwen3 vocabulary: each
// input line gives one {"accepted","rejected_at_token","complete"} line, a refused schema one
// {"error"} line, compile prints the grammar, and only bad usage or unreadable files exit
// non-zero. The expected rejected_at_token comes from the tokenizer alone: the index of the first
// token that reaches past the longest valid prefix of the line, a prefix written down by hand
// from the constraint.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/gguf_file.h"
#include "common/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

using ::testing::HasSubstr;

// A file in the temporary directory named after the process and `name`: ctest runs each test of
// this file as a process of its own, in parallel, so a shared name let one test read another's
// input (seen with ctest -j 2).
std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/deltaserve_grammar_cli_" +
                           std::to_string(::getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Runs the CLI with `input` on standard input (through sh, as a user would redirect a file).
ProcessResult RunCli(const std::vector<std::string>& args, const std::string& input = "") {
  std::string cmd = BinaryPath("worker/deltaserve-grammar");
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " < '" + WriteTemp("stdin.txt", input) + "'";
  return RunProcess({"/bin/sh", "-c", cmd});
}

class DeltaserveGrammarCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto file = common::GgufFile::Open(GoldenPath("qwen3-vocab-qwen35pre.gguf"));
    ASSERT_TRUE(file.ok()) << file.status();
    auto tok = common::Tokenizer::FromGguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok).release();
  }

  // The line the CLI must print for `text` whose longest valid prefix has `valid_bytes` bytes
  // (text.size() when all of it is valid), complete or not.
  static nlohmann::json Expected(const std::string& text, size_t valid_bytes, bool complete) {
    const std::vector<common::TokenId> ids = tokenizer_->Encode(text, false);
    size_t end = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      end += tokenizer_->Piece(ids[i]).size();
      if (end > valid_bytes) {
        return {{"accepted", false}, {"rejected_at_token", i}, {"complete", false}};
      }
    }
    return {{"accepted", true}, {"rejected_at_token", nullptr}, {"complete", complete}};
  }

  static std::vector<nlohmann::json> Lines(const std::string& out) {
    std::vector<nlohmann::json> lines;
    size_t start = 0;
    while (start < out.size()) {
      size_t nl = out.find('\n', start);
      if (nl == std::string::npos) nl = out.size();
      lines.push_back(nlohmann::json::parse(out.substr(start, nl - start)));
      start = nl + 1;
    }
    return lines;
  }

  static inline common::Tokenizer* tokenizer_ = nullptr;
};

TEST_F(DeltaserveGrammarCli, RegexLinesAcceptedRejectedAndIncomplete) {
  struct Row {
    std::string text;
    size_t valid;
    bool complete;
  };
  const std::vector<Row> rows = {
      {"hello 42", 8, true},     {"hello 4", 7, false},  {"hello 42x", 8, false},
      {"Hello 42", 0, false},    {"abc 99", 6, true},    {"zzzzzzzzzzzz 00", 15, true},
  };
  std::string input;
  for (const Row& r : rows) input += r.text + "\n";
  ProcessResult p = RunCli({"check", "--regex", "[a-z]+ [0-9]{2}", "--model",
                            GoldenPath("qwen3-vocab-qwen35pre.gguf")},
                           input);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto lines = Lines(p.out);
  ASSERT_EQ(lines.size(), rows.size()) << p.out;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(lines[i], Expected(rows[i].text, rows[i].valid, rows[i].complete)) << rows[i].text;
  }
}

TEST_F(DeltaserveGrammarCli, SchemaInstancesInBothSpellings) {
  const std::string schema = WriteTemp(
      "point.json",
      R"({"type":"object","properties":{"x":{"type":"integer"},"label":{"enum":["a","b"]}},)"
      R"("required":["x","label"],"additionalProperties":false})");
  struct Row {
    std::string text;
    size_t valid;
    bool complete;
  };
  const std::vector<Row> rows = {
      {R"({"x": 12, "label": "a"})", 23, true},   // json.dumps separators
      {R"({"x":-3,"label":"b"})", 20, true},      // compact
      {R"({"x": 12, "label": "c"})", 20, false},  // "c" is not in the enum
      {R"({"x": "12", "label": "a"})", 6, false},  // not an integer
      {R"({"x": 12)", 8, false},                  // cut short: accepted, incomplete
  };
  std::string input;
  for (const Row& r : rows) input += r.text + "\n";
  ProcessResult p = RunCli(
      {"check", "--schema", schema, "--model", GoldenPath("qwen3-vocab-qwen35pre.gguf")}, input);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto lines = Lines(p.out);
  ASSERT_EQ(lines.size(), rows.size()) << p.out;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(lines[i], Expected(rows[i].text, rows[i].valid, rows[i].complete)) << rows[i].text;
  }
}

TEST_F(DeltaserveGrammarCli, JsonObjectAcceptsAnyObjectOnly) {
  ProcessResult p = RunCli({"check", "--json-object", "--model",
                            GoldenPath("qwen3-vocab-qwen35pre.gguf")},
                           "{\"k\": [1, {\"y\": null}, \"s\"], \"t\": true}\n[1]\n");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto lines = Lines(p.out);
  ASSERT_EQ(lines.size(), 2u) << p.out;
  const std::string object = "{\"k\": [1, {\"y\": null}, \"s\"], \"t\": true}";
  EXPECT_EQ(lines[0], Expected(object, object.size(), true));
  EXPECT_EQ(lines[1], Expected("[1]", 0, false));
}

TEST_F(DeltaserveGrammarCli, RefusedSchemaPrintsOneErrorLine) {
  const std::string schema = WriteTemp("unique.json", R"({"type":"array","uniqueItems":true})");
  ProcessResult p = RunCli(
      {"check", "--schema", schema, "--model", GoldenPath("qwen3-vocab-qwen35pre.gguf")},
      "[1, 2]\n[3]\n");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto lines = Lines(p.out);
  ASSERT_EQ(lines.size(), 1u) << p.out;
  EXPECT_THAT(lines[0].at("error").get<std::string>(), HasSubstr("uniqueItems"));
  p = RunCli({"compile", "--schema", schema});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("\"error\""));
}

TEST_F(DeltaserveGrammarCli, CompilePrintsTheGrammar) {
  ProcessResult p = RunCli({"compile", "--regex", "ab|cd"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr(" ::= "));
  EXPECT_THAT(p.out, HasSubstr("\"ab\""));
  const std::string schema = WriteTemp("int.json", R"({"type":"integer"})");
  p = RunCli({"compile", "--schema", schema});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("[0-9]"));
}

TEST_F(DeltaserveGrammarCli, UsageAndUnreadableFilesExitNonZero) {
  EXPECT_EQ(RunCli({}).exit_code, 2);
  EXPECT_EQ(RunCli({"check", "--regex", "a"}).exit_code, 2);  // no --model
  EXPECT_EQ(RunCli({"compile", "--regex", "a", "--json-object"}).exit_code, 2);
  EXPECT_EQ(RunCli({"frobnicate", "--json-object"}).exit_code, 2);
  ProcessResult p = RunCli({"compile", "--schema", "/nonexistent/schema.json"});
  EXPECT_EQ(p.exit_code, 1);
  EXPECT_THAT(p.err, HasSubstr("/nonexistent/schema.json"));
  p = RunCli({"check", "--json-object", "--model", "/nonexistent/model.gguf"}, "{}\n");
  EXPECT_EQ(p.exit_code, 1);
}

}  // namespace
}  // namespace deltaserve::testing
