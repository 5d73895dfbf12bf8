#include "tests/router/fake_completion_backend.h"

#include <algorithm>

namespace deltaserve::router::testing {

struct FakeCompletionBackend::Run : api::GenerationHandle {
  explicit Run(FakeCompletionBackend* b) : backend(b) {}
  void Cancel() override {
    std::lock_guard<std::mutex> lock(backend->mu_);
    backend->cancelled_ = true;
    backend->cv_.notify_all();
  }
  FakeCompletionBackend* backend;  // outlives every handle in the tests
};

FakeCompletionBackend::~FakeCompletionBackend() {
  Release();
  for (auto& t : threads_) t.join();
}

void FakeCompletionBackend::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  released_ = true;
  cv_.notify_all();
}

bool FakeCompletionBackend::WaitForCancel(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return cancelled_; });
}

bool FakeCompletionBackend::WaitForGenerate(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return generated_; });
}

api::CompletionRequest FakeCompletionBackend::last_request() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_request_;
}

std::unique_ptr<api::GenerationHandle> FakeCompletionBackend::Generate(
    const api::CompletionRequest& request, std::shared_ptr<api::GenerationObserver> observer) {
  auto run = std::make_unique<Run>(this);
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_request_ = request;
    generated_ = true;
  }
  cv_.notify_all();
  std::string model = script_.answering_model.empty() ? request.model : script_.answering_model;
  int max_tokens = request.max_tokens.value_or(1 << 30);
  std::lock_guard<std::mutex> lock(mu_);  // Generate runs on several server threads
  threads_.emplace_back([this, observer, model, max_tokens] {
    if (!script_.fail_with.ok()) {
      observer->OnError(script_.fail_with);
      return;
    }
    observer->OnStart({model});
    int n = std::min<int>(max_tokens, static_cast<int>(script_.tokens.size()));
    for (int i = 0; i < n; ++i) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (i == script_.hold_before) {
          cv_.wait(lock, [this] { return released_ || cancelled_; });
        } else {
          cv_.wait_for(lock, script_.interval, [this] { return cancelled_; });
        }
        if (cancelled_) {
          lock.unlock();
          observer->OnError(absl::CancelledError("cancelled by the client"));
          return;
        }
      }
      api::GenerationDelta d;
      d.text = script_.tokens[i];
      d.tokens = 1;
      d.logprobs.push_back(
          {script_.tokens[i],
           -0.25f * static_cast<float>(i + 1),
           {{script_.tokens[i], -0.25f * static_cast<float>(i + 1)}, {"alt", -3.0f}}});
      tokens_emitted_.fetch_add(1);  // counted as produced before it is delivered
      observer->OnDelta(std::move(d));
    }
    api::GenerationEnd end;
    end.finish_reason = n < static_cast<int>(script_.tokens.size()) ? api::FinishReason::kLength
                                                                    : api::FinishReason::kStop;
    end.usage = {script_.prompt_tokens, n, script_.cached_tokens};
    observer->OnEnd(end);
  });
  return run;
}

}  // namespace deltaserve::router::testing
