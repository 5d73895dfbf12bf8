#pragma once
// One request/response exchange on a connection of the router's HTTP server, handed to a
// handler. The handler answers once, from any thread: either Respond() with a complete
// response, or StartSse() and then events through the returned SseStream. Both post to the
// connection's strand, so a generation thread may call them directly. OnClientGone() tells the
// handler when the client has disconnected, so it can cancel the work behind the answer.
//
//   server.Route("POST", "/v1/x", [](std::shared_ptr<HttpExchange> ex) {
//     auto sse = ex->StartSse();
//     ex->OnClientGone([job] { job->Cancel(); });
//     sse->Send(R"({"a":1})");  // "data: {"a":1}\n\n", flushed as its own chunk
//     sse->Finish();
//   });

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "router/http/http_message.h"

namespace deltaserve::router::http {

namespace internal {
class Connection;
}  // namespace internal

class SseStream;

// What a handler adds to its exchange's log line (ExchangeRecord::notes): key/value pairs such
// as the model, token counts and time to first token. Shared by the exchange and the
// connection, so notes made before the answer reach the record even when the handler has let
// go of the exchange by then.
struct ExchangeNotes {
  std::mutex mu;
  std::vector<HeaderField> fields;
};

class HttpExchange : public std::enable_shared_from_this<HttpExchange> {
 public:
  HttpExchange(Request request, std::weak_ptr<internal::Connection> connection, uint64_t seq);
  // An exchange dropped without an answer is answered with 500, and an SSE stream that was
  // started but not finished is finished, so a connection never hangs on a forgotten exchange.
  ~HttpExchange();
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  const Request& request() const { return request_; }

  // Sends a complete response. Only the first answer (Respond or StartSse) counts.
  void Respond(Response response);

  // Starts a Server-Sent Events response (status 200, text/event-stream, chunked) and returns
  // the stream to write events to. Returns the same stream when called again.
  std::shared_ptr<SseStream> StartSse(std::vector<HeaderField> extra_headers = {});

  // Registers `callback` to run once when the client disconnects (or the server is forced to
  // close the connection) before the answer was fully written. Runs at once, on the calling
  // thread, when the client is already gone; otherwise on a server thread. Callbacks must not
  // block.
  void OnClientGone(std::function<void()> callback);
  bool client_gone() const;

  // Adds `key`=`value` to this exchange's log line and ExchangeRecord. Make the notes before
  // answering (Respond, or SseStream::Finish): later ones may miss the record.
  void Note(std::string key, std::string value);

 private:
  friend class internal::Connection;
  friend class SseStream;

  // Called by the connection (on its strand).
  void MarkClientGone();
  void MarkCompleted();

  bool ClaimAnswer();  // true for the first Respond/StartSse
  void SendSseBytes(std::string bytes, bool last);

  const Request request_;
  const std::weak_ptr<internal::Connection> connection_;
  const uint64_t seq_;

  mutable std::mutex mu_;
  bool answered_ = false;
  bool gone_ = false;
  bool completed_ = false;
  std::vector<std::function<void()>> gone_callbacks_;
  std::weak_ptr<SseStream> sse_;
  std::shared_ptr<ExchangeNotes> notes_ = std::make_shared<ExchangeNotes>();
};

// The event side of a Server-Sent Events response. Thread-safe; every Send() is written and
// flushed as its own HTTP chunk (events queued while a write is in flight go out together in
// the next write).
class SseStream {
 public:
  explicit SseStream(std::shared_ptr<HttpExchange> exchange);
  ~SseStream();  // Finish()es a stream that was not finished
  SseStream(const SseStream&) = delete;
  SseStream& operator=(const SseStream&) = delete;

  // Writes one event: "data: <line>\n" per line of `data`, then "\n". Returns false when the
  // client is gone or the stream was finished (the event is dropped).
  bool Send(std::string_view data);
  // Same with an "event: <name>" line first.
  bool SendEvent(std::string_view event, std::string_view data);
  // Writes ": <text>\n\n", a comment clients ignore (keeps idle proxies from timing out).
  bool SendComment(std::string_view text);
  // Ends the response (the terminating zero-length chunk). The connection then serves the
  // client's next request. Idempotent.
  void Finish();

  bool client_gone() const { return exchange_->client_gone(); }
  HttpExchange& exchange() { return *exchange_; }

 private:
  bool Write(std::string payload);

  const std::shared_ptr<HttpExchange> exchange_;
  std::mutex mu_;
  bool finished_ = false;
};

}  // namespace deltaserve::router::http
