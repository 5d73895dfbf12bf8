// RenderChat against hand-written prompts. Expected strings follow the Qwen3 chat template
// (Jinja, the `tokenizer.chat_template` of ../shared/golden/qwen3-vocab-qwen35pre.gguf and of
// the Qwen/Qwen3-* models on Hugging Face) rendered with transformers' semantics: `tojson` is
// json.dumps(ensure_ascii=False), enable_thinking defaults to true. Each case was also checked
// by rendering that template with jinja2 during development.

#include "router/chat/qwen_chat_template.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace deltaserve::router::chat {
namespace {

api::ChatMessage Msg(std::string role, std::string content) {
  api::ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

api::ChatMessage ToolResult(std::string content, std::string call_id) {
  api::ChatMessage m = Msg("tool", std::move(content));
  m.tool_call_id = std::move(call_id);
  return m;
}

api::ChatMessage AssistantCalls(std::string content, std::string calls_json) {
  api::ChatMessage m = Msg("assistant", std::move(content));
  m.content_null = m.content.empty();
  m.tool_calls_json = std::move(calls_json);
  return m;
}

std::string Render(const std::vector<api::ChatMessage>& messages, ChatOptions options = {}) {
  absl::StatusOr<std::string> text = RenderChat(messages, options);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

constexpr char kWeatherTool[] =
    R"([{"type":"function","function":{"name":"get_weather","description":"Current weather",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"}},)"
    R"("required":["city"]}}}])";

