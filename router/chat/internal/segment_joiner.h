// Rule 9 of ../shared/fixtures/toolcalls.md, incrementally: `content` (and `reasoning_content`)
// is the text segments outside calls, each trimmed, empty ones dropped, joined with "\n\n".
// Text is appended as it becomes certain; only what can no longer change is returned, so a
// segment's trailing whitespace waits for more text of the same segment, and the "\n\n" between
// two segments goes out with the first non-space character of the second. Every piece returned
// holds a non-space character.
#pragma once

#include <string>
#include <string_view>

namespace deltaserve::router::internal {

class SegmentJoiner {
 public:
  // Appends text of the current segment; returns the part of the joined string now certain.
  std::string Append(std::string_view text);
  // Ends the current segment: its pending trailing whitespace is dropped.
  void EndSegment();
  // True once a non-empty segment has been emitted.
  bool any() const { return any_segment_; }

 private:
  bool any_segment_ = false;      // some non-empty segment was emitted
  bool segment_started_ = false;  // the current segment emitted a non-space character
  std::string pending_space_;     // whitespace after the current segment's last non-space
};

}  // namespace deltaserve::router::internal
