#include "router/http/internal/connection.h"

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/str_util.h"

namespace deltaserve::router::http::internal {
namespace {

using common::Sv;
namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

// Bytes read ahead while an exchange is in flight (pipelined requests); beyond this the
// connection stops reading until the answer is written, and cannot notice a disconnect.
constexpr size_t kMaxReadAhead = 64 << 10;
constexpr size_t kReadChunk = 16 << 10;
// After a server error that closes the connection, incoming bytes are read and dropped for
// this long so the client sees the response rather than a reset.
constexpr std::chrono::milliseconds kLinger{2000};

bool IsRequestIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == ':';
}

std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("req-%016x", rng());
}

// Header values we write must not carry CR or LF (a handler echoing client input).
bool SafeHeader(const HeaderField& h) {
  auto bad = [](char c) { return c == '\r' || c == '\n' || c == '\0'; };
  return !h.name.empty() && std::none_of(h.name.begin(), h.name.end(), bad) &&
         std::none_of(h.value.begin(), h.value.end(), bad);
}

bool ServerOwnedHeader(std::string_view name) {
  return EqualsIgnoreCase(name, "content-length") || EqualsIgnoreCase(name, "connection") ||
         EqualsIgnoreCase(name, "transfer-encoding") || EqualsIgnoreCase(name, "content-type") ||
         EqualsIgnoreCase(name, "x-request-id");
}

}  // namespace

Connection::Connection(std::shared_ptr<ServerCore> core, asio::ip::tcp::socket socket)
    : core_(std::move(core)), socket_(std::move(socket)), deadline_(socket_.get_executor()) {}

Connection::~Connection() {
  if (id_ != 0) core_->Unregister(id_);
}

void Connection::Start() {
  size_t open = 0;
  id_ = core_->Register(shared_from_this(), &open);
  const size_t limit = core_->options.max_connections;
  const bool over_limit = limit > 0 && open > limit;
  error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  if (!ec) peer_ = absl::StrCat(ep.address().to_string(), ":", ep.port());
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  asio::dispatch(socket_.get_executor(), [self = shared_from_this(), over_limit, limit] {
    if (self->core_->stopping) return self->Close();
    if (over_limit) {
      // Answered before its request is read; the linger that follows drains what it sends.
      self->over_limit_ = true;
      return self->WriteServerError(
          503, absl::StrCat("the router has ", limit, " connections open; retry later"));
    }
    self->SetDeadline(self->core_->options.idle_timeout);
    self->DoRead();
  });
}

// ---- reading ----------------------------------------------------------------------------

void Connection::DoRead() {
  if (reading_ || read_closed_ || state_ == State::kClosed) return;
  if (InExchange() && buffer_.size() >= kMaxReadAhead) return;
  reading_ = true;
  if (!read_chunk_) read_chunk_ = std::make_unique<char[]>(kReadChunk);
  socket_.async_read_some(
      asio::buffer(read_chunk_.get(), kReadChunk),
      [self = shared_from_this()](const error_code& ec, size_t n) { self->OnRead(ec, n); });
}

void Connection::OnRead(const error_code& ec, size_t n) {
  reading_ = false;
  if (state_ == State::kClosed) return;
  if (ec) {
    read_closed_ = true;
    // EOF or reset. Mid-exchange this is how a disconnect is noticed; a client that only
    // half-closes its sending side is treated as gone too.
    if (state_ == State::kClosing && writing_) return;  // let the error response go out
    return Close();
  }
  asio::buffer_copy(buffer_.prepare(n), asio::buffer(read_chunk_.get(), n));
  buffer_.commit(n);
  if (state_ == State::kClosing) {
    buffer_.consume(buffer_.size());
  } else if (state_ == State::kIdle || state_ == State::kReadingHeader ||
             state_ == State::kReadingBody) {
    ParseBuffered();
  }
  DoRead();
}

