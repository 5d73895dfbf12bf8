#pragma once
// One accepted TCP connection of the HTTP server: reads requests with Beast's parser (fed by
// hand so that one read loop serves request reading, pipelined bytes and disconnect
// detection), dispatches them, writes responses and SSE chunks. Everything runs on the
// connection's strand; the Post* functions may be called from any thread. Private to
// router/http.

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "router/http/http_exchange.h"
#include "router/http/http_message.h"
#include "router/http/http_server.h"
#include "router/http/internal/server_core.h"

namespace deltaserve::router::http::internal {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<ServerCore> core, boost::asio::ip::tcp::socket socket);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void Start();

  // Answers for exchange `seq`; ignored when that exchange is over or already answered.
  void PostResponse(uint64_t seq, Response response);
  void PostSseStart(uint64_t seq, std::vector<HeaderField> headers);
  void PostSseBytes(uint64_t seq, std::string bytes, bool last);
  void PostHandlerDropped(uint64_t seq);
  // Graceful stop: idle connections close now, busy ones after their answer.
  void PostServerStopping();
  void PostForceClose();

 private:
  enum class State {
    kIdle,  // between requests, nothing received
    kReadingHeader,
    kReadingBody,
    kDispatched,  // the handler has the exchange, no answer yet
    kWriting,     // writing a complete response
    kStreaming,   // SSE head written; chunks follow
    kClosing,     // writing a server error, then close (reads are drained and discarded)
    kClosed,
  };

  bool InExchange() const {
    return state_ == State::kDispatched || state_ == State::kWriting || state_ == State::kStreaming;
  }

  void DoRead();
  void OnRead(const boost::system::error_code& ec, size_t n);
  void ParseBuffered();
  void OnHeaderComplete();
  void OnParseError(const boost::system::error_code& ec);
  void Dispatch();
  void WriteResponse(Response response);
  void WriteServerError(int status, std::string_view message);
  void QueueWrite(std::string bytes);
  void DoWrite();
  void OnWrite(const boost::system::error_code& ec, size_t n);
  void FinishExchange();
  void ClientGone();
  void Close();
  void SetDeadline(std::chrono::milliseconds after);
  void ClearDeadline();
  void OnDeadline();
  void Report();
  std::string ResponseHead(int status, std::string_view content_type,
                           const std::vector<HeaderField>& headers, const std::string* body);

  const std::shared_ptr<ServerCore> core_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer deadline_;
  uint64_t deadline_gen_ = 0;
  uint64_t id_ = 0;
  std::string peer_;

  State state_ = State::kIdle;
  boost::beast::flat_buffer buffer_;  // read, not yet parsed
  // What async_read_some writes into. Not buffer_: the parser consumes buffer_ while a read is
  // pending (an exchange finishing parses a pipelined request), and an emptied flat_buffer
  // moves its start back, so a read into memory buffer_ handed out earlier was committed as
  // stale bytes of an older request.
  std::unique_ptr<char[]> read_chunk_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  bool reading_ = false;
  bool read_closed_ = false;

  std::deque<std::string> out_;
  std::vector<std::string> in_flight_;
  uint64_t out_bytes_ = 0;  // queued, not yet written
  bool writing_ = false;

  // The current exchange.
  uint64_t seq_ = 0;
  std::weak_ptr<HttpExchange> exchange_;
  std::shared_ptr<Connection> self_hold_;  // alive while a handler owes an answer
  bool keep_alive_ = false;
  bool over_limit_ = false;  // opened beyond max_connections: answered 503 and closed
  bool http10_ = false;
  bool chunked_ = true;
  bool sse_finished_ = false;
  std::string request_id_;
  ExchangeRecord record_;
  std::shared_ptr<ExchangeNotes> notes_;  // the current exchange's, for record_.notes
  std::chrono::steady_clock::time_point started_;
};

}  // namespace deltaserve::router::http::internal
