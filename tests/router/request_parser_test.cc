// Unit tests of router/api/request_parser: valid bodies become the right CompletionRequest,
// and every malformed body is an InvalidArgument naming the offending field (the `param` of
// the OpenAI error), never a crash. Field rules follow OpenAI's API reference (ranges of
// temperature, top_p, penalties, stop ≤ 4, top_logprobs ≤ 20, n = 1 only here).

#include "router/api/request_parser.h"

#include <gtest/gtest.h>

#include <string>

#include "router/api/api_error.h"

namespace deltaserve::router::api {
namespace {

constexpr char kChatPrefix[] = R"({"model":"m","messages":[{"role":"user","content":"hi"}])";

std::string Chat(const std::string& extra) {
  return std::string(kChatPrefix) + (extra.empty() ? "" : "," + extra) + "}";
}

TEST(ChatRequestParserTest, ParsesEveryKnownField) {
  auto r = ParseChatCompletionRequest(R"({
    "model": "qwen3.5-4b",
    "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1"}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}
    ],
    "max_tokens": 10, "max_completion_tokens": 20, "temperature": 0.5, "top_p": 0.9,
    "top_k": 40, "min_p": 0.05, "presence_penalty": -1, "frequency_penalty": 2,
    "repetition_penalty": 1.1, "seed": -7, "stop": ["x", "y"], "n": 1, "stream": true,
    "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 20,
    "logit_bias": {"15": -100, "7": 2.5}, "user": "u1", "unknown_field": {"ignored": [1]},
    "chat_template_kwargs": {"enable_thinking": false}
  })");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->endpoint, Endpoint::kChatCompletions);
  EXPECT_EQ(r->model, "qwen3.5-4b");
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[1].content, "ab");
  EXPECT_TRUE(r->messages[2].content_null);
  EXPECT_EQ(r->messages[2].tool_calls_json, R"([{"id":"c1"}])");
  EXPECT_EQ(r->messages[3].tool_call_id, "c1");
  EXPECT_EQ(r->max_tokens, 20);  // max_completion_tokens wins
  EXPECT_DOUBLE_EQ(*r->sampling.temperature, 0.5);
  EXPECT_DOUBLE_EQ(*r->sampling.top_p, 0.9);
  EXPECT_EQ(*r->sampling.top_k, 40);
  EXPECT_DOUBLE_EQ(*r->sampling.min_p, 0.05);
  EXPECT_DOUBLE_EQ(r->sampling.presence_penalty, -1);
  EXPECT_DOUBLE_EQ(r->sampling.frequency_penalty, 2);
  EXPECT_DOUBLE_EQ(*r->sampling.repetition_penalty, 1.1);
  EXPECT_EQ(*r->sampling.seed, -7);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 20);
  ASSERT_EQ(r->sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r->user, "u1");
  EXPECT_EQ(r->enable_thinking, false);
}

TEST(ChatRequestParserTest, NullMeansAbsentAndDefaultsStayUnset) {
  auto r = ParseChatCompletionRequest(Chat(R"("temperature":null,"stop":null,"n":null)"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->sampling.temperature.has_value());
  EXPECT_FALSE(r->max_tokens.has_value());
  EXPECT_TRUE(r->stop.empty());
  EXPECT_FALSE(r->stream);
}

TEST(ChatRequestParserTest, NChoicesUpToSixteenAndOneByDefault) {
  auto none = ParseChatCompletionRequest(Chat(R"("seed":1)"));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->n, 1);
  auto four = ParseChatCompletionRequest(Chat(R"("n":4)"));
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->n, 4);
  auto most = ParseCompletionRequest(R"({"model":"m","prompt":"x","n":16})");
  ASSERT_TRUE(most.ok()) << most.status();
  EXPECT_EQ(most->n, 16);
}