void Connection::ParseBuffered() {
  if (state_ == State::kIdle) {
    if (buffer_.size() == 0) return;
    parser_.emplace();
    parser_->eager(true);
    parser_->body_limit(core_->options.max_body_bytes);
    parser_->header_limit(core_->options.max_header_bytes);
    state_ = State::kReadingHeader;
    SetDeadline(core_->options.header_timeout);
  }
  while ((state_ == State::kReadingHeader || state_ == State::kReadingBody) && buffer_.size() > 0) {
    error_code ec;
    size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == bhttp::error::need_more) break;
    if (ec) return OnParseError(ec);
    if (state_ == State::kReadingHeader && parser_->is_header_done()) {
      OnHeaderComplete();
      if (state_ != State::kReadingBody) return;
    }
    if (parser_->is_done()) return Dispatch();
    if (used == 0) break;
  }
}

void Connection::OnHeaderComplete() {
  state_ = State::kReadingBody;
  SetDeadline(core_->options.body_timeout);
  const auto& req = parser_->get();
  auto expect = req.find(bhttp::field::expect);
  if (expect != req.end() &&
      EqualsIgnoreCase(std::string_view(expect->value().data(), expect->value().size()),
                       "100-continue") &&
      !parser_->is_done()) {
    QueueWrite("HTTP/1.1 100 Continue\r\n\r\n");
  }
}

void Connection::OnParseError(const error_code& ec) {
  if (ec == bhttp::error::body_limit) {
    return WriteServerError(413, absl::StrCat("request body is larger than the limit of ",
                                              core_->options.max_body_bytes, " bytes"));
  }
  if (ec == bhttp::error::header_limit) {
    return WriteServerError(431, absl::StrCat("request header is larger than the limit of ",
                                              core_->options.max_header_bytes, " bytes"));
  }
  WriteServerError(400, absl::StrCat("malformed HTTP request: ", ec.message()));
}

// ---- dispatch ---------------------------------------------------------------------------

void Connection::Dispatch() {
  ClearDeadline();
  auto msg = parser_->release();
  parser_.reset();
  state_ = State::kDispatched;
  ++seq_;
  sse_finished_ = false;
  started_ = std::chrono::steady_clock::now();
  http10_ = msg.version() < 11;
  chunked_ = !http10_;
  keep_alive_ = msg.keep_alive() && !core_->stopping;
  self_hold_ = shared_from_this();

  Request request;
  request.method = std::string(msg.method_string());
  request.target = std::string(msg.target());
  auto q = request.target.find('?');
  request.path = request.target.substr(0, q);
  if (q != std::string::npos) request.query = request.target.substr(q + 1);
  for (const auto& f : msg) {
    request.headers.push_back({std::string(f.name_string()), std::string(f.value())});
  }
  request.body = std::move(msg.body());
  std::string_view rid = request.Header("x-request-id");
  request_id_ =
      (!rid.empty() && rid.size() <= 128 && std::all_of(rid.begin(), rid.end(), IsRequestIdChar))
          ? std::string(rid)
          : NewRequestId();
  request.request_id = request_id_;
  request.peer = peer_;

  record_ = ExchangeRecord{};
  notes_.reset();
  record_.method = request.method;
  record_.path = request.path;
  record_.body_bytes_in = request.body.size();
  record_.request_id = request_id_;
  record_.peer = peer_;

  bool path_known = false;
  const Handler* handler = core_->FindRoute(request.method, request.path, &path_known);
  if (handler == nullptr) {
    Response r = path_known
                     ? core_->ErrorResponse(405,
                                            absl::StrCat("method ", request.method,
                                                         " is not allowed on ", request.path),
                                            request.path)
                     : core_->ErrorResponse(
                           404, absl::StrCat("no route for ", request.method, " ", request.path),
                           request.path);
    if (path_known) r.headers.push_back({"Allow", core_->AllowedMethods(request.path)});
    WriteResponse(std::move(r));
    DoRead();
    return;
  }
  record_.route_matched = true;
  auto exchange = std::make_shared<HttpExchange>(std::move(request), weak_from_this(), seq_);
  exchange_ = exchange;
  notes_ = exchange->notes_;
  try {
    (*handler)(exchange);
  } catch (const std::exception& e) {
    exchange->Respond(
        core_->ErrorResponse(500, absl::StrCat("handler failed: ", e.what()), record_.path));
  } catch (...) {
    exchange->Respond(core_->ErrorResponse(500, "handler failed", record_.path));
  }
  exchange.reset();  // a handler that kept no reference gets its 500 from ~HttpExchange
  DoRead();          // watch for a disconnect (and read ahead pipelined requests)
}

// ---- answers ----------------------------------------------------------------------------

