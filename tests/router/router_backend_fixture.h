// Test support for RouterBackend's integration tests (router_backend_test,
// router_backend_prefix_test): a fixture that starts in-process ScriptedWorker servers (a TEST
// DOUBLE of deltaserve.v1.Worker, scripted_worker.h), a WorkerPool polling them and a
// RouterBackend over them; a renderer that concatenates message texts (the test vocabulary is
// one token per byte, so a prompt's token count is its byte count); an observer that records
// what the backend delivers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "router/routing/router_backend.h"
#include "router/routing/tokenizer_provider.h"
#include "router/routing/worker_pool.h"
#include "tests/router/scripted_worker.h"

namespace deltaserve::router::testing {

inline api::ChatMessage Msg(std::string role, std::string content) {
  api::ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}
// Test renderer: chat messages' contents joined, or the completion prompt, as byte tokens; a
// chat message's boundary is where its content ends, and the turn-end ids are 7 and 10.
class ConcatRenderer : public PromptRenderer {
 public:
  absl::StatusOr<RenderedPrompt> Render(const api::CompletionRequest& request,
                                        const ModelState& /*model*/,
                                        const common::Tokenizer& tokenizer) const override {
    RenderedPrompt out;
    if (request.prompt_is_tokens) {
      out.token_ids = request.prompt_tokens;
      return out;
    }
    std::string text = request.prompt;
    for (const api::ChatMessage& m : request.messages) {
      text += m.content;
      if (!m.content.empty()) out.message_boundaries.push_back(static_cast<int32_t>(text.size()));
    }
    out.token_ids = tokenizer.Encode(text, /*parse_special=*/false);
    out.stop_token_ids = {7};
    if (!request.messages.empty()) out.turn_end_token_ids = {7, 10};
    return out;
  }
};

inline absl::StatusOr<std::unique_ptr<common::Tokenizer>> BuildTestTokenizer(
    const deltaserve::v1::Tokenizer& p) {
  common::TokenizerVocab vocab;
  vocab.tokens.assign(p.tokens().begin(), p.tokens().end());
  vocab.pre = p.pre();
  return common::Tokenizer::Create(std::move(vocab));
}

class RecordingObserver : public api::GenerationObserver {
 public:
  void OnStart(const api::GenerationStart& start) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++starts;
    model = start.model;
    cv_.notify_all();
  }
  void OnDelta(api::GenerationDelta delta) override {
    std::lock_guard<std::mutex> lock(mu_);
    text += delta.text;
    tokens += delta.tokens;
    for (auto& lp : delta.logprobs) logprobs.push_back(std::move(lp));
    choice_text[delta.choice] += delta.text;
    cv_.notify_all();
  }
  void OnEnd(const api::GenerationEnd& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++terminals;
    end = e;
    cv_.notify_all();
  }
  void OnError(const absl::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++terminals;
    error = status;
    cv_.notify_all();
  }
  // The waits below are bounds against a hang (generous: ASan on a loaded machine is slow).
  bool WaitDone(int ms = 60000) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return terminals > 0; });
  }
  bool WaitTokens(int n, int ms = 60000) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return tokens >= n; });
  }

  int starts = 0;
  int terminals = 0;
  std::string model;
  std::string text;
  int tokens = 0;
  std::vector<api::TokenLogprob> logprobs;
  std::map<int, std::string> choice_text;  // by GenerationDelta::choice
  std::optional<api::GenerationEnd> end;
  std::optional<absl::Status> error;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

inline api::CompletionRequest Chat(std::string model, std::string content) {
  api::CompletionRequest r;
  r.model = std::move(model);
  r.messages = {Msg("user", std::move(content))};
  r.request_id = "req-test";
  return r;
}

inline ScriptedModel Model(std::string name, int32_t running = 0, int32_t waiting = 0,
                           int32_t context = 4096) {
  ScriptedModel m;
  m.name = std::move(name);
  m.running = running;
  m.waiting = waiting;
  m.context_length = context;
  return m;
}

class RouterBackendTest : public ::testing::Test {
 protected:
  ScriptedWorker& AddWorker(std::vector<ScriptedModel> models) {
    workers_.push_back(std::make_unique<ScriptedWorker>(std::move(models)));
    workers_.back()->Start();
    return *workers_.back();
  }

  // Completes `config` with the workers and fast test timings, starts the pool and waits for
  // its first polls (tokenizers fetched), which must have found every worker: a test starts
  // with every worker reachable, its circuit closed without a failure counted.
  void StartRouter(RouterConfig config = {}) {
    for (const auto& w : workers_) config.workers.push_back({w->address()});
    config.routing.health_interval_ms = 50;
    // A poll's and a connection's deadline: ample on a loaded machine under ASan (a connection
    // on 127.0.0.1 takes milliseconds; none of these tests has a worker that does not answer).
    config.routing.connect_timeout_ms = 10000;
    config.routing.retry_backoff_ms = 5;
    config_ = std::make_shared<const RouterConfig>(std::move(config));
    pool_ = std::make_unique<WorkerPool>(config_->workers, config_->routing);
    pool_->Start();
    ASSERT_TRUE(pool_->WaitForFirstPolls(absl::Seconds(60)));
    for (const WorkerSnapshot& s : pool_->Snapshot()) {
      ASSERT_TRUE(s.reachable && s.consecutive_failures == 0) << s.address << ": " << s.last_error;
      for (const auto& m : s.models) {
        ASSERT_NE(m->tokenizer, nullptr) << s.address << " " << m->name;
      }
    }
    tokenizers_ = std::make_unique<CachingTokenizerProvider>(tokenizer_builder_);
    backend_ = std::make_unique<RouterBackend>([this] { return config_; }, pool_.get(),
                                               tokenizers_.get(), renderer_in_use_, options_);
  }

  std::shared_ptr<RecordingObserver> Run(const api::CompletionRequest& request) {
    auto observer = std::make_shared<RecordingObserver>();
    handle_ = backend_->Generate(request, observer);
    EXPECT_TRUE(observer->WaitDone());
    return observer;
  }

  // Waits until `pred()` holds; false if it still does not after `timeout`.
  template <typename Pred>
  static bool WaitUntil(Pred pred, absl::Duration timeout = absl::Seconds(30)) {
    const absl::Time until = absl::Now() + timeout;
    while (!pred()) {
      if (absl::Now() >= until) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return true;
  }

  // Waits until `pred(snapshot of worker i)` holds.
  template <typename Pred>
  bool WaitForWorker(size_t i, Pred pred, absl::Duration timeout = absl::Seconds(30)) {
    return WaitUntil(
        [&] {
          std::vector<WorkerSnapshot> s = pool_->Snapshot();
          return i < s.size() && pred(s[i]);
        },
        timeout);
  }

  RouterBackendOptions options_ = [] {
    RouterBackendOptions o;
    o.affinity_key = nullptr;  // load-only choice unless a test turns affinity on
    return o;
  }();
  ConcatRenderer renderer_;
  // What StartRouter uses: a test may put the real chat renderer and tokenizer builder here.
  const PromptRenderer* renderer_in_use_ = &renderer_;
  TokenizerBuilder tokenizer_builder_ = BuildTestTokenizer;
  std::vector<std::unique_ptr<ScriptedWorker>> workers_;
  std::shared_ptr<const RouterConfig> config_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<CachingTokenizerProvider> tokenizers_;
  std::unique_ptr<RouterBackend> backend_;
  std::unique_ptr<api::GenerationHandle> handle_;
};

}  // namespace deltaserve::router::testing
