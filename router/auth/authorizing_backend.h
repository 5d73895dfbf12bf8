// API keys in front of the completion backend: a CompletionBackend decorator that authenticates
// the request's Authorization header (401), checks the key may use the model or alias it names
// (403) and charges its rate limits (429) before the request reaches routing, then refunds the
// tokens the generation did not use. The authority is read per request through a getter, so a
// config reload (SIGHUP) swaps it without touching requests in flight.
#pragma once

#include <functional>
#include <memory>

#include "router/api/completion_backend.h"
#include "router/auth/api_key_authority.h"

namespace deltaserve::router::auth {

// See the file comment.
class AuthorizingBackend : public api::CompletionBackend {
 public:
  using AuthorityGetter = std::function<std::shared_ptr<ApiKeyAuthority>()>;
  AuthorizingBackend(api::CompletionBackend& inner, AuthorityGetter authority);

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
};

}  // namespace deltaserve::router::auth
