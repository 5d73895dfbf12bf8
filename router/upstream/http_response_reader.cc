#include "router/upstream/http_response_reader.h"

#include <algorithm>
#include <charconv>
#include <vector>

#include "absl/strings/str_cat.h"

namespace deltaserve::router::upstream {
namespace {

constexpr size_t kMaxLineBytes = 4096;  // a chunk-size or trailer line

// (std::string_view helpers: this build's absl::string_view is its own type.)
std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] + 32) : a[i];
    const char y = b[i] >= 'A' && b[i] <= 'Z' ? static_cast<char>(b[i] + 32) : b[i];
    if (x != y) return false;
  }
  return true;
}

// Digits only (in `base`), no sign, no overflow.
template <typename Int>
bool ParseNumber(std::string_view s, Int* out, int base = 10) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

absl::Status HttpResponseReader::Fail(std::string message) {
  state_ = State::kFailed;
  return absl::InvalidArgumentError(std::move(message));
}

std::string_view HttpResponseReader::Header(std::string_view name) const {
  for (const auto& [k, v] : headers_) {
    if (EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

bool HttpResponseReader::reusable() const {
  if (state_ != State::kDone || until_close_ || trailing_bytes_ || !http11_) return false;
  // Connection: a comma-separated list of options; "close" anywhere in it ends the connection.
  std::string_view options = Header("connection");
  while (!options.empty()) {
    const size_t comma = options.find(',');
    if (EqualsIgnoreCase(Trim(options.substr(0, comma)), "close")) return false;
    if (comma == std::string_view::npos) break;
    options.remove_prefix(comma + 1);
  }
  return true;
}

absl::Status HttpResponseReader::ParseHead(std::string_view head) {
  headers_.clear();
  std::vector<std::string_view> lines;
  for (size_t start = 0;;) {
    const size_t end = head.find("\r\n", start);
    lines.push_back(head.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 2;
  }
  std::string_view status_line = lines.empty() ? "" : lines[0];
  // HTTP/1.x SP 3DIGIT [SP reason]
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    return Fail("the upstream's answer does not start with an HTTP/1.x status line");
  }
  const std::string_view code = status_line.substr(9, 3);
  if (!ParseNumber(code, &status_) || status_ < 100 || status_ > 599 ||
      (status_line.size() > 12 && status_line[12] != ' ')) {
    return Fail("the upstream's status line has no valid status code");
  }
  http11_ = status_line.starts_with("HTTP/1.1 ");
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return Fail("the upstream sent a malformed header line");
    }
    headers_.emplace_back(std::string(line.substr(0, colon)),
                          std::string(Trim(line.substr(colon + 1))));
  }
  if (status_ < 200) {  // 100 Continue, 103 Early Hints: the real head follows
    state_ = State::kHeaders;
    return absl::OkStatus();
  }
  const std::string_view te = Header("transfer-encoding");
  const std::string_view length = Header("content-length");
  if (status_ == 204 || status_ == 304) {
    state_ = State::kDone;
  } else if (!te.empty()) {
    const std::string_view coding = Trim(te);
    if (coding.size() < 7 || !EqualsIgnoreCase(coding.substr(coding.size() - 7), "chunked")) {
      return Fail(absl::StrCat("the upstream's transfer coding is not supported"));
    }
    state_ = State::kChunkSize;
  } else if (!length.empty()) {
    if (!ParseNumber(length, &remaining_)) {
      return Fail("the upstream sent an invalid Content-Length");
    }
    state_ = remaining_ == 0 ? State::kDone : State::kBodyLength;
  } else {
    state_ = State::kBodyUntilClose;
  }
  return absl::OkStatus();
}

absl::Status HttpResponseReader::Feed(std::string_view bytes, std::string* body) {
  while (!bytes.empty()) {
    switch (state_) {
      case State::kFailed:
        return absl::InvalidArgumentError("the upstream's answer was already malformed");
      case State::kDone:
        // Bytes after the response: not the answer's, and the next request's answer could not
        // be told from them, so they are dropped and the connection is not reused.
        trailing_bytes_ = true;
        return absl::OkStatus();
      case State::kHeaders: {
        // Search from a little before the new bytes: "\r\n\r\n" may straddle two pieces.
        const size_t old_size = pending_.size();
        const size_t from = old_size >= 3 ? old_size - 3 : 0;
        const size_t appended = std::min(bytes.size(), kMaxHeaderBytes + 4);
        pending_.append(bytes.data(), appended);
        const size_t end = pending_.find("\r\n\r\n", from);
        if (end == std::string::npos || end > kMaxHeaderBytes) {
          if (pending_.size() > kMaxHeaderBytes) {
            return Fail("the upstream's headers are larger than 64 KiB");
          }
          bytes.remove_prefix(appended);
          continue;
        }
        const std::string head = pending_.substr(0, end);
        bytes.remove_prefix(end + 4 - old_size);
        pending_.clear();
        if (absl::Status s = ParseHead(head); !s.ok()) return s;
        continue;
      }
      case State::kBodyLength: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, bytes.size()));
        body->append(bytes.data(), take);
        bytes.remove_prefix(take);
        remaining_ -= take;
        if (remaining_ == 0) state_ = State::kDone;
        continue;
      }
      case State::kBodyUntilClose:
        body->append(bytes.data(), bytes.size());
        bytes = {};
        continue;
      case State::kChunkSize:
      case State::kTrailers:
      case State::kChunkDataEnd: {
        const size_t nl = bytes.find('\n');
        const size_t take = nl == std::string_view::npos ? bytes.size() : nl + 1;
        pending_.append(bytes.data(), take);
        bytes.remove_prefix(take);
        if (pending_.size() > kMaxLineBytes) return Fail("the upstream sent an overlong chunk line");
        if (nl == std::string_view::npos) continue;
        std::string_view line = pending_;
        if (line.ends_with('\n')) line.remove_suffix(1);
        if (line.ends_with('\r')) line.remove_suffix(1);
        if (state_ == State::kChunkDataEnd) {
          if (!line.empty()) return Fail("the upstream's chunk is longer than its size");
          state_ = State::kChunkSize;
        } else if (state_ == State::kTrailers) {
          if (line.empty()) state_ = State::kDone;
        } else {
          std::string_view size = line.substr(0, line.find(';'));
          size = Trim(size);
          if (size.size() > 15 || !ParseNumber(size, &remaining_, 16)) {
            return Fail("the upstream sent an invalid chunk size");
          }
          state_ = remaining_ == 0 ? State::kTrailers : State::kChunkData;
        }
        pending_.clear();
        continue;
      }
      case State::kChunkData: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, bytes.size()));
        body->append(bytes.data(), take);
        bytes.remove_prefix(take);
        remaining_ -= take;
        if (remaining_ == 0) state_ = State::kChunkDataEnd;
        continue;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status HttpResponseReader::FeedEof() {
  switch (state_) {
    case State::kDone:
      return absl::OkStatus();
    case State::kBodyUntilClose:
      state_ = State::kDone;
      until_close_ = true;
      return absl::OkStatus();
    case State::kHeaders:
      return Fail(pending_.empty() && status_ == 0
                      ? "the upstream closed the connection without an answer"
                      : "the upstream closed the connection inside its headers");
    default:
      return Fail("the upstream closed the connection before the end of its answer");
  }
}

}  // namespace deltaserve::router::upstream
