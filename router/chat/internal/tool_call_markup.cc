#include "router/chat/internal/tool_call_markup.h"

#include <utility>

namespace deltaserve::router::internal {
namespace {

using nlohmann::ordered_json;

// A tag name (`<function=NAME>`, `<parameter=NAME>`) longer than this is not a tag.
constexpr size_t kMaxTagName = 256;
// JSON bodies nested deeper than this are not calls (keeps the parser's recursion bounded).
constexpr size_t kMaxJsonDepth = 128;

ScanVerdict Undecided(bool final) {
  return final ? ScanVerdict::kNotACall : ScanVerdict::kNeedMore;
}

// Rule 5: a closing tag ends a value only when what follows it, after whitespace, is another tag
// of the call or the end of output. `</think>` counts as the end of output: a call inside a
// closed think block is read as if the block's end were the end of output.
Match FollowedByCallTag(std::string_view text, size_t after, bool final,
                        std::initializer_list<std::string_view> tags) {
  const size_t p = SkipSpace(text, after);
  if (p == text.size()) return final ? Match::kYes : Match::kMaybe;
  return MatchAny(text, p, tags, final);
}

struct TagName {
  ScanVerdict verdict = ScanVerdict::kNotACall;  // kCall: well formed
  std::string_view name;
  size_t stop = 0;  // the '>' (well formed), else the character that ended the header
};

// The NAME of `<prefix NAME>` starting at `begin`: up to '>'; malformed when it meets '<' or a
// newline first, is empty, longer than kMaxTagName, or holds '='.
TagName ScanTagName(std::string_view text, size_t begin, bool final) {
  size_t i = begin;
  while (i < text.size() && text[i] != '>' && text[i] != '<' && text[i] != '\n' &&
         i - begin <= kMaxTagName) {
    ++i;
  }
  if (i - begin > kMaxTagName) return {ScanVerdict::kNotACall, {}, i};
  if (i == text.size()) return {Undecided(final), {}, i};
  const std::string_view name = text.substr(begin, i - begin);
  const bool ok = text[i] == '>' && !name.empty() && name.find('=') == std::string_view::npos;
  return {ok ? ScanVerdict::kCall : ScanVerdict::kNotACall, name, i};
}

struct FunctionScan {
  ScanVerdict verdict = ScanVerdict::kNotACall;
  size_t end = 0;             // after `</function>`, or after `</tool_call>` when closed_block
  bool closed_block = false;  // `</function>` was missing and `</tool_call>` closed it
  bool declared = false;
  ScannedCall call;
};

// `<function=NAME>` at `pos`, its parameters, up to `</function>` or `</tool_call>` (rule 4).
// Text in the body that is not a parameter makes it not a call. `bare`: an undeclared NAME is
// not a call (known as soon as the name is read).
FunctionScan ScanXmlFunction(std::string_view text, size_t pos, bool final,
                             const ToolCatalog& tools, bool bare, ScanMemo* memo) {
  FunctionScan out;
  const TagName header = ScanTagName(text, pos + kFunctionOpen.size(), final);
  if (header.verdict != ScanVerdict::kCall) {
    out.verdict = header.verdict;
    return out;
  }
  out.call.name = std::string(header.name);
  out.declared = tools.Declares(header.name);
  if (bare && !out.declared) return out;
  size_t p = header.stop + 1;
  while (true) {
    p = SkipSpace(text, p);
    if (p == text.size()) {
      out.verdict = Undecided(final);
      return out;
    }
    const Match function_close = MatchAt(text, p, kFunctionClose, final);
    if (function_close == Match::kYes) {
      out.verdict = ScanVerdict::kCall;
      out.end = p + kFunctionClose.size();
      return out;
    }
    const Match block_close = MatchAt(text, p, kToolCallClose, final);
    if (block_close == Match::kYes) {
      out.verdict = ScanVerdict::kCall;
      out.end = p + kToolCallClose.size();
      out.closed_block = true;
      return out;
    }
    const Match parameter = MatchAt(text, p, kParameterOpen, final);
    if (parameter == Match::kMaybe || function_close == Match::kMaybe ||
        block_close == Match::kMaybe) {
      out.verdict = ScanVerdict::kNeedMore;
      return out;
    }
    if (parameter == Match::kNo) return out;  // stray text in the body: not a call
    const TagName name = ScanTagName(text, p + kParameterOpen.size(), final);
    if (name.verdict == ScanVerdict::kNeedMore) {
      out.verdict = ScanVerdict::kNeedMore;
      return out;
    }
    // A malformed header (rule 5) is skipped with its value; a header that never ends is too.
    const bool well_formed = name.verdict == ScanVerdict::kCall;
    const size_t value_begin = well_formed ? name.stop + 1 : name.stop;
    const ValueScan value = ScanXmlValue(text, value_begin, final, memo);
    if (value.verdict != ScanVerdict::kCall) {
      out.verdict = value.verdict;
      return out;
    }
    if (well_formed) {
      const std::string_view raw =
          StripValueNewlines(text.substr(value_begin, value.value_end - value_begin));
      out.call.arguments[std::string(name.name)] =
          ConvertTextValue(raw, tools.ParameterType(out.call.name, name.name));
    }
    switch (value.how) {
      case ValueEnd::kParameterClose:
      case ValueEnd::kNextParameter:
        p = value.next;
        break;
      case ValueEnd::kFunctionClose:
      case ValueEnd::kToolCallClose:
        out.verdict = ScanVerdict::kCall;
        out.end = value.next;
        out.closed_block = value.how == ValueEnd::kToolCallClose;
        return out;
    }
  }
}

// After a complete call ending at `end`: the position after an optional `</tool_call>` that
// follows it after whitespace (kCall), or kNeedMore while that cannot be told yet.
std::pair<ScanVerdict, size_t> ConsumeClose(std::string_view text, size_t end, bool final) {
  const size_t q = SkipSpace(text, end);
  if (q == text.size()) return {final ? ScanVerdict::kCall : ScanVerdict::kNeedMore, end};
  const Match close = MatchAt(text, q, kToolCallClose, final);
  if (close == Match::kMaybe) return {ScanVerdict::kNeedMore, end};
  if (close == Match::kYes) return {ScanVerdict::kCall, q + kToolCallClose.size()};
  return {ScanVerdict::kCall, end};
}

struct JsonExtent {
  ScanVerdict verdict = ScanVerdict::kNotACall;
  size_t end = 0;  // one past the closing '}'
};

// The extent of the JSON object starting at text[pos] == '{': brackets balanced outside strings.
// Whether it is valid JSON is for the parser to say.
JsonExtent ScanJsonObjectExtent(std::string_view text, size_t pos, bool final, ScanMemo* memo) {
  std::string closers;
  JsonStringTracker strings;
  size_t start = pos;
  if (memo != nullptr && memo->json_begin == pos && memo->json_resume <= text.size()) {
    start = memo->json_resume;
    closers = memo->json_closers;
    strings = memo->json_strings;
  }
  for (size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    if (!strings.Outside(c)) continue;
    if (c == '{' || c == '[') {
      if (closers.size() >= kMaxJsonDepth) return {};
      closers.push_back(c == '{' ? '}' : ']');
    } else if (c == '}' || c == ']') {
      if (closers.empty() || closers.back() != c) return {};
      closers.pop_back();
      if (closers.empty()) return {ScanVerdict::kCall, i + 1};
    }
  }
  if (memo != nullptr && !final) {
    memo->json_begin = pos;
    memo->json_resume = text.size();
    memo->json_closers = closers;
    memo->json_strings = strings;
  }
  return {Undecided(final), 0};
}

CallScan ScanJsonBlock(std::string_view text, size_t body, bool final, const ToolCatalog& tools,
                       ScanMemo* memo) {
  CallScan out;
  const JsonExtent extent = ScanJsonObjectExtent(text, body, final, memo);
  if (extent.verdict != ScanVerdict::kCall) {
    out.verdict = extent.verdict;
    return out;
  }
  const ordered_json object = ordered_json::parse(text.substr(body, extent.end - body), nullptr,
                                                  /*allow_exceptions=*/false);
  std::optional<ScannedCall> call = CallFromJsonObject(object, tools);
  if (!call.has_value()) return out;
  const auto [verdict, end] = ConsumeClose(text, extent.end, final);
  out.verdict = verdict;
  if (verdict != ScanVerdict::kCall) return out;
  out.end = end;
  out.pieces.push_back({std::move(call), body, extent.end});
  return out;
}

// `<tool_call>` at `pos` + a JSON object, or one or more XML functions, + `</tool_call>` (which
// may be missing once a function is complete). A later function that is not a call ends the
// block before it.
CallScan ScanToolCallBlock(std::string_view text, size_t pos, bool final, const ToolCatalog& tools,
                           ScanMemo* memo) {
  CallScan out;
  size_t p = SkipSpace(text, pos + kToolCallOpen.size());
  if (p == text.size()) {
    out.verdict = Undecided(final);
    return out;
  }
  if (text[p] == '{') return ScanJsonBlock(text, p, final, tools, memo);
  const Match function = MatchAt(text, p, kFunctionOpen, final);
  if (function != Match::kYes) {
    out.verdict = function == Match::kMaybe ? ScanVerdict::kNeedMore : ScanVerdict::kNotACall;
    return out;
  }
  bool any_declared = false;
  size_t end = 0;
  while (true) {
    FunctionScan f = ScanXmlFunction(text, p, final, tools, /*bare=*/false, memo);
    if (f.verdict == ScanVerdict::kNeedMore) {
      out.verdict = ScanVerdict::kNeedMore;
      return out;
    }
    if (f.verdict == ScanVerdict::kNotACall) {
      if (out.pieces.empty()) return out;
      break;  // `end` is the end of the previous function
    }
    if (f.declared) {
      any_declared = true;
      out.pieces.push_back({std::move(f.call), p, f.end});
    } else {
      out.pieces.push_back({std::nullopt, p, f.end});
    }
    end = f.end;
    if (f.closed_block) break;
    const size_t q = SkipSpace(text, f.end);
    if (q == text.size()) {
      if (!final) {
        out.verdict = ScanVerdict::kNeedMore;
        return out;
      }
      break;
    }
    const Match close = MatchAt(text, q, kToolCallClose, final);
    const Match next = MatchAt(text, q, kFunctionOpen, final);
    if (close == Match::kMaybe || next == Match::kMaybe) {
      out.verdict = ScanVerdict::kNeedMore;
      return out;
    }
    if (close == Match::kYes) {
      end = q + kToolCallClose.size();
      break;
    }
    if (next == Match::kNo) break;
    p = q;
  }
  if (!any_declared) {
    out.pieces.clear();
    return out;
  }
  out.verdict = ScanVerdict::kCall;
  out.end = end;
  return out;
}

CallScan ScanBareFunction(std::string_view text, size_t pos, bool final, const ToolCatalog& tools,
                          ScanMemo* memo) {
  CallScan out;
  FunctionScan f = ScanXmlFunction(text, pos, final, tools, /*bare=*/true, memo);
  if (f.verdict != ScanVerdict::kCall) {
    out.verdict = f.verdict;
    return out;
  }
  size_t end = f.end;
  if (!f.closed_block) {
    const auto [verdict, after_close] = ConsumeClose(text, f.end, final);
    if (verdict != ScanVerdict::kCall) {
      out.verdict = verdict;
      return out;
    }
    end = after_close;
  }
  out.verdict = ScanVerdict::kCall;
  out.end = end;
  out.pieces.push_back({std::move(f.call), pos, f.end});
  return out;
}

}  // namespace

ValueScan ScanXmlValue(std::string_view text, size_t begin, bool final, ScanMemo* memo) {
  static constexpr std::initializer_list<std::string_view> kAfterParameter = {
      kParameterOpen, kFunctionClose, kToolCallClose, kThinkClose};
  static constexpr std::initializer_list<std::string_view> kAfterFunction = {
      kToolCallClose, kFunctionOpen, kToolCallOpen, kToolResponseOpen, kThinkClose};
  static constexpr std::initializer_list<std::string_view> kAfterToolCall = {
      kToolCallOpen, kFunctionOpen, kToolResponseOpen, kThinkClose};
  struct Closer {
    std::string_view tag;
    ValueEnd how;
    std::initializer_list<std::string_view> followers;
  };
  const Closer closers[] = {{kParameterClose, ValueEnd::kParameterClose, kAfterParameter},
                            {kFunctionClose, ValueEnd::kFunctionClose, kAfterFunction},
                            {kToolCallClose, ValueEnd::kToolCallClose, kAfterToolCall}};
  ValueScan out;
  size_t i = begin;
  if (memo != nullptr && memo->value_begin == begin && memo->value_resume <= text.size()) {
    i = memo->value_resume;
  }
  // Every '<' before `lt` was definitely not the value's end: resume there next time.
  auto need_more = [&](size_t lt) {
    if (memo != nullptr) {
      memo->value_begin = begin;
      memo->value_resume = lt;
    }
    out.verdict = ScanVerdict::kNeedMore;
    return out;
  };
  while (true) {
    const size_t lt = text.find('<', i);
    if (lt == std::string_view::npos) {
      if (!final) return need_more(text.size());
      out.verdict = ScanVerdict::kNotACall;
      return out;
    }
    for (const Closer& closer : closers) {
      const Match m = MatchAt(text, lt, closer.tag, final);
      if (m == Match::kMaybe) return need_more(lt);
      if (m == Match::kNo) continue;
      const size_t after = lt + closer.tag.size();
      const Match follower = FollowedByCallTag(text, after, final, closer.followers);
      if (follower == Match::kMaybe) return need_more(lt);
      if (follower == Match::kYes) return {ScanVerdict::kCall, lt, closer.how, after};
    }
    if (lt > begin && text[lt - 1] == '\n') {
      const Match next = MatchAt(text, lt, kParameterOpen, final);
      if (next == Match::kMaybe) return need_more(lt);
      if (next == Match::kYes) return {ScanVerdict::kCall, lt, ValueEnd::kNextParameter, lt};
    }
    i = lt + 1;
  }
}

std::string_view StripValueNewlines(std::string_view raw) {
  if (!raw.empty() && raw.front() == '\n') raw.remove_prefix(1);
  if (!raw.empty() && raw.back() == '\n') raw.remove_suffix(1);
  return raw;
}

Match MayStartCall(std::string_view text, size_t pos, bool final) {
  return MatchAny(text, pos, {kToolCallOpen, kFunctionOpen}, final);
}

CallScan ScanCallAt(std::string_view text, size_t pos, bool final, const ToolCatalog& tools,
                    ScanMemo* memo) {
  if (MatchAt(text, pos, kToolCallOpen, final) == Match::kYes) {
    return ScanToolCallBlock(text, pos, final, tools, memo);
  }
  if (MatchAt(text, pos, kFunctionOpen, final) == Match::kYes) {
    return ScanBareFunction(text, pos, final, tools, memo);
  }
  return {};
}

CallScan ScanBareJsonAnswer(std::string_view text, size_t begin, bool final,
                            const ToolCatalog& tools, ScanMemo* memo) {
  CallScan out;
  const size_t p = SkipSpace(text, begin);
  if (p == text.size() || text[p] != '{') {
    out.verdict = p == text.size() ? Undecided(final) : ScanVerdict::kNotACall;
    return out;
  }
  const JsonExtent extent = ScanJsonObjectExtent(text, p, final, memo);
  if (extent.verdict != ScanVerdict::kCall) {
    out.verdict = extent.verdict;
    return out;
  }
  if (SkipSpace(text, extent.end) != text.size()) return out;  // more than one object
  if (!final) {
    out.verdict = ScanVerdict::kNeedMore;
    return out;
  }
  const ordered_json object =
      ordered_json::parse(text.substr(p, extent.end - p), nullptr, /*allow_exceptions=*/false);
  std::optional<ScannedCall> call = CallFromJsonObject(object, tools);
  if (!call.has_value()) return out;
  out.verdict = ScanVerdict::kCall;
  out.end = text.size();
  out.pieces.push_back({std::move(call), p, extent.end});
  return out;
}

std::optional<ScannedCall> CallFromJsonObject(const ordered_json& object,
                                              const ToolCatalog& tools) {
  if (!object.is_object()) return std::nullopt;
  auto name = object.find("name");
  if (name == object.end() || !name->is_string()) return std::nullopt;
  ScannedCall call;
  call.name = name->get<std::string>();
  if (!tools.Declares(call.name)) return std::nullopt;
  auto arguments = object.find("arguments");
  if (arguments == object.end()) arguments = object.find("parameters");
  if (arguments != object.end() && !arguments->is_null()) {
    ordered_json value = *arguments;
    if (value.is_string()) {
      value = ordered_json::parse(value.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    }
    if (!value.is_object()) return std::nullopt;
    call.arguments = std::move(value);
  }
  tools.ConvertJsonArguments(call.name, call.arguments);
  return call;
}

}  // namespace deltaserve::router::internal