void Connection::PostResponse(uint64_t seq, Response response) {
  asio::post(socket_.get_executor(),
             [self = shared_from_this(), seq, r = std::move(response)]() mutable {
               if (seq != self->seq_ || self->state_ != State::kDispatched) return;
               self->WriteResponse(std::move(r));
             });
}

void Connection::PostHandlerDropped(uint64_t seq) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), seq] {
    if (seq != self->seq_ || self->state_ != State::kDispatched) return;
    self->WriteResponse(self->core_->ErrorResponse(500, "the request was dropped unanswered"));
  });
}

void Connection::PostSseStart(uint64_t seq, std::vector<HeaderField> headers) {
  asio::post(
      socket_.get_executor(), [self = shared_from_this(), seq, h = std::move(headers)]() mutable {
        if (seq != self->seq_ || self->state_ != State::kDispatched) return;
        if (!self->chunked_) self->keep_alive_ = false;  // HTTP/1.0: body ends at close
        h.push_back({"Cache-Control", "no-cache"});
        h.push_back({"X-Accel-Buffering", "no"});
        self->state_ = State::kStreaming;
        self->record_.status = 200;
        self->record_.streamed = true;
        self->QueueWrite(self->ResponseHead(200, "text/event-stream; charset=utf-8", h, nullptr));
      });
}

void Connection::PostSseBytes(uint64_t seq, std::string bytes, bool last) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), seq, b = std::move(bytes),
                                      last]() mutable {
    if (seq != self->seq_ || self->state_ != State::kStreaming || self->sse_finished_) return;
    if (!b.empty()) {
      self->QueueWrite(self->chunked_ ? absl::StrCat(absl::Hex(b.size()), "\r\n", b, "\r\n")
                                      : std::move(b));
    }
    if (self->out_bytes_ > self->core_->options.max_sse_backlog_bytes) {
      return self->Close();  // the client is not reading
    }
    if (last) {
      self->sse_finished_ = true;
      if (self->chunked_) self->QueueWrite("0\r\n\r\n");
      if (!self->writing_) self->FinishExchange();
    }
  });
}

void Connection::PostServerStopping() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->state_ == State::kIdle && self->buffer_.size() == 0) self->Close();
  });
}

void Connection::PostForceClose() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
}

std::string Connection::ResponseHead(int status, std::string_view content_type,
                                     const std::vector<HeaderField>& headers,
                                     const std::string* body) {
  std::string head = absl::StrCat("HTTP/1.", http10_ ? "0 " : "1 ", status, " ",
                                  Sv(ReasonPhrase(status)), "\r\nContent-Type: ", Sv(content_type),
                                  "\r\nX-Request-Id: ", request_id_, "\r\n");
  for (const auto& h : headers) {
    if (SafeHeader(h) && !ServerOwnedHeader(h.name)) {
      absl::StrAppend(&head, h.name, ": ", h.value, "\r\n");
    }
  }
  if (body != nullptr) {
    absl::StrAppend(&head, "Content-Length: ", body->size(), "\r\n");
  } else if (chunked_) {
    absl::StrAppend(&head, "Transfer-Encoding: chunked\r\n");
  }
  if (!keep_alive_) {
    absl::StrAppend(&head, "Connection: close\r\n");
  } else if (http10_) {
    absl::StrAppend(&head, "Connection: keep-alive\r\n");
  }
  absl::StrAppend(&head, "\r\n");
  return head;
}

void Connection::WriteResponse(Response response) {
  if (core_->stopping) keep_alive_ = false;
  std::string head =
      ResponseHead(response.status, response.content_type, response.headers, &response.body);
  state_ = State::kWriting;
  record_.status = response.status;
  QueueWrite(std::move(head) + response.body);
}

