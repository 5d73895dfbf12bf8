#include "router/chat/chat_output_shaper.h"

#include <algorithm>
#include <utility>

#include "router/chat/cut_tool_call.h"
#include "router/chat/internal/markup_scan.h"
#include "router/chat/tool_call_types.h"

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
    const size_t first = out.size();
    Convert(stream_->Finish(), out);
    if (!cut_by_length_) return;
    // What the stream parser held to the end comes now; an unfinished call is in the last
    // content delta.
    for (size_t i = out.size(); i-- > first;) {
      if (!out[i].text.empty()) {
        std::vector<api::ToolCallDelta> calls;
        TakeCutCall(out[i].text, calls_sent_, calls);
        if (!calls.empty()) {
          api::GenerationDelta delta;
          delta.tool_calls = std::move(calls);
          out.push_back(std::move(delta));
        }
        if (out[i].text.empty() && out[i].reasoning_text.empty() && out[i].tool_calls.empty()) {
          out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      }
    }
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
  if (cut_by_length_ && !delta.text.empty()) {
    TakeCutCall(delta.text, static_cast<int>(delta.tool_calls.size()), delta.tool_calls);
  }
  called_tools_ = !delta.tool_calls.empty();
  out.push_back(std::move(delta));
}

void ChatOutputShaper::TakeCutCall(std::string& content, int next_index,
                                   std::vector<api::ToolCallDelta>& calls) {
  if (!options_.parse_tool_calls) return;
  const std::optional<size_t> at = FindCutCallOpener(content);
  if (!at) return;
  const ToolCatalog catalog(options_.tools);
  CutCall cut = ReadCutCall(std::string_view(content).substr(*at), catalog);
  if (cut.verdict == CutCall::Verdict::kKeep) return;
  // The text before the call, without the whitespace that separated them (rule 9); nothing
  // if that is only whitespace (no delta is whitespace only).
  size_t keep = *at;
  while (keep > 0 && internal::IsSpace(content[keep - 1])) --keep;
  content.resize(keep);
  ToolCallIdSource ids(options_.call_id_seed == 0 ? 0 : options_.call_id_seed + 1);
  for (CutCall::Call& call : cut.calls) {
    if (!parallel_tool_calls_ && next_index > 0) break;
    calls.push_back({next_index++, ids.Next(), std::move(call.name), std::move(call.arguments)});
    called_tools_ = true;
  }
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
        calls_sent_ = std::max(calls_sent_, d.index + 1);
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
