#pragma once
// How the router turns a request into prompt token ids for one model: the chat code
// (router/chat) renders messages with the model's chat template and tokenizes; completions
// tokenize the prompt (or pass its ids through). RouterBackend calls it once per distinct
// tokenizer digest among the candidates it considers, with the candidate's ModelDefaults
// already applied to the request (enable_thinking included).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer.h"
#include "deltaserve/v1/worker.pb.h"
#include "router/api/completion_backend.h"
#include "router/api/completion_request.h"
#include "router/routing/worker_pool.h"

namespace deltaserve::router {

// Turns one attempt's generated text into what the client sees: for chat, reasoning, content
// and tool calls (router/chat/chat_output_shaper.h). One per Generate call; called from one
// thread at a time.
class OutputShaper {
 public:
  virtual ~OutputShaper() = default;
  // A text delta from the worker; appends the deltas now certain to `out` (text,
  // reasoning_text, tool_calls; tokens and logprobs are the caller's).
  virtual void Feed(std::string_view text, std::vector<api::GenerationDelta>& out) = 0;
  // The output ended (the worker's final event): appends what is still held.
  virtual void Finish(std::vector<api::GenerationDelta>& out) = 0;
  // The output was cut by the token limit (called before Finish): a call it ended inside is
  // delivered with the arguments written so far rather than as markup.
  virtual void SetCutByLength() {}
  // A tool call was delivered (finish_reason "tool_calls" unless the output hit max_tokens).
  virtual bool called_tools() const = 0;
};

struct RenderedPrompt {
  std::vector<int32_t> token_ids;       // BOS included when the tokenizer's add_bos says so
  std::vector<int32_t> stop_token_ids;  // extra ids that end generation (a template's end of turn)
  // Token positions where a message of the prompt ends (ascending, each in [1, token_ids.size()];
  // GenerateRequest.message_boundaries): where workers snapshot, and what routing by prefix
  // matches against the workers' snapshot keys. Empty: none known.
  std::vector<int32_t> message_boundaries;
  // What the template writes after an assistant message (GenerateRequest.turn_end_token_ids);
  // empty for completions.
  std::vector<int32_t> turn_end_token_ids;
  // What the output must match (GenerateRequest.output_constraint): response_format, or a
  // tool_choice that forces a call in this model's call format (router/chat/
  // output_constraint_request.h); nullopt: none.
  std::optional<deltaserve::v1::OutputConstraint> output_constraint;
  // Makes the shaper of one attempt's output; null: the text goes to the client as generated.
  // `whole_output`: the request is not streamed, so the shaper may wait for the whole text.
  std::function<std::unique_ptr<OutputShaper>(bool whole_output)> output_shaper;
};

class PromptRenderer {
 public:
  virtual ~PromptRenderer() = default;
  // `model` carries the chat template, context length, n_vocab and the tokenizer proto (its
  // special ids and add_bos); `tokenizer` is built from that proto. Thread-safe. A status
  // that is the client's fault (a template refusing the messages) should be InvalidArgument
  // naming the field; it is passed to the client as is (400).
  virtual absl::StatusOr<RenderedPrompt> Render(const api::CompletionRequest& request,
                                                const ModelState& model,
                                                const common::Tokenizer& tokenizer) const = 0;
};

}  // namespace deltaserve::router
