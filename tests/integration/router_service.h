// The whole service for integration tests: a deltaserve-worker on the tiny golden model and a
// deltaserve-router in front of it, real processes on 127.0.0.1 with kernel-chosen ports, plus a
// raw HTTP/1.1 client that sends exact bytes (malformed ones included) and reads the answer with a
// deadline, so a router that hangs fails the test instead of stalling it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/child_process.h"

namespace deltaserve::testing {

// One HTTP answer as read from the socket.
struct RawHttpReply {
  int status = 0;       // 0: no parsable status line arrived before EOF or the deadline
  std::string headers;  // status line and headers, without the blank line
  std::string body;     // de-chunked when the answer was chunked
  bool timed_out = false;
};

// A connected TCP client socket to 127.0.0.1:port (closed by the destructor); valid() is false
// when the connection was refused.
class ClientSocket {
 public:
  explicit ClientSocket(int port);
  ~ClientSocket();
  ClientSocket(const ClientSocket&) = delete;
  ClientSocket& operator=(const ClientSocket&) = delete;
  bool valid() const { return fd_ >= 0; }
  // Writes all of `bytes` (no SIGPIPE); false when the peer closed or reset first.
  bool Send(const std::string& bytes);
  // True when a byte (or EOF) can be read within `wait`.
  bool Readable(std::chrono::milliseconds wait);
  // Reads until EOF or `deadline` and parses the bytes as one HTTP answer.
  RawHttpReply ReadReply(std::chrono::milliseconds deadline);

 private:
  int fd_ = -1;
};

// Sends `request` (the complete bytes: request line, headers, body) on a fresh connection to
// 127.0.0.1:port, half-closes nothing, and reads until the server closes or `deadline` passes.
// A send that fails half-way (the server closed early, e.g. after a 413) still reads the answer.
RawHttpReply SendRaw(int port, const std::string& request,
                     std::chrono::milliseconds deadline = std::chrono::seconds(60));

// A request with `Connection: close`; a POST gets Content-Type JSON and Content-Length.
RawHttpReply Http(int port, const std::string& method, const std::string& path,
                  const std::string& body = "", const std::string& extra_headers = "");

// SHA-256 of `text` as 64 lower-case hex digits, computed with sha256sum (independent of the
// router's own hashing); empty on failure.
std::string Sha256HexWithTool(const std::string& text);

// What a deltaserve-scripted-worker (tests/router/scripted_worker.h, the ScriptedWorker TEST
// DOUBLE as a process) stands in for a model with: it reports `chat_template` and replays
// `outputs` through the real gRPC contract, one per Generate call in order, in 5-byte pieces, so
// tool calls and reasoning come back exactly as scripted.
struct ScriptedReplies {
  std::vector<std::string> outputs;
  std::string chat_template;  // path of a template file (../shared/fixtures/templates)
};

// A worker serving "tiny" (tiny-dense-f32.gguf, context 256), or a scripted worker, and a router
// in front of it, ready (GET /ready answered 200) when the constructor returns, or port() == 0
// with a test failure.
class RouterService {
 public:
  // `config_text`: YAML for the router's --config (empty: none). `worker_args` are appended to
  // the worker's command line (a later flag overrides the default one, e.g. "--ctx", "2048").
  explicit RouterService(const std::string& config_text = "",
                         const std::vector<std::string>& worker_args = {});
  // The router (no --config) in front of deltaserve-scripted-worker replaying `scripted`.
  explicit RouterService(const ScriptedReplies& scripted);
  ~RouterService();
  RouterService(const RouterService&) = delete;
  RouterService& operator=(const RouterService&) = delete;

  int port() const { return port_; }
  // "http://127.0.0.1:PORT", what the SDK checks are given (OpenAI's clients with "/v1").
  std::string base_url() const;
  ChildProcess& router() { return *router_; }
  ChildProcess& worker() { return *worker_; }
  // The router's and then the worker's stderr under headings, for a failure message.
  std::string Logs();
  // The --config file written from `config_text` ("" when none), e.g. to rewrite before SIGHUP.
  const std::string& config_path() const { return config_path_; }

 private:
  // Starts `worker_argv`, then the router in front of it, and waits until it is ready.
  void Start(const std::vector<std::string>& worker_argv, const std::string& config_text);

  std::unique_ptr<ChildProcess> worker_, router_;
  int port_ = 0;
  std::string config_path_;
  std::string outputs_path_;  // the scripted worker's --outputs file, removed by the destructor
};

}  // namespace deltaserve::testing
