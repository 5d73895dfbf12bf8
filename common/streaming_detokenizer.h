// Turns a stream of token ids into text deltas that are always complete, valid UTF-8. A token's
// piece may end inside a multi-byte character (byte-level BPE splits characters, e.g. emoji);
// the partial bytes are held back and emitted with the token that completes them.
//
//   StreamingDetokenizer detok(tokenizer);
//   for (TokenId id : generated) send(detok.Push(id));
//   send(detok.Flush());
#pragma once

#include <string>

#include "common/tokenizer.h"

namespace deltaserve::common {

// Incremental detokenizer for one sequence; see the file comment.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Appends token `id` and returns the text that became complete (possibly empty). Bytes that
  // can never start valid UTF-8 are emitted as U+FFFD so the output stays valid.
  std::string Push(TokenId id);

  // Ends the stream: returns held-back bytes of an unfinished character as U+FFFD (or "").
  std::string Flush();

  // Bytes currently held back (at most 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
};

}  // namespace deltaserve::common