TEST(ChatRequestParserTest, StopAsStringAndIntegralFloatAccepted) {
  auto r = ParseChatCompletionRequest(Chat(R"("stop":"END","max_tokens":16.0)"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r->max_tokens, 16);
}

struct BadCase {
  std::string body;
  std::string param;  // expected `param`; "" for errors about the whole body
};

void ExpectBad(const absl::StatusOr<CompletionRequest>& r, const BadCase& c) {
  ASSERT_FALSE(r.ok()) << c.body;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
  EXPECT_EQ(ErrorParam(r.status()), c.param) << c.body << " -> " << r.status();
  EXPECT_FALSE(ErrorCode(r.status()).empty()) << c.body;
  EXPECT_EQ(ApiErrorFromStatus(r.status()).http_status, 400);
}

TEST(ChatRequestParserTest, EveryValidationErrorNamesItsField) {
  const std::vector<BadCase> cases = {
      {"", ""},
      {"{", ""},
      {"[1,2]", ""},
      {"\"text\"", ""},
      {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", ""},
      {R"({"model":1e400,"messages":[]})", ""},
      // max_json_depth (64): the 65th array is refused where it opens.
      {std::string(100, '[') + std::string(100, ']'),
       [] {
         std::string path;
         for (int i = 0; i < 64; ++i) path += "[0]";
         return path;
       }()},
      {R"({"messages":[{"role":"user","content":"x"}]})", "model"},
      {R"({"model":"","messages":[{"role":"user","content":"x"}]})", "model"},
      {R"({"model":5,"messages":[{"role":"user","content":"x"}]})", "model"},
      {R"({"model":"m"})", "messages"},
      {R"({"model":"m","messages":{}})", "messages"},
      {R"({"model":"m","messages":[]})", "messages"},
      {R"({"model":"m","messages":["hi"]})", "messages[0]"},
      {R"({"model":"m","messages":[{"content":"x"}]})", "messages[0].role"},
      {R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {R"({"model":"m","messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"model":"m","messages":[{"role":"user","content":7}]})", "messages[0].content"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
       "messages[1].content[0].type"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]})",
       "messages[0].content[0].type"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]})",
       "messages[0].content[0].text"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":1}]}]})",
       "messages[0].content[0].text"},
      {R"({"model":"m","messages":[{"role":"user","content":[5]}]})", "messages[0].content[0]"},
      {R"({"model":"m","messages":[{"role":"tool","content":"x"}]})", "messages[0].tool_call_id"},
      {R"({"model":"m","messages":[{"role":"user","content":"q"},)"
       R"({"role":"assistant","content":null,"tool_calls":[{"id":"c1"}]},)"
       R"({"role":"tool","tool_call_id":"c2","content":"x"}]})",
       "messages[2].tool_call_id"},
      {R"({"model":"m","messages":[{"role":"robot","content":"x"}]})", "messages[0].role"},
      {R"({"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]})",
       "messages[0].tool_calls"},
      {R"({"model":"m","messages":[{"role":"user","content":"x","name":3}]})", "messages[0].name"},
      // `reasoning` is checked even where `reasoning_content` wins (schemathesis found it ignored).
      {R"({"model":"m","messages":[{"role":"assistant","content":"a","reasoning_content":"r",)"
       R"("reasoning":{}}]})",
       "messages[0].reasoning"},
      {Chat(R"("max_tokens":0)"), "max_tokens"},
      {Chat(R"("max_tokens":-5)"), "max_tokens"},
      {Chat(R"("max_tokens":1.5)"), "max_tokens"},
      {Chat(R"("max_tokens":"10")"), "max_tokens"},
      {Chat(R"("max_tokens":99999999999999999999)"), "max_tokens"},
      {Chat(R"("max_completion_tokens":0)"), "max_completion_tokens"},
      {Chat(R"("temperature":2.5)"), "temperature"},
      {Chat(R"("temperature":-0.1)"), "temperature"},
      {Chat(R"("temperature":"hot")"), "temperature"},
      {Chat(R"("top_p":0)"), "top_p"},
      {Chat(R"("top_p":1.01)"), "top_p"},
      {Chat(R"("top_k":-2)"), "top_k"},
      {Chat(R"("top_k":2.5)"), "top_k"},
      {Chat(R"("min_p":1.5)"), "min_p"},
      {Chat(R"("presence_penalty":3)"), "presence_penalty"},
      {Chat(R"("frequency_penalty":-2.01)"), "frequency_penalty"},
      {Chat(R"("repetition_penalty":0)"), "repetition_penalty"},
      {Chat(R"("seed":"x")"), "seed"},
      {Chat(R"("seed":1.5)"), "seed"},
      // Unsigned values above INT64_MAX once wrapped to negatives and passed (schemathesis).
      {Chat(R"("seed":9223372036854775808)"), "seed"},
      {Chat(R"("seed":18446744073709551615)"), "seed"},
      {Chat(R"("top_k":18446744073709551615)"), "top_k"},
      {Chat(R"("stop":5)"), "stop"},
      {Chat(R"("stop":["a","b","c","d","e"])"), "stop"},
      {Chat(R"("stop":["a",7])"), "stop[1]"},
      {Chat(R"("stop":[""])"), "stop[0]"},
      {Chat(R"("n":17)"), "n"},
      {Chat(R"("n":0)"), "n"},
      {Chat(R"("stream":"yes")"), "stream"},
      {Chat(R"("stream_options":{"include_usage":true})"), "stream_options"},
      {Chat(R"("stream":true,"stream_options":[])"), "stream_options"},
      {Chat(R"("stream":true,"stream_options":{"include_usage":1})"),
       "stream_options.include_usage"},
      {Chat(R"("logprobs":1)"), "logprobs"},
      {Chat(R"("logprobs":true,"top_logprobs":21)"), "top_logprobs"},
      {Chat(R"("logprobs":true,"top_logprobs":-1)"), "top_logprobs"},
      {Chat(R"("top_logprobs":2)"), "top_logprobs"},
      {Chat(R"("logit_bias":[1])"), "logit_bias"},
      {Chat(R"("logit_bias":{"abc":1})"), "logit_bias.abc"},
      {Chat(R"("logit_bias":{"-1":1})"), "logit_bias.-1"},
      {Chat(R"("logit_bias":{"5":101})"), "logit_bias.5"},
      {Chat(R"("logit_bias":{"5":"x"})"), "logit_bias.5"},
      {Chat(R"("user":1)"), "user"},
      {Chat(R"("tools":{})"), "tools"},
      {Chat(R"("tool_choice":3)"), "tool_choice"},
      {Chat(R"("chat_template_kwargs":{"enable_thinking":"no"})"),
       "chat_template_kwargs.enable_thinking"},
      // Tools, tool_choice and tool messages (docs/chat.md, "Request validation").
      {Chat(R"("tools":[1])"), "tools[0]"},
      {Chat(R"("tools":[{"function":{"name":"f"}}])"), "tools[0].type"},
      {Chat(R"("tools":[{"type":"retrieval","function":{"name":"f"}}])"), "tools[0].type"},
      {Chat(R"("tools":[{"type":"function"}])"), "tools[0].function"},
      {Chat(R"("tools":[{"type":"function","function":{}}])"), "tools[0].function.name"},
      {Chat(R"("tools":[{"type":"function","function":{"name":"a b"}}])"),
       "tools[0].function.name"},
      {Chat(R"("tools":[{"type":"function","function":{"name":""}}])"), "tools[0].function.name"},
      {Chat(R"("tools":[{"type":"function","function":{"name":"f","parameters":"{}"}}])"),
       "tools[0].function.parameters"},
      {Chat(R"("tool_choice":"always")"), "tool_choice"},
      // "required" needs a tool to call.
      {Chat(R"("tool_choice":"required")"), "tool_choice"},
      {Chat(R"("tools":[],"tool_choice":"required")"), "tool_choice"},
      {Chat(R"("tool_choice":{"type":"function"})"), "tool_choice.function.name"},
      {Chat(R"("tool_choice":{"type":"x","function":{"name":"f"}})"), "tool_choice.type"},
      {Chat(R"("tools":[{"type":"function","function":{"name":"f"}}],)"
            R"("tool_choice":{"type":"function","function":{"name":"g"}})"),
       "tool_choice.function.name"},
      {Chat(R"("parallel_tool_calls":1)"), "parallel_tool_calls"},
      // response_format (docs/structured_outputs.md, "The API").
      {Chat(R"("response_format":"json")"), "response_format"},
      {Chat(R"("response_format":{})"), "response_format.type"},
      {Chat(R"("response_format":{"type":"xml"})"), "response_format.type"},
      {Chat(R"("response_format":{"type":"json_schema"})"), "response_format.json_schema"},
      {Chat(R"("response_format":{"type":"json_schema","json_schema":{"schema":{}}})"),
       "response_format.json_schema.name"},
      {Chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"a b"}})"),
       "response_format.json_schema.name"},
      {Chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"n","strict":1}})"),
       "response_format.json_schema.strict"},
      {Chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"n","schema":[1]}})"),
       "response_format.json_schema.schema"},
      {Chat(R"("response_format":{"type":"json_object"},"tools":[{"type":"function",)"
            R"("function":{"name":"f"}}],"tool_choice":"required")"),
       "response_format"},

      {Chat(R"("thinking_budget":-1)"), "thinking_budget"},
      {Chat(R"("thinking_budget":"many")"), "thinking_budget"},
      {Chat(R"("chat_template_kwargs":{"thinking_budget":1.5})"),
       "chat_template_kwargs.thinking_budget"},
  };
  for (const auto& c : cases) ExpectBad(ParseChatCompletionRequest(c.body), c);
}

