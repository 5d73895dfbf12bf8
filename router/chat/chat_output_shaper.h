// The chat OutputShaper (router/routing/prompt_renderer.h): splits one attempt's generated text
// into reasoning, content and tool calls with the model-output parser (tool_call_parser.h) —
// streamed through OutputStreamParser, or, for a request that is not streamed, parsed whole
// with ParseModelOutput at the end — and maps the result onto api::GenerationDelta (reasoning
// → reasoning_text, content → text, calls → tool_calls). parallel_tool_calls: false keeps only
// the first call. An output cut by the token limit inside a call gives that call with the
// arguments written so far (cut_tool_call.h), never its markup as content. docs/chat.md, "Tool
// calls and reasoning in answers".
//
//   auto shaper = std::make_unique<ChatOutputShaper>(options, /*whole_output=*/!stream, true);
//   shaper->Feed(worker_text, deltas); ... shaper->Finish(deltas);
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "router/chat/output_stream_parser.h"
#include "router/chat/tool_call_parser.h"
#include "router/routing/prompt_renderer.h"

namespace deltaserve::router::chat {

class ChatOutputShaper : public OutputShaper {
 public:
  ChatOutputShaper(OutputParseOptions options, bool whole_output, bool parallel_tool_calls);

  void Feed(std::string_view text, std::vector<api::GenerationDelta>& out) override;
  void Finish(std::vector<api::GenerationDelta>& out) override;
  bool called_tools() const override { return called_tools_; }
  void SetCutByLength() override { cut_by_length_ = true; }

 private:
  void Convert(std::vector<OutputDelta> deltas, std::vector<api::GenerationDelta>& out);
  // Cut by the limit: the unfinished call at the end of `content` (the output's last content)
  // becomes tool calls numbered from `next_index`, appended to `calls`; `content` keeps the text
  // before it.
  void TakeCutCall(std::string& content, int next_index,
                   std::vector<api::ToolCallDelta>& calls);

  const OutputParseOptions options_;
  const bool parallel_tool_calls_;
  std::optional<OutputStreamParser> stream_;  // unset: whole_output
  std::string text_;                          // whole_output: the text so far
  bool called_tools_ = false;
  bool cut_by_length_ = false;
  int calls_sent_ = 0;  // streamed: the calls delivered so far
  bool finished_ = false;
};

}  // namespace deltaserve::router::chat
