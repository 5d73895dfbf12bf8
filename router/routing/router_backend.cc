// RouterBackend itself: the registry of live generations, shutdown, and Generate, which starts
// a Run (internal/router_backend_run.h; its state machine is router_backend_run.cc).
#include "router/routing/router_backend.h"

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "router/routing/internal/router_backend_run.h"

namespace deltaserve::router {

RouterBackend::RouterBackend(ConfigSource config, WorkerPool* pool, TokenizerProvider* tokenizers,
                             const PromptRenderer* renderer, RouterBackendOptions options)
    : config_(std::move(config)),
      pool_(pool),
      tokenizers_(tokenizers),
      renderer_(renderer),
      options_(std::move(options)) {}

RouterBackend::~RouterBackend() {
  std::vector<std::shared_ptr<Run>> live;
  {
    std::lock_guard<std::mutex> lock(runs_mu_);
    shutting_down_ = true;
    for (auto& [ptr, weak] : runs_) {
      if (auto run = weak.lock()) live.push_back(std::move(run));
    }
  }
  for (const auto& run : live) run->Cancel();
  live.clear();
  // Runs waiting out a backoff step at once (and see the cancel).
  timer_.Shutdown();
  std::unique_lock<std::mutex> lock(runs_mu_);
  runs_cv_.wait(lock, [&] { return runs_.empty(); });
}

void RouterBackend::Register(const std::shared_ptr<Run>& run) {
  std::lock_guard<std::mutex> lock(runs_mu_);
  runs_.emplace(run.get(), run);
}

void RouterBackend::Unregister(Run* run) {
  std::lock_guard<std::mutex> lock(runs_mu_);
  runs_.erase(run);
  runs_cv_.notify_all();  // under the lock: the destructor may be waiting to return
}

int64_t RouterBackend::active_generations() const {
  std::lock_guard<std::mutex> lock(runs_mu_);
  return static_cast<int64_t>(runs_.size());
}

std::unique_ptr<api::GenerationHandle> RouterBackend::Generate(
    const api::CompletionRequest& request, std::shared_ptr<api::GenerationObserver> observer) {
  auto run = std::make_shared<Run>(this, request, std::move(observer), config_());
  bool shutting_down;
  {
    std::lock_guard<std::mutex> lock(runs_mu_);
    shutting_down = shutting_down_;
  }
  Register(run);
  if (shutting_down) {
    run->Cancel();
  }
  auto handle = std::make_unique<Handle>(run);
  run->Begin();
  return handle;
}

}  // namespace deltaserve::router
