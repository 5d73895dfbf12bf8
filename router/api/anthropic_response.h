#pragma once
// Writers for Anthropic Messages API answers: the `message` object, the streamed events in
// Anthropic's order (message_start, ping, then per content block content_block_start /
// content_block_delta / content_block_stop, message_delta with stop_reason and usage,
// message_stop) and errors as {"type":"error","error":{"type","message"}}. Fed with the same
// GenerationDelta / GenerationEnd events the OpenAI writers get (completion_backend.h): reasoning
// text becomes `thinking` blocks, text `text` blocks, parsed tool calls `tool_use` blocks whose
// arguments stream as input_json_delta. docs/anthropic_api.md lists every field.
//
//   AnthropicStreamWriter w(meta, request.stop);
//   sse->SendEvent(...) for each of w.Start(), w.Delta(d)..., w.End(end)

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "router/api/api_error.h"
#include "router/api/completion_backend.h"
#include "router/http/http_message.h"

namespace deltaserve::router::api {

// Anthropic's error `type` for an HTTP status: 400 invalid_request_error, 401
// authentication_error, 403 permission_error, 404 not_found_error, 413 request_too_large, 429
// rate_limit_error, 503 / 529 overloaded_error, other 5xx api_error (other 4xx:
// invalid_request_error).
std::string_view AnthropicErrorType(int http_status);
// {"type":"error","error":{"type","message"}} for `error` (its status picks the type).
std::string AnthropicErrorJson(const ApiError& error);
// The body above with error.http_status and Retry-After when the error has a hint.
http::Response AnthropicErrorResponse(const ApiError& error);

// "msg_" followed by 24 random alphanumerics.
std::string NewMessageId();

// stop_reason and stop_sequence for how a generation ended: "end_turn", "max_tokens",
// "tool_use", or "stop_sequence" when `matched_stop` is one of the request's `stop_sequences`.
struct StopInfo {
  std::string reason;
  std::string sequence;  // empty: null
};
StopInfo AnthropicStop(const GenerationEnd& end, const std::vector<std::string>& stop_sequences);

// {"input_tokens","output_tokens","cache_creation_input_tokens","cache_read_input_tokens"}:
// Anthropic counts cache reads apart from input_tokens, so input_tokens is the prompt less its
// cached tokens (their sum is what count_tokens returns).
std::string AnthropicUsageJson(const Usage& usage);

// One content block of an answer.
struct ContentBlock {
  enum class Type { kText, kThinking, kToolUse };
  Type type = Type::kText;
  std::string text;       // kText: the text; kThinking: the thinking
  std::string id;         // kToolUse
  std::string name;       // kToolUse
  std::string arguments;  // kToolUse: the input's JSON text
  int call_index = -1;    // kToolUse: ToolCallDelta::index
};

// The content blocks of a whole answer, built from the deltas in order.
class ContentBlocks {
 public:
  void Add(const GenerationDelta& delta);
  const std::vector<ContentBlock>& blocks() const { return blocks_; }

 private:
  std::vector<ContentBlock> blocks_;
};

// The `message` object of a non-streamed answer (`id`, `model` from meta). With
// `thinking_omitted` (thinking.display "omitted") thinking blocks have empty text and carry the
// reasoning in their signature (internal/reasoning_fields.h ThinkingSignature). Its usage has
// output_tokens_details.thinking_tokens.
std::string AnthropicMessageJson(std::string_view id, std::string_view model,
                                 const std::vector<ContentBlock>& blocks, const StopInfo& stop,
                                 const Usage& usage, bool thinking_omitted = false);

// One server-sent event: its `event:` name and its data.
struct SseEvent {
  std::string name;
  std::string data;
};

// The events of a streamed answer, in Anthropic's order. With `thinking_omitted` a thinking
// block gets no thinking_delta: its reasoning goes out as one signature_delta before its
// content_block_stop, as Anthropic streams omitted thinking.
class AnthropicStreamWriter {
 public:
  AnthropicStreamWriter(std::string id, std::string model, std::vector<std::string> stops,
                        bool thinking_omitted = false);
  // message_start (usage.input_tokens: `prompt_tokens`, the rest 0) and a ping.
  std::vector<SseEvent> Start(int64_t prompt_tokens);
  // The block starts, deltas and stops this delta leads to.
  std::vector<SseEvent> Delta(const GenerationDelta& delta);
  // The open block's stop, message_delta (stop_reason, stop_sequence, usage with
  // output_tokens_details.thinking_tokens, as Anthropic sends it only there) and message_stop.
  std::vector<SseEvent> End(const GenerationEnd& end);
  // An `error` event (the stream ends after it).
  static SseEvent Error(const ApiError& error);

 private:
  void Open(ContentBlock::Type type, std::vector<SseEvent>& out, const ToolCallDelta* call);
  void Close(std::vector<SseEvent>& out);

  std::string id_;
  std::string model_;
  std::vector<std::string> stops_;
  int index_ = -1;  // the open block's index; -1: none open
  bool open_ = false;
  ContentBlock::Type type_ = ContentBlock::Type::kText;
  int call_index_ = -1;  // the open tool_use block's call
  bool thinking_omitted_ = false;
  std::string omitted_thinking_;  // the open thinking block's text, when omitted
};

}  // namespace deltaserve::router::api