constexpr char kToolsBlockStart[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    R"({"type": "function", "function": {"name": "get_weather", "description": "Current weather", )"
    R"("parameters": {"type": "object", "properties": {"city": {"type": "string"}}, )"
    R"("required": ["city"]}}})"
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

TEST(QwenChatTemplateTest, SingleUserMessageEndsWithAssistantPrompt) {
  EXPECT_EQ(Render({Msg("user", "Hello")}),
            "<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(QwenChatTemplateTest, SystemMessageComesFirstInItsOwnTurn) {
  EXPECT_EQ(Render({Msg("system", "You are terse."), Msg("user", "Hi")}),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(QwenChatTemplateTest, DeveloperRoleIsRenderedAsSystem) {
  EXPECT_EQ(Render({Msg("developer", "Be brief."), Msg("user", "Hi")}),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(QwenChatTemplateTest, ThinkingOffAppendsEmptyThinkBlock) {
  ChatOptions options;
  options.enable_thinking = false;
  EXPECT_EQ(Render({Msg("user", "Hello")}, options),
            "<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(QwenChatTemplateTest, NoGenerationPrompt) {
  ChatOptions options;
  options.add_generation_prompt = false;
  options.enable_thinking = false;  // only affects the generation prompt
  EXPECT_EQ(Render({Msg("user", "Hello")}, options), "<|im_start|>user\nHello<|im_end|>\n");
}

TEST(QwenChatTemplateTest, MultiTurnDropsReasoningOfEarlierAnswers) {
  // The earlier answer precedes the last user query, so its <think> part is cut off.
  EXPECT_EQ(Render({Msg("system", "S"), Msg("user", "What is 2+2?"),
                    Msg("assistant", "<think>\nadd them\n</think>\n\n4"), Msg("user", "And 3+3?")}),
            "<|im_start|>system\nS<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n4<|im_end|>\n"
            "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(QwenChatTemplateTest, LastAssistantMessageGetsThinkBlock) {
  // Continuing a final assistant message (no generation prompt): after the last query, the last
  // message is written with its (here empty) reasoning.
  ChatOptions options;
  options.add_generation_prompt = false;
  EXPECT_EQ(Render({Msg("user", "Hi"), Msg("assistant", "Hello!")}, options),
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n");
}

TEST(QwenChatTemplateTest, LaterSystemMessageKeepsItsPlace) {
  EXPECT_EQ(Render({Msg("user", "A"), Msg("system", "Now be formal."), Msg("user", "B")}),
            "<|im_start|>user\nA<|im_end|>\n"
            "<|im_start|>system\nNow be formal.<|im_end|>\n"
            "<|im_start|>user\nB<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(QwenChatTemplateTest, ToolsAreListedInTheSystemTurn) {
  ChatOptions options;
  options.tools_json = kWeatherTool;
  EXPECT_EQ(Render({Msg("user", "Weather in Paris?")}, options),
            std::string("<|im_start|>system\n") + kToolsBlockStart +
                "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                "<|im_start|>assistant\n");
}

TEST(QwenChatTemplateTest, ToolsFollowTheSystemPrompt) {
  ChatOptions options;
  options.tools_json = kWeatherTool;
  options.enable_thinking = false;
  EXPECT_EQ(Render({Msg("system", "You are helpful."), Msg("user", "Weather in Paris?")}, options),
            std::string("<|im_start|>system\nYou are helpful.\n\n") + kToolsBlockStart +
                "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(QwenChatTemplateTest, EmptyToolsArrayMeansNoToolsBlock) {
  ChatOptions options;
  options.tools_json = "[]";
  EXPECT_EQ(Render({Msg("user", "Hi")}, options),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(QwenChatTemplateTest, ToolCallsAndConsecutiveToolResults) {
  ChatOptions options;
  options.tools_json = kWeatherTool;
  const std::string calls = R"([{"id":"call_1","type":"function","function":{"name":"get_weather",)"
                            R"("arguments":"{\"city\": \"Paris\"}"}},)"
                            R"({"id":"call_2","type":"function","function":{"name":"get_weather",)"
                            R"("arguments":"{\"city\": \"Rome\"}"}}])";
  EXPECT_EQ(Render({Msg("user", "Paris and Rome?"), AssistantCalls("", calls),
                    ToolResult("18C", "call_1"), ToolResult("21C", "call_2")},
                   options),
            std::string("<|im_start|>system\n") + kToolsBlockStart +
                "<|im_start|>user\nParis and Rome?<|im_end|>\n"
                "<|im_start|>assistant\n"
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                "</tool_call>\n"
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n"
                "</tool_call><|im_end|>\n"
                "<|im_start|>user\n<tool_response>\n18C\n</tool_response>\n"
                "<tool_response>\n21C\n</tool_response><|im_end|>\n"
                "<|im_start|>assistant\n");
}

TEST(QwenChatTemplateTest, ToolCallAfterContentAndReasoningInMultiStepToolUse) {
  // After the last user query the assistant's reasoning_content is kept; a tool call after
  // content starts on a new line; object arguments are written as tojson does.
  api::ChatMessage call = AssistantCalls(
      "Let me check.",
      R"([{"type":"function","function":{"name":"get_weather","arguments":{"city":"Paris","days":2}}}])");
  call.reasoning_content = "\nNeed the weather.\n";
  EXPECT_EQ(Render({Msg("user", "Paris?"), call, ToolResult("18C", "c")}),
            "<|im_start|>user\nParis?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nNeed the weather.\n</think>\n\nLet me check.\n"
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
            "\"days\": 2}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(QwenChatTemplateTest, ToolResponseWrappedUserMessageIsNotAQuery) {
  // A user message that is itself a <tool_response> does not count as the last query, so the
  // assistant turn before it keeps its reasoning (taken from <think> in the content).
  EXPECT_EQ(Render({Msg("user", "Q"), Msg("assistant", "<think>r</think>A"),
                    Msg("user", "<tool_response>x</tool_response>")}),
            "<|im_start|>user\nQ<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nr\n</think>\n\nA<|im_end|>\n"
            "<|im_start|>user\n<tool_response>x</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(QwenChatTemplateTest, RefusesWhatCannotBeRendered) {
  EXPECT_EQ(RenderChat({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RenderChat({Msg("robot", "x")}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ChatOptions bad_tools;
  bad_tools.tools_json = "{not json";
  absl::Status s = RenderChat({Msg("user", "x")}, bad_tools).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tools"), absl::string_view::npos) << s;
  s = RenderChat({Msg("user", "x"), AssistantCalls("", R"([{"function":{"arguments":"{}"}}])")}, {})
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("messages[1].tool_calls[0]"), absl::string_view::npos) << s;
}

TEST(QwenChatTemplateTest, PythonJsonDumpsMatchesJsonDumps) {
  // Expected: python3 -c 'import json; print(json.dumps(v, ensure_ascii=False))'.
  absl::StatusOr<std::string> s = internal::PythonJsonDumps(
      R"({"b":1,"a":[true,null,2.5,-3,"\u00e9\n\"\\\u0001/"],"c":{},"d":[],"e":1e-05})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s,
            "{\"b\": 1, \"a\": [true, null, 2.5, -3, \"\xC3\xA9\\n\\\"\\\\\\u0001/\"], \"c\": {}, "
            "\"d\": [], \"e\": 1e-05}");
}

}  // namespace
}  // namespace deltaserve::router::chat
