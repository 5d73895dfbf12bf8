// What the router sends an upstream and how it reads the answer (router/upstream/
// upstream_request.h, upstream_stream.h, upstream_call.h's ClassifyHttpError): requests parsed
// by the router's own parsers, translated chat completions -> Messages and Messages -> chat
// completions, passed through when the client speaks the upstream's API; streamed answers of
// both APIs turned into the router's deltas; upstream errors into statuses that never quote the
// key. Expected values come from the two APIs' documented shapes, written out by hand.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/anthropic_request.h"
#include "router/api/api_error.h"
#include "router/api/request_parser.h"
#include "router/upstream/upstream_call.h"
#include "router/upstream/upstream_request.h"
#include "router/upstream/upstream_stream.h"

namespace deltaserve::router::upstream {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

UpstreamConfig Upstream(UpstreamKind kind) {
  UpstreamConfig u;
  u.name = "cloud";
  u.kind = kind;
  u.base_url = "https://api.example.com/v1";
  u.model = "hosted-model";
  u.api_key = "sk-test-secret-0123456789";
  return u;
}

UpstreamUrl Url() { return *ParseUpstreamUrl("https://api.example.com/v1"); }

api::CompletionRequest Chat(const std::string& body) {
  absl::StatusOr<api::CompletionRequest> r = api::ParseChatCompletionRequest(body);
  EXPECT_TRUE(r.ok()) << r.status();
  r->raw_body = std::make_shared<const std::string>(body);
  return *r;
}

api::CompletionRequest Messages(const std::string& body) {
  absl::StatusOr<api::CompletionRequest> r = api::ParseAnthropicMessagesRequest(body);
  EXPECT_TRUE(r.ok()) << r.status();
  r->raw_body = std::make_shared<const std::string>(body);
  return *r;
}

json Sent(const api::CompletionRequest& r, UpstreamKind kind, std::string* path = nullptr) {
  absl::StatusOr<UpstreamHttpRequest> built = BuildUpstreamRequest(r, Upstream(kind), Url());
  EXPECT_TRUE(built.ok()) << built.status();
  if (!built.ok()) return json();
  if (path != nullptr) *path = built->path;
  return json::parse(built->body);
}

constexpr const char* kToolRoundTrip = R"({
  "model": "cloud", "max_tokens": 100, "temperature": 0.5, "stop": ["END"],
  "messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
      {"id": "call_2", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "22 C"},
    {"role": "tool", "tool_call_id": "call_2", "content": "25 C"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
  "tool_choice": "required"})";

TEST(UpstreamTranslationTest, ChatCompletionsToMessages) {
  std::string path;
  const json sent = Sent(Chat(kToolRoundTrip), UpstreamKind::kAnthropic, &path);
  EXPECT_EQ(path, "/v1/messages");
  const json expected = json::parse(R"({
    "model": "hosted-model", "system": "Be brief.",
    "messages": [
      {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
      {"role": "assistant", "content": [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "22 C"},
        {"type": "tool_result", "tool_use_id": "call_2", "content": "25 C"}]}],
    "max_tokens": 100, "temperature": 0.5, "stop_sequences": ["END"],
    "tools": [{"name": "get_weather", "description": "Weather.",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "tool_choice": {"type": "any"}, "stream": true})");
  EXPECT_EQ(sent, expected) << sent.dump(2);
}

TEST(UpstreamTranslationTest, MessagesGetADefaultMaxTokensAndThinking) {
  const json sent = Sent(
      Chat(R"({"model": "c", "messages": [{"role": "user", "content": "Hi"}],
               "chat_template_kwargs": {"enable_thinking": true}})"),
      UpstreamKind::kAnthropic);
  EXPECT_EQ(sent["max_tokens"], kDefaultAnthropicMaxTokens);
  EXPECT_EQ(sent["thinking"], json::parse(R"({"type": "enabled", "budget_tokens": 2048})"));
}

