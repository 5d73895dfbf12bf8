#pragma once
// The router's CompletionBackend: resolves the request's model (alias chain or the model),
// renders and tokenizes the prompt per candidate (PromptRenderer, TokenizerProvider), picks a
// worker (worker_choice.h over WorkerPool's state), and streams the worker's Generate events
// to the observer. Before the first token a failed attempt moves on — to another worker of the
// same model, or to the next candidate — after a jittered backoff, at most
// RoutingSettings::max_attempts calls in all; after it, a failure is the observer's OnError.
//
//   RouterBackend backend([&] { return current_config(); }, &pool, &tokenizers, &renderer);
//   api::OpenAiApi api(backend, state, metrics);
//
// Threading: Generate() resolves, renders and starts the first call on the caller's thread
// (no blocking I/O: gRPC's callback API); events arrive on gRPC's callback threads; backoff
// waits run on one timer thread. No thread is held per stream.
//
// Errors before any token (the client gets an HTTP status):
//   unknown model → NotFound (404); no candidate has an available worker → Unavailable (503);
//   every fitting worker saturated, or every attempt refused with RESOURCE_EXHAUSTED →
//   ResourceExhausted (429); no candidate's context holds prompt + max_tokens →
//   InvalidArgument with the numbers (400, code context_length_exceeded); a worker's
//   INVALID_ARGUMENT / OUT_OF_RANGE → passed on (400); attempts used up → Unavailable (503).

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "router/api/completion_backend.h"
#include "router/config/router_config.h"
#include "router/routing/internal/delay_queue.h"
#include "router/routing/prompt_renderer.h"
#include "router/routing/tokenizer_provider.h"
#include "router/routing/upstream_pool.h"
#include "router/routing/worker_choice.h"
#include "router/routing/worker_pool.h"

namespace deltaserve::router {

// The configuration in force; called once per request (a SIGHUP reload swaps what it returns;
// a request keeps the snapshot it started with). Never returns null.
using ConfigSource = std::function<std::shared_ptr<const RouterConfig>()>;

struct RouterBackendOptions {
  ChoiceOptions choice;
  // Deadline of each Generate call (every call carries one, proto/README.md).
  int64_t generate_deadline_ms = 10 * 60 * 1000;
  // Cap of the backoff between attempts; the base is RoutingSettings::retry_backoff_ms,
  // doubled per retry, times a uniform jitter in [0.5, 1.5).
  int64_t max_backoff_ms = 1000;
  // The session-affinity key of a request (0: none). Default: AffinityKey (worker_choice.h).
  std::function<uint64_t(const api::CompletionRequest&)> affinity_key = AffinityKey;
};

class RouterBackend : public api::CompletionBackend {
 public:
  // `pool`, `tokenizers` and `renderer` must outlive the backend.
  RouterBackend(ConfigSource config, WorkerPool* pool, TokenizerProvider* tokenizers,
                const PromptRenderer* renderer, RouterBackendOptions options = {});
  // Cancels the generations still running and waits until each has delivered its last event.
  ~RouterBackend() override;

  std::unique_ptr<api::GenerationHandle> Generate(
      const api::CompletionRequest& request,
      std::shared_ptr<api::GenerationObserver> observer) override;

  // Generations started and not yet finished.
  int64_t active_generations() const;

  // Serves the config's upstream models (docs/upstreams.md) through `upstreams` (must outlive
  // the backend); without it an upstream candidate counts as having no worker. Before the
  // first Generate only.
  void SetUpstreams(UpstreamPool* upstreams) { upstreams_ = upstreams; }

 private:
  class Run;
  class Call;
  class Handle;
  class UpstreamSink;
  friend class Run;
  friend class Call;

  void Register(const std::shared_ptr<Run>& run);
  void Unregister(Run* run);

  ConfigSource config_;
  WorkerPool* pool_;
  TokenizerProvider* tokenizers_;
  const PromptRenderer* renderer_;
  UpstreamPool* upstreams_ = nullptr;
  RouterBackendOptions options_;
  internal::DelayQueue timer_;

  mutable std::mutex runs_mu_;
  std::condition_variable runs_cv_;
  absl::flat_hash_map<Run*, std::weak_ptr<Run>> runs_;
  bool shutting_down_ = false;
};

}  // namespace deltaserve::router
