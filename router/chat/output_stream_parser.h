// Streaming form of ParseModelOutput (tool_call_parser.h): feed the detokenized text deltas of a
// generation as they arrive; each call returns the OpenAI-style deltas that are now certain.
//
//   OutputStreamParser parser(options);
//   for (each text delta d) for (const OutputDelta& x : parser.Feed(d)) Send(x);
//   for (const OutputDelta& x : parser.Finish()) Send(x);   // finish_reason: parser.finish()
//
// The contract (docs/tool_calls.md, "Streaming"):
// - Concatenating the reasoning deltas, the content deltas and each call's argument fragments
//   gives exactly ParseModelOutput's reasoning_content, content and arguments (serialized with
//   SerializeArguments) for the same text, however it was chunked.
// - Reasoning deltas come before content and call deltas (text held for rule 2 holds what
//   follows it too); content and calls come in text order.
// - A call is sent only once it is complete (rule 4) and certain: a kToolCallStart (index, id,
//   name; type "function") then one kToolCallArguments with the whole arguments object.
// - Tags split across deltas are handled; an incomplete UTF-8 character at the end of the input
//   waits for its next bytes; no delta is whitespace only.
// - What stays uncertain is held: a possible tag or call, a segment's trailing whitespace, text
//   before a possible orphan `</think>` (see OutputParseOptions::allow_orphan_think_close).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "router/chat/internal/output_scanner.h"
#include "router/chat/tool_call_parser.h"

namespace deltaserve::router {

// One streamed piece; maps onto a chat.completion.chunk's `choices[0].delta`.
struct OutputDelta {
  enum class Kind {
    kReasoning,          // delta.reasoning_content (and delta.reasoning) = text
    kContent,            // delta.content = text
    kToolCallStart,      // delta.tool_calls[0] = {index, id, type:"function", function:{name}}
    kToolCallArguments,  // delta.tool_calls[0] = {index, function:{arguments: text}}
  };
  Kind kind = Kind::kContent;
  std::string text;  // kReasoning/kContent: text; kToolCallArguments: a JSON fragment
  int index = -1;    // the call's index among this output's calls (kToolCall*)
  std::string id;    // kToolCallStart
  std::string name;  // kToolCallStart
};

class OutputStreamParser {
 public:
  explicit OutputStreamParser(const OutputParseOptions& options);

  // Appends a text delta; returns the deltas now certain (maybe none).
  std::vector<OutputDelta> Feed(std::string_view delta);
  // The output ended: returns everything still held. Later Feed/Finish calls return nothing.
  std::vector<OutputDelta> Finish();
  // "tool_calls" once a call was sent, else "stop" (meaningful after Finish).
  std::string finish() const { return scanner_.calls() > 0 ? "tool_calls" : "stop"; }

 private:
  void Convert(std::vector<internal::OutputEvent>& events, std::vector<OutputDelta>& out);

  internal::OutputScanner scanner_;
  ToolCallIdSource ids_;
  std::string text_;  // the output so far
  int next_index_ = 0;
  bool finished_ = false;
};

}  // namespace deltaserve::router
