#include "router/upstream/upstream_call.h"

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "router/api/api_error.h"
#include "router/config/upstream_config.h"
#include "router/upstream/connection_pool.h"
#include "router/upstream/http_connection.h"
#include "router/upstream/http_response_reader.h"
#include "router/upstream/sse_reader.h"
#include "router/upstream/upstream_request.h"
#include "router/upstream/upstream_stream.h"

namespace deltaserve::router::upstream {
namespace {

// UpstreamCall threads still running (WaitForUpstreamCalls).
std::mutex g_threads_mu;
std::condition_variable g_threads_cv;
int g_threads = 0;

constexpr size_t kMaxErrorBodyBytes = 64 << 10;
// After the answer's last event, how long to wait for the rest of its framing (the chunked
// terminator, normally in the same packet) so that the connection can be kept.
constexpr absl::Duration kDrainTimeout = absl::Seconds(1);
constexpr size_t kMaxWholeBodyBytes = 16 << 20;

std::string Redact(std::string text, const std::string& key) {
  if (key.empty()) return text;
  return absl::StrReplaceAll(text, {{key, "[redacted]"}});
}

// `text` on one line: control bytes (newlines included) become spaces, so an upstream's words
// cannot start a forged line in the router's text log.
std::string OneLine(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return text;
}

// The upstream's error message from an OpenAI- or Anthropic-shaped error body, else its start.
std::string ErrorMessage(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object()) {
    auto e = j.find("error");
    if (e != j.end() && e->is_object()) {
      auto m = e->find("message");
      if (m != e->end() && m->is_string()) return OneLine(m->get<std::string>().substr(0, 512));
    }
    if (e != j.end() && e->is_string()) return OneLine(e->get<std::string>().substr(0, 512));
  }
  return OneLine(std::string(body.substr(0, 256)));
}

}  // namespace

UpstreamFailure ClassifyHttpError(const UpstreamConfig& u, int http_status,
                                  std::string_view retry_after_header, std::string_view body) {
  UpstreamFailure f;
  const std::string where = absl::StrCat("upstream '", u.name, "' answered HTTP ", http_status);
  if (http_status == 401 || http_status == 403) {
    // The body may echo part of the key: never quoted.
    f.kind = kErrorAuth;
    f.status = absl::UnavailableError(
        absl::StrCat(where, ": it refused the router's credentials (check its api_key_env / "
                            "api_key_file)"));
    return f;
  }
  const std::string message = Redact(ErrorMessage(body), u.api_key);
  if (http_status == 429) {
    f.kind = kErrorRateLimited;
    int64_t seconds = 0;
    std::string text(retry_after_header);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.pop_back();
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.erase(0, 1);
    // Seconds only; an HTTP date is treated as no hint.
    if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos &&
        absl::SimpleAtoi(text, &seconds) && seconds > 0) {
      f.retry_after_seconds = std::min<int64_t>(seconds, 24 * 3600);
    }
    f.status = absl::ResourceExhaustedError(absl::StrCat(where, ": ", message));
    if (f.retry_after_seconds > 0) {
      f.status = api::WithRetryAfter(f.status, f.retry_after_seconds);
    }
    return f;
  }
  if (http_status == 404) {
    f.kind = kErrorNotFound;
    f.status = absl::UnavailableError(
        absl::StrCat(where, " (does it serve model '", u.model, "'?): ", message));
    return f;
  }
  if (http_status == 408 || http_status >= 500) {
    f.kind = kErrorServer;
    f.status = absl::UnavailableError(absl::StrCat(where, ": ", message));
    return f;
  }
  if (http_status >= 400) {
    f.kind = kErrorRefused;
    f.status = absl::InvalidArgumentError(absl::StrCat(where, ": ", message));
    return f;
  }
  f.kind = kErrorProtocol;
  f.status = absl::UnavailableError(absl::StrCat(where, ", which the router cannot use"));
  return f;
}

