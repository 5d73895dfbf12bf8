// Stop strings over a stream of text deltas: the text up to (not including) the first
// occurrence of any stop string is released, and nothing after it. Text that might be the start
// of a stop string is held back until the next delta decides, so a client never receives part of
// a stop string (OpenAI semantics: the stop sequence is not part of the output).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::worker {

// See the file comment.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends `delta`; returns the text that is now certain to be output. After a match it returns
  // the text before the stop string, matched() becomes true, and later calls return "".
  std::string Push(std::string_view delta);
  // The end of the stream: everything still held back (there is no stop string in it).
  std::string Flush();

  bool matched() const { return matched_index_ >= 0; }
  // The stop string that matched (empty before a match).
  std::string_view matched_string() const;

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // held back: a suffix that is a prefix of some stop string
  int matched_index_ = -1;
};

}  // namespace deltaserve::worker
