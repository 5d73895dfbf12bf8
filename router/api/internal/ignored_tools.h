#pragma once
// Tool types a parser skips rather than refuses (the Responses API's built-in tools, Anthropic's
// server tools): the answer names them in an X-DeltaServe-Warning header and the router logs
// them, so the client's text is cut down to characters safe in both before anyone keeps it.
// Private to router/api.

#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::router::api::internal {

// Most characters of a kept tool type; the rest is dropped.
inline constexpr size_t kMaxIgnoredToolTypeChars = 64;

// `type` with only [A-Za-z0-9_.-] kept (at most kMaxIgnoredToolTypeChars of them), or "unnamed"
// when nothing is left: "web_search_20250305" stays, "evil\r\nX-Injected: 1" is "evilX-Injected1".
std::string HeaderSafeToolType(std::string_view type);

// Appends HeaderSafeToolType(type) to `types` unless it is there already (first-seen order).
void NoteIgnoredToolType(std::string_view type, std::vector<std::string>* types);

}  // namespace deltaserve::router::api::internal