void Connection::WriteServerError(int status, std::string_view message) {
  // An error before dispatch: report it as an exchange of its own, then close.
  ClientGone();
  record_ = ExchangeRecord{};
  record_.status = status;
  record_.peer = peer_;
  record_.over_connection_limit = over_limit_;
  // A body over the limit is refused while the header is read (Content-Length): the request
  // line is parsed by then, and its path picks the error's shape.
  if (parser_ && !parser_->get().target().empty()) {
    record_.method = std::string(parser_->get().method_string());
    record_.path =
        std::string(parser_->get().target().substr(0, parser_->get().target().find('?')));
  }
  started_ = std::chrono::steady_clock::now();
  request_id_ = NewRequestId();
  record_.request_id = request_id_;
  parser_.reset();
  keep_alive_ = false;
  Response r = core_->ErrorResponse(status, message, record_.path);
  if (over_limit_) r.headers.push_back({"Retry-After", "1"});
  std::string head = ResponseHead(status, r.content_type, r.headers, &r.body);
  state_ = State::kClosing;
  SetDeadline(core_->options.write_timeout);
  QueueWrite(std::move(head) + r.body);
  Report();
}

void Connection::QueueWrite(std::string bytes) {
  out_bytes_ += bytes.size();
  out_.push_back(std::move(bytes));
  if (!writing_) DoWrite();
}

void Connection::DoWrite() {
  if (out_.empty() || state_ == State::kClosed) return;
  writing_ = true;
  in_flight_.assign(std::make_move_iterator(out_.begin()), std::make_move_iterator(out_.end()));
  out_.clear();
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(in_flight_.size());
  for (const auto& s : in_flight_) buffers.push_back(asio::buffer(s));
  if (state_ == State::kWriting || state_ == State::kStreaming) {
    SetDeadline(core_->options.write_timeout);
  }
  asio::async_write(socket_, buffers, [self = shared_from_this()](const error_code& ec, size_t n) {
    self->OnWrite(ec, n);
  });
}

void Connection::OnWrite(const error_code& ec, size_t n) {
  writing_ = false;
  in_flight_.clear();
  out_bytes_ = n > out_bytes_ ? 0 : out_bytes_ - n;
  if (state_ == State::kClosed) return;
  if (ec) return Close();
  record_.bytes_out += n;
  if (!out_.empty()) return DoWrite();
  if (state_ == State::kWriting || (state_ == State::kStreaming && sse_finished_)) {
    return FinishExchange();
  }
  if (state_ == State::kStreaming) {
    ClearDeadline();
  } else if (state_ == State::kClosing) {
    error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    if (read_closed_) return Close();
    SetDeadline(kLinger);
    DoRead();
  }
}

void Connection::FinishExchange() {
  if (auto ex = exchange_.lock()) ex->MarkCompleted();
  exchange_.reset();
  Report();
  auto self = std::move(self_hold_);  // keeps *this alive to the end of this function
  if (!keep_alive_ || core_->stopping || read_closed_) {
    error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    return Close();
  }
  state_ = State::kIdle;
  SetDeadline(core_->options.idle_timeout);
  ParseBuffered();
  DoRead();
}

void Connection::Report() {
  if (notes_ != nullptr) {
    std::lock_guard<std::mutex> lock(notes_->mu);
    record_.notes = notes_->fields;
  }
  notes_.reset();
  record_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  if (core_->options.on_exchange_done) core_->options.on_exchange_done(record_);
}

void Connection::ClientGone() {
  if (auto ex = exchange_.lock()) ex->MarkClientGone();
}

void Connection::Close() {
  if (state_ == State::kClosed) return;
  auto self = shared_from_this();
  if (InExchange()) {
    record_.client_gone = true;
    ClientGone();
    exchange_.reset();
    Report();
  }
  state_ = State::kClosed;
  error_code ignored;
  socket_.close(ignored);
  deadline_.cancel();
  out_.clear();
  self_hold_.reset();
}

// ---- deadlines --------------------------------------------------------------------------

void Connection::SetDeadline(std::chrono::milliseconds after) {
  uint64_t gen = ++deadline_gen_;
  deadline_.expires_after(after);
  deadline_.async_wait([self = shared_from_this(), gen](const error_code& ec) {
    if (ec || gen != self->deadline_gen_) return;
    self->OnDeadline();
  });
}

void Connection::ClearDeadline() {
  ++deadline_gen_;
  deadline_.cancel();
}

void Connection::OnDeadline() {
  switch (state_) {
    case State::kReadingHeader:
      return WriteServerError(408, "timed out reading the request header");
    case State::kReadingBody:
      return WriteServerError(408, "timed out reading the request body");
    default:
      return Close();  // idle keep-alive, a stalled write, or the linger after an error
  }
}

}  // namespace deltaserve::router::http::internal
