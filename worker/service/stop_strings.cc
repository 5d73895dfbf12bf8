#include "worker/service/stop_strings.h"

#include <algorithm>
#include <utility>

namespace deltaserve::worker {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));  // an empty stop string never matches
  }
}

std::string StopStringMatcher::Push(std::string_view delta) {
  if (matched()) return "";
  pending_.append(delta);
  // The earliest occurrence of any stop string wins.
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t at = pending_.find(stops_[i]);
    if (at != std::string::npos && at < best) {
      best = at;
      matched_index_ = static_cast<int>(i);
    }
  }
  if (best != std::string::npos) {
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) ==
          std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringMatcher::Flush() {
  if (matched()) return "";
  std::string out;
  out.swap(pending_);
  return out;
}

std::string_view StopStringMatcher::matched_string() const {
  return matched() ? std::string_view(stops_[matched_index_]) : std::string_view();
}

}  // namespace deltaserve::worker
