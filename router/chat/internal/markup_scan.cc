#include "router/chat/internal/markup_scan.h"

namespace deltaserve::router::internal {

Match MatchAt(std::string_view text, size_t pos, std::string_view tag, bool final) {
  if (pos > text.size()) return Match::kNo;
  const size_t available = text.size() - pos;
  if (available >= tag.size()) {
    return text.compare(pos, tag.size(), tag) == 0 ? Match::kYes : Match::kNo;
  }
  if (text.compare(pos, available, tag.substr(0, available)) != 0) return Match::kNo;
  return final ? Match::kNo : Match::kMaybe;
}

Match MatchAny(std::string_view text, size_t pos, std::initializer_list<std::string_view> tags,
               bool final) {
  Match best = Match::kNo;
  for (std::string_view tag : tags) {
    const Match m = MatchAt(text, pos, tag, final);
    if (m == Match::kYes) return m;
    if (m == Match::kMaybe) best = m;
  }
  return best;
}

size_t SkipSpace(std::string_view text, size_t pos) {
  while (pos < text.size() && IsSpace(text[pos])) ++pos;
  return pos;
}

std::string_view TrimSpace(std::string_view text) {
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && IsSpace(text[begin])) ++begin;
  while (end > begin && IsSpace(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

size_t CompleteUtf8Prefix(std::string_view text) {
  const size_t n = text.size();
  // Look back over at most 3 continuation bytes for the lead byte of the last sequence.
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t length = 1;
    if ((c & 0xE0) == 0xC0) {
      length = 2;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4;
    }
    return length > back ? n - back : n;
  }
  return n;
}

}  // namespace deltaserve::router::internal
