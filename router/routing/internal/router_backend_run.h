// The state machine of one generation inside RouterBackend (router_backend.h): Run (its
// candidates, attempts, retries and the observer it reports to), Call (one Generate stream to
// one worker) and Handle (the client's cancel). Defined here so that RouterBackend's own file
// (the registry of live runs) and the state machine's (router_backend_run.cc) share them; not
// for use outside RouterBackend.
#pragma once

#include <optional>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "router/routing/internal/generate_request.h"
#include "router/routing/router_backend.h"
#include "router/routing/worker_pool.h"
#include "router/upstream/upstream_call.h"

namespace deltaserve::router {

// One Generate call to one worker. Owns its ClientContext; keeps itself alive (self_) from
// Start until gRPC's OnDone, and the Run keeps a reference while it may cancel it.
class RouterBackend::Call : public grpc::ClientReadReactor<::deltaserve::v1::GenerateEvent>,
                            public std::enable_shared_from_this<Call> {
 public:
  Call(std::shared_ptr<Run> run, std::unique_ptr<WorkerPool::CallTicket> ticket, size_t candidate,
       const common::Tokenizer* tokenizer)
      : run_(std::move(run)),
        ticket_(std::move(ticket)),
        candidate_(candidate),
        tokenizer_(tokenizer) {}

  void Start(int64_t deadline_ms) {
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(deadline_ms));
    if (!request_.request_id().empty()) context_.AddMetadata("x-request-id", request_.request_id());
    self_ = shared_from_this();
    ticket_->stub->async()->Generate(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }
  void TryCancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

  ::deltaserve::v1::GenerateRequest& request() { return request_; }
  const WorkerPool::CallTicket& ticket() const { return *ticket_; }
  size_t candidate() const { return candidate_; }
  const common::Tokenizer* tokenizer() const { return tokenizer_; }

  // Reasoning / content / tool calls of this attempt's output, one per choice; empty: the text
  // as generated.
  std::vector<std::unique_ptr<OutputShaper>> shapers;
  // Per choice (CompletionRequest::n): its FinalEvent arrived, and how it ended.
  std::vector<bool> ended;
  std::vector<api::ChoiceEnd> ends;
  int finals = 0;
  api::Usage usage;          // the prompt once, completions summed
  std::string matched_stop;  // choice 0's
  bool final_seen = false;     // every choice's FinalEvent arrived, or one failed (later ignored)
  absl::Status early_failure;  // a FinalEvent ERROR/CANCELLED before any token

 private:
  std::shared_ptr<Run> run_;
  // Declared before context_, so destroyed after it: the context refers to the worker's channel,
  // whose last reference must stay with the pool (worker_pool.h, "Channel lifetime").
  std::unique_ptr<WorkerPool::CallTicket> ticket_;
  size_t candidate_;
  const common::Tokenizer* tokenizer_;
  grpc::ClientContext context_;
  ::deltaserve::v1::GenerateRequest request_;
  ::deltaserve::v1::GenerateEvent event_;
  std::shared_ptr<Call> self_;
};

// One generation: its candidates, the attempts made, the observer. Steps (Begin, Step, the
// event and done callbacks of its calls) run one at a time: one call is active at most, and
// the next step is started only by the previous one. Cancel() may come from any thread.
class RouterBackend::Run : public std::enable_shared_from_this<Run> {
 public:
  Run(RouterBackend* backend, const api::CompletionRequest& request,
      std::shared_ptr<api::GenerationObserver> observer, std::shared_ptr<const RouterConfig> config)
      : backend_(backend),
        request_(request),
        observer_(std::move(observer)),
        config_(std::move(config)) {}
  ~Run() { backend_->Unregister(this); }

  void Begin();
  void Step();
  void Cancel();
  void OnEvent(Call& call, const ::deltaserve::v1::GenerateEvent& event);
  void OnCallDone(Call& call, const grpc::Status& status);
  // The events of an upstream call (router/upstream/upstream_call.h), for candidate `index`.
  void OnUpstreamDeltas(size_t index, std::vector<api::GenerationDelta> deltas,
                        int64_t prompt_tokens);
  void OnUpstreamEnd(size_t index, const api::GenerationEnd& end, double ttft_seconds);
  void OnUpstreamFailed(size_t index, const upstream::UpstreamFailure& failure);

