// RouterBackend's upstream candidates (docs/upstreams.md): starting a call to an upstream model
// and what its events and failures lead to — the same decisions as for a worker's call
// (router_backend_run.cc): output passed on (or held, for a non-streaming request), a failure
// before the first output retried or passed to the next candidate, `Retry-After` waited out when
// the upstream is the last candidate, a failure after it reported to the client.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "router/api/api_error.h"
#include "router/config/upstream_config.h"
#include "router/routing/internal/log.h"
#include "router/routing/internal/router_backend_run.h"
#include "router/upstream/upstream_request.h"

namespace deltaserve::router {

using internal::LogRouting;

namespace {

// The longest Retry-After the router waits out itself before retrying the same upstream;
// a longer one goes back to the client as its 429's Retry-After.
constexpr int64_t kMaxRetryAfterWaitSeconds = 10;

// Tokens of a request's prompt, estimated from its bytes (4 a token), for an upstream's
// context_window (the router has no tokenizer for it).
int64_t EstimatedPromptTokens(const api::CompletionRequest& r) {
  if (r.prompt_is_tokens) return static_cast<int64_t>(r.prompt_tokens.size());
  size_t bytes = r.prompt.size() + r.tools_json.size();
  for (const api::ChatMessage& m : r.messages) {
    bytes += m.content.size() + m.tool_calls_json.size() + m.reasoning_content.size();
  }
  return static_cast<int64_t>((bytes + 3) / 4);
}

}  // namespace

bool RouterBackend::Run::StartUpstream(const Candidate& candidate) {
  const UpstreamConfig& u = *candidate.upstream;
  UpstreamPool* upstreams = backend_->upstreams_;
  if (upstreams == nullptr) {
    if (tried_.empty()) saw_no_worker_ = true;
    return false;
  }
  if (u.context_window > 0) {
    const int64_t prompt = EstimatedPromptTokens(request_);
    const int64_t wanted = prompt + request_.max_tokens.value_or(1);
    if (wanted > u.context_window) {
      if (context_error_.empty() || u.context_window > largest_context_) {
        largest_context_ = static_cast<int32_t>(std::min<int64_t>(u.context_window, INT32_MAX));
        context_error_ = absl::StrCat(
            "This model's maximum context length is ", u.context_window,
            " tokens. However, you requested about ", wanted, " tokens (about ", prompt,
            " in the prompt, ", request_.max_tokens.value_or(0),
            " for the completion). Please reduce the prompt or the completion length.");
      }
      return false;
    }
  }
  absl::StatusOr<UpstreamUrl> url = ParseUpstreamUrl(u.base_url);
  absl::StatusOr<upstream::UpstreamHttpRequest> built =
      url.ok() ? upstream::BuildUpstreamRequest(request_, u, *url)
               : absl::StatusOr<upstream::UpstreamHttpRequest>(url.status());
  if (!built.ok()) {
    upstreams->CountSkipped(u.name, upstream::kErrorUntranslatable);
    if (untranslatable_.ok()) untranslatable_ = built.status();
    LogRouting(absl::StrCat("request ", request_.request_id, ": upstream '", u.name,
                            "' skipped: ", built.status().message()));
    return false;
  }
  switch (upstreams->TryBegin(u)) {
    case UpstreamAdmission::kCircuitOpen:
      if (tried_.empty()) saw_no_worker_ = true;
      return false;
    case UpstreamAdmission::kSaturated:
      saw_saturated_ = true;
      return false;
    case UpstreamAdmission::kAdmitted:
      break;
  }
  ++attempts_;
  if (attempts_ > 1) backend_->pool_->metrics().CountRetry();
  if (candidate_ > 0 && candidate_ > fallback_logged_) {
    fallback_logged_ = candidate_;
    backend_->pool_->metrics().CountFallback(candidates_[0].name, candidate.name);
    LogRouting(absl::StrCat("request ", request_.request_id, ": fallback from '",
                            candidates_[0].name, "' to upstream '", candidate.name, "'",
                            last_error_.empty() ? "" : absl::StrCat(" after: ", last_error_)));
  }
  tried_.push_back(absl::StrCat("upstream:", u.name));
  prompt_tokens_ = 0;
  max_tokens_clamped_.reset();
  auto sink = std::make_shared<UpstreamSink>(shared_from_this(), candidate_);
  auto call = std::make_shared<upstream::UpstreamCall>(u, std::move(*built), request_.endpoint,
                                                       NChoices(), request_.request_id, sink);
  sink->SetCall(call);
  bool cancel_now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    upstream_call_ = call;
    cancel_now = cancelled_.load();
  }
  call->Start();
  if (cancel_now) call->Cancel();
  return true;
}

