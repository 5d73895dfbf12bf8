#include "tests/support/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>

namespace deltaserve::testing {

std::string HttpGet(int port, const std::string& path, int timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  const timeval limit{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  std::string resp;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
    (void)!::write(fd, req.data(), req.size());
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) {
      resp.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return resp;
}

}  // namespace deltaserve::testing
