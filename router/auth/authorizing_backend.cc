#include "router/auth/authorizing_backend.h"

#include <algorithm>
#include <atomic>
#include <utility>

namespace deltaserve::router::auth {
namespace {

// A handle for a request refused before it reached the backend.
class NoHandle : public api::GenerationHandle {
 public:
  void Cancel() override {}
};

// Passes every event through, refunds unused tokens when the generation ends, and releases the
// request's place in flight: at its end or error, or when the last reference to the observer
// goes (a generation torn down without either still frees its place).
class RefundingObserver : public api::GenerationObserver {
 public:
  RefundingObserver(std::shared_ptr<api::GenerationObserver> inner,
                    std::shared_ptr<ApiKeyAuthority> authority, ApiKeyIdentity who, int64_t charged)
      : inner_(std::move(inner)),
        authority_(std::move(authority)),
        who_(std::move(who)),
        charged_(charged) {}
  ~RefundingObserver() override { ReleaseOnce(); }

  void OnStart(const api::GenerationStart& start) override { inner_->OnStart(start); }
  void OnDelta(api::GenerationDelta delta) override { inner_->OnDelta(std::move(delta)); }
  void OnEnd(const api::GenerationEnd& end) override {
    const int64_t used = end.usage.prompt_tokens + end.usage.completion_tokens;
    if (charged_ > used) authority_->Refund(who_, charged_ - used);
    ReleaseOnce();
    inner_->OnEnd(end);
  }
  void OnError(const absl::Status& status) override {
    // Nothing (or little) was generated: the whole charge goes back.
    authority_->Refund(who_, charged_);
    ReleaseOnce();
    inner_->OnError(status);
  }

 private:
  void ReleaseOnce() {
    if (!released_.exchange(true)) authority_->Release(who_);
  }

  std::shared_ptr<api::GenerationObserver> inner_;
  std::shared_ptr<ApiKeyAuthority> authority_;
  ApiKeyIdentity who_;
  int64_t charged_;
  std::atomic<bool> released_{false};
};

}  // namespace

AuthorizingBackend::AuthorizingBackend(api::CompletionBackend& inner, AuthorityGetter authority,
                                       api::ApiMetrics* metrics)
    : inner_(inner), authority_(std::move(authority)), metrics_(metrics) {}

int64_t AuthorizingBackend::EstimatedTokens(const api::CompletionRequest& request,
                                            int64_t default_max) {
  int64_t bytes = static_cast<int64_t>(request.prompt.size());
  for (const api::ChatMessage& m : request.messages) {
    bytes += static_cast<int64_t>(m.content.size() + m.tool_calls_json.size());
  }
  const int64_t prompt = request.prompt_is_tokens
                             ? static_cast<int64_t>(request.prompt_tokens.size())
                             : (bytes + 3) / 4;
  return prompt + request.max_tokens.value_or(default_max);
}

std::unique_ptr<api::GenerationHandle> AuthorizingBackend::Generate(
    const api::CompletionRequest& request, std::shared_ptr<api::GenerationObserver> observer) {
  std::shared_ptr<ApiKeyAuthority> authority = authority_();
  if (authority == nullptr || authority->open()) return inner_.Generate(request, observer);
  absl::StatusOr<ApiKeyIdentity> who = authority->Authenticate(request.authorization);
  absl::Status status = who.ok() ? authority->Authorize(*who, request.model) : who.status();
  // A request without max_tokens is charged 16 output tokens up front; the limit is on what
  // was admitted, not on what a generation later turns out to use.
  const int64_t charge = EstimatedTokens(request, 16);
  if (status.ok()) {
    status = authority->Admit(*who, charge);
    if (absl::IsResourceExhausted(status) && metrics_ != nullptr) {
      metrics_->RecordRateLimited(who->name);
    }
  }
  if (!status.ok()) {
    observer->OnError(status);
    return std::make_unique<NoHandle>();
  }
  return inner_.Generate(
      request, std::make_shared<RefundingObserver>(std::move(observer), authority, *who, charge));
}

KeyedModelListGate::KeyedModelListGate(AuthorizingBackend::AuthorityGetter authority)
    : authority_(std::move(authority)) {}

absl::StatusOr<std::function<bool(std::string_view)>> KeyedModelListGate::Visible(
    std::string_view authorization) const {
  std::shared_ptr<ApiKeyAuthority> authority = authority_();
  if (authority == nullptr || authority->open()) {
    return std::function<bool(std::string_view)>([](std::string_view) { return true; });
  }
  absl::StatusOr<ApiKeyIdentity> who = authority->Authenticate(authorization);
  if (!who.ok()) return who.status();
  // The predicate keeps the authority it was checked against alive while the list is built.
  return std::function<bool(std::string_view)>([authority, who = *who](std::string_view model) {
    return authority->Authorize(who, model).ok();
  });
}

}  // namespace deltaserve::router::auth
