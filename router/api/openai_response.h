#pragma once
// Writers for OpenAI response bodies: chat.completion and text_completion objects, the
// streamed chat.completion.chunk / text_completion chunks (role delta first, content deltas,
// finish_reason, the usage chunk when stream_options.include_usage, then [DONE]), usage, and
// logprobs in OpenAI's two shapes. Output is compact JSON; bytes that are not valid UTF-8
// (a token that splits a character) are replaced by U+FFFD in strings and kept exact in
// "bytes".

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::router::api {

enum class FinishReason { kStop, kLength, kToolCalls, kContentFilter };
std::string_view FinishReasonName(FinishReason reason);

// A max_tokens the router lowered to the room the prompt left in the worker's context (the
// config's clamp_max_tokens): reported in usage ("max_tokens_clamped": {"from", "to"}) and in
// the response header kMaxTokensClampedHeader ("FROM->TO").
struct MaxTokensClamped {
  int64_t from = 0;  // what the request asked
  int64_t to = 0;    // what the worker was given
};
inline constexpr std::string_view kMaxTokensClampedHeader = "x-deltaserve-max-tokens-clamped";
std::string MaxTokensClampedHeaderValue(const MaxTokensClamped& clamped);  // "32000->3100"

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  // Of completion_tokens, those inside the model's thinking block (the worker's
  // Usage.reasoning_tokens; every choice's summed).
  int64_t reasoning_tokens = 0;
  std::optional<MaxTokensClamped> max_tokens_clamped = std::nullopt;
};

struct TopLogprob {
  std::string token;  // raw bytes of the token's text
  float logprob = 0;
};

struct TokenLogprob {
  std::string token;
  float logprob = 0;
  std::vector<TopLogprob> top;  // the top_logprobs alternatives, best first
};

// Identity shared by every object of one response.
struct ResponseMeta {
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;    // the model that actually answered
};

// One tool call of a chat answer (message.tool_calls[i], type "function").
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object's text
};

// One streamed piece of a tool call (delta.tool_calls[0]): the first piece of a call carries
// its id and name (arguments ""), the following ones fragments of its arguments' JSON text.
struct ToolCallDelta {
  int index = 0;     // the call's index in the answer
  std::string id;    // set on a call's first piece only
  std::string name;  // set on a call's first piece only
  std::string arguments;
};

// One finished choice (non-streaming responses).
struct CompletionChoice {
  std::string text;
  // Chat: message.content is null rather than "" when the answer has no text (tool calls).
  bool content_null = false;
  std::string reasoning_content;     // chat only; omitted when empty; also written as "reasoning"
  std::vector<ToolCall> tool_calls;  // chat only; message.tool_calls when not empty
  FinishReason finish_reason = FinishReason::kStop;
  bool with_logprobs = false;
  std::vector<TokenLogprob> logprobs;
};

// "chatcmpl-" or "cmpl-" followed by 24 random alphanumerics.
std::string NewResponseId(std::string_view prefix);
int64_t UnixSecondsNow();

inline constexpr std::string_view kSseDone = "[DONE]";

// {"prompt_tokens":..,"completion_tokens":..,"total_tokens":..,
//  "prompt_tokens_details":{"cached_tokens":..},
//  "completion_tokens_details":{"reasoning_tokens":..}}
std::string UsageJson(const Usage& usage);

std::string ChatCompletionJson(const ResponseMeta& meta, const CompletionChoice& choice,
                               const Usage& usage);
std::string TextCompletionJson(const ResponseMeta& meta, const CompletionChoice& choice,
                               const Usage& usage);
// The same with n choices ("index" 0 .. n-1, in order) and one usage for all of them.
std::string ChatCompletionJson(const ResponseMeta& meta, const std::vector<CompletionChoice>& choices,
                               const Usage& usage);
std::string TextCompletionJson(const ResponseMeta& meta, const std::vector<CompletionChoice>& choices,
                               const Usage& usage);

// Streamed chat.completion.chunk objects, in the order a stream sends them. Each chunk carries
// one choice, `index` (n > 1: the choices' chunks interleave; each choice gets its role chunk
// first and its finish chunk last).
class ChatChunkWriter {
 public:
  // With include_usage every chunk carries "usage": null and UsageChunk() ends the stream.
  ChatChunkWriter(ResponseMeta meta, bool include_usage, bool with_logprobs);
  // {"role":"assistant","content":""} — the first chunk.
  std::string RoleChunk(int index = 0) const;
  // A content (and/or reasoning_content, also written as "reasoning") delta with the logprobs
  // of its tokens.
  std::string DeltaChunk(std::string_view content, std::string_view reasoning,
                         const std::vector<TokenLogprob>& logprobs, int index = 0) const;
  // delta.tool_calls = [{index, id, type:"function", function:{name, arguments:""}}] for a
  // call's first piece, [{index, function:{arguments}}] for the next ones.
  std::string ToolCallChunk(const ToolCallDelta& call, int index = 0) const;
  // An empty delta with finish_reason.
  std::string FinishChunk(FinishReason reason, int index = 0) const;
  // "choices": [] and the usage (only when include_usage).
  std::string UsageChunk(const Usage& usage) const;

 private:
  ResponseMeta meta_;
  bool include_usage_;
  bool with_logprobs_;
};

// Streamed text_completion chunks, each with one choice `index`.
class TextChunkWriter {
 public:
  TextChunkWriter(ResponseMeta meta, bool include_usage, bool with_logprobs);
  // Tracks text offsets across calls, per choice, for the completions logprobs' "text_offset".
  std::string DeltaChunk(std::string_view text, const std::vector<TokenLogprob>& logprobs,
                         int index = 0);
  std::string FinishChunk(FinishReason reason, int index = 0) const;
  std::string UsageChunk(const Usage& usage) const;

 private:
  ResponseMeta meta_;
  bool include_usage_;
  bool with_logprobs_;
  std::vector<int64_t> text_offsets_;  // by choice
};

}  // namespace deltaserve::router::api
