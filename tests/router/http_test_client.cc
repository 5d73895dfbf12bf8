#include "tests/router/http_test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

namespace deltaserve::router::testing {

using Clock = std::chrono::steady_clock;

std::string HttpReply::Header(const std::string& lower_name) const {
  for (const auto& [k, v] : headers) {
    if (k == lower_name) return v;
  }
  return "";
}

RawHttpClient::RawHttpClient(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

RawHttpClient::~RawHttpClient() { Close(); }

void RawHttpClient::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool RawHttpClient::Send(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

bool RawHttpClient::Fill(Clock::time_point deadline) {
  if (fd_ < 0) return false;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
  char tmp[16384];
  ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
  if (n <= 0) return false;
  buf_.append(tmp, static_cast<size_t>(n));
  return true;
}

std::optional<std::string> RawHttpClient::ReadLine(Clock::time_point deadline) {
  while (true) {
    size_t nl = buf_.find("\r\n");
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 2);
      return line;
    }
    if (!Fill(deadline)) return std::nullopt;
  }
}

std::optional<std::string> RawHttpClient::ReadExactly(size_t n, Clock::time_point deadline) {
  while (buf_.size() < n) {
    if (!Fill(deadline)) return std::nullopt;
  }
  std::string out = buf_.substr(0, n);
  buf_.erase(0, n);
  return out;
}

std::optional<HttpReply> RawHttpClient::ReadHead(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  HttpReply reply;
  std::optional<std::string> status_line;
  do {  // skip "100 Continue" interim responses
    status_line = ReadLine(deadline);
    if (!status_line || status_line->size() < 12) return std::nullopt;
    reply.status = std::stoi(status_line->substr(9, 3));
    reply.headers.clear();
    while (true) {
      std::optional<std::string> line = ReadLine(deadline);
      if (!line) return std::nullopt;
      if (line->empty()) break;
      size_t colon = line->find(':');
      std::string name = line->substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      size_t v = line->find_first_not_of(' ', colon + 1);
      reply.headers.emplace_back(name, v == std::string::npos ? "" : line->substr(v));
    }
  } while (reply.status == 100);
  return reply;
}

std::optional<std::string> RawHttpClient::ReadChunk(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::optional<std::string> size_line = ReadLine(deadline);
  if (!size_line) return std::nullopt;
  size_t size = std::stoul(*size_line, nullptr, 16);
  std::optional<std::string> data = ReadExactly(size, deadline);
  if (!data || !ReadLine(deadline)) return std::nullopt;
  return data;
}

std::optional<HttpReply> RawHttpClient::ReadResponse(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::optional<HttpReply> reply = ReadHead(timeout);
  if (!reply) return std::nullopt;
  if (reply->Header("transfer-encoding") == "chunked") {
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      std::optional<std::string> chunk = ReadChunk(left);
      if (!chunk) return std::nullopt;
      if (chunk->empty()) break;
      reply->body += *chunk;
    }
    return reply;
  }
  std::string len = reply->Header("content-length");
  std::optional<std::string> body = ReadExactly(len.empty() ? 0 : std::stoul(len), deadline);
  if (!body) return std::nullopt;
  reply->body = std::move(*body);
  return reply;
}

bool RawHttpClient::WaitForClose(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char tmp[4096];
    ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return true;
  }
  return false;
}

std::string RawHttpClient::Request(const std::string& method, const std::string& path,
                                   const std::string& body, bool close) {
  // append() throughout: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.
  std::string r = method;
  r.append(" ").append(path).append(" HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  if (!body.empty() || method == "POST") {
    r.append("Content-Type: application/json\r\nContent-Length: ")
        .append(std::to_string(body.size()))
        .append("\r\n");
  }
  if (close) r.append("Connection: close\r\n");
  r.append("\r\n").append(body);
  return r;
}

std::vector<std::string> SseDataEvents(const std::string& stream) {
  std::vector<std::string> events;
  size_t pos = 0;
  while (true) {
    size_t end = stream.find("\n\n", pos);
    if (end == std::string::npos) break;
    std::string event = stream.substr(pos, end - pos);
    pos = end + 2;
    std::string data;
    size_t lp = 0;
    while (lp <= event.size()) {
      size_t nl = event.find('\n', lp);
      std::string line = event.substr(lp, nl == std::string::npos ? std::string::npos : nl - lp);
      if (line.rfind("data: ", 0) == 0) {
        if (!data.empty()) data.append("\n");
        data.append(line, 6);
      }
      if (nl == std::string::npos) break;
      lp = nl + 1;
    }
    events.push_back(data);
  }
  return events;
}

}  // namespace deltaserve::router::testing
