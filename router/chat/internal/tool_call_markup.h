// Rules 3-5 of ../shared/fixtures/toolcalls.md: the call shapes recognised in model output, when a
// call is complete, and where an XML parameter value ends. Each scanner looks at one position of
// a text that may still grow (`final` false while streaming) and answers
//   kCall      a complete call (or block of calls) ends at `end`; more text cannot change it,
//   kNotACall  no continuation makes this a complete call naming a declared tool,
//   kNeedMore  the answer depends on text not seen yet (never when `final`).
// Callers rely on that monotonicity: an answer other than kNeedMore given for a prefix is the
// answer for every extension of it, so streaming and parsing at once take the same decisions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "router/chat/internal/markup_scan.h"
#include "router/chat/tool_call_types.h"

namespace deltaserve::router::internal {

enum class ScanVerdict { kCall, kNotACall, kNeedMore };

// Where a left-to-right scan of JSON text stands with respect to strings and their escapes, so
// that the scanners built on it (bracket balancing, the end of a value) see only structure.
struct JsonStringTracker {
  bool in_string = false;
  bool escaped = false;
  // Feeds the next character: true when it is structure (outside every string; an opening
  // quote counts as outside), false for a string's content or its closing quote.
  bool Outside(char c) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      return false;
    }
    if (c == '"') in_string = true;
    return true;
  }
};

// Where a scan that answered kNeedMore stopped inside a long XML value or JSON object, so that
// the next scan of a longer text (streaming) resumes there instead of rescanning from the start:
// without it, holding a 100 KB call fed 4 bytes at a time costs seconds. Valid only while each
// text extends the previous one; scanners take it as an optional argument.
struct ScanMemo {
  size_t value_begin = std::string::npos;  // the value ScanXmlValue last stopped in
  size_t value_resume = 0;                 // no terminator before here
  size_t json_begin = std::string::npos;   // the object the extent scan last stopped in
  size_t json_resume = 0;
  std::string json_closers;  // the extent scan's state at json_resume
  JsonStringTracker json_strings;
};

// A function call read from the text: a declared name and its typed arguments (an object).
struct ScannedCall {
  std::string name;
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

// One piece of a scanned block, in text order: a call, or (no `call`) the text [begin, end) of a
// function inside a <tool_call> block that names an undeclared tool, which stays text (rule 7).
struct CallPiece {
  std::optional<ScannedCall> call;
  size_t begin = 0;
  size_t end = 0;
};

struct CallScan {
  ScanVerdict verdict = ScanVerdict::kNotACall;
  size_t end = 0;                 // kCall: one past the last character of the call's markup
  std::vector<CallPiece> pieces;  // kCall: at least one piece has a call
};

// How an XML parameter value ended (rule 4/5).
enum class ValueEnd { kParameterClose, kFunctionClose, kToolCallClose, kNextParameter };

struct ValueScan {
  ScanVerdict verdict = ScanVerdict::kNotACall;  // kCall: the value ends at `value_end`
  size_t value_end = 0;
  ValueEnd how = ValueEnd::kParameterClose;
  size_t next = 0;  // where scanning goes on: after the closing tag, or at the next <parameter=
};

// Where the value starting at `begin` (just after `<parameter=NAME>`) ends: at the first
// `</parameter>`, `</function>` or `</tool_call>` that is followed, after whitespace, by another
// tag of the call (or `</think>`, or the end of output), or before a `<parameter=` that starts a
// line. kNotACall when the output ends first.
ValueScan ScanXmlValue(std::string_view text, size_t begin, bool final, ScanMemo* memo = nullptr);

// Rule 5: exactly one leading and one trailing '\n' removed, nothing else.
std::string_view StripValueNewlines(std::string_view raw);

// The call starting at `pos`: a `<tool_call>` block (XML functions or a JSON object) or a bare
// `<function=NAME>` (NAME declared; an orphan `</tool_call>` after it belongs to it). kNotACall
// at any other text.
CallScan ScanCallAt(std::string_view text, size_t pos, bool final, const ToolCatalog& tools,
                    ScanMemo* memo = nullptr);

// Whether a call shape starts at `pos` (`<tool_call>` or `<function=`).
Match MayStartCall(std::string_view text, size_t pos, bool final);

// Rule 3, last shape: the answer text from `begin` (its first non-space character, a '{') to the
// end of output is exactly one JSON object {"name": <declared>, "arguments": {...}}. Needs the
// end of output to say kCall.
CallScan ScanBareJsonAnswer(std::string_view text, size_t begin, bool final,
                            const ToolCatalog& tools, ScanMemo* memo = nullptr);

// A parsed JSON call object: {"name": declared, "arguments"|"parameters": object or JSON string
// of one, or absent = {}}, with rule 6's conversion applied; nullopt for anything else.
std::optional<ScannedCall> CallFromJsonObject(const nlohmann::ordered_json& object,
                                              const ToolCatalog& tools);

}  // namespace deltaserve::router::internal
