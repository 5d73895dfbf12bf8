// Unit tests of router/api/responses_request: a Responses body becomes the CompletionRequest that
// the equivalent chat completions body becomes (the chat parser, request_parser.h, is the
// reference: same messages, tool calls, tool messages, tools, tool_choice, response_format),
// reasoning.effort maps as docs/responses_api.md says, ignored tool types are collected, and
// every malformed or stateful body is a 400 naming the field by its path in the Responses body.

#include "router/api/responses_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "router/api/api_error.h"
#include "router/api/request_parser.h"

namespace deltaserve::router::api {
namespace {

using json = nlohmann::ordered_json;

void ExpectSameMessages(const CompletionRequest& got, const CompletionRequest& want) {
  ASSERT_EQ(got.messages.size(), want.messages.size());
  for (size_t i = 0; i < got.messages.size(); ++i) {
    SCOPED_TRACE(i);
    const ChatMessage& g = got.messages[i];
    const ChatMessage& w = want.messages[i];
    EXPECT_EQ(g.role, w.role);
    EXPECT_EQ(g.content, w.content);
    EXPECT_EQ(g.content_null, w.content_null);
    EXPECT_EQ(g.tool_call_id, w.tool_call_id);
    EXPECT_EQ(g.tool_calls_json, w.tool_calls_json);
    EXPECT_EQ(g.reasoning_content, w.reasoning_content);
  }
}

TEST(ResponsesRequestTest, ConversationEqualsTheEquivalentChatRequest) {
  auto r = ParseResponsesRequest(R"({
    "model": "m", "instructions": "be brief",
    "input": [
      {"role": "developer", "content": "dev note"},
      {"type": "message", "role": "user",
       "content": [{"type": "input_text", "text": "weather "}, {"type": "input_text", "text": "in Paris?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "short"}],
       "content": [{"type": "reasoning_text", "text": "I should call"}], "encrypted_content": "x"},
      {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
       "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
      {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
      {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
      {"type": "function_call", "call_id": "call_3", "name": "get_time", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_3", "output": "1pm"},
      {"role": "user", "content": "thanks"}
    ],
    "tools": [{"type": "function", "name": "get_weather", "description": "w",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true},
              {"type": "web_search"},
              {"type": "function", "name": "get_time", "parameters": {"type": "object"}},
              {"type": "local_shell"}, {"type": "web_search"}],
    "tool_choice": "auto", "parallel_tool_calls": false
  })");
  ASSERT_TRUE(r.ok()) << r.status();
  auto chat = ParseChatCompletionRequest(R"({
    "model": "m",
    "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "developer", "content": "dev note"},
      {"role": "user", "content": "weather in Paris?"},
      {"role": "assistant", "content": "Let me check.", "reasoning_content": "I should call",
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                      {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
      {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
      {"role": "assistant", "tool_calls": [{"id": "call_3", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_3", "content": "1pm"},
      {"role": "user", "content": "thanks"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "w",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true}},
              {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}],
    "tool_choice": "auto", "parallel_tool_calls": false
  })");
  ASSERT_TRUE(chat.ok()) << chat.status();
  ExpectSameMessages(r->completion, *chat);
  EXPECT_EQ(r->completion.tools_json, chat->tools_json);
  EXPECT_EQ(r->completion.tool_choice_json, chat->tool_choice_json);
  EXPECT_EQ(r->completion.tool_choice, ToolChoice::kAuto);
  EXPECT_FALSE(r->completion.parallel_tool_calls);
  EXPECT_EQ(r->ignored_tool_types, (std::vector<std::string>{"web_search", "local_shell"}));
  EXPECT_EQ(IgnoredToolsWarning(r->ignored_tool_types),
            "tools of type web_search, local_shell are not supported by DeltaServe and were "
            "ignored; only function tools reach the model");
  // The echo keeps the Responses shape of the function tools only.
  ASSERT_EQ(r->echo["tools"].size(), 2u);
  EXPECT_EQ(r->echo["tools"][0]["name"], "get_weather");
  EXPECT_EQ(r->echo["tools"][0]["strict"], true);
  EXPECT_EQ(r->echo["tool_choice"], "auto");
  EXPECT_EQ(r->echo["store"], false);
}

TEST(ResponsesRequestTest, StringInputSamplingAndEcho) {
  auto r = ParseResponsesRequest(
      R"({"model":"m","input":"hi","max_output_tokens":7,"temperature":0,"top_p":0.5,
          "stream":true,"store":true,"metadata":{"k":"v"},"user":"u","include":["x"],
          "truncation":"auto","service_tier":"auto","prompt_cache_key":"p","unknown":{"a":[1]}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const CompletionRequest& c = r->completion;
  ASSERT_EQ(c.messages.size(), 1u);
  EXPECT_EQ(c.messages[0].role, "user");
  EXPECT_EQ(c.messages[0].content, "hi");
  EXPECT_EQ(c.max_tokens, 7);
  EXPECT_EQ(c.sampling.temperature, 0.0);
  EXPECT_EQ(c.sampling.top_p, 0.5);
  EXPECT_TRUE(c.stream);
  EXPECT_EQ(c.user, "u");
  EXPECT_TRUE(c.tools_json.empty());
  EXPECT_EQ(r->echo.dump(),
            R"({"instructions":null,"max_output_tokens":7,"metadata":{"k":"v"},)"
            R"("parallel_tool_calls":true,"previous_response_id":null,)"
            R"("reasoning":{"effort":null,"summary":null},"store":false,"temperature":0.0,)"
            R"("text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":0.5,)"
            R"("truncation":"auto","user":"u"})");
}

TEST(ResponsesRequestTest, ReasoningEffortMapsOntoThinking) {
  struct Row {
    const char* effort;
    bool thinking;
    std::optional<int32_t> budget;
  };
  for (const Row& row :
       {Row{"none", false, std::nullopt}, Row{"minimal", false, std::nullopt},
        Row{"low", true, kReasoningBudgetLow}, Row{"medium", true, kReasoningBudgetMedium},
        Row{"high", true, kReasoningBudgetHigh}}) {
    SCOPED_TRACE(row.effort);
    auto r =
        ParseResponsesRequest(std::string(R"({"model":"m","input":"x","reasoning":{"effort":")") +
                              row.effort + R"(","summary":"auto"}})");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->completion.enable_thinking, row.thinking);
    EXPECT_EQ(r->completion.thinking_budget, row.budget);
    EXPECT_EQ(r->echo["reasoning"]["effort"], row.effort);
  }
  auto none = ParseResponsesRequest(R"({"model":"m","input":"x"})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->completion.enable_thinking.has_value());
}

// The error's param and code, for a failed parse ("ok" when it parses).
std::string Fault(const std::string& body) {
  auto r = ParseResponsesRequest(body);
  if (r.ok()) return "ok";
  return ErrorParam(r.status()) + " " + ErrorCode(r.status());
}

TEST(ResponsesRequestTest, TextVerbosityOnlyAsTheDefault) {
  auto r = ParseResponsesRequest(R"({"model":"m","input":"x","text":{"verbosity":"medium"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->echo["text"]["verbosity"], "medium");
  EXPECT_EQ(r->echo["text"]["format"]["type"], "text");
  EXPECT_FALSE(ParseResponsesRequest(R"({"model":"m","input":"x"})")->echo["text"].contains(
      "verbosity"));
  EXPECT_EQ(Fault(R"({"model":"m","input":"x","text":{"verbosity":"low"}})"),
            "text.verbosity unsupported_value");
  EXPECT_EQ(Fault(R"({"model":"m","input":"x","text":{"verbosity":"high"}})"),
            "text.verbosity unsupported_value");
  EXPECT_EQ(Fault(R"({"model":"m","input":"x","text":{"verbosity":"loud"}})"),
            "text.verbosity invalid_value");
  EXPECT_EQ(Fault(R"({"model":"m","input":"x","text":{"verbosity":3}})"),
            "text.verbosity invalid_type");
}

TEST(ResponsesRequestTest, ReasoningSummaryAutoOrNoneOnly) {
  for (const char* field : {"summary", "generate_summary"}) {
    SCOPED_TRACE(field);
    const std::string head = std::string(R"({"model":"m","input":"x","reasoning":{")") + field;
    for (const char* ok : {"auto", "none"}) {
      auto r = ParseResponsesRequest(head + R"(":")" + ok + R"("}})");
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->echo["reasoning"]["summary"], ok);
      EXPECT_FALSE(r->completion.enable_thinking.has_value());  // no effort: the default
    }
    for (const char* refused : {"concise", "detailed"}) {
      EXPECT_EQ(Fault(head + R"(":")" + refused + R"("}})"),
                std::string("reasoning.") + field + " unsupported_value");
    }
    EXPECT_EQ(Fault(head + R"(":"short"}})"), std::string("reasoning.") + field + " invalid_value");
  }
}

TEST(ResponsesRequestTest, ServiceTierAndSafetyIdentifier) {
  for (const char* ok : {"auto", "default"}) {
    EXPECT_EQ(Fault(std::string(R"({"model":"m","input":"x","service_tier":")") + ok + R"("})"),
              "ok");
  }
  for (const char* refused : {"flex", "priority", "scale"}) {
    EXPECT_EQ(
        Fault(std::string(R"({"model":"m","input":"x","service_tier":")") + refused + R"("})"),
        "service_tier unsupported_value");
  }
  EXPECT_EQ(Fault(R"({"model":"m","input":"x","service_tier":"gold"})"),
            "service_tier invalid_value");
  auto r = ParseResponsesRequest(R"({"model":"m","input":"x","safety_identifier":"hash-1"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->completion.user, "hash-1");
  r = ParseResponsesRequest(
      R"({"model":"m","input":"x","user":"u","safety_identifier":"hash-1"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->completion.user, "u");
}

// The body Codex CLI builds (codex-rs ResponsesApiRequest: instructions, input items, function
// and built-in tools, tool_choice "auto", reasoning {effort, summary: "auto"}, store false,
// stream, include reasoning.encrypted_content, prompt_cache_key; text only when configured).
TEST(ResponsesRequestTest, CodexRequestShapeIsAccepted) {
  auto r = ParseResponsesRequest(R"({
    "model": "m", "instructions": "You are Codex.",
    "input": [{"type": "message", "role": "user",
               "content": [{"type": "input_text", "text": "list files"}]}],
    "tools": [{"type": "function", "name": "shell", "description": "run", "strict": false,
               "parameters": {"type": "object", "properties": {"command": {"type": "array",
                 "items": {"type": "string"}}}, "required": ["command"]}},
              {"type": "web_search"}],
    "tool_choice": "auto", "parallel_tool_calls": false,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": false, "stream": true, "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "0b5c5a3e-1d6f-4c51-9f0e-3f1c1f7b2a10"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->completion.enable_thinking, true);
  EXPECT_EQ(r->completion.thinking_budget, kReasoningBudgetMedium);
  EXPECT_EQ(r->echo["reasoning"]["summary"], "auto");
  EXPECT_TRUE(r->completion.stream);
  EXPECT_FALSE(r->completion.parallel_tool_calls);
  // With a configured verbosity Codex adds text.verbosity: the default passes, others are 400.
  EXPECT_EQ(Fault(R"({"model":"m","input":"x","text":{"verbosity":"low"},
                      "reasoning":{"effort":"medium","summary":"auto"}})"),
            "text.verbosity unsupported_value");
}

TEST(ResponsesRequestTest, TextFormatIsChatResponseFormat) {
  auto r = ParseResponsesRequest(R"({"model":"m","input":"x","text":{"verbosity":"medium","format":
      {"type":"json_schema","name":"person","strict":true,
       "schema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],
                 "additionalProperties":false}}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  auto chat = ParseChatCompletionRequest(R"({"model":"m","messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"person","strict":true,
       "schema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],
                 "additionalProperties":false}}}})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(r->completion.response_format.type, ResponseFormat::Type::kJsonSchema);
  EXPECT_EQ(r->completion.response_format.name, chat->response_format.name);
  EXPECT_EQ(r->completion.response_format.schema_json, chat->response_format.schema_json);
  EXPECT_EQ(r->completion.response_format.strict, chat->response_format.strict);
  EXPECT_EQ(r->echo["text"]["format"]["name"], "person");

  auto object = ParseResponsesRequest(
      R"({"model":"m","input":"x","text":{"format":{"type":"json_object"}}})");
  ASSERT_TRUE(object.ok());
  EXPECT_EQ(object->completion.response_format.type, ResponseFormat::Type::kJsonObject);
}

TEST(ResponsesRequestTest, ToolChoiceRequiredAndNamedForceACall) {
  const std::string tools = R"("tools":[{"type":"function","name":"f"},{"type":"web_search"}])";
  auto required = ParseResponsesRequest(R"({"model":"m","input":"x",)" + tools +
                                        R"(,"tool_choice":"required"})");
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_EQ(required->completion.tool_choice, ToolChoice::kRequired);
  EXPECT_EQ(required->completion.tool_choice_json, R"("required")");
  auto named = ParseResponsesRequest(R"({"model":"m","input":"x",)" + tools +
                                     R"(,"tool_choice":{"type":"function","name":"f"}})");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->completion.tool_choice, ToolChoice::kFunction);
  EXPECT_EQ(named->completion.tool_choice_function, "f");
  EXPECT_EQ(named->completion.tool_choice_json, R"({"type":"function","function":{"name":"f"}})");
  EXPECT_EQ(named->echo["tool_choice"].dump(), R"({"type":"function","name":"f"})");
  auto none =
      ParseResponsesRequest(R"({"model":"m","input":"x",)" + tools + R"(,"tool_choice":"none"})");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->completion.tool_choice_json, R"("none")");  // the renderer's "no parsing" sign
}

TEST(ResponsesRequestTest, ReasoningWithoutAnAssistantTurnIsDropped) {
  auto r = ParseResponsesRequest(R"({"model":"m","input":[
      {"type":"reasoning","summary":[{"type":"summary_text","text":"a"},{"type":"summary_text","text":"b"}]},
      {"role":"assistant","content":"answer"},
      {"type":"reasoning","summary":[{"type":"summary_text","text":"lost"}]},
      {"role":"user","content":"next"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->completion.messages.size(), 2u);
  EXPECT_EQ(r->completion.messages[0].reasoning_content, "a\n\nb");  // summaries, no content
  EXPECT_EQ(r->completion.messages[1].reasoning_content, "");
}

struct BadBody {
  const char* body;
  const char* param;
  const char* code;
};

TEST(ResponsesRequestTest, MalformedAndStatefulBodiesAre400sNamingTheField) {
  const BadBody rows[] = {
      {R"([])", "", "invalid_type"},
      {R"({"model":"m","input":"x"])", "", "invalid_json"},
      {R"({"input":"x"})", "model", "missing_required_parameter"},
      {R"({"model":"m"})", "input", "missing_required_parameter"},
      {R"({"model":"m","input":[]})", "input", "invalid_value"},
      {R"({"model":"m","input":7})", "input", "invalid_type"},
      {R"({"model":"m","input":[7]})", "input[0]", "invalid_type"},
      {R"({"model":"m","input":[{"content":"x"}]})", "input[0].type", "missing_required_parameter"},
      {R"({"model":"m","input":[{"role":"tool","content":"x"}]})", "input[0].role",
       "invalid_value"},
      {R"({"model":"m","input":[{"role":"user"}]})", "input[0].content",
       "missing_required_parameter"},
      {R"({"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]})",
       "input[0].content[0].type", "unsupported_value"},
      {R"({"model":"m","input":[{"role":"user","content":[{"type":"input_text"}]}]})",
       "input[0].content[0].text", "missing_required_parameter"},
      {R"({"model":"m","input":[{"type":"function_call","call_id":"c","name":"f"}]})",
       "input[0].arguments", "missing_required_parameter"},
      {R"({"model":"m","input":[{"type":"function_call_output","call_id":"nope","output":"x"}]})",
       "input[0].call_id", "invalid_value"},
      {R"({"model":"m","input":[{"type":"item_reference","id":"msg_1"}]})", "input[0].type",
       "unsupported_value"},
      {R"({"model":"m","input":[{"type":"local_shell_call","id":"x"}]})", "input[0].type",
       "unsupported_value"},
      {R"({"model":"m","input":[{"type":"reasoning","summary":[{"type":"x","text":"t"}]}]})",
       "input[0].summary[0].type", "invalid_value"},
      {R"({"model":"m","input":"x","previous_response_id":"resp_1"})", "previous_response_id",
       "unsupported_value"},
      {R"({"model":"m","input":"x","conversation":"conv_1"})", "conversation", "unsupported_value"},
      {R"({"model":"m","input":"x","background":true})", "background", "unsupported_value"},
      {R"({"model":"m","input":"x","top_logprobs":3})", "top_logprobs", "unsupported_value"},
      {R"({"model":"m","input":"x","top_logprobs":21})", "top_logprobs", "invalid_value"},
      {R"({"model":"m","input":"x","include":["message.output_text.logprobs"]})", "include[0]",
       "unsupported_value"},
      {R"({"model":"m","input":"x","instructions":5})", "instructions", "invalid_type"},
      {R"({"model":"m","input":"x","max_output_tokens":0})", "max_output_tokens", "invalid_value"},
      {R"({"model":"m","input":"x","temperature":3})", "temperature", "invalid_value"},
      {R"({"model":"m","input":"x","stream":"yes"})", "stream", "invalid_type"},
      {R"({"model":"m","input":"x","tools":{}})", "tools", "invalid_type"},
      {R"({"model":"m","input":"x","tools":[{"name":"f"}]})", "tools[0].type",
       "missing_required_parameter"},
      {R"({"model":"m","input":"x","tools":[{"type":"function"}]})", "tools[0].name",
       "missing_required_parameter"},
      {R"({"model":"m","input":"x","tools":[{"type":"function","name":"a b"}]})", "tools[0].name",
       "invalid_value"},
      {R"({"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":[]}]})",
       "tools[0].parameters", "invalid_type"},
      {R"({"model":"m","input":"x","tools":[{"type":"web_search"}],"tool_choice":"required"})",
       "tool_choice", "invalid_value"},
      {R"({"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}})",
       "tool_choice.name", "invalid_value"},
      {R"({"model":"m","input":"x","tool_choice":{"type":"web_search_preview"}})",
       "tool_choice.type", "unsupported_value"},
      {R"({"model":"m","input":"x","tool_choice":"sometimes"})", "tool_choice", "invalid_value"},
      {R"({"model":"m","input":"x","text":{"format":{"type":"yaml"}}})", "text.format.type",
       "invalid_value"},
      {R"({"model":"m","input":"x","text":{"format":{"type":"json_schema","schema":{}}}})",
       "text.format.name", "missing_required_parameter"},
      {R"({"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object","properties":{"a":{"type":"string","pattern":"(?<=a)b"}},"required":["a"]}}}})",
       "text.format.schema", "invalid_value"},
      {R"({"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"required","text":{"format":{"type":"json_object"}}})",
       "text.format", "invalid_value"},
      {R"({"model":"m","input":"x","reasoning":{"effort":"max"}})", "reasoning.effort",
       "invalid_value"},
      {R"({"model":"m","input":"x","metadata":{"k":1}})", "metadata.k", "invalid_type"},
      {R"({"model":"m","input":"x","include":[1]})", "include[0]", "invalid_type"},
      {R"({"model":"m","input":"x","truncation":"sometimes"})", "truncation", "invalid_value"},
  };
  for (const BadBody& row : rows) {
    SCOPED_TRACE(row.body);
    auto r = ParseResponsesRequest(row.body);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ErrorParam(r.status()), row.param) << r.status();
    EXPECT_EQ(ErrorCode(r.status()), row.code) << r.status();
    const ApiError e = ApiErrorFromStatus(r.status());
    EXPECT_EQ(e.http_status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
  }
}

TEST(ResponsesRequestTest, IgnoredToolTypeNamesAreSafeInHeaders) {
  auto r = ParseResponsesRequest(
      R"({"model":"m","input":"x","tools":[{"type":"evil\r\nX-Injected: 1"},{"type":"\n"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ignored_tool_types, (std::vector<std::string>{"evilX-Injected1", "unnamed"}));
}

}  // namespace
}  // namespace deltaserve::router::api