TEST(UpstreamTranslationTest, WhatMessagesCannotSayIsRefusedNamingTheField) {
  const struct {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"model":"c","n":2,"messages":[{"role":"user","content":"x"}]})", "n"},
      {R"({"model":"c","logprobs":true,"messages":[{"role":"user","content":"x"}]})", "logprobs"},
      {R"({"model":"c","temperature":1.5,"messages":[{"role":"user","content":"x"}]})",
       "temperature"},
      {R"({"model":"c","presence_penalty":1,"messages":[{"role":"user","content":"x"}]})",
       "presence_penalty"},
      {R"({"model":"c","response_format":{"type":"json_object"},
           "messages":[{"role":"user","content":"x"}]})",
       "response_format"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<UpstreamHttpRequest> built =
        BuildUpstreamRequest(Chat(c.body), Upstream(UpstreamKind::kAnthropic), Url());
    ASSERT_FALSE(built.ok()) << c.body;
    EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(api::ErrorParam(built.status()), c.param);
    EXPECT_THAT(built.status().message(), HasSubstr("upstream 'cloud'"));
  }
  absl::StatusOr<api::CompletionRequest> completion =
      api::ParseCompletionRequest(R"({"model":"c","prompt":"x"})");
  ASSERT_TRUE(completion.ok());
  EXPECT_EQ(BuildUpstreamRequest(*completion, Upstream(UpstreamKind::kAnthropic), Url())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(UpstreamTranslationTest, MessagesToChatCompletions) {
  std::string path;
  const json sent = Sent(Messages(R"({
    "model": "cloud", "max_tokens": 64, "system": "Be brief.",
    "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "22 C"},
        {"type": "text", "text": "Thanks"}]}],
    "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "tool", "name": "get_weather"}, "stop_sequences": ["END"]})"),
                         UpstreamKind::kOpenAi, &path);
  EXPECT_EQ(path, "/v1/chat/completions");
  EXPECT_EQ(sent["model"], "hosted-model");
  EXPECT_EQ(sent["max_tokens"], 64);
  EXPECT_EQ(sent["stop"], json::parse(R"(["END"])"));
  EXPECT_EQ(sent["stream"], true);
  EXPECT_EQ(sent["stream_options"], json::parse(R"({"include_usage": true})"));
  EXPECT_EQ(sent["tools"], json::parse(R"([{"type": "function", "function": {
      "name": "get_weather", "parameters": {"type": "object"}}}])"));
  EXPECT_EQ(sent["tool_choice"],
            json::parse(R"({"type": "function", "function": {"name": "get_weather"}})"));
  const json& m = sent["messages"];
  ASSERT_EQ(m.size(), 5u) << m.dump(2);
  EXPECT_EQ(m[0], json::parse(R"({"role": "system", "content": "Be brief."})"));
  EXPECT_EQ(m[1], json::parse(R"({"role": "user", "content": "Weather?"})"));
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "Let me check.");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(json::parse(m[2]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(m[3], json::parse(R"({"role": "tool", "content": "22 C", "tool_call_id": "toolu_1"})"));
  EXPECT_EQ(m[4], json::parse(R"({"role": "user", "content": "Thanks"})"));
}

TEST(UpstreamTranslationTest, TheClientsOwnApiIsPassedThrough) {
  // Fields the router does not model (metadata, a cache_control mark, service_tier) reach the
  // upstream as the client wrote them; only model and stream change.
  const std::string body = R"({"model": "cloud", "max_tokens": 10, "metadata": {"user_id": "u"},
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi",
                                              "cache_control": {"type": "ephemeral"}}]}]})";
  json expected = json::parse(body);
  expected["model"] = "hosted-model";
  expected["stream"] = true;
  EXPECT_EQ(Sent(Messages(body), UpstreamKind::kAnthropic), expected);

  const std::string chat = R"({"model": "cloud", "service_tier": "auto", "stream": true,
    "stream_options": {"include_usage": false},
    "messages": [{"role": "user", "content": "Hi"}]})";
  expected = json::parse(chat);
  expected["model"] = "hosted-model";
  expected["stream"] = true;
  expected["stream_options"]["include_usage"] = true;
  EXPECT_EQ(Sent(Chat(chat), UpstreamKind::kOpenAi), expected);
}

