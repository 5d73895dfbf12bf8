// API keys in front of the completion backend: a CompletionBackend decorator that authenticates
// the request's Authorization header (401), checks the key may use the model or alias it names
// (403) and charges its rate limits (429) before the request reaches routing, then refunds the
// tokens the generation did not use. The authority is read per request through a getter, so a
// config reload (SIGHUP) swaps it without touching requests in flight.
#pragma once

#include <functional>
#include <memory>

#include "router/api/api_metrics.h"
#include "router/api/completion_backend.h"
#include "router/api/openai_api.h"
#include "router/auth/api_key_authority.h"

namespace deltaserve::router::auth {

// See the file comment.
class AuthorizingBackend : public api::CompletionBackend {
 public:
  using AuthorityGetter = std::function<std::shared_ptr<ApiKeyAuthority>()>;
  // `metrics`, when given, counts the requests a key's limits refused (429) by key name.
  AuthorizingBackend(api::CompletionBackend& inner, AuthorityGetter authority,
                     api::ApiMetrics* metrics = nullptr);

  std::unique_ptr<api::GenerationHandle> Generate(
      const api::CompletionRequest& request,
      std::shared_ptr<api::GenerationObserver> observer) override;

  // Tokens charged at admission before the prompt is tokenized: max_tokens (or `default_max`)
  // plus one token per 4 bytes of prompt text, the usual English ratio; the difference to the
  // actual usage is refunded when the generation ends.
  static int64_t EstimatedTokens(const api::CompletionRequest& request, int64_t default_max);

 private:
  api::CompletionBackend& inner_;
  AuthorityGetter authority_;
  api::ApiMetrics* metrics_;
};

// GET /v1/models under the same keys: open when no keys are configured; otherwise a valid key
// is needed (401) and only the names it may use (Authorize) are listed. Reads the authority
// per request, like AuthorizingBackend, so a reload applies to the next listing.
class KeyedModelListGate : public api::ModelListGate {
 public:
  explicit KeyedModelListGate(AuthorizingBackend::AuthorityGetter authority);

  absl::StatusOr<std::function<bool(std::string_view)>> Visible(
      std::string_view authorization) const override;

 private:
  AuthorizingBackend::AuthorityGetter authority_;
};

}  // namespace deltaserve::router::auth