// The chat fields of issue 12: any chat_template_kwargs passed through, `reasoning` on input,
// thinking_budget (the body's over the kwargs'), parallel_tool_calls, tool_choice "auto".
TEST(ChatRequestParserTest, ToolAndReasoningFields) {
  auto r = ParseChatCompletionRequest(R"({"model":"m","messages":[
      {"role":"user","content":"q"},
      {"role":"assistant","content":"a","reasoning":"because"}],
    "tools":[{"type":"function","function":{"name":"get-weather_2","parameters":{}}}],
    "tool_choice":"auto",
    "parallel_tool_calls":false, "thinking_budget":32,
    "chat_template_kwargs":{"enable_thinking":true,"thinking_budget":8,"custom":{"k":[1]}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages[1].reasoning_content, "because");
  EXPECT_FALSE(r->parallel_tool_calls);
  EXPECT_EQ(r->thinking_budget, 32);
  EXPECT_EQ(r->enable_thinking, true);
  EXPECT_EQ(r->chat_template_kwargs_json,
            R"({"enable_thinking":true,"thinking_budget":8,"custom":{"k":[1]}})");
  auto kw = ParseChatCompletionRequest(R"({"model":"m","messages":[{"role":"user","content":"q"}],)"
                                       R"("chat_template_kwargs":{"thinking_budget":0}})");
  ASSERT_TRUE(kw.ok()) << kw.status();
  EXPECT_EQ(kw->thinking_budget, 0);
  EXPECT_TRUE(kw->parallel_tool_calls);
}

