// RouterBackend's per-generation state machine (internal/router_backend_run.h): candidates,
// attempts with backoff, the Generate stream's events, and what an early failure leads to
// (internal/early_failure.h).
#include "router/routing/internal/router_backend_run.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "router/api/api_error.h"
#include "router/routing/candidates.h"
#include "router/routing/internal/early_failure.h"
#include "router/routing/internal/generate_request.h"
#include "router/routing/internal/log.h"

namespace deltaserve::router {

namespace v1 = ::deltaserve::v1;
using internal::LogRouting;
using internal::PreparedPrompt;
using internal::ToApiLogprob;

namespace {

double Jitter() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return std::uniform_real_distribution<double>(0.5, 1.5)(rng);
}

std::string StatusText(const grpc::Status& s) {
  return absl::StrCat(s.error_message(), " (gRPC code ", static_cast<int>(s.error_code()), ")");
}

}  // namespace

void RouterBackend::Call::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended; OnDone follows
  run_->OnEvent(*this, event_);
  event_.Clear();
  StartRead(&event_);
}

void RouterBackend::Call::OnDone(const grpc::Status& status) {
  std::shared_ptr<Run> run = std::move(run_);
  run->OnCallDone(*this, status);
  self_.reset();  // last: may destroy this
}

void RouterBackend::Run::Begin() {
  absl::StatusOr<std::vector<Candidate>> resolved = ResolveCandidates(request_.model, *config_);
  if (resolved.ok() && config_->models.empty()) {
    // Without configured models every name passes resolution; a name no worker has ever
    // reported is unknown (404), one that some worker served and none serves now is 503.
    std::erase_if(*resolved,
                  [&](const Candidate& c) {
                    return c.upstream == nullptr && !backend_->pool_->EverServed(c.served_name);
                  });
    if (resolved->empty()) {
      resolved = api::WithErrorDetail(
          absl::NotFoundError(absl::StrCat("The model '", request_.model, "' does not exist")),
          "model", "model_not_found");
    }
  }
  if (!resolved.ok()) {
    backend_->pool_->metrics().CountRejection(kRejectUnknownModel);
    Finish(resolved.status());
    return;
  }
  candidates_ = std::move(*resolved);
  affinity_ = backend_->options_.affinity_key ? backend_->options_.affinity_key(request_) : 0;
  Step();
}

void RouterBackend::Run::Cancel() {
  std::shared_ptr<Call> call;
  std::shared_ptr<upstream::UpstreamCall> upstream_call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_.exchange(true)) return;
    call = call_;
    upstream_call = upstream_call_;
  }
  // Outside the lock: gRPC may run the call's callbacks inline.
  if (call) call->TryCancel();
  if (upstream_call) upstream_call->Cancel();
}

absl::StatusOr<PreparedPrompt*> RouterBackend::Run::Prepare(const Candidate& candidate,
                                                            const ModelState& model) {
  const std::string key = absl::StrCat(candidate_, "\n", model.tokenizer_digest);
  if (auto it = prepared_.find(key); it != prepared_.end()) return &it->second;
  absl::StatusOr<const common::Tokenizer*> tok =
      backend_->tokenizers_->Get(*model.tokenizer, model.tokenizer_digest);
  if (!tok.ok()) {
    return absl::InternalError(
        absl::StrCat("tokenizer of model '", model.name,
                     "' from its worker is unusable: ", tok.status().message()));
  }
  api::CompletionRequest request = request_;
  ApplyModelDefaults(candidate.defaults, request);
  absl::StatusOr<RenderedPrompt> rendered = backend_->renderer_->Render(request, model, **tok);
  if (!rendered.ok()) return rendered.status();
  const std::string_view prompt_param =
      request_.endpoint == api::Endpoint::kChatCompletions ? "messages" : "prompt";
  if (rendered->token_ids.empty()) {
    return api::InvalidRequestError(prompt_param, "invalid_value", "The prompt has no tokens");
  }
  const int32_t n_vocab = model.n_vocab > 0 ? model.n_vocab : (*tok)->vocab_size();
  for (int32_t id : rendered->token_ids) {
    if (id < 0 || id >= n_vocab) {
      return api::InvalidRequestError(
          prompt_param, "invalid_value",
          absl::StrCat("Token id ", id, " is outside the vocabulary of model '", candidate.name,
                       "' (", n_vocab, " tokens)"));
    }
  }
  for (const auto& [id, bias] : request.sampling.logit_bias) {
    if (id < 0 || id >= n_vocab) {
      return api::InvalidRequestError(
          absl::StrCat("logit_bias.", id), "invalid_value",
          absl::StrCat("Token id ", id, " is outside the vocabulary of model '", candidate.name,
                       "' (", n_vocab, " tokens)"));
    }
  }
  PreparedPrompt& p = prepared_[key];
  p.tokenizer = *tok;
  p.prompt = std::move(*rendered);
  p.sampling = std::move(request.sampling);
  p.prefix_matcher.emplace(p.prompt.token_ids, p.prompt.message_boundaries);
  return &p;
}

