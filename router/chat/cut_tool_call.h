// A tool call that the token limit cut: when a generation ends with finish_reason "length"
// inside a call's markup, the client gets a tool call with the arguments written so far (what
// OpenAI returns when max_tokens cuts a call), never the raw `<tool_call>` markup as content.
// Rule 4 of ../shared/fixtures/toolcalls.md keeps an incomplete call's text in content "as far
// as the text tells"; this is the step a server that knows it hit the limit adds on top.
//
//   if (auto at = FindCutCallOpener(content)) {
//     CutCall cut = ReadCutCall(content.substr(*at), catalog);
//     // kCalls: emit cut.calls; kDrop: remove the markup; kKeep: leave it as text
//   }
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "router/chat/tool_call_types.h"

namespace deltaserve::router {

// Where the output's last call opener starts (`<tool_call>`, or a bare `<function=`) when no
// closing tag follows it: the text from there is an unfinished call. Else, where a call tag the
// cut split starts (`<tool_`, `</tool_c` after a complete call). nullopt: neither.
std::optional<size_t> FindCutCallOpener(std::string_view content);

struct CutCall {
  enum class Verdict {
    kCalls,  // `calls` holds at least one call of a declared function
    kDrop,   // cut before a function name was complete: nothing a client can use
    kKeep,   // not a call of a declared function: stays text (rule 7)
  };
  struct Call {
    std::string name;
    // XML calls: a JSON object of the parameters written, the last one's value as far as it
    // went (typed as rule 6 says). JSON calls: the text of the "arguments" (or "parameters")
    // value as written, so usually JSON cut in the middle, as OpenAI's are; "" when it had not
    // begun.
    std::string arguments;
  };
  Verdict verdict = Verdict::kDrop;
  std::vector<Call> calls;  // kCalls: in text order (a <tool_call> block may hold several)
};

// Reads the unfinished call `markup` (starting at an opener FindCutCallOpener found).
CutCall ReadCutCall(std::string_view markup, const ToolCatalog& tools);

}  // namespace deltaserve::router
