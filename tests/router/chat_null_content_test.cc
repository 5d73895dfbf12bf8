// The agent loop's messages on every chat template of ../shared/fixtures/templates: the OpenAI SDK
// (and openai-agents) sends the assistant turn that called a tool back with `content: null` beside
// its `tool_calls`, then the tool's result, then the next user turn. The request goes through the
// real body parser and BuildTemplateContext, the conversion the router renders with, and the
// template through the Jinja engine (which stays equal to jinja2: a None content is an error in
// a template that tests `'</think>' in message.content`, Qwen3's). Null content must render
// exactly as the empty text, which is what vLLM and llama-server pass to the template: the same
// conversation with `"content": ""` is the expected prompt, rendered independently of the null
// handling. Each turn's text (the call's name and arguments, the tool result, the next question)
// is in the prompt.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/jinja/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/request_parser.h"
#include "router/chat/chat_template_context.h"
#include "tests/support/test_paths.h"

namespace deltaserve::router::chat {
namespace {

using json = nlohmann::ordered_json;
using ::testing::HasSubstr;

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> TemplatePaths() {
  std::vector<std::string> paths;
  const std::filesystem::path dir =
      std::filesystem::path(deltaserve::testing::FixturesDir()) / "templates";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".jinja") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

// The agent loop as the OpenAI SDK sends it: the assistant turn that called get_weather has
// `content` as given (null from the SDK), then the tool result; with `next_turn`, the final
// answer and the user's next question follow.
json AgentLoopBody(const json& assistant_content, bool next_turn) {
  json messages = json::array();
  messages.push_back({{"role", "system"}, {"content", "You answer weather questions."}});
  messages.push_back({{"role", "user"}, {"content", "Weather in Paris?"}});
  json call = {{"id", "call_1"},
               {"type", "function"},
               {"function", {{"name", "get_weather"}, {"arguments", R"({"city": "Paris"})"}}}};
  messages.push_back(
      {{"role", "assistant"}, {"content", assistant_content}, {"tool_calls", json::array({call})}});
  messages.push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "Sunny, 22 C"}});
  if (next_turn) {
    messages.push_back({{"role", "assistant"}, {"content", "It is sunny in Paris."}});
    messages.push_back({{"role", "user"}, {"content", "And in Rome?"}});
  }
  json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "The weather of a city.", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  return {{"model", "m"}, {"messages", messages}, {"tools", tools}};
}

// The prompt `tmpl` renders for `body`, through the router's conversion.
absl::StatusOr<std::string> Render(const common::ChatTemplate& tmpl, const json& body) {
  absl::StatusOr<api::CompletionRequest> request = api::ParseChatCompletionRequest(body.dump());
  if (!request.ok()) return request.status();
  // The special tokens a Llama 3.1 file carries (the Qwen templates use none of them).
  absl::StatusOr<json> context =
      BuildTemplateContext(*request, {.bos_token = "<|begin_of_text|>", .eos_token = "<|eot_id|>"});
  if (!context.ok()) return context.status();
  return tmpl.Render(*context);
}

TEST(ChatNullContentTest, TheAgentLoopRendersOnEveryFixtureTemplate) {
  const std::vector<std::string> paths = TemplatePaths();
  ASSERT_GE(paths.size(), 6u) << "templates in " << deltaserve::testing::FixturesDir();
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    absl::StatusOr<common::ChatTemplate> tmpl = common::ChatTemplate::Parse(ReadText(path));
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    for (const bool next_turn : {false, true}) {
      SCOPED_TRACE(next_turn ? "then the next turn" : "the turn after the tool result");
      absl::StatusOr<std::string> with_null = Render(*tmpl, AgentLoopBody(nullptr, next_turn));
      ASSERT_TRUE(with_null.ok()) << with_null.status();
      absl::StatusOr<std::string> with_empty = Render(*tmpl, AgentLoopBody("", next_turn));
      ASSERT_TRUE(with_empty.ok()) << with_empty.status();
      EXPECT_EQ(*with_null, *with_empty);
      EXPECT_THAT(*with_null, HasSubstr("get_weather"));
      EXPECT_THAT(*with_null, HasSubstr("Paris"));
      EXPECT_THAT(*with_null, HasSubstr("Sunny, 22 C"));
      if (next_turn) {
        EXPECT_THAT(*with_null, HasSubstr("It is sunny in Paris."));
        EXPECT_THAT(*with_null, HasSubstr("And in Rome?"));
      }
    }
  }
}

// What a template sees of the assistant turn that called the tool: "" for its null content, its
// arguments as an object.
TEST(ChatNullContentTest, NullContentIsTheEmptyTextInTheContext) {
  absl::StatusOr<api::CompletionRequest> request =
      api::ParseChatCompletionRequest(AgentLoopBody(nullptr, false).dump());
  ASSERT_TRUE(request.ok()) << request.status();
  absl::StatusOr<json> context = BuildTemplateContext(*request, {});
  ASSERT_TRUE(context.ok()) << context.status();
  const json& assistant = (*context)["messages"][2];
  ASSERT_EQ(assistant["role"], "assistant");
  EXPECT_EQ(assistant["content"], "");
  EXPECT_EQ(assistant["tool_calls"][0]["function"]["arguments"], json({{"city", "Paris"}}));
}

}  // namespace
}  // namespace deltaserve::router::chat
