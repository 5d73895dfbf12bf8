// Anthropic answers (router/api/anthropic_response.h): the message object, the event stream in
// the order of Anthropic's streaming reference (message_start, ping, content_block_start /
// content_block_delta / content_block_stop per block, message_delta, message_stop), stop
// reasons, usage with cache reads apart, and the error shape per status. The expected JSON is
// written from Anthropic's API reference, field by field.

#include "router/api/anthropic_response.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "router/api/internal/reasoning_fields.h"

namespace deltaserve::router::api {
namespace {

using json = nlohmann::json;

GenerationDelta Text(std::string text) {
  GenerationDelta d;
  d.text = std::move(text);
  d.tokens = 1;
  return d;
}

GenerationDelta Thinking(std::string text) {
  GenerationDelta d;
  d.reasoning_text = std::move(text);
  d.tokens = 1;
  return d;
}

GenerationDelta Call(int index, std::string id, std::string name, std::string arguments) {
  GenerationDelta d;
  d.tool_calls.push_back(ToolCallDelta{index, std::move(id), std::move(name), std::move(arguments)});
  return d;
}

GenerationEnd End(FinishReason reason, std::string matched = "") {
  GenerationEnd e;
  e.finish_reason = reason;
  e.usage.prompt_tokens = 20;
  e.usage.cached_tokens = 8;
  e.usage.completion_tokens = 5;
  e.usage.reasoning_tokens = 2;
  e.matched_stop = std::move(matched);
  return e;
}

TEST(AnthropicResponseTest, StopReasons) {
  const std::vector<std::string> stops = {"END"};
  EXPECT_EQ(AnthropicStop(End(FinishReason::kStop), stops).reason, "end_turn");
  EXPECT_EQ(AnthropicStop(End(FinishReason::kLength), stops).reason, "max_tokens");
  EXPECT_EQ(AnthropicStop(End(FinishReason::kToolCalls), stops).reason, "tool_use");
  const StopInfo s = AnthropicStop(End(FinishReason::kStop, "END"), stops);
  EXPECT_EQ(s.reason, "stop_sequence");
  EXPECT_EQ(s.sequence, "END");
  // A stop string the client did not send (none of its stop_sequences) is an ordinary end.
  EXPECT_EQ(AnthropicStop(End(FinishReason::kStop, "<|im_end|>"), stops).reason, "end_turn");
}

TEST(AnthropicResponseTest, MessageWithThinkingTextAndToolUse) {
  ContentBlocks blocks;
  blocks.Add(Thinking("Let me "));
  blocks.Add(Thinking("think."));
  blocks.Add(Text("Checking."));
  blocks.Add(Call(0, "call_1", "get_weather", ""));
  blocks.Add(Call(0, "", "", R"({"city":)"));
  blocks.Add(Call(0, "", "", R"("Paris","days":2})"));
  const json m = json::parse(AnthropicMessageJson(
      "msg_1", "tiny", blocks.blocks(), AnthropicStop(End(FinishReason::kToolCalls), {}),
      End(FinishReason::kToolCalls).usage));
  const json expected = json::parse(R"({
    "id": "msg_1", "type": "message", "role": "assistant", "model": "tiny",
    "content": [
      {"type": "thinking", "thinking": "Let me think.", "signature": ""},
      {"type": "text", "text": "Checking."},
      {"type": "tool_use", "id": "call_1", "name": "get_weather",
       "input": {"city": "Paris", "days": 2}}],
    "stop_reason": "tool_use", "stop_sequence": null,
    "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 8, "output_tokens": 5,
              "output_tokens_details": {"thinking_tokens": 2}}})");
  EXPECT_EQ(m, expected) << m.dump(2);
}

TEST(AnthropicResponseTest, StreamEventsInAnthropicsOrder) {
  AnthropicStreamWriter w("msg_2", "tiny", {"END"});
  std::vector<SseEvent> events = w.Start(20);
  auto add = [&](std::vector<SseEvent> more) {
    for (SseEvent& e : more) events.push_back(std::move(e));
  };
  add(w.Delta(Thinking("Hmm.")));
  add(w.Delta(Text("Hi")));
  add(w.Delta(Text(" there")));
  add(w.Delta(Call(0, "call_1", "f", "")));
  add(w.Delta(Call(0, "", "", R"({"a":)")));
  add(w.Delta(Call(0, "", "", "1}")));
  add(w.Delta(Call(1, "call_2", "g", "{}")));
  add(w.End(End(FinishReason::kToolCalls)));

  std::vector<std::string> names;
  for (const SseEvent& e : events) {
    names.push_back(e.name);
    EXPECT_EQ(json::parse(e.data)["type"], e.name) << e.data;  // `event:` equals data.type
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "message_start", "ping",
                       "content_block_start", "content_block_delta", "content_block_stop",
                       "content_block_start", "content_block_delta", "content_block_delta",
                       "content_block_stop",
                       "content_block_start", "content_block_delta", "content_block_delta",
                       "content_block_stop",
                       "content_block_start", "content_block_delta", "content_block_stop",
                       "message_delta", "message_stop"}));
  EXPECT_EQ(json::parse(events[0].data), json::parse(R"({"type": "message_start", "message": {
    "id": "msg_2", "type": "message", "role": "assistant", "model": "tiny", "content": [],
    "stop_reason": null, "stop_sequence": null,
    "usage": {"input_tokens": 20, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 0, "output_tokens": 0}}})"));
  EXPECT_EQ(json::parse(events[2].data), json::parse(R"({"type": "content_block_start",
    "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})"));
  EXPECT_EQ(json::parse(events[3].data), json::parse(R"({"type": "content_block_delta",
    "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm."}})"));
  EXPECT_EQ(json::parse(events[6].data), json::parse(R"({"type": "content_block_delta",
    "index": 1, "delta": {"type": "text_delta", "text": "Hi"}})"));
  EXPECT_EQ(json::parse(events[9].data), json::parse(R"({"type": "content_block_start",
    "index": 2, "content_block": {"type": "tool_use", "id": "call_1", "name": "f",
    "input": {}}})"));
  EXPECT_EQ(json::parse(events[10].data), json::parse(R"({"type": "content_block_delta",
    "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}})"));
  EXPECT_EQ(json::parse(events[12].data),
            json::parse(R"({"type": "content_block_stop", "index": 2})"));
  EXPECT_EQ(json::parse(events[13].data)["index"], 3);
  EXPECT_EQ(json::parse(events[16].data), json::parse(R"({"type": "message_delta",
    "delta": {"stop_reason": "tool_use", "stop_sequence": null},
    "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 8, "output_tokens": 5,
              "output_tokens_details": {"thinking_tokens": 2}}})"));
}

