#include "router/chat/reasoning_split.h"

#include <utility>

#include "router/chat/internal/markup_scan.h"

namespace deltaserve::router {

using internal::Match;

ThinkStartResult LocateThinkStart(std::string_view text, bool final, bool prompt_opened_think) {
  const size_t p = internal::SkipSpace(text, 0);
  if (p == text.size() && !final) return {};
  const Match opener = internal::MatchAt(text, p, internal::kThinkOpen, final);
  if (opener == Match::kMaybe) return {};
  if (opener == Match::kYes) return {ThinkStart::kOpened, p + internal::kThinkOpen.size()};
  if (prompt_opened_think) return {ThinkStart::kOpened, 0};
  return {ThinkStart::kNoOpener, 0};
}

std::vector<ReasoningPiece> PromoteReasoningCalls(std::string_view region,
                                                  const ToolCatalog& tools) {
  std::vector<ReasoningPiece> pieces;
  size_t text_begin = 0;
  size_t i = 0;
  while (true) {
    const size_t open = region.find(internal::kToolCallOpen, i);
    if (open == std::string_view::npos) break;
    internal::CallScan scan = internal::ScanCallAt(region, open, /*final=*/true, tools);
    if (scan.verdict != internal::ScanVerdict::kCall) {
      i = open + 1;
      continue;
    }
    pieces.push_back({region.substr(text_begin, open - text_begin), std::nullopt});
    for (internal::CallPiece& piece : scan.pieces) {
      if (piece.call.has_value()) {
        pieces.push_back({{}, std::move(piece.call)});
      } else {
        pieces.push_back({region.substr(piece.begin, piece.end - piece.begin), std::nullopt});
      }
    }
    text_begin = i = scan.end;
  }
  pieces.push_back({region.substr(text_begin), std::nullopt});
  return pieces;
}

}  // namespace deltaserve::router
