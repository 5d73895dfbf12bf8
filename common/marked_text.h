// Text assembled from trusted pieces (a chat template's own markup) and pieces that came from a
// request (message content, tool calls, tool schemas), with the byte ranges of the latter. The
// tokenizer matches control tokens such as <|im_start|> only outside those ranges
// (Tokenizer::EncodeMarked), so text a client typed can never become role markup
// (docs/chat.md, "Special tokens in content").
//
//   MarkedText t;
//   t.AppendTrusted("<|im_start|>user\n");
//   t.AppendUntrusted(message.content);
//   std::vector<TokenId> ids = tokenizer.EncodeMarked(t.text, t.untrusted);
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

namespace deltaserve::common {

// Bytes [begin, end) of a text.
struct ByteRange {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const ByteRange&) const = default;
};

// Adds [begin, end) to `ranges`, whose last range ends at or before `begin`. An empty range is
// dropped and one that touches the last range extends it, so the list stays sorted, disjoint,
// non-adjacent and free of empty ranges: the form every reader of ranges may assume.
inline void AddByteRange(std::vector<ByteRange>& ranges, size_t begin, size_t end) {
  if (begin >= end) return;
  if (!ranges.empty() && ranges.back().end == begin) {
    ranges.back().end = end;
    return;
  }
  ranges.push_back({begin, end});
}

// A text and which of its bytes are untrusted; see the file comment.
struct MarkedText {
  std::string text;
  std::vector<ByteRange> untrusted;  // sorted, disjoint, non-adjacent, none empty

  void AppendTrusted(std::string_view s) { text.append(s); }
  void AppendUntrusted(std::string_view s) {
    AddByteRange(untrusted, text.size(), text.size() + s.size());
    text.append(s);
  }
  // Appends `s`, whose own untrusted ranges (offsets into `s`, in the form above) are `ranges`.
  void Append(std::string_view s, absl::Span<const ByteRange> ranges) {
    const size_t base = text.size();
    for (const ByteRange& r : ranges) AddByteRange(untrusted, base + r.begin, base + r.end);
    text.append(s);
  }
};

}  // namespace deltaserve::common
