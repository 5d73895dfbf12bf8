// deploy/run-demo.sh --once with the programs of this build tree (--bin) and the tiny golden model:
// the script shows the curl command and prints the streamed answer as text, not SSE. The text is
// checked against the stream the script kept (answer.sse in --logs), read here independently:
// every `data:` event's content deltas, concatenated, is what the script printed after the curl
// command, and no `data:` line reaches the terminal.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

using ::testing::HasSubstr;

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(RunDemo, PrintsTheStreamedAnswerAsText) {
  const std::string logs = ::testing::TempDir() + "/run_demo_" + std::to_string(::getpid());
  std::filesystem::remove_all(logs);
  const ProcessResult r = RunProcess({"/bin/bash", DELTASERVE_RUN_DEMO_SCRIPT, "--once", "--bin",
                                      BinaryPath("."), "--model", GoldenPath("tiny-dense-f32.gguf"),
                                      "--threads", "1", "--prompt", "Say hello.", "--logs", logs},
                                     std::chrono::minutes(5));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << ReadText(logs + "/worker.log")
                            << ReadText(logs + "/router.log");

  // The answer as the stream carried it.
  std::string content;
  int events = 0;
  for (absl::string_view line : absl::StrSplit(ReadText(logs + "/answer.sse"), '\n')) {
    if (!absl::ConsumePrefix(&line, "data: ") || line == "[DONE]") continue;
    const nlohmann::json event = nlohmann::json::parse(line);
    ++events;
    for (const nlohmann::json& choice : event.at("choices")) {
      const nlohmann::json& delta = choice.at("delta");
      ASSERT_FALSE(delta.contains("reasoning_content")) << "the tiny model has no think block";
      if (delta.contains("content") && delta["content"].is_string()) {
        content += delta["content"].get<std::string>();
      }
    }
  }
  ASSERT_GT(events, 2) << "answer.sse holds no stream";
  ASSERT_FALSE(content.empty());

  // What the terminal showed: the curl command to copy, then the text and a newline.
  EXPECT_THAT(r.out, HasSubstr("$ curl -N http://127.0.0.1:"));
  EXPECT_THAT(r.out, HasSubstr("-d '{\"model\": \"demo\", \"stream\": true"));
  const std::string shown_after = "\"content\": \"Say hello.\"}]}'\n";
  const size_t start = r.out.find(shown_after);
  ASSERT_NE(start, std::string::npos) << r.out;
  const std::string printed = r.out.substr(start + shown_after.size());
  EXPECT_EQ(printed.substr(0, content.size() + 1), content + "\n") << r.out;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    EXPECT_FALSE(absl::StartsWith(line, "data:")) << "raw SSE on the terminal: " << line;
  }
}

}  // namespace
}  // namespace deltaserve::testing
