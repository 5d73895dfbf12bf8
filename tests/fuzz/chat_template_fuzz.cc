// libFuzzer target for chat templates (common/jinja/chat_template.h): a GGUF's
// tokenizer.chat_template or a --chat-template file is untrusted text. Each input is parsed as a
// template; when it parses it is rendered against a fixed small chat (system, user, assistant
// with a tool call, tool result; two tools; eos token). Parse and RenderMarked must return — a
// value or a Status — never crash, hang or allocate without bound (and the marks of request text
// must be well-formed ranges of the output): the engine's limits
// (common/jinja/interpreter.h) cap output size, loop iterations, nesting and total work.
// Seeds: the six templates of ../shared/fixtures/templates, copied at configure time.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/jinja/chat_template.h"
#include "common/jinja/interpreter.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_check.h"

namespace deltaserve::common {
namespace {

constexpr const char* kTarget = "chat_template_fuzz";

const nlohmann::ordered_json& Context() {
  static const auto* context = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful.\u00a0"},
      {"role": "user", "content": "What is the weather in Paris? <think>x</think>"},
      {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
       "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                       "arguments": {"city": "Paris", "days": 3, "metric": true, "t": -3.5,
                                     "tags": ["a", null], "opts": {}}}}]},
      {"role": "tool", "content": "{\"temp\": 12}"},
      {"role": "user", "content": [{"type": "text", "text": "thanks"}, {"type": "image"}]}
    ],
    "tools": [
      {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
      {"type": "function", "function": {"name": "noop", "parameters": {}}}
    ],
    "documents": null,
    "add_generation_prompt": true,
    "bos_token": "<|begin_of_text|>",
    "eos_token": "<|im_end|>",
    "enable_thinking": false
  })"));
  return *context;
}

}  // namespace
}  // namespace deltaserve::common

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using deltaserve::common::ChatTemplate;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source);
  if (!tmpl.ok()) {
    deltaserve::fuzz::Check(tmpl.status().code() == absl::StatusCode::kInvalidArgument,
                            deltaserve::common::kTarget, "parse errors are InvalidArgument");
    return 0;
  }
  const std::vector<std::string> trusted = {"bos_token", "eos_token"};
  absl::StatusOr<deltaserve::common::MarkedText> out =
      tmpl->RenderMarked(deltaserve::common::Context(), trusted);
  if (out.ok()) {
    deltaserve::fuzz::Check(
        out->text.size() <= static_cast<size_t>(deltaserve::common::jinja::kMaxOutputBytes),
        deltaserve::common::kTarget, "output within kMaxOutputBytes");
    // The request-text marks the tokenizer relies on: sorted, disjoint, inside the text.
    size_t end = 0;
    for (const deltaserve::common::ByteRange& r : out->untrusted) {
      deltaserve::fuzz::Check(
          r.begin < r.end && r.end <= out->text.size() && (end == 0 || r.begin > end),
          deltaserve::common::kTarget, "marks sorted, disjoint, in range");
      end = r.end;
    }
  }
  return 0;
}