// response_format as OpenAI's API reference and its Python SDK send it, and the tool_choice
// values that force a call (docs/structured_outputs.md, "The API").
// param and code of a failed chat parse ("ok" when it parses).
std::string ChatFault(const std::string& extra) {
  auto r = ParseChatCompletionRequest(Chat(extra));
  if (r.ok()) return "ok";
  return ErrorParam(r.status()) + " " + ErrorCode(r.status());
}

TEST(ChatRequestParserTest, ReasoningEffortIsResponsesEffort) {
  struct Row {
    const char* effort;
    bool thinking;
    std::optional<int32_t> budget;
  };
  for (const Row& row : {Row{"none", false, std::nullopt}, Row{"minimal", false, std::nullopt},
                         Row{"low", true, 1024}, Row{"medium", true, 4096},
                         Row{"high", true, 16384}}) {
    SCOPED_TRACE(row.effort);
    auto r = ParseChatCompletionRequest(Chat(std::string(R"("reasoning_effort":")") + row.effort +
                                             "\""));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->enable_thinking, row.thinking);
    EXPECT_EQ(r->thinking_budget, row.budget);
  }
  // A smaller budget the request set stays; a larger one is lowered to the level's.
  auto r = ParseChatCompletionRequest(Chat(R"("reasoning_effort":"high","thinking_budget":100)"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->thinking_budget, 100);
  r = ParseChatCompletionRequest(Chat(R"("reasoning_effort":"low","thinking_budget":5000)"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->thinking_budget, 1024);
  // Agreeing with chat_template_kwargs is fine; contradicting it is a 400.
  EXPECT_EQ(ChatFault(R"("reasoning_effort":"low","chat_template_kwargs":{"enable_thinking":true})"),
            "ok");
  EXPECT_EQ(
      ChatFault(R"("reasoning_effort":"high","chat_template_kwargs":{"enable_thinking":false})"),
      "reasoning_effort invalid_value");
  EXPECT_EQ(ChatFault(R"("reasoning_effort":"extreme")"), "reasoning_effort invalid_value");
  EXPECT_EQ(ChatFault(R"("reasoning_effort":1)"), "reasoning_effort invalid_type");
}

TEST(ChatRequestParserTest, FieldsWithNothingBehindThemAreDefaultsOrRefused) {
  EXPECT_EQ(ChatFault(R"("verbosity":"medium")"), "ok");
  EXPECT_EQ(ChatFault(R"("verbosity":"low")"), "verbosity unsupported_value");
  EXPECT_EQ(ChatFault(R"("verbosity":"high")"), "verbosity unsupported_value");
  EXPECT_EQ(ChatFault(R"("store":false,"metadata":{"team":"a"})"), "ok");
  EXPECT_EQ(ChatFault(R"("store":true)"), "store unsupported_value");
  EXPECT_EQ(ChatFault(R"("metadata":{"team":1})"), "metadata.team invalid_type");
  EXPECT_EQ(ChatFault(R"("modalities":["text"])"), "ok");
  EXPECT_EQ(ChatFault(R"("modalities":["text","audio"])"), "modalities[1] unsupported_value");
  EXPECT_EQ(ChatFault(R"("modalities":["video"])"), "modalities[0] invalid_value");
  EXPECT_EQ(ChatFault(R"("audio":{"voice":"alloy","format":"wav"})"), "audio unsupported_value");
  EXPECT_EQ(ChatFault(R"("prediction":{"type":"content","content":"x"})"),
            "prediction unsupported_value");
  EXPECT_EQ(ChatFault(R"("web_search_options":{})"), "web_search_options unsupported_value");
  EXPECT_EQ(ChatFault(R"("functions":[{"name":"f"}])"), "functions unsupported_value");
  EXPECT_EQ(ChatFault(R"("function_call":"auto")"), "function_call unsupported_value");
  EXPECT_EQ(ChatFault(R"("service_tier":"auto")"), "ok");
  EXPECT_EQ(ChatFault(R"("service_tier":"priority")"), "service_tier unsupported_value");
  EXPECT_EQ(ChatFault(R"("stream":true,"stream_options":{"include_obfuscation":false})"), "ok");
  EXPECT_EQ(ChatFault(R"("stream":true,"stream_options":{"include_obfuscation":"no"})"),
            "stream_options.include_obfuscation invalid_type");
  EXPECT_FALSE(ParseCompletionRequest(R"({"model":"m","prompt":"x","stream":true,
                                          "stream_options":{"include_obfuscation":1}})")
                   .ok());
  EXPECT_EQ(ChatFault(R"("prompt_cache_key":"k")"), "ok");
  EXPECT_EQ(ChatFault(R"("prompt_cache_key":5)"), "prompt_cache_key invalid_type");
  // null is absent everywhere.
  EXPECT_EQ(ChatFault(R"("audio":null,"functions":null,"store":null,"verbosity":null)"), "ok");
  auto r = ParseChatCompletionRequest(Chat(R"("safety_identifier":"hash-1")"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->user, "hash-1");
}

TEST(ChatRequestParserTest, ResponseFormatAndForcedToolChoice) {
  auto schema = ParseChatCompletionRequest(
      Chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"answer",)"
           R"("description":"d","strict":true,"schema":{"type":"object","properties":)"
           R"({"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}}})"));
  ASSERT_TRUE(schema.ok()) << schema.status();
  EXPECT_EQ(schema->response_format.type, ResponseFormat::Type::kJsonSchema);
  EXPECT_EQ(schema->response_format.name, "answer");
  EXPECT_TRUE(schema->response_format.strict);
  // Compact, in the client's key order.
  EXPECT_EQ(schema->response_format.schema_json,
            R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],)"
            R"("additionalProperties":false})");

  auto no_schema = ParseChatCompletionRequest(Chat(
      R"("response_format":{"type":"json_schema","json_schema":{"name":"any","strict":null}})"));
  ASSERT_TRUE(no_schema.ok()) << no_schema.status();
  EXPECT_EQ(no_schema->response_format.schema_json, "{}");
  EXPECT_FALSE(no_schema->response_format.strict);

  auto object = ParseChatCompletionRequest(Chat(R"("response_format":{"type":"json_object"})"));
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->response_format.type, ResponseFormat::Type::kJsonObject);
  auto text = ParseChatCompletionRequest(Chat(R"("response_format":{"type":"text"})"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->response_format.type, ResponseFormat::Type::kText);
  auto completion = ParseCompletionRequest(
      R"({"model":"m","prompt":"x","response_format":{"type":"json_object"}})");
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->response_format.type, ResponseFormat::Type::kJsonObject);

  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{}}},)"
      R"({"type":"function","function":{"name":"g"}}])";
  auto required = ParseChatCompletionRequest(Chat(tools + R"(,"tool_choice":"required")"));
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_EQ(required->tool_choice, ToolChoice::kRequired);
  auto named = ParseChatCompletionRequest(
      Chat(tools + R"(,"tool_choice":{"type":"function","function":{"name":"g"}})"));
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->tool_choice, ToolChoice::kFunction);
  EXPECT_EQ(named->tool_choice_function, "g");
  auto none = ParseChatCompletionRequest(Chat(tools + R"(,"tool_choice":"none")"));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->tool_choice, ToolChoice::kNone);
}