void RouterBackend::Run::Step() {
  WorkerPool& pool = *backend_->pool_;
  for (;;) {
    if (cancelled_.load()) {
      Finish(absl::CancelledError("generation cancelled"));
      return;
    }
    if (attempts_ >= MaxAttempts() || candidate_ >= candidates_.size()) {
      FinishExhausted();
      return;
    }
    const Candidate& candidate = candidates_[candidate_];
    if (candidate.upstream != nullptr) {
      if (StartUpstream(candidate)) return;
      NextCandidate();
      continue;
    }
    const std::vector<ServingWorker> serving = pool.ModelsServing(candidate.served_name);
    std::vector<WorkerOption> options(serving.size());
    std::vector<PreparedPrompt*> prompts(serving.size(), nullptr);
    ChoiceOptions choice_options = backend_->options_.choice;
    choice_options.prefix_affinity = config_->routing.prefix_affinity;
    choice_options.prefix_max_waiting = config_->routing.prefix_max_waiting;
    // n > 1: only workers that run n sequences at once can serve it (0: not reported, tried).
    auto holds_n = [&](const ServingWorker& s) {
      return NChoices() <= 1 || s.model->load.max_parallel <= 0 ||
             s.model->load.max_parallel >= NChoices();
    };
    if (!serving.empty() && std::none_of(serving.begin(), serving.end(), holds_n)) {
      int32_t most = 0;
      for (const ServingWorker& s : serving) most = std::max(most, s.model->load.max_parallel);
      n_error_ = absl::StrCat("n=", NChoices(), " choices exceed the ", most,
                              " sequences a worker of model '", candidate.name,
                              "' runs at once");
      NextCandidate();
      continue;
    }
    // A clamped max_tokens fits any worker whose context leaves room for one token.
    const bool clamp = internal::ClampsMaxTokens(request_, candidate, *config_);
    for (size_t i = 0; i < serving.size(); ++i) {
      const ServingWorker& s = serving[i];
      WorkerOption& o = options[i];
      o.worker = s.address;
      o.available = s.available && holds_n(s) &&
                    std::find(tried_.begin(), tried_.end(), s.address) == tried_.end();
      o.context_length = s.model->context_length;
      o.load = s.model->load;
      o.router_inflight = s.router_inflight;
      if (!o.available) continue;
      absl::StatusOr<PreparedPrompt*> p = Prepare(candidate, *s.model);
      if (!p.ok()) {
        Finish(p.status());
        return;
      }
      prompts[i] = *p;
      o.tokens_needed = static_cast<int64_t>((*p)->prompt.token_ids.size()) +
                        (request_.max_tokens && !clamp ? *request_.max_tokens : 1);
      if (choice_options.prefix_affinity && s.model->snapshot_root.has_value()) {
        o.reports_snapshots = true;
        if (s.model->snapshot_prefixes != nullptr) {
          o.held_prefix_tokens = (*p)->prefix_matcher->HeldPrefixTokens(
              (*p)->prompt.token_ids, *s.model->snapshot_root, *s.model->snapshot_prefixes);
        }
      }
    }
    const WorkerChoice choice = ChooseWorkers(options, affinity_, choice_options);
    switch (choice.outcome) {
      case ChoiceOutcome::kNoWorker:
        if (tried_.empty()) saw_no_worker_ = true;
        NextCandidate();
        continue;
      case ChoiceOutcome::kContextTooSmall: {
        // The numbers of the candidate that came closest: the largest context among them.
        if (context_error_.empty() || choice.largest_context > largest_context_) {
          largest_context_ = choice.largest_context;
          const int64_t max_tokens = request_.max_tokens ? *request_.max_tokens : 0;
          const int64_t prompt_tokens = choice.tokens_needed - (max_tokens > 0 ? max_tokens : 1);
          context_error_ = absl::StrCat(
              "This model's maximum context length is ", choice.largest_context,
              " tokens. However, you requested ", prompt_tokens + max_tokens, " tokens (",
              prompt_tokens, " in the prompt, ", max_tokens,
              " for the completion). Please reduce the prompt or the completion length.");
        }
        NextCandidate();
        continue;
      }
      case ChoiceOutcome::kSaturated:
        saw_saturated_ = true;
        NextCandidate();
        continue;
      case ChoiceOutcome::kChosen:
        pool.metrics().CountPrefixRouting(PrefixOutcomeLabel(choice.prefix));
        break;
    }
    for (size_t index : choice.order) {
      std::unique_ptr<WorkerPool::CallTicket> ticket =
          pool.BeginCall(serving[index].address, candidate.served_name);
      if (ticket == nullptr) continue;  // its circuit opened since the snapshot
      StartCall(candidate, serving[index], std::move(ticket), *prompts[index]);
      return;
    }
    if (tried_.empty()) saw_no_worker_ = true;
    NextCandidate();
  }
}

