#include "router/chat/internal/output_scanner.h"

#include <algorithm>
#include <utility>

#include "router/chat/internal/markup_scan.h"
#include "router/chat/reasoning_split.h"

namespace deltaserve::router::internal {

OutputScanner::OutputScanner(ToolCatalog tools, OutputScannerOptions options)
    : tools_(std::move(tools)),
      options_(options),
      parse_calls_(options.parse_tool_calls && !tools_.empty()) {}

void OutputScanner::Advance(std::string_view text, bool final, std::vector<OutputEvent>& out) {
  while (true) {
    bool more = false;
    switch (phase_) {
      case Phase::kStart:
        more = StepStart(text, final);
        break;
      case Phase::kOrphanHold:
        more = StepOrphanHold(text, final);
        break;
      case Phase::kReasoning:
        more = StepReasoning(text, final, out);
        break;
      case Phase::kAnswerStart:
        more = StepAnswerStart(text, final, out);
        break;
      case Phase::kAnswer:
        more = StepAnswer(text, final, out);
        break;
      case Phase::kDone:
        if (final) Finish(text, out);
        return;
    }
    if (!more) return;
  }
}

bool OutputScanner::StepStart(std::string_view text, bool final) {
  const ThinkStartResult start = LocateThinkStart(text, final, options_.prompt_opened_think);
  switch (start.kind) {
    case ThinkStart::kNeedMore:
      return false;
    case ThinkStart::kOpened:
      phase_ = Phase::kReasoning;
      pos_ = start.reasoning_begin;
      return true;
    case ThinkStart::kNoOpener:
      break;
  }
  if (options_.allow_orphan_think_close) {
    phase_ = Phase::kOrphanHold;
  } else {
    phase_ = Phase::kAnswerStart;
    answer_begin_ = 0;
  }
  return true;
}

// Rule 1: with no opener, a `</think>` anywhere makes everything before it reasoning; until one
// is seen (or the output ends without one) nothing is certain.
bool OutputScanner::StepOrphanHold(std::string_view text, bool final) {
  if (text.find(kThinkClose, orphan_scan_) != std::string_view::npos) {
    phase_ = Phase::kReasoning;
    pos_ = 0;
    return true;
  }
  if (!final) {
    orphan_scan_ = text.size() >= kThinkClose.size() ? text.size() - kThinkClose.size() + 1 : 0;
    return false;
  }
  phase_ = Phase::kAnswerStart;
  answer_begin_ = 0;
  return true;
}

// Reasoning runs to the first `</think>`; in a block never closed, to the first complete call
// naming a declared tool (rule 1). A possible call inside a closed block is left to rule 2.
bool OutputScanner::StepReasoning(std::string_view text, bool final,
                                  std::vector<OutputEvent>& out) {
  size_t i = pos_;
  while (true) {
    const size_t lt = text.find('<', i);
    if (lt == std::string_view::npos) {
      EmitReasoning(text.substr(pos_), out);
      pos_ = text.size();
      if (!final) return false;
      reasoning_.EndSegment();
      phase_ = Phase::kAnswerStart;
      answer_begin_ = text.size();
      return true;
    }
    const Match close = MatchAt(text, lt, kThinkClose, final);
    if (close != Match::kNo) {
      EmitReasoning(text.substr(pos_, lt - pos_), out);
      pos_ = lt;
      if (close == Match::kMaybe) return false;
      reasoning_.EndSegment();
      phase_ = Phase::kAnswerStart;
      answer_begin_ = lt + kThinkClose.size();
      return true;
    }
    if (parse_calls_) {
      const Match start = MayStartCall(text, lt, final);
      if (start == Match::kMaybe) {
        EmitReasoning(text.substr(pos_, lt - pos_), out);
        pos_ = lt;
        return false;
      }
      const ScanVerdict verdict = start == Match::kYes
                                      ? ScanCallAt(text, lt, final, tools_, &memo_).verdict
                                      : ScanVerdict::kNotACall;
      if (verdict != ScanVerdict::kNotACall) {
        EmitReasoning(text.substr(pos_, lt - pos_), out);
        pos_ = lt;
        if (close_search_begin_ < lt) close_search_begin_ = lt;
        const size_t close_at = text.find(kThinkClose, close_search_begin_);
        if (close_at != std::string_view::npos) {
          reasoning_held_ = true;
          held_begin_ = lt;
          held_end_ = close_at;
          phase_ = Phase::kAnswerStart;
          answer_begin_ = close_at + kThinkClose.size();
          return true;
        }
        if (verdict == ScanVerdict::kNeedMore || !final) {
          close_search_begin_ =
              std::max(lt, text.size() - std::min(text.size(), kThinkClose.size() - 1));
          return false;
        }
        reasoning_.EndSegment();  // unclosed block: the call and what follows are the answer
        phase_ = Phase::kAnswerStart;
        answer_begin_ = lt;
        return true;
      }
    }
    i = lt + 1;
  }
}

// Rule 3's last shape: an answer that is exactly one JSON call object.
bool OutputScanner::StepAnswerStart(std::string_view text, bool final,
                                    std::vector<OutputEvent>& out) {
  if (parse_calls_) {
    const size_t p = SkipSpace(text, answer_begin_);
    if (p == text.size() && !final) return false;
    if (p < text.size() && text[p] == '{') {
      CallScan scan = ScanBareJsonAnswer(text, answer_begin_, final, tools_, &memo_);
      if (scan.verdict == ScanVerdict::kNeedMore) return false;
      if (scan.verdict == ScanVerdict::kCall) {
        EmitCall(text, std::move(*scan.pieces.front().call), out);
        pos_ = text.size();
        phase_ = Phase::kDone;
        return true;
      }
    }
  }
  phase_ = Phase::kAnswer;
  pos_ = answer_begin_;
  return true;
}

// Prose and calls (rules 3, 4, 7, 8): text outside complete calls is content; a
// `<tool_response>` after a call ends the answer.
bool OutputScanner::StepAnswer(std::string_view text, bool final, std::vector<OutputEvent>& out) {
  size_t i = pos_;
  while (true) {
    const size_t lt = parse_calls_ ? text.find('<', i) : std::string_view::npos;
    if (lt == std::string_view::npos) {
      EmitContent(text.substr(pos_), out);
      pos_ = text.size();
      if (!final) return false;
      content_.EndSegment();
      phase_ = Phase::kDone;
      return true;
    }
    if (answer_calls_ > 0) {
      const Match response = MatchAt(text, lt, kToolResponseOpen, final);
      if (response != Match::kNo) {
        EmitContent(text.substr(pos_, lt - pos_), out);
        pos_ = lt;
        if (response == Match::kMaybe) return false;
        content_.EndSegment();
        pos_ = text.size();
        phase_ = Phase::kDone;
        return true;
      }
    }
    const Match start = MayStartCall(text, lt, final);
    if (start == Match::kMaybe) {
      EmitContent(text.substr(pos_, lt - pos_), out);
      pos_ = lt;
      return false;
    }
    if (start == Match::kYes) {
      CallScan scan = ScanCallAt(text, lt, final, tools_, &memo_);
      if (scan.verdict == ScanVerdict::kNeedMore) {
        EmitContent(text.substr(pos_, lt - pos_), out);
        pos_ = lt;
        return false;
      }
      if (scan.verdict == ScanVerdict::kCall) {
        EmitContent(text.substr(pos_, lt - pos_), out);
        content_.EndSegment();
        for (CallPiece& piece : scan.pieces) {
          if (piece.call.has_value()) {
            EmitCall(text, std::move(*piece.call), out);
          } else {
            EmitContent(text.substr(piece.begin, piece.end - piece.begin), out);
            content_.EndSegment();
          }
        }
        pos_ = i = scan.end;
        continue;
      }
    }
    i = lt + 1;
  }
}

// End of output: rule 2 for reasoning still held (the answer had no call), then what was held.
void OutputScanner::Finish(std::string_view text, std::vector<OutputEvent>& out) {
  if (!reasoning_held_) return;
  reasoning_held_ = false;
  std::vector<ScannedCall> promoted;
  const std::string_view region = text.substr(held_begin_, held_end_ - held_begin_);
  for (ReasoningPiece& piece : PromoteReasoningCalls(region, tools_)) {
    if (piece.call.has_value()) {
      promoted.push_back(std::move(*piece.call));
    } else {
      EmitReasoning(piece.text, out);
      reasoning_.EndSegment();
    }
  }
  for (OutputEvent& event : held_answer_) out.push_back(std::move(event));
  held_answer_.clear();
  for (ScannedCall& call : promoted) {
    ++calls_;
    out.push_back({OutputEvent::Kind::kToolCall, {}, std::move(call)});
  }
}

void OutputScanner::EmitReasoning(std::string_view text, std::vector<OutputEvent>& out) {
  std::string piece = reasoning_.Append(text);
  if (!piece.empty()) out.push_back({OutputEvent::Kind::kReasoning, std::move(piece), {}});
}

void OutputScanner::EmitContent(std::string_view text, std::vector<OutputEvent>& out) {
  std::string piece = content_.Append(text);
  if (!piece.empty()) {
    AnswerSink(out).push_back({OutputEvent::Kind::kContent, std::move(piece), {}});
  }
}

void OutputScanner::EmitCall(std::string_view text, ScannedCall call,
                             std::vector<OutputEvent>& out) {
  if (reasoning_held_) ReleaseHeldReasoning(text, out);
  ++answer_calls_;
  ++calls_;
  out.push_back({OutputEvent::Kind::kToolCall, {}, std::move(call)});
}

void OutputScanner::ReleaseHeldReasoning(std::string_view text, std::vector<OutputEvent>& out) {
  reasoning_held_ = false;
  EmitReasoning(text.substr(held_begin_, held_end_ - held_begin_), out);
  reasoning_.EndSegment();
  for (OutputEvent& event : held_answer_) out.push_back(std::move(event));
  held_answer_.clear();
}

}  // namespace deltaserve::router::internal
