// An incremental reader of one HTTP/1.1 response from an upstream: the status line and headers
// (at most kMaxHeaderBytes), then the body by Content-Length, chunked transfer coding, or until
// the connection closes. Bytes come in pieces of any size (Feed); the body's bytes come out as
// they arrive, so a streamed (SSE) answer is passed on without waiting for its end. Interim 1xx
// responses are skipped. Malformed input is an InvalidArgument naming what is wrong; the reader
// never reads outside what it was given (tests/fuzz/upstream_stream_fuzz.cc).
//
// The response is delimited exactly: bytes after its end belong to no request, so they are
// remembered (trailing_bytes) and the connection is not kept for another request (reusable).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace deltaserve::router::upstream {

inline constexpr size_t kMaxHeaderBytes = 64 << 10;

class HttpResponseReader {
 public:
  // Consumes `bytes`, appending body bytes to `body`. After an error the reader stays failed.
  absl::Status Feed(std::string_view bytes, std::string* body);
  // The connection closed: OK when the response is complete (or read until close).
  absl::Status FeedEof();

  bool headers_done() const { return state_ > State::kHeaders; }
  bool complete() const { return state_ == State::kDone; }
  int status() const { return status_; }
  // Bytes came after the end of the response.
  bool trailing_bytes() const { return trailing_bytes_; }
  // The connection may carry another request: the response ended by its own framing
  // (Content-Length, the chunked terminator, or none for 204/304), nothing followed it, it is
  // HTTP/1.1 and its Connection header has no "close".
  bool reusable() const;
  // The first header named `name` (case-insensitive), or "".
  std::string_view Header(std::string_view name) const;

 private:
  enum class State { kHeaders, kBodyLength, kBodyUntilClose, kChunkSize, kChunkData,
                     kChunkDataEnd, kTrailers, kDone, kFailed };
  absl::Status ParseHead(std::string_view head);
  absl::Status Fail(std::string message);

  State state_ = State::kHeaders;
  bool until_close_ = false;    // the body ran to the connection's end
  bool trailing_bytes_ = false;
  bool http11_ = false;
  std::string pending_;  // header bytes, or a partial chunk-size / trailer line
  int status_ = 0;
  std::vector<std::pair<std::string, std::string>> headers_;
  uint64_t remaining_ = 0;  // of the Content-Length body or of the current chunk
};

}  // namespace deltaserve::router::upstream