void RouterBackend::Run::NextCandidate() {
  ++candidate_;
  tried_.clear();
}

void RouterBackend::Run::StartCall(const Candidate& candidate, const ServingWorker& worker,
                                   std::unique_ptr<WorkerPool::CallTicket> ticket,
                                   const PreparedPrompt& prepared) {
  ++attempts_;
  WorkerPool& pool = *backend_->pool_;
  if (attempts_ > 1) pool.metrics().CountRetry();
  if (candidate_ > 0 && candidate_ > fallback_logged_) {
    fallback_logged_ = candidate_;
    pool.metrics().CountFallback(candidates_[0].name, candidate.name);
    LogRouting(absl::StrCat("request ", request_.request_id, ": fallback from '",
                            candidates_[0].name, "' to '", candidate.name, "'",
                            last_error_.empty() ? "" : absl::StrCat(" after: ", last_error_)));
  }
  tried_.push_back(worker.address);

  prompt_tokens_ = static_cast<int64_t>(prepared.prompt.token_ids.size());
  auto call =
      std::make_shared<Call>(shared_from_this(), std::move(ticket), candidate_, prepared.tokenizer);
  // Each choice's output is shaped on its own (its reasoning, content and tool calls).
  call->ends.resize(static_cast<size_t>(NChoices()));
  call->ended.assign(static_cast<size_t>(NChoices()), false);
  if (prepared.prompt.output_shaper) {
    for (int i = 0; i < NChoices(); ++i) {
      call->shapers.push_back(prepared.prompt.output_shaper(buffered_));
    }
  }
  max_tokens_clamped_ = internal::FillGenerateRequest(
      request_, candidate, worker.model->context_length, prepared,
      internal::ClampsMaxTokens(request_, candidate, *config_), call->request());

  bool cancel_now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    call_ = call;
    cancel_now = cancelled_.load();
  }
  call->Start(backend_->options_.generate_deadline_ms);
  if (cancel_now) call->TryCancel();
}

void RouterBackend::Run::StartOnce(const Candidate& candidate) {
  if (started_) return;
  started_ = true;
  observer_->OnStart(api::GenerationStart{candidate.name, prompt_tokens_, max_tokens_clamped_});
}

void RouterBackend::Run::Deliver(const Candidate& candidate,
                                 std::vector<api::GenerationDelta> deltas) {
  if (buffered_) {
    for (api::GenerationDelta& d : deltas) held_.push_back(std::move(d));
    return;
  }
  StartOnce(candidate);
  for (api::GenerationDelta& d : deltas) observer_->OnDelta(std::move(d));
}