UpstreamCall::UpstreamCall(UpstreamConfig upstream, UpstreamHttpRequest request,
                           api::Endpoint endpoint, int n, std::string request_id,
                           std::shared_ptr<UpstreamCallSink> sink)
    : upstream_(std::move(upstream)),
      request_(std::move(request)),
      endpoint_(endpoint),
      n_(n),
      request_id_(std::move(request_id)),
      sink_(std::move(sink)),
      connection_(std::make_unique<HttpConnection>()) {}

UpstreamCall::~UpstreamCall() = default;

void UpstreamCall::Start() {
  started_ = absl::Now();
  {
    std::lock_guard<std::mutex> lock(g_threads_mu);
    ++g_threads;
  }
  std::thread([self = shared_from_this()]() mutable {
    self->Main();
    self.reset();  // the connection closes here, before the thread counts as ended
    std::lock_guard<std::mutex> lock(g_threads_mu);
    --g_threads;
    g_threads_cv.notify_all();
  }).detach();
}

bool WaitForUpstreamCalls(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(g_threads_mu);
  return g_threads_cv.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                               [] { return g_threads == 0; });
}

void UpstreamCall::Cancel() {
  cancelled_ = true;
  std::lock_guard<std::mutex> lock(connection_mu_);
  if (connection_ != nullptr) connection_->Cancel();
}

bool UpstreamCall::Adopt(std::unique_ptr<HttpConnection> connection) {
  std::unique_ptr<HttpConnection> old;  // closed outside the lock
  std::lock_guard<std::mutex> lock(connection_mu_);
  // Cancel() sets cancelled_ before it takes the lock: either it sees the new connection, or
  // this sees cancelled_.
  if (cancelled_) return false;
  old = std::move(connection_);
  connection_ = std::move(connection);
  return true;
}

void UpstreamCall::Keep(const std::string& key) {
  std::unique_ptr<HttpConnection> kept;
  {
    std::lock_guard<std::mutex> lock(connection_mu_);
    if (cancelled_) return;  // its cancel flag is set: of no use to anyone
    kept = std::move(connection_);
  }
  if (kept != nullptr) ConnectionPool::Global().Put(key, std::move(kept), absl::Now());
}

std::string UpstreamCall::Scrub(std::string text) const {
  return Redact(std::move(text), upstream_.api_key);
}

void UpstreamCall::Main() {
  UpstreamFailure failure = Exchange();
  std::shared_ptr<UpstreamCallSink> sink = std::move(sink_);
  if (failure.status.ok()) return;  // OnUpstreamEnd was called
  if (cancelled_) {
    failure.status = absl::CancelledError("generation cancelled");
    failure.kind = "";
  }
  failure.after_output = output_reported_;
  failure.status =
      absl::Status(failure.status.code(), OneLine(Scrub(std::string(failure.status.message()))));
  if (auto seconds = api::RetryAfterSeconds(failure.status); !seconds && failure.retry_after_seconds) {
    failure.status = api::WithRetryAfter(failure.status, failure.retry_after_seconds);
  }
  sink->OnUpstreamFailed(failure);
}

UpstreamFailure UpstreamCall::Exchange() {
  auto fail = [&](absl::Status status, const char* kind) {
    UpstreamFailure f;
    f.kind = kind;
    f.status = std::move(status);
    return f;
  };
  const std::string name = absl::StrCat("upstream '", upstream_.name, "'");
  absl::StatusOr<UpstreamUrl> url = ParseUpstreamUrl(upstream_.base_url);
  if (!url.ok()) return fail(url.status(), kErrorConnect);

  const std::string key = ConnectionKey(*url, upstream_.ca_pem);
  for (int attempt = 0;; ++attempt) {
    // The first attempt takes a kept connection if there is one; a retry never does (the kept
    // ones are as old as the one that failed).
    std::unique_ptr<HttpConnection> idle =
        attempt == 0 ? ConnectionPool::Global().Take(key, absl::Now()) : nullptr;
    const bool reused = idle != nullptr;
    if (!Adopt(reused ? std::move(idle) : std::make_unique<HttpConnection>())) {
      return fail(absl::CancelledError("cancelled"), "");
    }
    if (reused) {
      ConnectionPool::Global().CountReused(upstream_.name);
    } else {
      if (absl::Status s = connection_->Connect(
              *url, upstream_.ca_pem,
              absl::Now() + absl::Milliseconds(upstream_.connect_timeout_ms));
          !s.ok()) {
        const bool timeout = s.code() == absl::StatusCode::kDeadlineExceeded;
        return fail(absl::Status(timeout ? absl::StatusCode::kDeadlineExceeded
                                         : absl::StatusCode::kUnavailable,
                                 absl::StrCat(name, ": ", s.message())),
                    timeout ? kErrorTimeout : kErrorConnect);
      }
      ConnectionPool::Global().CountNew(upstream_.name);
    }
    bool stale = false;
    UpstreamFailure f = Converse(*url, key, reused, &stale);
    if (!stale) return f;
  }
}

