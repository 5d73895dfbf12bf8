#pragma once
// The router's HTTP/1.1 server on Boost.Beast/Asio: keep-alive, a request body limit (413),
// header and body read timeouts, Server-Sent Events, and a graceful stop. Handlers are
// registered per method and exact path before Start(); they run on a server thread and must
// not block: they hand the exchange to other threads and answer from there (http_exchange.h).
//
//   HttpServer server(HttpServerOptions{.port = 0});
//   server.Route("GET", "/health", [](std::shared_ptr<HttpExchange> ex) {
//     ex->Respond(Response::Json(200, R"({"status":"ok"})"));
//   });
//   absl::Status started = server.Start();   // server.port() is the bound port
//   ...
//   server.Stop(absl::Seconds(30));         // stop accepting, finish in-flight, then close

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "router/http/http_exchange.h"
#include "router/http/http_message.h"

namespace deltaserve::router::http {

// What the server reports once per finished exchange (for the access log and metrics).
struct ExchangeRecord {
  std::string method;
  std::string path;  // the registered route, or the raw path when none matched
  bool route_matched = false;
  int status = 0;            // status sent; 0 when the connection closed before any answer
  bool streamed = false;     // an SSE response
  bool client_gone = false;  // the client left before the answer was complete
  bool over_connection_limit = false;  // refused (503) because max_connections were open
  uint64_t body_bytes_in = 0;
  uint64_t bytes_out = 0;
  double seconds = 0;  // from the end of the request to the end of the answer
  std::string request_id;
  std::string peer;
  // What the handler noted (HttpExchange::Note), in order: model, tokens, time to first token.
  std::vector<HeaderField> notes;
};

struct HttpServerOptions {
  std::string address = "127.0.0.1";  // IPv4 or IPv6 literal
  uint16_t port = 0;                  // 0: the kernel picks a free port (see port())
  int threads = 2;                    // io threads

  uint64_t max_body_bytes = 8 << 20;     // larger request bodies get 413
  uint32_t max_header_bytes = 16 << 10;  // larger request headers get 431
  // A keep-alive connection waiting for the first byte of its next request is closed after:
  std::chrono::milliseconds idle_timeout{60'000};
  // From the first byte of a request until its header is complete; then 408 and close.
  std::chrono::milliseconds header_timeout{10'000};
  // From the end of the header until the body is complete; then 408 and close.
  std::chrono::milliseconds body_timeout{30'000};
  // One write (a response, or a batch of SSE events) may take at most this long; a client
  // that does not read is disconnected.
  std::chrono::milliseconds write_timeout{30'000};
  // SSE bytes queued for a client that is not reading; beyond this it is disconnected.
  uint64_t max_sse_backlog_bytes = 4 << 20;
  // Open connections at most (0: no limit). One more is answered 503 with Retry-After and
  // closed, without reading its request, so the process never runs out of file descriptors or
  // memory; idle keep-alive connections count, so keep idle_timeout short where this binds.
  size_t max_connections = 20000;

  // Makes the body of errors the server itself answers (400 bad HTTP, 404, 405, 408, 413,
  // 431, 500 for a handler that threw or dropped its exchange). Default: the OpenAI shape
  // {"error":{"message","type","param":null,"code"}}.
  std::function<Response(int status, std::string_view message)> error_response;
  // When set, used instead of error_response with the request's path ("" when not yet known),
  // so an API mounted under a path (Anthropic's /v1/messages) answers in its own error shape.
  std::function<Response(std::string_view path, int status, std::string_view message)>
      error_response_at;
  // Called once per finished exchange, on a server thread; must not block.
  std::function<void(const ExchangeRecord&)> on_exchange_done;
};

using Handler = std::function<void(std::shared_ptr<HttpExchange> exchange)>;

// The default body of server-made errors: {"error":{"message":...,"type":...,"param":null,
// "code":...}} with type "invalid_request_error" for 4xx and "server_error" for 5xx.
Response DefaultErrorResponse(int status, std::string_view message);

namespace internal {
struct ServerCore;
}  // namespace internal

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();  // Stop(absl::ZeroDuration()) when still running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers `handler` for `method` and the exact `path` (no query). A `path` ending in '*'
  // ("/v1/models/*") matches every longer path with that prefix that no exact route takes (the
  // handler reads request().path). Before Start() only.
  void Route(std::string method, std::string path, Handler handler);
  // Convenience for handlers that answer at once.
  void RouteSync(std::string method, std::string path,
                 std::function<Response(const Request&)> handler);

  // Binds, listens and starts the io threads. Fails (naming the address) when the address is
  // bad or the port is in use.
  absl::Status Start();
  // The bound port (useful with port 0); 0 before Start().
  uint16_t port() const { return bound_port_; }

  // Graceful stop: closes the listening socket, closes idle keep-alive connections, lets
  // exchanges in flight (SSE streams included) finish with "Connection: close", waits up to
  // `grace`, then closes what is left (their handlers see OnClientGone) and joins the threads.
  // Idempotent; blocks.
  void Stop(absl::Duration grace);

  // Open connections right now.
  size_t connection_count() const;

 private:
  std::shared_ptr<internal::ServerCore> core_;
  std::shared_ptr<void> acceptor_;    // internal::Acceptor
  std::shared_ptr<void> work_guard_;  // keeps the io threads running until Stop()
  std::vector<std::thread> threads_;
  uint16_t bound_port_ = 0;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace deltaserve::router::http