// thinking.display "omitted": the block is there, its text empty; the reasoning travels in the
// signature (whole: the block's; streamed: one signature_delta before its stop), and comes back
// from it on the next turn (anthropic_request_test).
TEST(AnthropicResponseTest, OmittedThinkingKeepsTheBlockAndCarriesTheTextInItsSignature) {
  ContentBlocks blocks;
  blocks.Add(Thinking("Let me "));
  blocks.Add(Thinking("think."));
  blocks.Add(Text("Hi"));
  const json m = json::parse(AnthropicMessageJson("msg_1", "tiny", blocks.blocks(),
                                                  AnthropicStop(End(FinishReason::kStop), {}),
                                                  End(FinishReason::kStop).usage, true));
  ASSERT_EQ(m["content"].size(), 2u);
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][0]["thinking"], "");
  EXPECT_EQ(internal::ReasoningFromSignature(m["content"][0]["signature"].get<std::string>()),
            "Let me think.");
  EXPECT_EQ(m["content"][1], json::parse(R"({"type": "text", "text": "Hi"})"));

  AnthropicStreamWriter w("msg_2", "tiny", {}, true);
  std::vector<SseEvent> events = w.Start(20);
  for (const GenerationDelta& d : {Thinking("Let me "), Thinking("think."), Text("Hi")}) {
    for (SseEvent& e : w.Delta(d)) events.push_back(std::move(e));
  }
  for (SseEvent& e : w.End(End(FinishReason::kStop))) events.push_back(std::move(e));
  std::vector<std::string> names;
  for (const SseEvent& e : events) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "ping", "content_block_start",
                                             "content_block_delta", "content_block_stop",
                                             "content_block_start", "content_block_delta",
                                             "content_block_stop", "message_delta",
                                             "message_stop"}));
  EXPECT_EQ(json::parse(events[2].data)["content_block"],
            json::parse(R"({"type": "thinking", "thinking": "", "signature": ""})"));
  const json sig = json::parse(events[3].data);
  EXPECT_EQ(sig["index"], 0);
  EXPECT_EQ(sig["delta"]["type"], "signature_delta");
  EXPECT_EQ(internal::ReasoningFromSignature(sig["delta"]["signature"].get<std::string>()),
            "Let me think.");
  for (const SseEvent& e : events) EXPECT_EQ(e.data.find("thinking_delta"), std::string::npos);
  // message_start has no thinking count; the final message_delta has it.
  EXPECT_FALSE(json::parse(events[0].data)["message"]["usage"].contains("output_tokens_details"));
  EXPECT_EQ(json::parse(events[8].data)["usage"]["output_tokens_details"]["thinking_tokens"], 2);
}

TEST(AnthropicResponseTest, StreamWithoutContentStillEndsProperly) {
  AnthropicStreamWriter w("msg_3", "tiny", {"END"});
  std::vector<SseEvent> events = w.Start(3);
  for (SseEvent& e : w.End(End(FinishReason::kStop, "END"))) events.push_back(std::move(e));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[2].name, "message_delta");
  EXPECT_EQ(json::parse(events[2].data)["delta"],
            json::parse(R"({"stop_reason": "stop_sequence", "stop_sequence": "END"})"));
  EXPECT_EQ(events[3].name, "message_stop");
}

TEST(AnthropicResponseTest, ErrorTypesPerStatus) {
  const std::vector<std::pair<int, std::string>> rows = {
      {400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
      {404, "not_found_error"},       {413, "request_too_large"},    {429, "rate_limit_error"},
      {500, "api_error"},             {503, "overloaded_error"},     {529, "overloaded_error"},
      {504, "api_error"},             {405, "invalid_request_error"}};
  for (const auto& [status, type] : rows) EXPECT_EQ(AnthropicErrorType(status), type) << status;

  ApiError e = ApiErrorFromStatus(absl::ResourceExhaustedError("slow down"));
  e.retry_after_seconds = 2;
  const http::Response r = AnthropicErrorResponse(e);
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"type": "error", "error": {
    "type": "rate_limit_error", "message": "slow down"}})"));
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0].name, "Retry-After");
  EXPECT_EQ(r.headers[0].value, "2");

  const SseEvent event = AnthropicStreamWriter::Error(
      ApiErrorFromStatus(absl::InternalError("worker ended the sequence")));
  EXPECT_EQ(event.name, "error");
  EXPECT_EQ(json::parse(event.data), json::parse(R"({"type": "error", "error": {
    "type": "api_error", "message": "worker ended the sequence"}})"));
}

}  // namespace
}  // namespace deltaserve::router::api
