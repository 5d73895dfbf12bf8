#include "router/chat/chat_output_shaper.h"

#include <utility>

namespace deltaserve::router::chat {

ChatOutputShaper::ChatOutputShaper(OutputParseOptions options, bool whole_output,
                                   bool parallel_tool_calls)
    : options_(std::move(options)), parallel_tool_calls_(parallel_tool_calls) {
  if (!whole_output) stream_.emplace(options_);
}

void ChatOutputShaper::Feed(std::string_view text, std::vector<api::GenerationDelta>& out) {
  if (finished_) return;
  if (!stream_) {
    text_.append(text);
    return;
  }
  Convert(stream_->Feed(text), out);
}

void ChatOutputShaper::Finish(std::vector<api::GenerationDelta>& out) {
  if (finished_) return;
  finished_ = true;
  if (stream_) {
    Convert(stream_->Finish(), out);
    return;
  }
  ParsedOutput parsed = ParseModelOutput(text_, options_);
  api::GenerationDelta delta;
  if (parsed.reasoning_content) delta.reasoning_text = std::move(*parsed.reasoning_content);
  if (parsed.content) delta.text = std::move(*parsed.content);
  if (!parallel_tool_calls_ && parsed.tool_calls.size() > 1) parsed.tool_calls.resize(1);
  for (size_t i = 0; i < parsed.tool_calls.size(); ++i) {
    ToolCallOut& call = parsed.tool_calls[i];
    delta.tool_calls.push_back({static_cast<int>(i), std::move(call.id), std::move(call.name),
                                SerializeArguments(call.arguments)});
  }
  called_tools_ = !delta.tool_calls.empty();
  out.push_back(std::move(delta));
}

void ChatOutputShaper::Convert(std::vector<OutputDelta> deltas,
                               std::vector<api::GenerationDelta>& out) {
  for (OutputDelta& d : deltas) {
    if ((d.kind == OutputDelta::Kind::kToolCallStart ||
         d.kind == OutputDelta::Kind::kToolCallArguments) &&
        !parallel_tool_calls_ && d.index > 0) {
      continue;
    }
    api::GenerationDelta g;
    switch (d.kind) {
      case OutputDelta::Kind::kReasoning:
        g.reasoning_text = std::move(d.text);
        break;
      case OutputDelta::Kind::kContent:
        g.text = std::move(d.text);
        break;
      case OutputDelta::Kind::kToolCallStart:
        called_tools_ = true;
        g.tool_calls.push_back({d.index, std::move(d.id), std::move(d.name), ""});
        break;
      case OutputDelta::Kind::kToolCallArguments:
        g.tool_calls.push_back({d.index, "", "", std::move(d.text)});
        break;
    }
    out.push_back(std::move(g));
  }
}

}  // namespace deltaserve::router::chat