void RouterBackend::Run::OnEvent(Call& call, const v1::GenerateEvent& event) {
  if (call.final_seen || done_) return;  // nothing after the final event counts
  const Candidate& candidate = candidates_[call.candidate()];
  switch (event.event_case()) {
    case v1::GenerateEvent::kTokenEvent: {
      const v1::TokenEvent& t = event.token_event();
      // A choice outside the request's (a worker breaking the contract) is skipped; its missing
      // final event then fails the call.
      const int choice = t.choice_index();
      if (choice < 0 || choice >= NChoices() || call.ended[choice]) return;
      OutputShaper* shaper = call.shapers.empty() ? nullptr : call.shapers[choice].get();
      api::GenerationDelta delta;
      delta.text = t.text();
      delta.tokens = t.token_ids_size();
      if (request_.logprobs) {
        delta.logprobs.reserve(t.logprobs_size());
        for (const v1::TokenLogprobs& lp : t.logprobs()) {
          delta.logprobs.push_back(ToApiLogprob(lp, call.tokenizer()));
        }
      }
      std::vector<api::GenerationDelta> deltas;
      if (shaper != nullptr) {
        // The worker's tokens and logprobs ride on the first delta (or an empty one).
        shaper->Feed(t.text(), deltas);
        if (deltas.empty()) deltas.emplace_back();
        deltas.front().tokens = delta.tokens;
        deltas.front().logprobs = std::move(delta.logprobs);
      } else {
        deltas.push_back(std::move(delta));
      }
      for (api::GenerationDelta& d : deltas) d.choice = choice;
      Deliver(candidate, std::move(deltas));
      return;
    }
    case v1::GenerateEvent::kFinalEvent: {
      const v1::FinalEvent& f = event.final_event();
      const int choice = f.choice_index();
      if (choice < 0 || choice >= NChoices() || call.ended[choice]) return;
      if (f.finish_reason() == v1::FINISH_REASON_STOP ||
          f.finish_reason() == v1::FINISH_REASON_LENGTH) {
        call.ended[choice] = true;
        ++call.finals;
        OutputShaper* shaper = call.shapers.empty() ? nullptr : call.shapers[choice].get();
        api::ChoiceEnd& ce = call.ends[choice];
        ce.finish_reason = f.finish_reason() == v1::FINISH_REASON_STOP ? api::FinishReason::kStop
                                                                       : api::FinishReason::kLength;
        if (shaper != nullptr) {
          if (ce.finish_reason == api::FinishReason::kLength) shaper->SetCutByLength();
          std::vector<api::GenerationDelta> tail;
          shaper->Finish(tail);
          for (api::GenerationDelta& d : tail) d.choice = choice;
          if (!tail.empty()) Deliver(candidate, std::move(tail));
          ce.content_null_when_empty = true;
          // "length" stays: the calls were complete, but the answer was cut.
          if (shaper->called_tools() && ce.finish_reason == api::FinishReason::kStop) {
            ce.finish_reason = api::FinishReason::kToolCalls;
          }
        }
        // The choices share the prompt: counted once; their completions add up.
        call.usage.prompt_tokens = f.usage().prompt_tokens();
        call.usage.cached_tokens = f.usage().cached_prompt_tokens();
        call.usage.completion_tokens += f.usage().completion_tokens();
        call.usage.reasoning_tokens += f.usage().reasoning_tokens();
        if (choice == 0 && f.has_matched_stop_string()) call.matched_stop = f.matched_stop_string();
        if (call.finals < NChoices()) return;
        call.final_seen = true;
        StartOnce(candidate);
        for (api::GenerationDelta& held : held_) observer_->OnDelta(std::move(held));
        held_.clear();
        api::GenerationEnd end;
        end.finish_reason = call.ends[0].finish_reason;
        end.content_null_when_empty = call.ends[0].content_null_when_empty;
        if (NChoices() > 1) end.choices = call.ends;
        end.usage = call.usage;
        end.usage.max_tokens_clamped = max_tokens_clamped_;
        end.matched_stop = call.matched_stop;
        FinishEnd(end);
        return;
      }
      call.final_seen = true;
      // One choice failing ends them all: the call is cancelled so the worker frees the others.
      if (NChoices() > 1) call.TryCancel();
      // ERROR, CANCELLED (a worker shutting down) or a reason this build does not know.
      const std::string why = absl::StrCat(
          "worker ", call.ticket().address, " ended the sequence with ",
          v1::FinishReason_IsValid(f.finish_reason()) ? v1::FinishReason_Name(f.finish_reason())
                                                      : absl::StrCat(f.finish_reason()),
          f.message().empty() ? "" : absl::StrCat(": ", f.message()));
      const absl::Status status = f.finish_reason() == v1::FINISH_REASON_CANCELLED
                                      ? absl::UnavailableError(why)
                                      : absl::InternalError(why);
      if (!started_) {
        call.early_failure = status;  // retried when the call is done
      } else {
        backend_->pool_->metrics().CountErrorAfterStart();
        LogRouting(
            absl::StrCat("request ", request_.request_id, ": error after the first token: ", why));
        Finish(status);
      }
      return;
    }
    default:
      return;  // a newer kind of event: skipped (proto/README.md)
  }
}

