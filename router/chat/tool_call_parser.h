// The model-output parser of the chat layer: splits what a Qwen-family model generated into
// reasoning, content and OpenAI tool calls, following the rules of
// ../shared/fixtures/toolcalls.md (docs/tool_calls.md says how each rule is implemented). Both
// call formats are accepted whatever the model: XML (`<tool_call><function=NAME><parameter=...>`)
// and JSON in `<tool_call>`. For streaming, OutputStreamParser (output_stream_parser.h) runs the
// same scan over text deltas and yields exactly what this yields for the whole text.
//
//   OutputParseOptions options{.tools = request["tools"], .prompt_opened_think = true};
//   ParsedOutput parsed = ParseModelOutput(generated_text, options);
//   // parsed.reasoning_content, parsed.content, parsed.tool_calls, parsed.finish
//
// Never throws; any bytes are accepted (invalid UTF-8 passes through into content).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace deltaserve::router {

// One extracted call, as OpenAI's `tool_calls[i]` (type "function").
struct ToolCallOut {
  std::string id;                    // "call_" + 24 alphanumerics
  std::string name;                  // a function declared in the request's tools
  nlohmann::ordered_json arguments;  // always an object, keys in the order written
};

struct ParsedOutput {
  std::optional<std::string> content;            // nullopt when empty
  std::optional<std::string> reasoning_content;  // nullopt when empty
  std::vector<ToolCallOut> tool_calls;
  std::string finish;  // "tool_calls" or "stop" ("length" is the caller's knowledge)
};

struct OutputParseOptions {
  nlohmann::ordered_json tools;  // the request's OpenAI tools array (null/empty: no calls parsed)
  // The rendered prompt ended inside an open <think> block (the Qwen3.5/3.6 and Qwen3 thinking
  // templates' generation prompt ends with "<think>\n"): the output starts as reasoning.
  bool prompt_opened_think = false;
  // false for tool_choice "none": nothing is parsed as a call (rule 2's promotion included).
  bool parse_tool_calls = true;
  // Rule 1's "`</think>` with no opener: everything before it is reasoning". While no opener was
  // seen, a later `</think>` can turn all earlier text into reasoning, so a stream holds its
  // content until the end. Set false when the prompt ended with the think block closed (thinking
  // off) or the template has none: an unopened `</think>` is then content and content streams.
  bool allow_orphan_think_close = true;
  // Seed of the tool-call ids; 0: a random seed per parse.
  uint64_t call_id_seed = 0;
};

// Parses the complete output `raw` (special tokens such as <|im_end|> removed).
ParsedOutput ParseModelOutput(std::string_view raw, const OutputParseOptions& options);

// Tool-call ids in OpenAI's shape: "call_" + 24 characters of [A-Za-z0-9].
class ToolCallIdSource {
 public:
  explicit ToolCallIdSource(uint64_t seed);  // 0: seeded from std::random_device
  std::string Next();

 private:
  std::mt19937_64 rng_;
};

// The arguments' serialization sent to clients: compact JSON, UTF-8 as is (invalid bytes
// replaced by U+FFFD, so serializing never fails).
std::string SerializeArguments(const nlohmann::ordered_json& arguments);

}  // namespace deltaserve::router
