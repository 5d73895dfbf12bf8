#pragma once
// The interface between the OpenAI endpoints and whatever produces tokens: the router's
// routing + gRPC worker client implements CompletionBackend; the endpoints implement
// GenerationObserver and turn its events into a JSON body or SSE chunks.
//
// Event order for one generation: OnStart once (a worker accepted it; the HTTP status is
// committed from here on), any number of OnDelta, then exactly one of OnEnd or OnError. An
// OnError before OnStart becomes the HTTP error status (404 unknown model, 429, 503, 400 for
// a prompt that does not fit, ...; see api_error.h); after OnStart it becomes an error event
// in the stream. Calls for one generation never overlap; they may come from any thread and
// must not be made while holding locks the observer could need.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "router/api/completion_request.h"
#include "router/api/openai_response.h"

namespace deltaserve::router::api {

struct GenerationStart {
  std::string model;  // the model that answers (after aliases and fallbacks)
  // Tokens of the rendered prompt sent to that model (Anthropic's message_start reports them
  // before the end); 0 when unknown.
  int64_t prompt_tokens = 0;
  // The request's max_tokens lowered to the room the prompt left (clamp_max_tokens); the
  // endpoints send it as the kMaxTokensClampedHeader header.
  std::optional<MaxTokensClamped> max_tokens_clamped = std::nullopt;
};

struct GenerationDelta {
  // The choice this delta belongs to, in [0, CompletionRequest::n); deltas of different choices
  // interleave, those of one choice keep their order.
  int32_t choice = 0;
  std::string text;            // detokenized text for the response's content
  std::string reasoning_text;  // text for reasoning_content (chat), usually empty
  // Chat tool calls, in order after `reasoning_text` and `text` (openai_response.h).
  std::vector<ToolCallDelta> tool_calls;
  int32_t tokens = 0;                  // tokens this delta covers
  std::vector<TokenLogprob> logprobs;  // one per token, when the request asked for logprobs
};

// How one choice ended (GenerationEnd::choices).
struct ChoiceEnd {
  FinishReason finish_reason = FinishReason::kStop;
  bool content_null_when_empty = false;
};

struct GenerationEnd {
  // Choice 0's end: the only choice unless CompletionRequest::n > 1.
  FinishReason finish_reason = FinishReason::kStop;
  // Chat whose output was parsed (reasoning / content / tool calls): an answer without text
  // has content null rather than "".
  bool content_null_when_empty = false;
  // With n > 1: every choice's end, by index (choices[0] repeats the fields above); empty for
  // one choice. OnEnd comes once, after the last choice ended.
  std::vector<ChoiceEnd> choices;
  // The prompt counted once; completion_tokens summed over the choices.
  Usage usage;
  // The stop string that ended the output (the worker's matched_stop_string); empty: none.
  std::string matched_stop;
};

class GenerationObserver {
 public:
  virtual ~GenerationObserver() = default;
  virtual void OnStart(const GenerationStart& start) = 0;
  virtual void OnDelta(GenerationDelta delta) = 0;
  virtual void OnEnd(const GenerationEnd& end) = 0;
  virtual void OnError(const absl::Status& status) = 0;
};

// A generation in progress. Cancel() may be called from any thread, more than once, and must
// not block; the backend then stops the sequence (freeing its memory) and may still deliver
// a last OnEnd or OnError, which the observer ignores.
class GenerationHandle {
 public:
  virtual ~GenerationHandle() = default;
  virtual void Cancel() = 0;
};

class CompletionBackend {
 public:
  virtual ~CompletionBackend() = default;
  // Starts generating for a validated request. Must not block on the generation itself; the
  // observer may be called before this returns. Never returns null.
  virtual std::unique_ptr<GenerationHandle> Generate(
      const CompletionRequest& request, std::shared_ptr<GenerationObserver> observer) = 0;
};

}  // namespace deltaserve::router::api
