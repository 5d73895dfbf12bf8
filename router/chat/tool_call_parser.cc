#include "router/chat/tool_call_parser.h"

#include <utility>

#include "router/chat/internal/output_scanner.h"
#include "router/chat/tool_call_types.h"

namespace deltaserve::router {

ToolCallIdSource::ToolCallIdSource(uint64_t seed)
    : rng_(seed != 0 ? seed : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()) {}

std::string ToolCallIdSource::Next() {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng_() % kAlphabet.size()];
  return id;
}

std::string SerializeArguments(const nlohmann::ordered_json& arguments) {
  return arguments.dump(-1, ' ', /*ensure_ascii=*/false,
                        nlohmann::ordered_json::error_handler_t::replace);
}

ParsedOutput ParseModelOutput(std::string_view raw, const OutputParseOptions& options) {
  internal::OutputScanner scanner(ToolCatalog(options.tools),
                                  {.parse_tool_calls = options.parse_tool_calls,
                                   .prompt_opened_think = options.prompt_opened_think,
                                   .allow_orphan_think_close = options.allow_orphan_think_close});
  std::vector<internal::OutputEvent> events;
  scanner.Advance(raw, /*final=*/true, events);

  ParsedOutput parsed;
  ToolCallIdSource ids(options.call_id_seed);
  std::string content;
  std::string reasoning;
  for (internal::OutputEvent& event : events) {
    switch (event.kind) {
      case internal::OutputEvent::Kind::kReasoning:
        reasoning += event.text;
        break;
      case internal::OutputEvent::Kind::kContent:
        content += event.text;
        break;
      case internal::OutputEvent::Kind::kToolCall:
        parsed.tool_calls.push_back(
            {ids.Next(), std::move(event.call.name), std::move(event.call.arguments)});
        break;
    }
  }
  if (!content.empty()) parsed.content = std::move(content);
  if (!reasoning.empty()) parsed.reasoning_content = std::move(reasoning);
  parsed.finish = parsed.tool_calls.empty() ? "stop" : "tool_calls";
  return parsed;
}

}  // namespace deltaserve::router
