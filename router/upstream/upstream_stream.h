// Reads an upstream's streamed answer (its server-sent events, sse_reader.h) into the router's
// generation events (router/api/completion_backend.h): text, reasoning and tool-call deltas per
// choice, how each choice ended, and the usage the upstream reported. The client's endpoint then
// frames them in the client's API, so an Anthropic upstream's `content_block_delta`s reach an
// OpenAI client as chat chunks and the other way round.
//
//   OpenAI chat.completion.chunk / text_completion chunks: choices[].delta.{content,
//     reasoning_content|reasoning, tool_calls}, choices[].text, finish_reason, usage, [DONE];
//   Anthropic: message_start (input and cache tokens), content_block_start / _delta / _stop
//     (text, thinking, tool_use with input_json_delta), message_delta (stop_reason, output
//     tokens), message_stop; `error` events.
//
// An answer that is one JSON object instead of a stream (a server that ignored "stream": true)
// is read by ReadWhole. Malformed events are InvalidArgument; an upstream's own error event is
// Unavailable with its message.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "router/api/completion_backend.h"
#include "router/config/router_config.h"
#include "router/upstream/sse_reader.h"

namespace deltaserve::router::upstream {

class StreamTranslator {
 public:
  virtual ~StreamTranslator() = default;
  // One event of the stream: appends the deltas it holds to `out`.
  virtual absl::Status OnEvent(const SseEvent& event, std::vector<api::GenerationDelta>* out) = 0;
  // A whole (non-streamed) answer's JSON body.
  virtual absl::Status ReadWhole(std::string_view body, std::vector<api::GenerationDelta>* out) = 0;
  // The stream's end was seen ([DONE], message_stop), or every choice finished.
  virtual bool done() const = 0;
  // The connection closed: whether what came is a whole answer (an OpenAI-compatible server
  // that ends every choice but sends no [DONE] before closing).
  virtual bool CompleteAtEof() const { return done(); }
  // How the generation ended (valid once done()).
  virtual api::GenerationEnd End() const = 0;
  // Prompt tokens when the upstream told them before the end (Anthropic's message_start), else 0.
  virtual int64_t early_prompt_tokens() const { return 0; }
};

// `n`: the choices the request asked for (OpenAI upstreams may interleave them).
std::unique_ptr<StreamTranslator> MakeStreamTranslator(UpstreamKind kind, api::Endpoint endpoint,
                                                       int n);

}  // namespace deltaserve::router::upstream