// vLLM's and SGLang's guided-decoding fields (docs/structured_outputs.md, "vLLM-style fields").
TEST(ChatRequestParserTest, VllmGuidedDecodingFields) {
  auto regex = ParseChatCompletionRequest(Chat(R"("structured_outputs":{"regex":"[0-9]{3}"})"));
  ASSERT_TRUE(regex.ok()) << regex.status();
  EXPECT_EQ(regex->response_format.type, ResponseFormat::Type::kRegex);
  EXPECT_EQ(regex->response_format.regex, "[0-9]{3}");
  EXPECT_EQ(regex->response_format.param, "structured_outputs.regex");
  for (const char* field : {R"("guided_regex":"a+")", R"("regex":"a+")"}) {
    auto r = ParseChatCompletionRequest(Chat(field));
    ASSERT_TRUE(r.ok()) << field << r.status();
    EXPECT_EQ(r->response_format.type, ResponseFormat::Type::kRegex);
    EXPECT_EQ(r->response_format.regex, "a+");
  }
  // A choice is one of its strings exactly: regex metacharacters are escaped.
  auto choice = ParseChatCompletionRequest(Chat(R"x("guided_choice":["yes","no (1.5)","a|b"])x"));
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->response_format.type, ResponseFormat::Type::kRegex);
  EXPECT_EQ(choice->response_format.regex, R"((yes|no \(1\.5\)|a\|b))");
  auto so_choice =
      ParseChatCompletionRequest(Chat(R"("structured_outputs":{"choice":["x","y"]})"));
  ASSERT_TRUE(so_choice.ok()) << so_choice.status();
  EXPECT_EQ(so_choice->response_format.regex, "(x|y)");
  // json: a schema object, or a string holding one.
  for (const char* field : {R"("guided_json":{"type":"boolean"})",
                            R"("guided_json":"{\"type\": \"boolean\"}")",
                            R"("structured_outputs":{"json":{"type":"boolean"}})"}) {
    auto r = ParseChatCompletionRequest(Chat(field));
    ASSERT_TRUE(r.ok()) << field << r.status();
    EXPECT_EQ(r->response_format.type, ResponseFormat::Type::kJsonSchema) << field;
    EXPECT_EQ(r->response_format.schema_json, R"({"type":"boolean"})") << field;
  }
  auto object = ParseChatCompletionRequest(
      Chat(R"("structured_outputs":{"json_object":true,"regex":null})"));
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->response_format.type, ResponseFormat::Type::kJsonObject);
  auto completion =
      ParseCompletionRequest(R"({"model":"m","prompt":"x","guided_regex":"[ab]{2}"})");
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->response_format.regex, "[ab]{2}");

  // Refusals name the field.
  const std::pair<std::string, std::string> kBad[] = {
      {Chat(R"("structured_outputs":[])"), "structured_outputs"},
      {Chat(R"("structured_outputs":{"regex":7})"), "structured_outputs.regex"},
      {Chat(R"("structured_outputs":{"regex":"(a"})"), "structured_outputs.regex"},
      {Chat(R"x("guided_regex":"a(?=b)")x"), "guided_regex"},
      {Chat(R"("guided_choice":[])"), "guided_choice"},
      {Chat(R"("guided_choice":["a",1])"), "guided_choice[1]"},
      {Chat(R"("guided_json":"{not json")"), "guided_json"},
      {Chat(R"("guided_json":{"type":"strange"})"), "guided_json"},
      {Chat(R"("guided_grammar":"root ::= \"a\"")"), "guided_grammar"},
      {Chat(R"("structured_outputs":{"grammar":"root ::= x"})"), "structured_outputs.grammar"},
      {Chat(R"("ebnf":"root ::= x")"), "ebnf"},
      // vLLM's options are refused, not accepted and ignored.
      {Chat(R"("structured_outputs":{"regex":"a","disable_any_whitespace":true})"),
       "structured_outputs.disable_any_whitespace"},
      {Chat(R"("structured_outputs":{"json_object":1})"), "structured_outputs.json_object"},
      {Chat(R"("guided_json":{},"guided_whitespace_pattern":" ?")"), "guided_whitespace_pattern"},
      {Chat(R"("guided_regex":"a","guided_choice":["b"])"), "guided_regex"},
      {Chat(R"("response_format":{"type":"json_object"},"guided_regex":"a")"), "guided_regex"},
      {Chat(R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required",)"
            R"("guided_regex":"a")"),
       "guided_regex"},
  };
  for (const auto& [body, param] : kBad) {
    auto r = ParseChatCompletionRequest(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(ApiErrorFromStatus(r.status()).http_status, 400) << body;
    EXPECT_EQ(ErrorParam(r.status()), param) << body << ": " << r.status();
  }
}

// A schema the grammar engine cannot enforce is a 400 before any worker is involved, naming the
// keyword (the compiler's message), with the schema's path as param.
TEST(ChatRequestParserTest, UnenforceableSchemaIsA400NamingTheKeyword) {
  auto r = ParseChatCompletionRequest(
      Chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"n","schema":)"
           R"({"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}}}})"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorParam(r.status()), "response_format.json_schema.schema");
  EXPECT_EQ(ApiErrorFromStatus(r.status()).http_status, 400);
  EXPECT_NE(r.status().message().find("$ref"), std::string_view::npos) << r.status();

  auto not_json_schema = ParseChatCompletionRequest(
      Chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"n","schema":)"
           R"({"type":"strange"}}})"));
  ASSERT_FALSE(not_json_schema.ok());
  EXPECT_EQ(ErrorParam(not_json_schema.status()), "response_format.json_schema.schema");
}

