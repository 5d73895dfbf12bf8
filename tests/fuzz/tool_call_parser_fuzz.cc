// libFuzzer target for the model-output parser (router/chat/tool_call_parser.h): the input is
// arbitrary model output, parsed against a fixed tools array (names and parameter types of the
// shared tool-call fixtures) under three option sets. Properties:
//   1. ParseModelOutput never crashes and keeps its invariants (finish agrees with the calls;
//      content and reasoning are null or hold a non-space character; arguments are objects);
//   2. streaming equals parsing at once: OutputStreamParser fed the input in chunks whose sizes
//      come from the input itself (and byte by byte for short inputs) yields the same content,
//      reasoning, call names and argument texts.
// Seeds: the raw outputs of ../shared/fixtures/toolcalls.json (written at configure time).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "router/chat/output_stream_parser.h"
#include "router/chat/tool_call_parser.h"
#include "tests/fuzz/fuzz_check.h"

namespace deltaserve::router {
namespace {

constexpr const char* kTarget = "tool_call_parser_fuzz";

const nlohmann::ordered_json& FixedTools() {
  static const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                     "unit": {"type": ["string", "null"]}}}}},
    {"type": "function", "function": {"name": "create_event", "parameters": {"type": "object",
      "properties": {"title": {"type": "string"}, "duration_minutes": {"type": "integer"},
                     "priority": {"type": "number"}, "all_day": {"type": "boolean"},
                     "attendees": {"type": "array"}, "location": {"type": "object"},
                     "reminder_minutes": {"type": ["integer", "null"]}}}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object",
      "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "search_products", "parameters": {"type": "object",
      "properties": {"query": {"type": "string"}, "max_price": {"type": "number"}}}}},
    {"name": "Finish", "parameters": {"properties": {"answer": {"type": "string"}}}},
    {"type": "function", "function": {"name": "web_search"}},
    {"type": "function", "function": {"name": "Glob"}},
    {"type": "function", "function": {"name": "bash"}},
    {"type": "function", "function": {"name": "read"}},
    {"type": "function", "function": {"name": "shell"}},
    {"type": "function", "function": {"name": "get_current_time"}}
  ])");
  return tools;
}

bool HasNonSpace(const std::string& s) {
  return s.find_first_not_of(" \t\n\r\f\v") != std::string::npos;
}

struct Streamed {
  std::string content, reasoning;
  std::vector<std::string> names, arguments;
};

void Collect(std::vector<OutputDelta> deltas, Streamed& s) {
  for (OutputDelta& d : deltas) {
    switch (d.kind) {
      case OutputDelta::Kind::kReasoning:
        s.reasoning += d.text;
        break;
      case OutputDelta::Kind::kContent:
        fuzz::Check(HasNonSpace(d.text), kTarget, "no whitespace-only content delta");
        s.content += d.text;
        break;
      case OutputDelta::Kind::kToolCallStart:
        fuzz::Check(d.index == static_cast<int>(s.names.size()), kTarget, "call indices in order");
        s.names.push_back(d.name);
        s.arguments.emplace_back();
        break;
      case OutputDelta::Kind::kToolCallArguments:
        fuzz::Check(!s.arguments.empty() && d.index + 1 == static_cast<int>(s.arguments.size()),
                    kTarget, "arguments follow their call's start");
        if (!s.arguments.empty()) s.arguments.back() += d.text;
        break;
    }
  }
}

void CheckStream(std::string_view raw, const OutputParseOptions& options, const ParsedOutput& whole,
                 bool byte_by_byte) {
  OutputStreamParser parser(options);
  Streamed s;
  size_t at = 0;
  while (at < raw.size()) {
    size_t chunk = byte_by_byte ? 1 : 1 + static_cast<uint8_t>(raw[at]) % 7;
    if (chunk > raw.size() - at) chunk = raw.size() - at;
    Collect(parser.Feed(raw.substr(at, chunk)), s);
    at += chunk;
  }
  Collect(parser.Finish(), s);
  fuzz::Check(s.content == whole.content.value_or(""), kTarget, "streamed content equals parse");
  fuzz::Check(s.reasoning == whole.reasoning_content.value_or(""), kTarget,
              "streamed reasoning equals parse");
  fuzz::Check(s.names.size() == whole.tool_calls.size(), kTarget, "same number of calls");
  for (size_t i = 0; i < s.names.size() && i < whole.tool_calls.size(); ++i) {
    fuzz::Check(s.names[i] == whole.tool_calls[i].name, kTarget, "same call names");
    fuzz::Check(s.arguments[i] == SerializeArguments(whole.tool_calls[i].arguments), kTarget,
                "argument fragments concatenate to the arguments");
  }
  fuzz::Check(parser.finish() == whole.finish, kTarget, "same finish");
}

void CheckOne(std::string_view raw, const OutputParseOptions& options) {
  const ParsedOutput whole = ParseModelOutput(raw, options);
  fuzz::Check(whole.finish == (whole.tool_calls.empty() ? "stop" : "tool_calls"), kTarget,
              "finish agrees with the calls");
  fuzz::Check(!whole.content.has_value() || HasNonSpace(*whole.content), kTarget,
              "content is null or not blank");
  fuzz::Check(!whole.reasoning_content.has_value() || HasNonSpace(*whole.reasoning_content),
              kTarget, "reasoning is null or not blank");
  for (const ToolCallOut& call : whole.tool_calls) {
    fuzz::Check(call.arguments.is_object(), kTarget, "arguments are an object");
  }
  CheckStream(raw, options, whole, /*byte_by_byte=*/false);
  if (raw.size() <= 512) CheckStream(raw, options, whole, /*byte_by_byte=*/true);
}

}  // namespace
}  // namespace deltaserve::router

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using deltaserve::router::OutputParseOptions;
  const std::string_view raw(reinterpret_cast<const char*>(data), size);
  OutputParseOptions options;
  options.tools = deltaserve::router::FixedTools();
  options.call_id_seed = 1;
  deltaserve::router::CheckOne(raw, options);
  options.prompt_opened_think = true;
  deltaserve::router::CheckOne(raw, options);
  options.prompt_opened_think = false;
  options.allow_orphan_think_close = false;
  deltaserve::router::CheckOne(raw, options);
  return 0;
}
