#include "router/http/http_exchange.h"

#include <utility>

#include "router/http/internal/connection.h"

namespace deltaserve::router::http {

HttpExchange::HttpExchange(Request request, std::weak_ptr<internal::Connection> connection,
                           uint64_t seq)
    : request_(std::move(request)), connection_(std::move(connection)), seq_(seq) {}

void HttpExchange::Note(std::string key, std::string value) {
  std::lock_guard<std::mutex> lock(notes_->mu);
  notes_->fields.push_back({std::move(key), std::move(value)});
}

HttpExchange::~HttpExchange() {
  if (answered_) return;
  if (auto c = connection_.lock()) c->PostHandlerDropped(seq_);
}

bool HttpExchange::ClaimAnswer() {
  std::lock_guard<std::mutex> lock(mu_);
  if (answered_) return false;
  answered_ = true;
  return true;
}

void HttpExchange::Respond(Response response) {
  if (!ClaimAnswer()) return;
  if (auto c = connection_.lock()) c->PostResponse(seq_, std::move(response));
}

std::shared_ptr<SseStream> HttpExchange::StartSse(std::vector<HeaderField> extra_headers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto existing = sse_.lock()) return existing;
    bool first = !answered_;
    answered_ = true;
    if (first) {
      if (auto c = connection_.lock()) c->PostSseStart(seq_, std::move(extra_headers));
    }
  }
  // When Respond() came first, the connection ignores this stream's bytes (it is not
  // streaming), so the stream is harmless.
  auto stream = std::make_shared<SseStream>(shared_from_this());
  std::lock_guard<std::mutex> lock(mu_);
  sse_ = stream;
  return stream;
}

void HttpExchange::OnClientGone(std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (completed_) return;
    if (!gone_) {
      gone_callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

bool HttpExchange::client_gone() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gone_;
}

void HttpExchange::MarkClientGone() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (completed_ || gone_) return;
    gone_ = true;
    callbacks.swap(gone_callbacks_);
  }
  for (auto& cb : callbacks) cb();
}

void HttpExchange::MarkCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  completed_ = true;
  gone_callbacks_.clear();
}

void HttpExchange::SendSseBytes(std::string bytes, bool last) {
  if (auto c = connection_.lock()) c->PostSseBytes(seq_, std::move(bytes), last);
}

// ---- SseStream --------------------------------------------------------------------------

SseStream::SseStream(std::shared_ptr<HttpExchange> exchange) : exchange_(std::move(exchange)) {}

SseStream::~SseStream() { Finish(); }

bool SseStream::Write(std::string payload) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ || exchange_->client_gone()) return false;
  exchange_->SendSseBytes(std::move(payload), /*last=*/false);
  return true;
}

namespace {
void AppendDataLines(std::string_view data, std::string* out) {
  // A line break inside the data starts a new "data:" field (the SSE spec joins them with
  // "\n" again on the client side).
  size_t start = 0;
  while (true) {
    size_t nl = data.find('\n', start);
    std::string_view line = data.substr(start, nl == std::string_view::npos ? nl : nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out->append("data: ").append(line).append("\n");
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out->append("\n");
}
}  // namespace

bool SseStream::Send(std::string_view data) {
  std::string payload;
  payload.reserve(data.size() + 8);
  AppendDataLines(data, &payload);
  return Write(std::move(payload));
}

bool SseStream::SendEvent(std::string_view event, std::string_view data) {
  std::string payload = "event: ";
  for (char c : event) {
    if (c != '\r' && c != '\n') payload.push_back(c);
  }
  payload.append("\n");
  AppendDataLines(data, &payload);
  return Write(std::move(payload));
}

bool SseStream::SendComment(std::string_view text) {
  std::string payload = ": ";
  for (char c : text) {
    if (c != '\r' && c != '\n') payload.push_back(c);
  }
  payload.append("\n\n");
  return Write(std::move(payload));
}

void SseStream::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
  }
  exchange_->SendSseBytes("", /*last=*/true);
}

}  // namespace deltaserve::router::http