// max_response_schema_bytes (docs/router.md, "Request limits"): checked on the compact JSON
// before the schema is compiled.
TEST(ChatRequestParserTest, ResponseSchemaOverTheLimitIsA400) {
  const std::string description((1 << 20) + 1, 'x');
  auto r = ParseChatCompletionRequest(
      Chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"n","schema":)"
           R"({"type":"object","description":")" +
           description + R"("}}})"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorParam(r.status()), "response_format.json_schema.schema");
  EXPECT_EQ(ErrorCode(r.status()), "request_limit_exceeded");
  EXPECT_NE(r.status().message().find("max_response_schema_bytes"), std::string_view::npos)
      << r.status().message().substr(0, 200);
}

TEST(CompletionRequestParserTest, PromptForms) {
  auto text = ParseCompletionRequest(R"({"model":"m","prompt":"Once","logprobs":3})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->prompt, "Once");
  EXPECT_TRUE(text->logprobs);
  EXPECT_EQ(text->top_logprobs, 3);

  auto one = ParseCompletionRequest(R"({"model":"m","prompt":["Once"]})");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->prompt, "Once");

  auto ids = ParseCompletionRequest(R"({"model":"m","prompt":[1,2,3]})");
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(ids->prompt_is_tokens);
  EXPECT_EQ(ids->prompt_tokens, (std::vector<int32_t>{1, 2, 3}));

  auto nested = ParseCompletionRequest(R"({"model":"m","prompt":[[4,5]]})");
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(nested->prompt_tokens, (std::vector<int32_t>{4, 5}));
}

