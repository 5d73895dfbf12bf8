// An incremental reader of a text/event-stream (the WHATWG server-sent events format) as an
// upstream streams it: lines end in "\n", "\r\n" or "\r"; `event:` names the event, `data:`
// lines (joined with "\n") are its payload, `:` lines are comments, a blank line dispatches.
// Pieces of any size may be fed; an event larger than kMaxSseEventBytes is an error rather than
// unbounded memory.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace deltaserve::router::upstream {

inline constexpr size_t kMaxSseEventBytes = 8 << 20;

struct SseEvent {
  std::string event;  // "" when the event had no `event:` line
  std::string data;
};

class SseReader {
 public:
  // Appends the events completed by `bytes` to `out`.
  absl::Status Feed(std::string_view bytes, std::vector<SseEvent>* out);

 private:
  void Line(std::string_view line, std::vector<SseEvent>* out);

  std::string line_;
  bool after_cr_ = false;  // the last byte was "\r": a following "\n" belongs to it
  SseEvent current_;
  bool has_data_ = false;
};

}  // namespace deltaserve::router::upstream
