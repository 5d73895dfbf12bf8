#include "router/chat/internal/segment_joiner.h"

#include "router/chat/internal/markup_scan.h"

namespace deltaserve::router::internal {

std::string SegmentJoiner::Append(std::string_view text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (IsSpace(text[i])) {
      const size_t start = i;
      while (i < text.size() && IsSpace(text[i])) ++i;
      if (segment_started_) pending_space_.append(text.substr(start, i - start));
      continue;
    }
    const size_t start = i;
    while (i < text.size() && !IsSpace(text[i])) ++i;
    if (!segment_started_) {
      if (any_segment_) out += "\n\n";
      segment_started_ = true;
      any_segment_ = true;
    }
    out += pending_space_;
    pending_space_.clear();
    out.append(text.substr(start, i - start));
  }
  return out;
}

void SegmentJoiner::EndSegment() {
  segment_started_ = false;
  pending_space_.clear();
}

}  // namespace deltaserve::router::internal
