// Rules 1 and 2 of ../shared/fixtures/toolcalls.md as pure functions: where the model's
// reasoning (`<think>` ... `</think>`) starts, and which calls written inside a closed think block
// are promoted to tool calls. The output parser (tool_call_parser.h) drives them; the rest of
// rule 1 (the closing tag, an opener never closed) lives in its scanner
// (internal/output_scanner.h) because it interleaves with finding calls.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "router/chat/internal/tool_call_markup.h"
#include "router/chat/tool_call_types.h"

namespace deltaserve::router {

// How the output begins, as far as reasoning goes.
enum class ThinkStart {
  kNeedMore,  // only whitespace, or a prefix of `<think>`, so far
  kOpened,    // reasoning starts at ThinkStartResult::reasoning_begin
  kNoOpener,  // no opener: rule 1's orphan `</think>` may still make a prefix reasoning
};

struct ThinkStartResult {
  ThinkStart kind = ThinkStart::kNeedMore;
  size_t reasoning_begin = 0;  // kOpened: just after the `<think>` opener (0 if none was written)
};

// Rule 1's opener. `<think>` opens reasoning only as the first non-space text of the output (a
// `<think>` later in the answer is text). `prompt_opened_think`: the rendered prompt ended inside
// an open think block, so reasoning starts at 0 (a `<think>` the model writes again at the start
// is skipped).
ThinkStartResult LocateThinkStart(std::string_view text, bool final, bool prompt_opened_think);

// One piece of a closed reasoning region after rule 2: reasoning text, or a promoted call.
struct ReasoningPiece {
  std::string_view text;
  std::optional<internal::ScannedCall> call;
};

// Rule 2, for a reasoning region whose answer part holds no call: complete `<tool_call>` blocks
// naming declared tools become calls (in order) and leave the text; blocks naming undeclared
// functions, bare `<function=...>` and unfinished markup stay text. The region is read as a
// whole output (its end is the end of output for rule 5).
std::vector<ReasoningPiece> PromoteReasoningCalls(std::string_view region,
                                                  const ToolCatalog& tools);

}  // namespace deltaserve::router
