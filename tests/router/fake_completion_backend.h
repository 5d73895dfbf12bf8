#pragma once
// TEST DOUBLE — not a worker. An in-process CompletionBackend for the HTTP/OpenAI layer's
// tests: each Generate() starts a thread that emits a fixed list of tokens on a timer, can
// hold before a given token until the test releases it (to prove the previous chunk already
// reached the client), can fail before the first token, and records cancellation. The real
// backend is the router's gRPC worker client.

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "router/api/completion_backend.h"

namespace deltaserve::router::testing {

class FakeCompletionBackend : public api::CompletionBackend {
 public:
  struct Script {
    std::vector<std::string> tokens = {"Hello", ",", " world", "!"};
    std::chrono::milliseconds interval{5};
    // Before emitting token `hold_before` (0-based), wait for Release(); -1: never hold.
    int hold_before = -1;
    // Fails before OnStart with this status when not OK.
    absl::Status fail_with = absl::OkStatus();
    std::string answering_model;  // GenerationStart::model; the request's model when empty
    int64_t prompt_tokens = 7;
    int64_t cached_tokens = 3;
  };

  explicit FakeCompletionBackend(Script script) : script_(std::move(script)) {}
  ~FakeCompletionBackend() override;

  std::unique_ptr<api::GenerationHandle> Generate(
      const api::CompletionRequest& request,
      std::shared_ptr<api::GenerationObserver> observer) override;

  void Release();                                         // lets a held generation go on
  bool WaitForCancel(std::chrono::milliseconds timeout);  // true once a generation is cancelled
  // True once Generate has been called (the request got past the HTTP layer).
  bool WaitForGenerate(std::chrono::milliseconds timeout);
  int tokens_emitted() const { return tokens_emitted_.load(); }
  api::CompletionRequest last_request() const;

 private:
  struct Run;
  Script script_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  bool cancelled_ = false;
  bool generated_ = false;
  api::CompletionRequest last_request_;
  std::atomic<int> tokens_emitted_{0};
  std::vector<std::thread> threads_;
};

}  // namespace deltaserve::router::testing