TEST(CompletionRequestParserTest, EveryValidationErrorNamesItsField) {
  const std::vector<BadCase> cases = {
      {R"({"model":"m"})", "prompt"},
      {R"({"model":"m","prompt":5})", "prompt"},
      {R"({"model":"m","prompt":[]})", "prompt"},
      {R"({"model":"m","prompt":["a","b"]})", "prompt"},
      {R"({"model":"m","prompt":[1,-2]})", "prompt[1]"},
      {R"({"model":"m","prompt":[1,"a"]})", "prompt[1]"},
      {R"({"model":"m","prompt":[[1,2.5]]})", "prompt[0][1]"},
      {R"({"model":"m","prompt":[[]]})", "prompt[0]"},
      {R"({"model":"m","prompt":"x","logprobs":true})", "logprobs"},
      {R"({"model":"m","prompt":"x","logprobs":21})", "logprobs"},
      {R"({"model":"m","prompt":"x","echo":true})", "echo"},
      {R"({"model":"m","prompt":"x","best_of":2})", "best_of"},
      {R"({"model":"m","prompt":"x","suffix":"y"})", "suffix"},
      {R"({"model":"m","prompt":"x","n":17})", "n"},
      {R"({"prompt":"x"})", "model"},
  };
  for (const auto& c : cases) ExpectBad(ParseCompletionRequest(c.body), c);
}

