// One request to an upstream (docs/upstreams.md), run on a thread of its own: builds the request
// in the upstream's API (upstream_request.h), connects (http_connection.h), sends it, reads the
// answer as it arrives (http_response_reader.h, sse_reader.h) and reports the translated events
// (upstream_stream.h) to its sink — the router's routing state machine, which decides between
// passing them on, retrying and falling back. Every wait has a deadline (connect, first byte,
// idle gap between bytes); Cancel() wakes any of them.
//
// What the sink gets: any number of OnUpstreamDeltas, then exactly one of OnUpstreamEnd or
// OnUpstreamFailed, all from the call's thread. A failure says whether output had already been
// reported and what kind it was (the `kind` label of the upstream error metric).
//
// Connections are kept for the next request (connection_pool.h): the call takes an idle one when
// there is one and gives it back only when the answer was read exactly to its end and the server
// keeps it open. A kept connection the server closed meanwhile (the request cannot be written,
// or the connection ends or is reset before any byte of the answer) is retried once on a new
// connection: a server that closes an idle connection has not read the request on it.
//
// Key material: the key goes into the request's header only; every message that may hold text
// from the upstream has the key replaced by "[redacted]", and a 401/403's body is not quoted.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "router/api/completion_backend.h"
#include "router/api/completion_request.h"
#include "router/config/router_config.h"
#include "router/upstream/upstream_request.h"

namespace deltaserve::router::upstream {

class HttpConnection;
class HttpResponseReader;

// Values of the `kind` label (deltaserve_router_upstream_errors_total).
inline constexpr const char* kErrorConnect = "connect";          // refused, reset, DNS, TLS
inline constexpr const char* kErrorTimeout = "timeout";          // connect, first byte or idle
inline constexpr const char* kErrorRateLimited = "rate_limited";  // HTTP 429
inline constexpr const char* kErrorServer = "server";            // HTTP 5xx, 408, 529
inline constexpr const char* kErrorAuth = "auth";                // HTTP 401 / 403
inline constexpr const char* kErrorNotFound = "not_found";       // HTTP 404
inline constexpr const char* kErrorRefused = "refused";          // HTTP 400 / 413 / 422 ...
inline constexpr const char* kErrorProtocol = "protocol";        // a malformed answer
inline constexpr const char* kErrorStream = "stream";            // broken / ended early
inline constexpr const char* kErrorUntranslatable = "untranslatable";  // never sent

struct UpstreamFailure {
  absl::Status status;  // InvalidArgument: the client's request; Cancelled: Cancel()
  std::string kind;     // kError*; "" for Cancelled
  bool after_output = false;      // deltas had been reported
  int64_t retry_after_seconds = 0;  // a 429's Retry-After (0: none)
};

class UpstreamCallSink {
 public:
  virtual ~UpstreamCallSink() = default;
  // `prompt_tokens`: what the upstream reported so far (0: not yet).
  virtual void OnUpstreamDeltas(std::vector<api::GenerationDelta> deltas,
                                int64_t prompt_tokens) = 0;
  virtual void OnUpstreamEnd(const api::GenerationEnd& end) = 0;
  virtual void OnUpstreamFailed(const UpstreamFailure& failure) = 0;
};

class UpstreamCall : public std::enable_shared_from_this<UpstreamCall> {
 public:
  // `request`: what BuildUpstreamRequest made of the client's request; `endpoint` and `n` say
  // how to read the answer, `request_id` is forwarded as X-Request-Id.
  UpstreamCall(UpstreamConfig upstream, UpstreamHttpRequest request, api::Endpoint endpoint,
               int n, std::string request_id, std::shared_ptr<UpstreamCallSink> sink);
  ~UpstreamCall();

  // Starts the call's thread.
  void Start();
  // Any thread; never blocks.
  void Cancel();

  // Seconds from Start to the first reported delta (0 before it).
  double first_output_seconds() const { return first_output_seconds_.load(); }

 private:
  void Main();
  UpstreamFailure Exchange();  // the failure, or a status OK after OnUpstreamEnd
  // One request on connection_ (`reused`: taken from the pool). `stale`: a reused connection
  // failed before any byte of the answer, and the request may be sent again on a new one.
  UpstreamFailure Converse(const UpstreamUrl& url, const std::string& key, bool reused,
                           bool* stale);
  // Makes `connection` the call's; false (and it is closed) once the call is cancelled.
  bool Adopt(std::unique_ptr<HttpConnection> connection);
  // Gives connection_ back to the pool unless the call was cancelled.
  void Keep(const std::string& key);
  // After the end was reported: reads the rest of the answer's framing (briefly) and keeps the
  // connection when the answer then ends exactly.
  void Drain(HttpResponseReader& response, const std::string& key);
  std::string Scrub(std::string text) const;

  const UpstreamConfig upstream_;
  const UpstreamHttpRequest request_;
  const api::Endpoint endpoint_;
  const int n_;
  const std::string request_id_;
  std::shared_ptr<UpstreamCallSink> sink_;
  std::mutex connection_mu_;  // connection_ changes vs Cancel()
  std::unique_ptr<HttpConnection> connection_;
  std::atomic<bool> cancelled_{false};
  std::atomic<double> first_output_seconds_{0};
  bool output_reported_ = false;
  absl::Time started_;
};

// Waits until the threads of every UpstreamCall started have ended (at most `timeout`); true when
// none is left. For the end of the process, after the backend cancelled its generations: a
// thread past its last report may still be closing its connection.
bool WaitForUpstreamCalls(absl::Duration timeout);

// The status, kind and Retry-After of an upstream's non-2xx answer (`body`: its start), with
// `key` never quoted. Exposed for tests.
UpstreamFailure ClassifyHttpError(const UpstreamConfig& upstream, int http_status,
                                  std::string_view retry_after_header, std::string_view body);

}  // namespace deltaserve::router::upstream