void RouterBackend::Run::OnUpstreamDeltas(size_t index, std::vector<api::GenerationDelta> deltas,
                                          int64_t prompt_tokens) {
  if (done_) return;
  if (prompt_tokens > 0) prompt_tokens_ = prompt_tokens;
  Deliver(candidates_[index], std::move(deltas));
}

void RouterBackend::Run::OnUpstreamEnd(size_t index, const api::GenerationEnd& end,
                                       double ttft_seconds) {
  const Candidate& candidate = candidates_[index];
  {
    std::lock_guard<std::mutex> lock(mu_);
    upstream_call_.reset();
  }
  backend_->upstreams_->EndSuccess(candidate.name, ttft_seconds, end.usage);
  if (done_) return;
  if (prompt_tokens_ == 0) prompt_tokens_ = end.usage.prompt_tokens;
  StartOnce(candidate);
  for (api::GenerationDelta& held : held_) observer_->OnDelta(std::move(held));
  held_.clear();
  FinishEnd(end);
}

void RouterBackend::Run::OnUpstreamFailed(size_t index, const upstream::UpstreamFailure& failure) {
  const Candidate& candidate = candidates_[index];
  {
    std::lock_guard<std::mutex> lock(mu_);
    upstream_call_.reset();
  }
  UpstreamPool& upstreams = *backend_->upstreams_;
  const absl::StatusCode code = failure.status.code();
  if (code == absl::StatusCode::kCancelled || cancelled_.load()) {
    upstreams.EndNeutral(candidate.name);
    Finish(absl::CancelledError("generation cancelled"));
    return;
  }
  // A refused request (400) and a rate limit say nothing about the upstream's health.
  const bool health = code != absl::StatusCode::kInvalidArgument &&
                      code != absl::StatusCode::kResourceExhausted;
  upstreams.EndFailure(candidate.name, failure.kind, health);
  if (done_) return;
  if (started_) {
    backend_->pool_->metrics().CountErrorAfterStart();
    LogRouting(absl::StrCat("request ", request_.request_id, ": error after the first token: ",
                            failure.status.message()));
    Finish(absl::UnavailableError(failure.status.message()));
    return;
  }
  if (!held_.empty()) {
    backend_->pool_->metrics().CountDiscardedPartial();
    held_.clear();
  }
  last_error_ = std::string(failure.status.message());
  if (code == absl::StatusCode::kInvalidArgument) {
    // The upstream refused the request itself: another try would be refused the same way.
    Finish(failure.status);
    return;
  }
  if (code == absl::StatusCode::kResourceExhausted) {
    ++exhausted_failures_;
    retry_after_seconds_ = std::max(retry_after_seconds_, failure.retry_after_seconds);
  } else {
    ++other_failures_;
  }
  LogRouting(absl::StrCat("request ", request_.request_id, ": attempt ", attempts_, " failed (",
                          failure.kind, "): ", failure.status.message()));
  if (candidate_ + 1 < candidates_.size()) {
    NextCandidate();
    Retry();
    return;
  }
  // The last candidate: the same upstream again, after its Retry-After when it named one.
  if (failure.retry_after_seconds > kMaxRetryAfterWaitSeconds) {
    FinishExhausted();
    return;
  }
  Retry(failure.retry_after_seconds * 1000);
}

}  // namespace deltaserve::router
