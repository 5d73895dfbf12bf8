// The engine behind ParseModelOutput and OutputStreamParser (router/chat/tool_call_parser.h): one
// left-to-right scan of the model's output that emits reasoning text, content text and tool calls
// as soon as no later text can change them. The whole-text parse is the same scan told that the
// text is final, so streaming with any chunking yields what parsing at once yields.
//
// Phases: the start (is there a `<think>`?), holding for an orphan `</think>` (rule 1, when no
// opener was written), reasoning (up to `</think>`, or in an unclosed block up to the first
// complete call), the start of the answer (the bare-JSON shape of rule 3), the answer (prose and
// calls, rules 3-5, 7-8), done. What stays undecided is kept as a position into the text: the
// scan resumes there on the next call.
//
// Rule 2 (calls inside reasoning) needs the answer: when a closed think block holds what may be
// a call, the rest of the reasoning is held, and so is everything after it ("reasoning first"),
// until the answer's first call (nothing is promoted) or the end of output (PromoteReasoningCalls).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "router/chat/internal/segment_joiner.h"
#include "router/chat/internal/tool_call_markup.h"
#include "router/chat/tool_call_types.h"

namespace deltaserve::router::internal {

// One certain piece of the parse, in the order the stream sends it.
struct OutputEvent {
  enum class Kind { kReasoning, kContent, kToolCall };
  Kind kind = Kind::kContent;
  std::string text;  // kReasoning / kContent: text to append to that field
  ScannedCall call;  // kToolCall
};

struct OutputScannerOptions {
  bool parse_tool_calls = true;          // false: no call is parsed, rule 2 included
  bool prompt_opened_think = false;      // reasoning starts at 0
  bool allow_orphan_think_close = true;  // rule 1's `</think>` with no opener
};

class OutputScanner {
 public:
  OutputScanner(ToolCatalog tools, OutputScannerOptions options);

  // `text` is the whole output so far; each call's text extends the previous one's. Appends to
  // `out` what became certain. With `final`, the output is complete: everything is emitted and
  // later calls do nothing.
  void Advance(std::string_view text, bool final, std::vector<OutputEvent>& out);

  // Calls found so far (answer and promoted).
  int calls() const { return calls_; }

 private:
  enum class Phase { kStart, kOrphanHold, kReasoning, kAnswerStart, kAnswer, kDone };

  // Returns false when the scan must wait for more text.
  bool StepStart(std::string_view text, bool final);
  bool StepOrphanHold(std::string_view text, bool final);
  bool StepReasoning(std::string_view text, bool final, std::vector<OutputEvent>& out);
  bool StepAnswerStart(std::string_view text, bool final, std::vector<OutputEvent>& out);
  bool StepAnswer(std::string_view text, bool final, std::vector<OutputEvent>& out);
  void Finish(std::string_view text, std::vector<OutputEvent>& out);

  void EmitReasoning(std::string_view text, std::vector<OutputEvent>& out);
  void EmitContent(std::string_view text, std::vector<OutputEvent>& out);
  void EmitCall(std::string_view text, ScannedCall call, std::vector<OutputEvent>& out);
  // The answer's first call settles rule 2: the held reasoning is reasoning, verbatim.
  void ReleaseHeldReasoning(std::string_view text, std::vector<OutputEvent>& out);
  std::vector<OutputEvent>& AnswerSink(std::vector<OutputEvent>& out) {
    return reasoning_held_ ? held_answer_ : out;
  }

  ToolCatalog tools_;
  OutputScannerOptions options_;
  bool parse_calls_ = false;
  Phase phase_ = Phase::kStart;
  size_t pos_ = 0;               // text before it is consumed (emitted or decided)
  size_t orphan_scan_ = 0;       // kOrphanHold: `</think>` is not before here
  size_t answer_begin_ = 0;      // kAnswerStart: where the answer part begins
  bool reasoning_held_ = false;  // rule 2 pending over [held_begin_, held_end_)
  size_t held_begin_ = 0;
  size_t held_end_ = 0;
  std::vector<OutputEvent> held_answer_;  // answer events waiting for the held reasoning
  ScanMemo memo_;                         // resumes the scan of a held call (tool_call_markup.h)
  size_t close_search_begin_ = 0;         // `</think>` is not in [held call start, here)
  int answer_calls_ = 0;
  int calls_ = 0;
  SegmentJoiner reasoning_;
  SegmentJoiner content_;
};

}  // namespace deltaserve::router::internal
