// Unit tests of router/api/openai_response: the JSON shapes OpenAI documents for
// chat.completion, text_completion, their streamed chunks, usage and both logprobs shapes
// (platform.openai.com/docs/api-reference/chat/object and .../chat/streaming).

#include "router/api/openai_response.h"

#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "router/api/prometheus_text.h"

namespace deltaserve::router::api {
namespace {

using json = nlohmann::json;

ResponseMeta Meta(const char* id) { return {id, 1700000000, "qwen3.5-4b"}; }

TEST(OpenAiResponseTest, ChatCompletionShape) {
  CompletionChoice c;
  c.text = "Hi!";
  c.finish_reason = FinishReason::kLength;
  Usage usage{10, 2, 4};
  usage.reasoning_tokens = 1;
  json j = json::parse(ChatCompletionJson(Meta("chatcmpl-1"), c, usage));
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "qwen3.5-4b");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"], json({{"role", "assistant"}, {"content", "Hi!"}}));
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"], json::parse(R"({"prompt_tokens":10,"completion_tokens":2,
      "total_tokens":12,"prompt_tokens_details":{"cached_tokens":4},
      "completion_tokens_details":{"reasoning_tokens":1}})"));
}

TEST(OpenAiResponseTest, ChatLogprobsShapeKeepsExactBytes) {
  CompletionChoice c;
  c.with_logprobs = true;
  c.logprobs.push_back(
      {"\xE4\xBD", -0.5f, {{"\xE4\xBD", -0.5f}, {"a", -2.0f}}});  // half a CJK char
  json j = json::parse(ChatCompletionJson(Meta("chatcmpl-2"), c, {}));
  const json& t = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(t["token"], "\xEF\xBF\xBD");             // the incomplete sequence replaced by U+FFFD
  EXPECT_EQ(t["bytes"], json::array({0xE4, 0xBD}));  // exact in bytes
  EXPECT_DOUBLE_EQ(t["logprob"].get<double>(), -0.5);
  EXPECT_EQ(t["top_logprobs"].size(), 2u);
  EXPECT_EQ(t["top_logprobs"][1]["token"], "a");
  EXPECT_TRUE(j["choices"][0]["logprobs"]["refusal"].is_null());
}

TEST(OpenAiResponseTest, TextCompletionWithLogprobs) {
  CompletionChoice c;
  c.text = "ab";
  c.with_logprobs = true;
  c.logprobs = {{"a", -1.0f, {{"a", -1.0f}}}, {"b", -2.0f, {{"b", -2.0f}}}};
  json j = json::parse(TextCompletionJson(Meta("cmpl-1"), c, {3, 2, 0}));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "ab");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], json::array({"a", "b"}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], json::array({0, 1}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][1], json({{"b", -2.0}}));
}

// OpenAI's shape of an answer with tool calls: content null, arguments a JSON string.
TEST(OpenAiResponseTest, ChatCompletionWithToolCallsAndReasoning) {
  CompletionChoice c;
  c.content_null = true;
  c.reasoning_content = "The user wants weather.";
  c.tool_calls = {{"call_1", "get_weather", R"({"city":"Paris"})"}};
  c.finish_reason = FinishReason::kToolCalls;
  json j = json::parse(ChatCompletionJson(Meta("chatcmpl-9"), c, {10, 2, 0}));
  const json& m = j["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["reasoning_content"], "The user wants weather.");
  EXPECT_EQ(m["reasoning"], "The user wants weather.");
  EXPECT_EQ(m["tool_calls"], json::parse(R"([{"id":"call_1","type":"function",)"
                                         R"("function":{"name":"get_weather",)"
                                         R"("arguments":"{\"city\":\"Paris\"}"}}])"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  c.content_null = false;
  c.tool_calls.clear();
  EXPECT_EQ(json::parse(ChatCompletionJson(Meta("x"), c, {}))["choices"][0]["message"]["content"],
            "");
}

TEST(OpenAiResponseTest, ChatChunksInStreamOrder) {
  ChatChunkWriter w(Meta("chatcmpl-3"), /*include_usage=*/true, /*with_logprobs=*/false);
  json role = json::parse(w.RoleChunk());
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(role.contains("usage") && role["usage"].is_null());
  json delta = json::parse(w.DeltaChunk("Hel", "", {}));
  EXPECT_EQ(delta["choices"][0]["delta"], json({{"content", "Hel"}}));
  json reasoning = json::parse(w.DeltaChunk("", "think", {}));
  // Both names: some clients read `reasoning` (issue 12).
  EXPECT_EQ(reasoning["choices"][0]["delta"],
            json({{"reasoning_content", "think"}, {"reasoning", "think"}}));
  json start = json::parse(w.ToolCallChunk({1, "call_a", "get_weather", ""}));
  EXPECT_EQ(start["choices"][0]["delta"],
            json::parse(R"({"tool_calls":[{"index":1,"id":"call_a","type":"function",)"
                        R"("function":{"name":"get_weather","arguments":""}}]})"));
  json args = json::parse(w.ToolCallChunk({1, "", "", R"({"city":"Paris"})"}));
  EXPECT_EQ(args["choices"][0]["delta"],
            json::parse(
                R"({"tool_calls":[{"index":1,"function":{"arguments":"{\"city\":\"Paris\"}"}}]})"));
  json fin = json::parse(w.FinishChunk(FinishReason::kStop));
  EXPECT_EQ(fin["choices"][0]["delta"], json::object());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  json usage = json::parse(w.UsageChunk({5, 3, 0}));
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["total_tokens"], 8);
  EXPECT_EQ(usage["id"], "chatcmpl-3");

  ChatChunkWriter no_usage(Meta("chatcmpl-4"), false, false);
  EXPECT_FALSE(json::parse(no_usage.RoleChunk()).contains("usage"));
}