TEST(UpstreamTranslationTest, RequestBytesCarryTheKeyOnlyInItsHeader) {
  UpstreamHttpRequest r{"/v1/messages", "{}", false};
  const std::string anthropic =
      UpstreamHttpRequestBytes(r, Upstream(UpstreamKind::kAnthropic), Url(), "req-7");
  EXPECT_THAT(anthropic, HasSubstr("POST /v1/messages HTTP/1.1\r\nHost: api.example.com\r\n"));
  EXPECT_THAT(anthropic, HasSubstr("\r\nx-api-key: sk-test-secret-0123456789\r\n"));
  EXPECT_THAT(anthropic, HasSubstr("\r\nanthropic-version: 2023-06-01\r\n"));
  EXPECT_THAT(anthropic, HasSubstr("\r\nX-Request-Id: req-7\r\n"));
  EXPECT_THAT(anthropic, Not(HasSubstr("Authorization")));
  const std::string openai =
      UpstreamHttpRequestBytes(r, Upstream(UpstreamKind::kOpenAi), Url(), "");
  EXPECT_THAT(openai, HasSubstr("\r\nAuthorization: Bearer sk-test-secret-0123456789\r\n"));
  EXPECT_THAT(openai, Not(HasSubstr("X-Request-Id")));
  EXPECT_THAT(openai, HasSubstr("\r\nContent-Length: 2\r\n"));
  EXPECT_TRUE(openai.ends_with("\r\n\r\n{}"));
}

std::vector<api::GenerationDelta> Feed(StreamTranslator& t,
                                       const std::vector<std::pair<std::string, std::string>>& ev) {
  std::vector<api::GenerationDelta> out;
  for (const auto& [name, data] : ev) {
    absl::Status s = t.OnEvent(SseEvent{name, data}, &out);
    EXPECT_TRUE(s.ok()) << s << " at " << data;
  }
  return out;
}

TEST(UpstreamStreamTest, AnthropicEventsBecomeDeltas) {
  auto t = MakeStreamTranslator(UpstreamKind::kAnthropic, api::Endpoint::kChatCompletions, 1);
  std::vector<api::GenerationDelta> d = Feed(*t, {
      {"message_start", R"({"type":"message_start","message":{"usage":{"input_tokens":11,
         "cache_read_input_tokens":3,"output_tokens":1}}})"},
      {"content_block_start", R"({"index":0,"content_block":{"type":"thinking","thinking":""}})"},
      {"content_block_delta", R"({"index":0,"delta":{"type":"thinking_delta","thinking":"Hm."}})"},
      {"content_block_delta", R"({"index":0,"delta":{"type":"signature_delta","signature":"s"}})"},
      {"content_block_stop", R"({"index":0})"},
      {"ping", R"({"type":"ping"})"},
      {"content_block_start", R"({"index":1,"content_block":{"type":"text","text":""}})"},
      {"content_block_delta", R"({"index":1,"delta":{"type":"text_delta","text":"Sure."}})"},
      {"content_block_start", R"({"index":2,"content_block":{"type":"tool_use","id":"toolu_9",
         "name":"f","input":{}}})"},
      {"content_block_delta", R"({"index":2,"delta":{"type":"input_json_delta",
         "partial_json":"{\"a\":"}})"},
      {"content_block_delta", R"({"index":2,"delta":{"type":"input_json_delta",
         "partial_json":"1}"}})"},
      {"message_delta", R"({"delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}})"},
  });
  EXPECT_EQ(t->early_prompt_tokens(), 14);
  EXPECT_FALSE(t->done());
  Feed(*t, {{"message_stop", R"({"type":"message_stop"})"}});
  EXPECT_TRUE(t->done());
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d[0].reasoning_text, "Hm.");
  EXPECT_EQ(d[1].text, "Sure.");
  ASSERT_EQ(d[2].tool_calls.size(), 1u);
  EXPECT_EQ(d[2].tool_calls[0].id, "toolu_9");
  EXPECT_EQ(d[2].tool_calls[0].name, "f");
  EXPECT_EQ(d[3].tool_calls[0].arguments, "{\"a\":");
  EXPECT_EQ(d[4].tool_calls[0].arguments, "1}");
  EXPECT_EQ(d[4].tool_calls[0].index, 0);
  const api::GenerationEnd end = t->End();
  EXPECT_EQ(end.finish_reason, api::FinishReason::kToolCalls);
  EXPECT_EQ(end.usage.prompt_tokens, 14);
  EXPECT_EQ(end.usage.cached_tokens, 3);
  EXPECT_EQ(end.usage.completion_tokens, 9);
}

