#pragma once
// The part every HTTP endpoint's generation session shares (completion_endpoint.cc,
// responses_endpoint.cc, anthropic_endpoint.cc): the link between the exchange and the
// generation it started, so that a client that goes away cancels the generation whether the
// backend's handle has arrived yet or not; and the header that reports a max_tokens the router
// lowered. Sessions derive from it, guard their own state with mu_ and set finished_ once their
// answer is complete (a finished session is not cancelled).

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "router/api/api_metrics.h"
#include "router/api/completion_backend.h"
#include "router/api/openai_response.h"
#include "router/http/http_message.h"

namespace deltaserve::router::api::internal {

class CancellableSession : public GenerationObserver {
 public:
  explicit CancellableSession(ApiMetrics& metrics) : cancel_metrics_(metrics) {}

  // The backend's handle, once Generate returned: cancelled at once when the client left before.
  void AttachHandle(std::unique_ptr<GenerationHandle> handle) {
    bool cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handle_ = std::move(handle);
      cancel = cancel_requested_ && handle_ != nullptr;
    }
    if (cancel) handle_->Cancel();
  }

  // From HttpExchange::OnClientGone, on a server thread.
  void CancelForClient() {
    GenerationHandle* handle;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancel_requested_ || finished_) return;
      cancel_requested_ = true;
      handle = handle_.get();
    }
    cancel_metrics_.RecordClientGone();
    if (handle != nullptr) handle->Cancel();  // outside the lock: it may call OnError at once
  }

 protected:
  // kMaxTokensClampedHeader ("FROM->TO") when the router lowered the request's max_tokens.
  static void AddClampedHeader(const std::optional<MaxTokensClamped>& clamped,
                               std::vector<http::HeaderField>& headers) {
    if (clamped) {
      headers.push_back({std::string(kMaxTokensClampedHeader),
                         MaxTokensClampedHeaderValue(*clamped)});
    }
  }

  std::mutex mu_;
  bool finished_ = false;  // guarded by mu_
  // GenerationStart's max_tokens_clamped, for a stream's headers; guarded by mu_.
  std::optional<MaxTokensClamped> clamped_;

 private:
  ApiMetrics& cancel_metrics_;
  std::unique_ptr<GenerationHandle> handle_;  // guarded by mu_
  bool cancel_requested_ = false;             // guarded by mu_
};

}  // namespace deltaserve::router::api::internal