TEST(ApiErrorTest, StatusMapsToHttpStatusAndOpenAiShape) {
  EXPECT_EQ(ApiErrorFromStatus(absl::NotFoundError("x")).http_status, 404);
  EXPECT_EQ(ApiErrorFromStatus(absl::UnauthenticatedError("x")).http_status, 401);
  EXPECT_EQ(ApiErrorFromStatus(absl::PermissionDeniedError("x")).http_status, 403);
  EXPECT_EQ(ApiErrorFromStatus(absl::ResourceExhaustedError("x")).http_status, 429);
  EXPECT_EQ(ApiErrorFromStatus(absl::UnavailableError("x")).http_status, 503);
  EXPECT_EQ(ApiErrorFromStatus(absl::InternalError("x")).http_status, 500);
  ApiError e = ApiErrorFromStatus(InvalidRequestError("stop[1]", "invalid_type", "bad"));
  EXPECT_EQ(ApiErrorJson(e), R"({"error":{"code":"invalid_type","message":"bad","param":"stop[1]",)"
                             R"("type":"invalid_request_error"}})");
  EXPECT_EQ(ApiErrorJson(ApiErrorFromStatus(absl::UnavailableError("down"))),
            R"({"error":{"code":null,"message":"down","param":null,"type":"server_error"}})");
}

}  // namespace
}  // namespace deltaserve::router::api

namespace deltaserve::router::api {
namespace {

TEST(ChatRequestParserTest, ToolsKeepTheClientsKeyOrder) {
  // The chat template prints tools as the client wrote them (Hugging Face keeps dict order), so
  // "type" before "function" must stay in that order, not sorted.
  absl::StatusOr<CompletionRequest> r = ParseChatCompletionRequest(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],)"
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"z":1,"a":2}}}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tools_json,
            R"([{"type":"function","function":{"name":"f","parameters":{"z":1,"a":2}}}])");
}

}  // namespace
}  // namespace deltaserve::router::api
