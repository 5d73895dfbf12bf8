// The lexical layer of the model-output parser (router/chat/tool_call_parser.h): the tags of the
// Qwen output formats, and matching a tag at a position of text that may still be growing. Every
// scanner of the parser answers kMaybe / kNeedMore instead of guessing when the answer depends on
// text not seen yet (`final` false), which is what makes streaming equal to parsing at once.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string_view>

namespace deltaserve::router::internal {

inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";
inline constexpr std::string_view kFunctionOpen = "<function=";
inline constexpr std::string_view kFunctionClose = "</function>";
inline constexpr std::string_view kParameterOpen = "<parameter=";
inline constexpr std::string_view kParameterClose = "</parameter>";
inline constexpr std::string_view kToolResponseOpen = "<tool_response>";

// kYes: `tag` starts at the position. kNo: it does not. kMaybe: the text ends inside a prefix of
// it and more text may come (never when `final`).
enum class Match { kNo, kYes, kMaybe };

Match MatchAt(std::string_view text, size_t pos, std::string_view tag, bool final);
// kYes if one of `tags` matches, else kMaybe if one may, else kNo.
Match MatchAny(std::string_view text, size_t pos, std::initializer_list<std::string_view> tags,
               bool final);

// ASCII whitespace (space, \t, \n, \r, \f, \v): what rule 9 trims.
inline bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
// The first position at or after `pos` that is not whitespace (text.size() if none).
size_t SkipSpace(std::string_view text, size_t pos);
std::string_view TrimSpace(std::string_view text);

// The length of `text` without a trailing incomplete UTF-8 sequence (at most 3 bytes cut), so
// that a streamed delta never splits a character that the next delta completes.
size_t CompleteUtf8Prefix(std::string_view text);

}  // namespace deltaserve::router::internal
