#include "router/chat/output_stream_parser.h"

#include <utility>

#include "router/chat/internal/markup_scan.h"

namespace deltaserve::router {

OutputStreamParser::OutputStreamParser(const OutputParseOptions& options)
    : scanner_(ToolCatalog(options.tools),
               {.parse_tool_calls = options.parse_tool_calls,
                .prompt_opened_think = options.prompt_opened_think,
                .allow_orphan_think_close = options.allow_orphan_think_close}),
      ids_(options.call_id_seed) {}

std::vector<OutputDelta> OutputStreamParser::Feed(std::string_view delta) {
  std::vector<OutputDelta> out;
  if (finished_ || delta.empty()) return out;
  text_.append(delta);
  const std::string_view text(text_);
  std::vector<internal::OutputEvent> events;
  scanner_.Advance(text.substr(0, internal::CompleteUtf8Prefix(text)), /*final=*/false, events);
  Convert(events, out);
  return out;
}

std::vector<OutputDelta> OutputStreamParser::Finish() {
  std::vector<OutputDelta> out;
  if (finished_) return out;
  finished_ = true;
  std::vector<internal::OutputEvent> events;
  scanner_.Advance(text_, /*final=*/true, events);
  Convert(events, out);
  return out;
}

void OutputStreamParser::Convert(std::vector<internal::OutputEvent>& events,
                                 std::vector<OutputDelta>& out) {
  for (internal::OutputEvent& event : events) {
    switch (event.kind) {
      case internal::OutputEvent::Kind::kReasoning:
        out.push_back({OutputDelta::Kind::kReasoning, std::move(event.text), -1, {}, {}});
        break;
      case internal::OutputEvent::Kind::kContent:
        out.push_back({OutputDelta::Kind::kContent, std::move(event.text), -1, {}, {}});
        break;
      case internal::OutputEvent::Kind::kToolCall: {
        const int index = next_index_++;
        out.push_back({OutputDelta::Kind::kToolCallStart,
                       {},
                       index,
                       ids_.Next(),
                       std::move(event.call.name)});
        out.push_back({OutputDelta::Kind::kToolCallArguments,
                       SerializeArguments(event.call.arguments),
                       index,
                       {},
                       {}});
        break;
      }
    }
  }
}

}  // namespace deltaserve::router
