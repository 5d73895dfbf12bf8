#include "tests/integration/router_service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

RawHttpReply ParseReply(const std::string& raw) {
  RawHttpReply r;
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.size() < 12 || raw.compare(0, 5, "HTTP/") != 0 || head_end == std::string::npos) {
    return r;
  }
  r.status = std::atoi(raw.substr(9, 3).c_str());
  r.headers = raw.substr(0, head_end);
  const std::string rest = raw.substr(head_end + 4);
  if (r.headers.find("chunked") == std::string::npos) {
    r.body = rest;
    return r;
  }
  size_t pos = 0;
  while (pos < rest.size()) {
    const size_t eol = rest.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t len = std::strtoul(rest.substr(pos, eol - pos).c_str(), nullptr, 16);
    if (len == 0) break;
    r.body += rest.substr(eol + 2, len);
    pos = eol + 2 + len + 2;
  }
  return r;
}

// A file in the test's temporary directory named after this process and the running test
// (a parameterized test's '/' replaced), so that tests running at once never share one.
std::string TempFileForThisTest(const std::string& what, const std::string& extension) {
  std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(test.begin(), test.end(), '/', '_');
  return ::testing::TempDir() + "/" + what + "_" + std::to_string(::getpid()) + "_" + test +
         extension;
}

}  // namespace

ClientSocket::ClientSocket(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  // A server that neither reads nor closes must not block a test forever.
  timeval tv{};
  tv.tv_sec = 20;
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

ClientSocket::~ClientSocket() {
  if (fd_ >= 0) ::close(fd_);
}

bool ClientSocket::Send(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

bool ClientSocket::Readable(milliseconds wait) {
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(wait.count())) > 0;
}

RawHttpReply ClientSocket::ReadReply(milliseconds deadline) {
  const auto end = steady_clock::now() + deadline;
  std::string raw;
  char buf[16384];
  bool timed_out = false;
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(end - steady_clock::now());
    if (left.count() <= 0 || !Readable(left)) {
      timed_out = true;
      break;
    }
    const ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF, or a reset after the answer
    raw.append(buf, static_cast<size_t>(n));
  }
  RawHttpReply r = ParseReply(raw);
  r.timed_out = timed_out;
  return r;
}

RawHttpReply SendRaw(int port, const std::string& request, milliseconds deadline) {
  ClientSocket s(port);
  if (!s.valid()) return {};
  (void)s.Send(request);
  return s.ReadReply(deadline);
}

RawHttpReply Http(int port, const std::string& method, const std::string& path,
                  const std::string& body, const std::string& extra_headers) {
  std::string req =
      method + " " + path + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n" + extra_headers;
  if (!body.empty() || method == "POST") {
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  return SendRaw(port, req);
}

std::string Sha256HexWithTool(const std::string& text) {
  // printf %s keeps the key exact (no newline); the key is a test constant without quotes.
  const std::string cmd = "printf %s '" + text + "' | sha256sum";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  char hex[65] = {};
  const size_t n = ::fread(hex, 1, 64, p);
  ::pclose(p);
  return n == 64 ? std::string(hex, 64) : "";
}

RouterService::RouterService(const std::string& config_text,
                             const std::vector<std::string>& worker_args) {
  std::vector<std::string> worker_argv = {
      BinaryPath("worker/deltaserve-worker"), "--model", "tiny=" + GoldenPath("tiny-dense-f32.gguf"),
      "--listen", "127.0.0.1:0", "--threads", "1", "--ctx", "256", "--parallel", "2", "--ram",
      "2GiB", "--cache-type-k", "f32", "--cache-type-v", "f32"};
  worker_argv.insert(worker_argv.end(), worker_args.begin(), worker_args.end());
  Start(worker_argv, config_text);
}

void RouterService::Start(const std::vector<std::string>& worker_argv,
                          const std::string& config_text) {
  worker_ = std::make_unique<ChildProcess>(worker_argv);
  auto line = worker_->WaitForLine("listening on ", seconds(60));
  EXPECT_TRUE(line.has_value()) << worker_->err();
  if (!line) return;
  const std::string worker_addr = line->substr(line->find("listening on ") + 13);
  std::vector<std::string> argv = {BinaryPath("router/deltaserve-router"), "--listen",
                                   "127.0.0.1:0", "--worker", worker_addr};
  if (!config_text.empty()) {
    config_path_ = TempFileForThisTest("router_service", ".yaml");
    std::ofstream(config_path_) << config_text;
    argv.push_back("--config");
    argv.push_back(config_path_);
  }
  router_ = std::make_unique<ChildProcess>(argv);
  auto rline = router_->WaitForLine("listening on ", seconds(30));
  EXPECT_TRUE(rline.has_value()) << router_->err();
  if (!rline) return;
  const int port = std::atoi(rline->substr(rline->rfind(':') + 1).c_str());
  for (int i = 0; i < 600; ++i) {
    if (Http(port, "GET", "/ready").status == 200) {
      port_ = port;
      return;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  ADD_FAILURE() << "router never became ready: " << router_->err();
}

RouterService::RouterService(const ScriptedReplies& scripted) {
  outputs_path_ = TempFileForThisTest("scripted_outputs", ".json");
  std::ofstream(outputs_path_) << nlohmann::json(scripted.outputs).dump();
  Start({BinaryPath("tests/router/deltaserve-scripted-worker"), "--outputs", outputs_path_,
         "--chat-template", scripted.chat_template, "--piece-bytes", "5"},
        "");
}

RouterService::~RouterService() {
  if (!outputs_path_.empty()) std::remove(outputs_path_.c_str());
}

std::string RouterService::base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

std::string RouterService::Logs() {
  std::string logs;
  if (router_ != nullptr) logs += "\n--- router stderr ---\n" + router_->err();
  if (worker_ != nullptr) logs += "\n--- worker stderr ---\n" + worker_->err();
  return logs;
}

}  // namespace deltaserve::testing
