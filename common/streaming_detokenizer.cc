#include "common/streaming_detokenizer.h"

#include "common/unicode.h"

namespace deltaserve::common {

std::string StreamingDetokenizer::Push(TokenId id) {
  pending_.append(tokenizer_.Piece(id));
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const int len = Utf8SequenceLength(pending_, i);
    if (len < 0) break;  // a valid prefix cut short: wait for the next token
    if (len == 0) {
      AppendUtf8(kReplacementChar, out);
      ++i;
      continue;
    }
    out.append(pending_, i, len);
    i += len;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out;
  // Each held-back byte is an unfinished character; one U+FFFD stands for the whole of it.
  if (!pending_.empty()) AppendUtf8(kReplacementChar, out);
  pending_.clear();
  return out;
}

}  // namespace deltaserve::common