void RouterBackend::Run::OnCallDone(Call& call, const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (call_.get() == &call) call_.reset();
  }
  WorkerPool& pool = *backend_->pool_;
  const WorkerPool::CallTicket& ticket = call.ticket();
  const bool cancelled = cancelled_.load();
  const std::string where =
      absl::StrCat("worker ", ticket.address, " (model '", ticket.model, "')");

  if (done_) {
    // The final event was delivered (or an error after it was reported).
    const bool clean = status.ok() && call.final_seen && call.early_failure.ok();
    pool.EndCall(ticket,
                 clean       ? CallOutcome::kSuccess
                 : cancelled ? CallOutcome::kNeutral
                             : CallOutcome::kFailure,
                 StatusText(status));
    return;
  }
  if (started_) {
    if (cancelled) {
      pool.EndCall(ticket, CallOutcome::kNeutral);
      Finish(absl::CancelledError("generation cancelled"));
      return;
    }
    const std::string why = status.ok() ? "the stream ended without a final event"
                                        : absl::StrCat("the stream broke: ", StatusText(status));
    pool.EndCall(ticket, CallOutcome::kFailure, why);
    pool.metrics().CountErrorAfterStart();
    LogRouting(absl::StrCat("request ", request_.request_id, ": error after the first token on ",
                            where, ": ", why));
    Finish(absl::UnavailableError(absl::StrCat(where, " failed during generation: ", why)));
    return;
  }
  if (cancelled) {
    pool.EndCall(ticket, CallOutcome::kNeutral);
    Finish(absl::CancelledError("generation cancelled"));
    return;
  }

  // Before the first token reached the client: decide between passing the error on and trying
  // elsewhere. A buffered generation's partial output is dropped; the retry starts over.
  if (!held_.empty()) {
    pool.metrics().CountDiscardedPartial();
    LogRouting(absl::StrCat("request ", request_.request_id, ": dropping ", held_.size(),
                            " undelivered event(s) of a failed call on ", where));
    held_.clear();
  }
  absl::Status failure;
  if (!call.early_failure.ok()) {
    // Before the status: with n > 1 the router cancelled the call after a choice's ERROR.
    failure = call.early_failure;
  } else if (!status.ok()) {
    failure =
        absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  } else {
    failure = absl::InternalError("the stream ended without a final event");
  }
  last_error_ = absl::StrCat(where, ": ", failure.ToString());
  const internal::EarlyFailureVerdict verdict = internal::ClassifyEarlyFailure(failure.code());
  pool.EndCall(ticket, verdict.outcome,
               verdict.outcome == CallOutcome::kFailure ? failure.ToString() : std::string());
  switch (verdict.step) {
    case internal::EarlyFailureStep::kPassOn:
      if (absl::StartsWith(failure.message(), "n: ")) {
        // The worker's refusal of n (its --parallel, or n choices at full length beyond its
        // KV cache): the client's 400 names the parameter.
        failure = api::WithErrorDetail(failure, "n", "invalid_value");
      }
      if (failure.code() == absl::StatusCode::kInvalidArgument) {
        LogRouting(
            absl::StrCat("request ", request_.request_id, ": ", where,
                         " refused the request as invalid (version skew?): ", failure.message()));
      }
      Finish(failure);
      return;
    case internal::EarlyFailureStep::kDeadline:
      Finish(absl::DeadlineExceededError(absl::StrCat(where, " did not start in time")));
      return;
    case internal::EarlyFailureStep::kRefused:
      Finish(
          absl::InternalError(absl::StrCat(where, " refused the request: ", failure.ToString())));
      return;
    case internal::EarlyFailureStep::kNextCandidate:
      pool.PollSoon();
      LogRouting(absl::StrCat("request ", request_.request_id, ": ", where,
                              " does not serve the model (NOT_FOUND); next candidate"));
      ++other_failures_;
      NextCandidate();
      Retry();
      return;
    case internal::EarlyFailureStep::kRetrySaturated:
      ++exhausted_failures_;
      Retry();
      return;
    case internal::EarlyFailureStep::kRetryFailed:
      ++other_failures_;
      LogRouting(absl::StrCat("request ", request_.request_id, ": attempt ", attempts_, " on ",
                              where, " failed before the first token: ", failure.ToString()));
      Retry();
      return;
  }
}

