#include "router/chat/cut_tool_call.h"

#include <string>

#include "nlohmann/json.hpp"
#include "router/chat/internal/markup_scan.h"
#include "router/chat/internal/tool_call_markup.h"
#include "router/chat/tool_call_parser.h"

namespace deltaserve::router {
namespace {

using internal::IsSpace;
using internal::SkipSpace;
using nlohmann::ordered_json;

// The last `open` with no `close` after it.
std::optional<size_t> LastUnclosed(std::string_view text, std::string_view open,
                                   std::string_view close) {
  const size_t at = text.rfind(open);
  if (at == std::string_view::npos) return std::nullopt;
  if (text.find(close, at) != std::string_view::npos) return std::nullopt;
  return at;
}

// Where an unfinished call tag at the end of `text` starts (`</param`, `<parameter=ci`,
// `</tool_c`, `<tool_`): the cut fell inside the tag, which is no part of a value. npos: none.
size_t UnfinishedTagStart(std::string_view text) {
  const size_t lt = text.rfind('<');
  if (lt == std::string_view::npos || text.find('>', lt) != std::string_view::npos) {
    return std::string_view::npos;
  }
  const std::string_view tail = text.substr(lt);
  for (std::string_view tag : {internal::kParameterOpen, internal::kFunctionOpen}) {
    if (tail.starts_with(tag)) return lt;
  }
  for (std::string_view tag : {internal::kParameterClose, internal::kFunctionClose,
                               internal::kToolCallClose, internal::kParameterOpen,
                               internal::kFunctionOpen, internal::kToolCallOpen}) {
    if (tag.starts_with(tail)) return lt;
  }
  return std::string_view::npos;
}

// XML: `<function=NAME>` ... cut. Closing the markup and scanning it as a complete call gives
// rule 5's values and rule 6's types for everything written.
CutCall ReadXmlCall(std::string_view markup, const ToolCatalog& tools) {
  CutCall out;
  // A function whose name the cut split went with its unfinished tag.
  const std::string_view body = markup.substr(0, UnfinishedTagStart(markup));
  if (body.find(internal::kFunctionOpen) == std::string_view::npos) return out;  // kDrop
  // The value's one trailing newline (rule 5) is there already when the cut fell in its
  // closing tag.
  std::string closed(internal::kToolCallOpen);
  closed.append("\n").append(body);
  if (!body.ends_with('\n')) closed.push_back('\n');
  closed.append("</function>\n</tool_call>");
  const internal::CallScan scan =
      internal::ScanCallAt(closed, 0, /*final=*/true, tools, /*memo=*/nullptr);
  if (scan.verdict == internal::ScanVerdict::kCall) {
    for (const internal::CallPiece& piece : scan.pieces) {
      if (piece.call) {
        out.calls.push_back({piece.call->name, SerializeArguments(piece.call->arguments)});
      }
    }
  }
  out.verdict = out.calls.empty() ? CutCall::Verdict::kKeep : CutCall::Verdict::kCalls;
  return out;
}

// The end of the JSON value starting at `begin` (a string, number, literal, object or array),
// or npos when the text ends inside it.
size_t JsonValueEnd(std::string_view text, size_t begin) {
  int depth = 0;
  internal::JsonStringTracker strings;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (!strings.Outside(c)) {
      if (!strings.in_string && depth == 0) return i + 1;  // a top-level string's closing quote
      continue;
    }
    if (c == '"') continue;  // a string opens
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (depth == 0) return i;  // a scalar ended by its object's close
      if (--depth == 0) return i + 1;
    } else if (depth == 0 && (c == ',' || IsSpace(c))) {
      return i;
    }
  }
  return std::string_view::npos;
}

// JSON: `{"name": "f", "arguments": {"city": "Par` (cut). The top-level keys are read one by one
// as far as the text goes.
CutCall ReadJsonCall(std::string_view text, const ToolCatalog& tools) {
  CutCall out;
  std::optional<std::string> name;
  std::string arguments;
  size_t p = SkipSpace(text, 1);  // after '{'
  while (p < text.size() && text[p] == '"') {
    const size_t key_end = JsonValueEnd(text, p);
    if (key_end == std::string_view::npos) break;
    const ordered_json key = ordered_json::parse(text.substr(p, key_end - p), nullptr, false);
    p = SkipSpace(text, key_end);
    if (p >= text.size() || text[p] != ':' || !key.is_string()) break;
    p = SkipSpace(text, p + 1);
    const size_t value_end = p < text.size() ? JsonValueEnd(text, p) : std::string_view::npos;
    const std::string_view value =
        text.substr(p, value_end == std::string_view::npos ? std::string_view::npos : value_end - p);
    const std::string& k = key.get_ref<const std::string&>();
    if (k == "name" && value_end != std::string_view::npos) {
      const ordered_json v = ordered_json::parse(value, nullptr, false);
      if (v.is_string()) name = v.get<std::string>();
    } else if (k == "arguments" || k == "parameters") {
      arguments = std::string(internal::TrimSpace(value));
      if (value_end != std::string_view::npos) {
        // Complete: a JSON string holding the arguments is decoded (rule 3).
        const ordered_json v = ordered_json::parse(value, nullptr, false);
        if (v.is_string()) arguments = v.get<std::string>();
      }
    }
    if (value_end == std::string_view::npos) break;
    p = SkipSpace(text, value_end);
    if (p < text.size() && text[p] == ',') p = SkipSpace(text, p + 1);
  }
  if (!name) return out;  // kDrop
  if (!tools.Declares(*name)) {
    out.verdict = CutCall::Verdict::kKeep;
    return out;
  }
  out.verdict = CutCall::Verdict::kCalls;
  out.calls.push_back({*name, std::move(arguments)});
  return out;
}

}  // namespace

std::optional<size_t> FindCutCallOpener(std::string_view content) {
  if (const size_t tag = UnfinishedTagStart(content); tag != std::string_view::npos) {
    // A call's opener or closer cut in the middle; an opener before it wins.
    if (auto at = FindCutCallOpener(content.substr(0, tag))) return at;
    return tag;
  }
  if (auto at = LastUnclosed(content, internal::kToolCallOpen, internal::kToolCallClose)) {
    return at;
  }
  return LastUnclosed(content, internal::kFunctionOpen, internal::kFunctionClose);
}

CutCall ReadCutCall(std::string_view markup, const ToolCatalog& tools) {
  if (tools.empty()) return {CutCall::Verdict::kKeep, {}};
  // Only a tag cut in the middle (`<tool_`, `</tool_c` after a complete call): dropped.
  if (UnfinishedTagStart(markup) == 0) return {};
  if (markup.starts_with(internal::kToolCallOpen)) {
    const std::string_view rest = markup.substr(internal::kToolCallOpen.size());
    const size_t p = SkipSpace(rest, 0);
    if (p == rest.size()) return {};  // kDrop: nothing after the opener
    if (rest[p] == '{') return ReadJsonCall(rest.substr(p), tools);
    if (rest.substr(p).starts_with(internal::kFunctionOpen)) {
      return ReadXmlCall(rest.substr(p), tools);
    }
    if (internal::kFunctionOpen.starts_with(rest.substr(p))) return {};  // cut inside it
    return {CutCall::Verdict::kKeep, {}};
  }
  // A bare function naming nothing declared is plain text (rule 3): kKeep.
  if (markup.starts_with(internal::kFunctionOpen)) return ReadXmlCall(markup, tools);
  return {CutCall::Verdict::kKeep, {}};
}

}  // namespace deltaserve::router
