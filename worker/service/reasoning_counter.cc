#include "worker/service/reasoning_counter.h"

namespace deltaserve::worker {

ReasoningCounter::ReasoningCounter(int32_t start, int32_t end, bool prompt_opened)
    : start_(start),
      end_(end),
      state_(start < 0 || end < 0 ? State::kDone
             : prompt_opened      ? State::kInside
                                  : State::kBefore),
      reopen_skippable_(prompt_opened) {}

void ReasoningCounter::Feed(int32_t token, bool blank) {
  switch (state_) {
    case State::kDone:
      return;
    case State::kInside:
      if (token == end_) {
        state_ = State::kDone;
      } else if (token == start_ && reopen_skippable_) {
        // The prompt opened the block and the model wrote `<think>` again first: the router
        // skips that opener, so it is not reasoning text.
        reopen_skippable_ = false;
      } else {
        ++count_;
        if (!blank) reopen_skippable_ = false;
      }
      return;
    case State::kBefore:
      if (token == start_) {
        state_ = State::kInside;
        return;
      }
      [[fallthrough]];
    case State::kNoOpener:
      if (token == end_) {
        count_ = before_;  // an orphan `</think>`: everything before it was reasoning
        state_ = State::kDone;
        return;
      }
      ++before_;
      if (!blank) state_ = State::kNoOpener;
      return;
  }
}

bool IsBlankText(std::string_view text) {
  for (char c : text) {
    // The router's parser's whitespace (router/chat/internal/markup_scan.h IsSpace).
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') return false;
  }
  return true;
}

}  // namespace deltaserve::worker