 private:
  absl::StatusOr<internal::PreparedPrompt*> Prepare(const Candidate& candidate,
                                                    const ModelState& model);
  void StartCall(const Candidate& candidate, const ServingWorker& worker,
                 std::unique_ptr<WorkerPool::CallTicket> ticket,
                 const internal::PreparedPrompt& prepared);
  // Starts a call to the upstream `candidate` names; false when it cannot take the request now
  // (circuit open, saturated, too small a context window, untranslatable), with the reason kept.
  bool StartUpstream(const Candidate& candidate);
  void NextCandidate();
  // `at_least_ms`: a wait the upstream asked for (Retry-After), beyond the backoff.
  void Retry(int64_t at_least_ms = 0);
  void FinishExhausted();
  void Finish(const absl::Status& status);
  void FinishEnd(const api::GenerationEnd& end);
  void StartOnce(const Candidate& candidate);
  // Delivers (or holds, when buffered_) one event's deltas.
  void Deliver(const Candidate& candidate, std::vector<api::GenerationDelta> deltas);
  int MaxAttempts() const { return std::max(1, config_->routing.max_attempts); }
  int NChoices() const { return std::max(1, request_.n); }

  RouterBackend* const backend_;
  const api::CompletionRequest request_;
  std::shared_ptr<api::GenerationObserver> observer_;  // dropped once the last event is sent
  const std::shared_ptr<const RouterConfig> config_;
  std::vector<Candidate> candidates_;
  uint64_t affinity_ = 0;

  size_t candidate_ = 0;            // the candidate being tried
  std::vector<std::string> tried_;  // workers of that candidate already tried
  // By candidate + digest; node-based: Step holds pointers to several while adding others.
  absl::node_hash_map<std::string, internal::PreparedPrompt> prepared_;
  int attempts_ = 0;                                                     // Generate calls started
  bool started_ = false;                                                 // OnStart sent
  int64_t prompt_tokens_ = 0;  // the prompt of the latest call started (GenerationStart)
  // The latest call's max_tokens when clamp_max_tokens lowered it (GenerationStart, usage).
  std::optional<api::MaxTokensClamped> max_tokens_clamped_;
  // A non-streaming request holds its deltas until the final event: the client sees nothing
  // before then, so a worker that fails mid-generation is retried from scratch elsewhere.
  const bool buffered_ = !request_.stream;
  std::vector<api::GenerationDelta> held_;  // the current call's deltas, when buffered_
  bool done_ = false;                       // OnEnd or OnError sent
  size_t fallback_logged_ = 0;              // highest candidate whose first try was logged

  // Why candidates were passed over, for the final status.
  bool saw_no_worker_ = false;
  bool saw_saturated_ = false;
  std::string context_error_;  // the numbers, when a candidate's context was too small
  std::string n_error_;        // when no worker of a candidate runs n sequences at once
  int32_t largest_context_ = 0;
  int exhausted_failures_ = 0;  // attempts refused with RESOURCE_EXHAUSTED
  int other_failures_ = 0;      // attempts that failed otherwise
  std::string last_error_;
  int64_t retry_after_seconds_ = 0;    // the largest Retry-After an upstream sent
  absl::Status untranslatable_;        // an upstream candidate the request could not be sent to

  std::mutex mu_;  // guards call_ and cancelled_ against Cancel()
  std::shared_ptr<Call> call_;
  std::shared_ptr<upstream::UpstreamCall> upstream_call_;
  std::atomic<bool> cancelled_{false};
};

// Passes an UpstreamCall's events to its Run (upstream_call.h's sink).
class RouterBackend::UpstreamSink : public upstream::UpstreamCallSink {
 public:
  UpstreamSink(std::shared_ptr<Run> run, size_t candidate)
      : run_(std::move(run)), candidate_(candidate) {}
  void SetCall(std::weak_ptr<upstream::UpstreamCall> call) { call_ = std::move(call); }
  void OnUpstreamDeltas(std::vector<api::GenerationDelta> deltas, int64_t prompt_tokens) override {
    run_->OnUpstreamDeltas(candidate_, std::move(deltas), prompt_tokens);
  }
  void OnUpstreamEnd(const api::GenerationEnd& end) override {
    std::shared_ptr<upstream::UpstreamCall> call = call_.lock();
    run_->OnUpstreamEnd(candidate_, end, call ? call->first_output_seconds() : 0);
  }
  void OnUpstreamFailed(const upstream::UpstreamFailure& failure) override {
    run_->OnUpstreamFailed(candidate_, failure);
  }

 private:
  std::shared_ptr<Run> run_;
  size_t candidate_;
  std::weak_ptr<upstream::UpstreamCall> call_;
};

class RouterBackend::Handle : public api::GenerationHandle {
 public:
  explicit Handle(std::weak_ptr<Run> run) : run_(std::move(run)) {}
  void Cancel() override {
    if (auto run = run_.lock()) run->Cancel();
  }

 private:
  std::weak_ptr<Run> run_;
};

}  // namespace deltaserve::router