void RouterBackend::Run::Retry(int64_t at_least_ms) {
  if (attempts_ >= MaxAttempts()) {
    FinishExhausted();
    return;
  }
  const int64_t base = std::max<int64_t>(0, config_->routing.retry_backoff_ms);
  const int shift = std::min(attempts_ - 1, 16);
  const double ms = std::max<double>(
      static_cast<double>(at_least_ms),
      std::min<double>(static_cast<double>(base) * (int64_t{1} << shift) * Jitter(),
                       static_cast<double>(backend_->options_.max_backoff_ms)));
  std::shared_ptr<Run> self = shared_from_this();
  backend_->timer_.RunAfter(absl::Milliseconds(ms), [self] { self->Step(); });
}

void RouterBackend::Run::FinishExhausted() {
  RoutingMetrics& metrics = backend_->pool_->metrics();
  const std::string& model = request_.model;
  absl::Status status;
  if (exhausted_failures_ + other_failures_ > 0) {
    if (other_failures_ == 0) {
      metrics.CountRejection(kRejectSaturated);
      status = absl::ResourceExhaustedError(absl::StrCat(
          "Every worker for model '", model, "' is at capacity; retry later (", last_error_, ")"));
    } else {
      metrics.CountRejection(kRejectExhausted);
      status =
          absl::UnavailableError(absl::StrCat("No worker could serve model '", model, "' after ",
                                              attempts_, " attempt(s); last: ", last_error_));
    }
  } else if (saw_saturated_) {
    metrics.CountRejection(kRejectSaturated);
    status = absl::ResourceExhaustedError(
        absl::StrCat("Every worker for model '", model, "' is saturated; retry later"));
  } else if (saw_no_worker_) {
    metrics.CountRejection(kRejectNoWorker);
    status = absl::UnavailableError(absl::StrCat("No worker is available for model '", model, "'"));
  } else if (!n_error_.empty() && context_error_.empty()) {
    metrics.CountRejection(kRejectContext);
    status = api::WithErrorDetail(absl::InvalidArgumentError(n_error_), "n", "invalid_value");
  } else if (!context_error_.empty()) {
    metrics.CountRejection(kRejectContext);
    status = api::WithErrorDetail(
        absl::InvalidArgumentError(context_error_),
        request_.endpoint == api::Endpoint::kChatCompletions ? "messages" : "prompt",
        "context_length_exceeded");
  } else {
    metrics.CountRejection(kRejectNoWorker);
    status = absl::UnavailableError(absl::StrCat("No worker is available for model '", model, "'"));
  }
  if (absl::IsResourceExhausted(status) && retry_after_seconds_ > 0) {
    status = api::WithRetryAfter(status, retry_after_seconds_);
  }
  if (!untranslatable_.ok() && attempts_ == 0 && !saw_saturated_) {
    // The only candidates left out were upstreams the request cannot be sent to: say why.
    status = untranslatable_;
  }
  LogRouting(absl::StrCat("request ", request_.request_id, ": refused: ", status.ToString()));
  Finish(status);
}

void RouterBackend::Run::Finish(const absl::Status& status) {
  if (done_) return;
  done_ = true;
  std::shared_ptr<api::GenerationObserver> observer = std::move(observer_);
  observer->OnError(status);
}

void RouterBackend::Run::FinishEnd(const api::GenerationEnd& end) {
  if (done_) return;
  done_ = true;
  std::shared_ptr<api::GenerationObserver> observer = std::move(observer_);
  observer->OnEnd(end);
}

}  // namespace deltaserve::router
