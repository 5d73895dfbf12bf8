#include "tests/support/redis_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace deltaserve::testing {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A port that was free a moment ago (the kernel's pick for a bind to port 0). Another process
// can take it before redis-server binds it; Start() then retries with a new one.
int PickFreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

bool CanConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// Percent-encodes a URL's userinfo part.
std::string Encode(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
        c == '~') {
      out.push_back(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", static_cast<unsigned char>(c));
      out += buf;
    }
  }
  return out;
}

// redis.conf quoting: double quotes with backslash escapes.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

}  // namespace

std::string RedisServerBinary() {
  const char* env = std::getenv("DELTASERVE_REDIS_SERVER");
  return env != nullptr && *env != '\0' ? env : "/usr/bin/redis-server";
}

bool RedisServerHasTls() {
  // Built with BUILD_TLS=yes, redis-server links OpenSSL and names its functions in the dynamic
  // symbol table; a build without TLS refuses tls-port instead.
  static const bool has = ReadFile(RedisServerBinary()).find("SSL_CTX_new") != std::string::npos;
  return has;
}

RedisServerProcess::RedisServerProcess() {
  std::string templ = (fs::temp_directory_path() / "deltaserve-redis-XXXXXX").string();
  if (::mkdtemp(templ.data()) != nullptr) dir_ = templ;
}

RedisServerProcess::~RedisServerProcess() {
  Kill();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

bool RedisServerProcess::Start(const RedisServerOptions& options) {
  if (dir_.empty()) {
    ADD_FAILURE() << "redis-server: cannot create a temporary directory";
    return false;
  }
  if (running()) Kill();
  options_ = options;
  // A port picked free can be taken before redis-server binds it: try a few.
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = PickFreePort();
    if (port_ != 0 && Launch()) return true;
    if (running()) break;  // it started but never became ready: not a port race
  }
  ADD_FAILURE() << "redis-server did not start; its log:\n" << log();
  Kill();
  return false;
}

bool RedisServerProcess::Restart() {
  Kill();
  // The same port: clients reconnect to the address they know. Redis binds with SO_REUSEADDR,
  // so the old connections' TIME_WAIT does not stand in the way; a stranger taking the port in
  // the meantime would, hence the retries.
  for (int attempt = 0; attempt < 20; ++attempt) {
    if (Launch()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "redis-server did not restart on port " << port_ << "; its log:\n" << log();
  return false;
}

bool RedisServerProcess::Launch() {
  const std::string conf = dir_ + "/redis.conf";
  const std::string log_path = dir_ + "/redis.log";
  {
    std::error_code ec;
    fs::remove(log_path, ec);
    std::ofstream out(conf);
    out << "bind 127.0.0.1\n"
        << "dir " << Quote(dir_) << "\n"
        << "logfile " << Quote(log_path) << "\n"
        << "daemonize no\nsave \"\"\nappendonly no\nprotected-mode no\n";
    if (options_.tls) {
      out << "port 0\ntls-port " << port_ << "\n"
          << "tls-cert-file " << Quote(options_.tls->server_cert) << "\n"
          << "tls-key-file " << Quote(options_.tls->server_key) << "\n"
          << "tls-ca-cert-file " << Quote(options_.tls->ca_cert) << "\n"
          << "tls-auth-clients no\n";
    } else {
      out << "port " << port_ << "\n";
    }
    if (!options_.password.empty()) out << "requirepass " << Quote(options_.password) << "\n";
    if (!options_.acl_user.empty()) {
      out << "user " << options_.acl_user << " on "
          << Quote(std::string(">").append(options_.acl_password)) << " ~* &* +@all\n";
    }
    if (options_.maxmemory > 0) out << "maxmemory " << options_.maxmemory << "\n";
    if (!options_.maxmemory_policy.empty()) {
      out << "maxmemory-policy " << options_.maxmemory_policy << "\n";
    }
    for (const std::string& line : options_.extra_config) out << line << "\n";
  }
  child_ = std::make_unique<ChildProcess>(std::vector<std::string>{RedisServerBinary(), conf});
  paused_ = false;
  if (!child_->started()) {
    child_.reset();
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (child_->Wait(std::chrono::milliseconds(0))) {  // exited: e.g. the port was taken
      child_.reset();
      return false;
    }
    // The log line comes after the listeners are open and the (empty) data set is loaded.
    if (ReadFile(log_path).find("Ready to accept connections") != std::string::npos &&
        CanConnect(port_)) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void RedisServerProcess::Stop() {
  if (!running()) return;
  if (paused_) Resume();
  child_->Signal(SIGTERM);
  if (!child_->Wait(std::chrono::seconds(10))) Kill();
  child_.reset();
}

void RedisServerProcess::Kill() {
  if (!running()) return;
  child_->Signal(SIGKILL);
  child_->Wait(std::chrono::seconds(10));
  child_.reset();
  paused_ = false;
}

void RedisServerProcess::Pause() {
  if (!running() || paused_) return;
  child_->Signal(SIGSTOP);
  paused_ = true;
}

void RedisServerProcess::Resume() {
  if (!running() || !paused_) return;
  child_->Signal(SIGCONT);
  paused_ = false;
}

std::string RedisServerProcess::url() const {
  std::string url = options_.tls ? "rediss://" : "redis://";
  if (!options_.acl_user.empty()) {
    url.append(Encode(options_.acl_user)).append(":").append(Encode(options_.acl_password));
    url.append("@");
  } else if (!options_.password.empty()) {
    url.append(":").append(Encode(options_.password)).append("@");
  }
  url.append("127.0.0.1:").append(std::to_string(port_));
  if (options_.tls) url.append("?tls_ca_cert=").append(options_.tls->ca_cert);
  return url;
}

std::string RedisServerProcess::log() const { return ReadFile(dir_ + "/redis.log"); }

}  // namespace deltaserve::testing