TEST(UpstreamStreamTest, AnthropicErrorEventIsAnUpstreamError) {
  auto t = MakeStreamTranslator(UpstreamKind::kAnthropic, api::Endpoint::kChatCompletions, 1);
  std::vector<api::GenerationDelta> out;
  absl::Status s = t->OnEvent(
      {"error", R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})"},
      &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("Overloaded"));
  EXPECT_FALSE(t->OnEvent({"content_block_delta", "not json"}, &out).ok());
}

TEST(UpstreamStreamTest, OpenAiChunksBecomeDeltas) {
  auto t = MakeStreamTranslator(UpstreamKind::kOpenAi, api::Endpoint::kChatCompletions, 2);
  std::vector<api::GenerationDelta> d = Feed(*t, {
      {"", R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})"},
      {"", R"({"choices":[{"index":0,"delta":{"reasoning_content":"Think."}}]})"},
      {"", R"({"choices":[{"index":1,"delta":{"content":"B"}}]})"},
      {"", R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1",
         "type":"function","function":{"name":"f","arguments":"{\"x\""}}]}}]})"},
      {"", R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,
         "function":{"arguments":":1}"}}]}}]})"},
      {"", R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"},
                          {"index":1,"delta":{},"finish_reason":"length"}]})"},
  });
  EXPECT_FALSE(t->done());  // the usage chunk and [DONE] follow
  EXPECT_TRUE(t->CompleteAtEof());
  Feed(*t, {{"", R"({"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":6,
                 "prompt_tokens_details":{"cached_tokens":16},
                 "completion_tokens_details":{"reasoning_tokens":2}}})"},
            {"", "[DONE]"}});
  EXPECT_TRUE(t->done());
  ASSERT_EQ(d.size(), 4u);  // the empty first content is no delta
  EXPECT_EQ(d[0].reasoning_text, "Think.");
  EXPECT_EQ(d[1].choice, 1);
  EXPECT_EQ(d[1].text, "B");
  // The first piece of a call: its id and name, then its arguments apart.
  ASSERT_EQ(d[2].tool_calls.size(), 2u);
  EXPECT_EQ(d[2].tool_calls[0].id, "call_1");
  EXPECT_EQ(d[2].tool_calls[0].arguments, "");
  EXPECT_EQ(d[2].tool_calls[1].arguments, "{\"x\"");
  EXPECT_EQ(d[3].tool_calls[0].arguments, ":1}");
  const api::GenerationEnd end = t->End();
  ASSERT_EQ(end.choices.size(), 2u);
  EXPECT_EQ(end.choices[0].finish_reason, api::FinishReason::kToolCalls);
  EXPECT_EQ(end.choices[1].finish_reason, api::FinishReason::kLength);
  EXPECT_EQ(end.usage.prompt_tokens, 20);
  EXPECT_EQ(end.usage.cached_tokens, 16);
  EXPECT_EQ(end.usage.completion_tokens, 6);
  EXPECT_EQ(end.usage.reasoning_tokens, 2);
  std::vector<api::GenerationDelta> out;
  EXPECT_FALSE(t->OnEvent({"", R"({"choices":[{"index":2,"delta":{"content":"x"}}]})"}, &out)
                   .ok());
  EXPECT_FALSE(t->OnEvent({"", R"({"choices":[{"index":0,"delta":{"tool_calls":[
      {"index":-1,"function":{"arguments":"x"}}]}}]})"}, &out).ok());
}

