#pragma once
// A tiny blocking HTTP/1.1 client over a raw socket for the router's integration tests: it
// writes exactly the bytes a test gives it and reads responses (Content-Length or chunked)
// with timeouts, so tests can split headers, hold connections open, and read SSE chunks one
// at a time.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace deltaserve::router::testing {

struct HttpReply {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::string Header(const std::string& lower_name) const;
};

class RawHttpClient {
 public:
  // Connects to 127.0.0.1:port; check connected().
  explicit RawHttpClient(int port);
  ~RawHttpClient();
  RawHttpClient(const RawHttpClient&) = delete;
  RawHttpClient& operator=(const RawHttpClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  bool Send(const std::string& bytes);
  // Reads one response (status line, headers, whole body). nullopt on timeout or close.
  std::optional<HttpReply> ReadResponse(std::chrono::milliseconds timeout);
  // Reads only the status line and headers (for a streamed body read with ReadChunk).
  std::optional<HttpReply> ReadHead(std::chrono::milliseconds timeout);
  // Reads one chunk of a chunked body; "" for the last chunk; nullopt on timeout/close.
  std::optional<std::string> ReadChunk(std::chrono::milliseconds timeout);
  // True when the server closes the connection within `timeout` (any bytes before the close
  // are read and dropped).
  bool WaitForClose(std::chrono::milliseconds timeout);
  void Close();

  // A whole request: method, path, body (JSON), Connection keep-alive.
  static std::string Request(const std::string& method, const std::string& path,
                             const std::string& body = "", bool close = false);

 private:
  bool Fill(std::chrono::steady_clock::time_point deadline);  // reads more into buf_
  std::optional<std::string> ReadLine(std::chrono::steady_clock::time_point deadline);
  std::optional<std::string> ReadExactly(size_t n, std::chrono::steady_clock::time_point deadline);

  int fd_ = -1;
  std::string buf_;
};

// Splits an SSE byte stream into the data payloads of its events ("data: x\n\n" -> "x").
std::vector<std::string> SseDataEvents(const std::string& stream);

}  // namespace deltaserve::router::testing