void UpstreamCall::Drain(HttpResponseReader& response, const std::string& key) {
  const absl::Time deadline = absl::Now() + kDrainTimeout;
  std::string rest;  // body bytes after the answer's end: read past, not used
  char buffer[4096];
  while (!response.complete()) {
    absl::StatusOr<size_t> n = connection_->Read(buffer, sizeof buffer, deadline);
    if (!n.ok() || *n == 0) return;
    if (!response.Feed(std::string_view(buffer, *n), &rest).ok()) return;
    if (rest.size() > kMaxErrorBodyBytes) return;  // not just framing: not worth the wait
    rest.clear();
  }
  if (response.reusable()) Keep(key);
}

UpstreamFailure UpstreamCall::Converse(const UpstreamUrl& url, const std::string& key,
                                       bool reused, bool* stale) {
  auto fail = [&](absl::Status status, const char* kind) {
    UpstreamFailure f;
    f.kind = kind;
    f.status = std::move(status);
    return f;
  };
  // A kept connection the server closed while it was idle: the write fails, or the read ends
  // or is reset before the first byte. Timeouts and cancels are not that.
  auto closed_by_server = [&](const absl::Status& s) {
    return reused && !cancelled_ && s.code() == absl::StatusCode::kUnavailable;
  };
  const std::string name = absl::StrCat("upstream '", upstream_.name, "'");
  const absl::Time first_byte_deadline =
      absl::Now() + absl::Milliseconds(upstream_.first_byte_timeout_ms);
  const std::string bytes =
      UpstreamHttpRequestBytes(request_, upstream_, url, request_id_);
  if (absl::Status s = connection_->Write(bytes, first_byte_deadline); !s.ok()) {
    if (closed_by_server(s)) {
      *stale = true;
      return {};
    }
    const bool timeout = s.code() == absl::StatusCode::kDeadlineExceeded;
    return fail(absl::Status(timeout ? absl::StatusCode::kDeadlineExceeded
                                     : absl::StatusCode::kUnavailable,
                             absl::StrCat(name, ": sending the request: ", s.message())),
                timeout ? kErrorTimeout : kErrorConnect);
  }

  HttpResponseReader response;
  SseReader sse;
  std::unique_ptr<StreamTranslator> translator =
      MakeStreamTranslator(upstream_.kind, endpoint_, n_);
  bool body_started = false;
  bool streamed = false;
  std::string body;  // body bytes not yet consumed
  std::string whole;
  std::vector<SseEvent> events;
  std::vector<api::GenerationDelta> deltas;
  char buffer[16 << 10];
  bool any_byte = false;  // of the answer
  for (;;) {
    const absl::Time deadline =
        body_started ? absl::Now() + absl::Milliseconds(upstream_.idle_timeout_ms)
                     : first_byte_deadline;
    absl::StatusOr<size_t> n = connection_->Read(buffer, sizeof buffer, deadline);
    const bool closed = n.ok() ? *n == 0 && reused && !cancelled_ : closed_by_server(n.status());
    if (closed && !any_byte) {
      *stale = true;
      return {};
    }
    if (n.ok() && *n > 0) any_byte = true;
    if (!n.ok()) {
      if (n.status().code() == absl::StatusCode::kDeadlineExceeded) {
        return fail(absl::DeadlineExceededError(absl::StrCat(
                        name, body_started ? ": the stream stalled (no byte for "
                                           : ": no answer within ",
                        body_started ? upstream_.idle_timeout_ms : upstream_.first_byte_timeout_ms,
                        body_started ? " ms)" : " ms")),
                    kErrorTimeout);
      }
      return fail(absl::UnavailableError(absl::StrCat(name, ": ", n.status().message())),
                  n.status().code() == absl::StatusCode::kCancelled ? "" : kErrorStream);
    }
    absl::Status fed = *n == 0 ? response.FeedEof()
                               : response.Feed(std::string_view(buffer, *n), &body);
    if (!fed.ok()) {
      return fail(absl::UnavailableError(absl::StrCat(name, ": ", fed.message())),
                  *n == 0 && response.headers_done() ? kErrorStream : kErrorProtocol);
    }
    if (!response.headers_done()) continue;
    if (!body.empty()) body_started = true;
    if (response.status() < 200 || response.status() > 299) {
      whole += body;
      body.clear();
      if (whole.size() < kMaxErrorBodyBytes && !response.complete()) continue;
      if (response.reusable()) Keep(key);
      return ClassifyHttpError(upstream_, response.status(), response.Header("retry-after"),
                               whole);
    }
    if (!streamed &&
        !absl::StrContains(absl::AsciiStrToLower(std::string(response.Header("content-type"))),
                           "text/event-stream")) {
      // An answer in one piece (the server ignored "stream": true).
      whole += body;
      body.clear();
      if (whole.size() > kMaxWholeBodyBytes) {
        return fail(absl::UnavailableError(absl::StrCat(name, ": the answer is over 16 MiB")),
                    kErrorProtocol);
      }
      if (!response.complete()) continue;
      deltas.clear();
      if (absl::Status s = translator->ReadWhole(whole, &deltas); !s.ok()) {
        return fail(absl::UnavailableError(absl::StrCat(name, ": ", s.message())),
                    s.code() == absl::StatusCode::kUnavailable ? kErrorServer : kErrorProtocol);
      }
    } else {
      streamed = true;
      events.clear();
      if (absl::Status s = sse.Feed(body, &events); !s.ok()) {
        return fail(absl::UnavailableError(absl::StrCat(name, ": ", s.message())), kErrorProtocol);
      }
      body.clear();
      deltas.clear();
      for (const SseEvent& e : events) {
        if (translator->done()) break;
        if (absl::Status s = translator->OnEvent(e, &deltas); !s.ok()) {
          return fail(absl::UnavailableError(absl::StrCat(name, ": ", s.message())),
                      s.code() == absl::StatusCode::kUnavailable ? kErrorServer : kErrorProtocol);
        }
      }
    }
    if (!deltas.empty()) {
      if (!output_reported_) {
        first_output_seconds_ = absl::ToDoubleSeconds(absl::Now() - started_);
      }
      output_reported_ = true;
      sink_->OnUpstreamDeltas(std::move(deltas), translator->early_prompt_tokens());
      deltas = {};
    }
    if (translator->done() || (*n == 0 && translator->CompleteAtEof())) {
      // Kept before the end is reported, so that the client's next request finds it.
      if (*n != 0 && response.reusable()) Keep(key);
      std::shared_ptr<UpstreamCallSink> sink = std::move(sink_);
      sink->OnUpstreamEnd(translator->End());
      if (*n != 0 && !response.complete()) Drain(response, key);
      return UpstreamFailure{};
    }
    if (*n == 0 || response.complete()) {
      return fail(absl::UnavailableError(
                      absl::StrCat(name, ": the stream ended before the answer's end")),
                  kErrorStream);
    }
  }
}

}  // namespace deltaserve::router::upstream