TEST(UpstreamStreamTest, WholeAnswersToo) {
  auto t = MakeStreamTranslator(UpstreamKind::kOpenAi, api::Endpoint::kChatCompletions, 1);
  std::vector<api::GenerationDelta> out;
  ASSERT_TRUE(t->ReadWhole(R"({"choices":[{"index":0,"message":{"role":"assistant",
      "content":"Whole."},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,
      "completion_tokens":2}})", &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "Whole.");
  EXPECT_TRUE(t->done());
  auto a = MakeStreamTranslator(UpstreamKind::kAnthropic, api::Endpoint::kChatCompletions, 1);
  out.clear();
  ASSERT_TRUE(a->ReadWhole(R"({"type":"message","content":[{"type":"text","text":"A."},
      {"type":"tool_use","id":"t","name":"f","input":{"k":1}}],"stop_reason":"tool_use",
      "usage":{"input_tokens":4,"output_tokens":5}})", &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].tool_calls[1].arguments, R"({"k":1})");
  EXPECT_EQ(a->End().finish_reason, api::FinishReason::kToolCalls);
}

TEST(UpstreamErrorTest, HttpStatusesBecomeStatusesThatNeverQuoteTheKey) {
  const UpstreamConfig u = Upstream(UpstreamKind::kOpenAi);
  UpstreamFailure f = ClassifyHttpError(
      u, 401, "", R"({"error":{"message":"Incorrect API key provided: sk-test-secret-0123456789"}})");
  EXPECT_EQ(f.kind, kErrorAuth);
  EXPECT_EQ(f.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(f.status.message(), Not(HasSubstr("sk-test")));
  EXPECT_THAT(f.status.message(), Not(HasSubstr("Incorrect")));

  f = ClassifyHttpError(u, 429, " 7 ", R"({"error":{"message":"slow down"}})");
  EXPECT_EQ(f.kind, kErrorRateLimited);
  EXPECT_EQ(f.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(f.retry_after_seconds, 7);
  EXPECT_EQ(api::RetryAfterSeconds(f.status), 7);
  EXPECT_EQ(ClassifyHttpError(u, 429, "Wed, 21 Oct 2015 07:28:00 GMT", "").retry_after_seconds, 0);

  f = ClassifyHttpError(u, 500, "", R"({"error":{"message":"boom with sk-test-secret-0123456789"}})");
  EXPECT_EQ(f.kind, kErrorServer);
  EXPECT_EQ(f.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(f.status.message(), HasSubstr("boom with [redacted]"));
  // An upstream's message stays on one line (no forged log lines).
  f = ClassifyHttpError(u, 500, "", R"({"error":{"message":"a\nrequest id=forged code=200"}})");
  EXPECT_THAT(f.status.message(), HasSubstr("a request id=forged"));
  EXPECT_EQ(f.status.message().find('\n'), absl::string_view::npos);
  EXPECT_EQ(ClassifyHttpError(u, 529, "", "").kind, kErrorServer);
  EXPECT_EQ(ClassifyHttpError(u, 404, "", "").kind, kErrorNotFound);

  f = ClassifyHttpError(u, 400, "", R"({"type":"error","error":{"type":"invalid_request_error",
      "message":"max_tokens: too large"}})");
  EXPECT_EQ(f.kind, kErrorRefused);
  EXPECT_EQ(f.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(f.status.message(), HasSubstr("max_tokens: too large"));
}

}  // namespace
}  // namespace deltaserve::router::upstream
