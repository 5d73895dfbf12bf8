#include "router/upstream/sse_reader.h"

namespace deltaserve::router::upstream {

void SseReader::Line(std::string_view line, std::vector<SseEvent>* out) {
  if (line.empty()) {
    if (has_data_) out->push_back(std::move(current_));
    current_ = SseEvent{};
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;
  const size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
  if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) current_.data += '\n';
    current_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    current_.event = std::string(value);
  }
  // id, retry and unknown fields: nothing the router uses.
}

absl::Status SseReader::Feed(std::string_view bytes, std::vector<SseEvent>* out) {
  for (size_t i = 0; i < bytes.size();) {
    const char c = bytes[i];
    if (after_cr_ && c == '\n') {
      after_cr_ = false;
      ++i;
      continue;
    }
    after_cr_ = false;
    const size_t end = bytes.find_first_of("\r\n", i);
    if (end == std::string_view::npos) {
      line_.append(bytes.substr(i));
      if (line_.size() + current_.data.size() > kMaxSseEventBytes) {
        return absl::InvalidArgumentError("the upstream sent an event larger than 8 MiB");
      }
      break;
    }
    line_.append(bytes.substr(i, end - i));
    after_cr_ = bytes[end] == '\r';
    Line(line_, out);
    line_.clear();
    if (current_.data.size() > kMaxSseEventBytes) {
      return absl::InvalidArgumentError("the upstream sent an event larger than 8 MiB");
    }
    i = end + 1;
  }
  return absl::OkStatus();
}

}  // namespace deltaserve::router::upstream