TEST(OpenAiResponseTest, TextChunksTrackOffsets) {
  TextChunkWriter w(Meta("cmpl-2"), false, true);
  json a = json::parse(w.DeltaChunk("ab", {{"ab", -1.0f, {}}}));
  json b = json::parse(w.DeltaChunk("c", {{"c", -1.0f, {}}}));
  EXPECT_EQ(a["object"], "text_completion");
  EXPECT_EQ(a["choices"][0]["text"], "ab");
  EXPECT_EQ(b["choices"][0]["logprobs"]["text_offset"], json::array({2}));
  EXPECT_EQ(json::parse(w.FinishChunk(FinishReason::kLength))["choices"][0]["finish_reason"],
            "length");
}

TEST(OpenAiResponseTest, ChoicesCarryTheirIndexAndOneUsage) {
  // n > 1 (platform.openai.com/docs/api-reference/chat/object: choices[].index).
  std::vector<CompletionChoice> choices(3);
  choices[0].text = "a";
  choices[1].text = "b";
  choices[1].finish_reason = FinishReason::kLength;
  choices[2].content_null = true;
  choices[2].tool_calls.push_back({"call_1", "f", "{}"});
  choices[2].finish_reason = FinishReason::kToolCalls;
  json chat = json::parse(ChatCompletionJson(Meta("chatcmpl-5"), choices, {7, 9, 0}));
  ASSERT_EQ(chat["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(chat["choices"][i]["index"], i);
  EXPECT_EQ(chat["choices"][1]["message"]["content"], "b");
  EXPECT_EQ(chat["choices"][1]["finish_reason"], "length");
  EXPECT_TRUE(chat["choices"][2]["message"]["content"].is_null());
  EXPECT_EQ(chat["choices"][2]["finish_reason"], "tool_calls");
  EXPECT_EQ(chat["usage"]["total_tokens"], 16);
  json text = json::parse(TextCompletionJson(Meta("cmpl-5"), choices, {7, 9, 0}));
  EXPECT_EQ(text["choices"][1]["index"], 1);
  EXPECT_EQ(text["choices"][1]["text"], "b");

  ChatChunkWriter cw(Meta("chatcmpl-6"), false, false);
  EXPECT_EQ(json::parse(cw.RoleChunk(2))["choices"][0]["index"], 2);
  EXPECT_EQ(json::parse(cw.DeltaChunk("x", "", {}, 1))["choices"][0]["index"], 1);
  EXPECT_EQ(json::parse(cw.ToolCallChunk({0, "call_1", "f", ""}, 3))["choices"][0]["index"], 3);
  EXPECT_EQ(json::parse(cw.FinishChunk(FinishReason::kStop, 1))["choices"][0]["index"], 1);
  // Completions logprobs' text_offset counts each choice's own text.
  TextChunkWriter tw(Meta("cmpl-6"), false, true);
  tw.DeltaChunk("abc", {{"abc", -1.0f, {}}}, 0);
  json b = json::parse(tw.DeltaChunk("d", {{"d", -1.0f, {}}}, 1));
  json a = json::parse(tw.DeltaChunk("e", {{"e", -1.0f, {}}}, 0));
  EXPECT_EQ(b["choices"][0]["index"], 1);
  EXPECT_EQ(b["choices"][0]["logprobs"]["text_offset"], json::array({0}));
  EXPECT_EQ(a["choices"][0]["logprobs"]["text_offset"], json::array({3}));
}

TEST(OpenAiResponseTest, IdsHavePrefixAndAreDistinct) {
  std::string a = NewResponseId("chatcmpl-"), b = NewResponseId("chatcmpl-");
  EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(a.size(), 9u + 24u);
  EXPECT_NE(a, b);
  EXPECT_EQ(NewResponseId("cmpl-").rfind("cmpl-", 0), 0u);
}

// The exposition format as specified in prometheus.io/docs/instrumenting/exposition_formats.
TEST(PrometheusTextTest, FamiliesLabelsAndHistogram) {
  PrometheusText out;
  out.Counter("req_total", "Requests.\nTwo lines", {{"path", "a\"b\\c\nd"}}, 3);
  out.Counter("req_total", "ignored", {{"path", "x"}}, 4);
  out.Gauge("g", "G.", {}, 0.25);
  out.Histogram("lat", "L.", {{"r", "x"}}, {0.1, 1}, {1, 2, 3}, 7.5);
  EXPECT_EQ(out.text(),
            "# HELP req_total Requests.\\nTwo lines\n"
            "# TYPE req_total counter\n"
            "req_total{path=\"a\\\"b\\\\c\\nd\"} 3\n"
            "req_total{path=\"x\"} 4\n"
            "# HELP g G.\n# TYPE g gauge\ng 0.25\n"
            "# HELP lat L.\n# TYPE lat histogram\n"
            "lat_bucket{r=\"x\",le=\"0.1\"} 1\n"
            "lat_bucket{r=\"x\",le=\"1\"} 3\n"
            "lat_bucket{r=\"x\",le=\"+Inf\"} 6\n"
            "lat_sum{r=\"x\"} 7.5\n"
            "lat_count{r=\"x\"} 6\n");
  EXPECT_EQ(PrometheusText::FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(PrometheusText::FormatValue(0.1), "0.1");
}

}  // namespace
}  // namespace deltaserve::router::api
