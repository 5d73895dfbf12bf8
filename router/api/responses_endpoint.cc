#include "router/api/responses_endpoint.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "router/api/api_error.h"
#include "router/api/internal/cancellable_session.h"
#include "router/api/openai_response.h"
#include "router/api/responses_output.h"
#include "router/api/responses_request.h"

namespace deltaserve::router::api {
namespace {

// Tool types a client may send that are counted by name; any other is counted as "other", so a
// client cannot grow the metric's label set.
constexpr std::array<std::string_view, 10> kKnownToolTypes = {
    "web_search",           "web_search_preview", "file_search",      "local_shell", "custom",
    "computer_use_preview", "code_interpreter",   "image_generation", "mcp",         "other"};

std::array<std::atomic<uint64_t>, kKnownToolTypes.size()> g_ignored_tools{};
std::array<std::atomic<bool>, kKnownToolTypes.size()> g_ignored_logged{};

void CountIgnoredTools(const std::vector<std::string>& types) {
  for (const std::string& type : types) {
    size_t k = kKnownToolTypes.size() - 1;
    for (size_t i = 0; i + 1 < kKnownToolTypes.size(); ++i) {
      if (type == kKnownToolTypes[i]) k = i;
    }
    g_ignored_tools[k].fetch_add(1, std::memory_order_relaxed);
    // Logged once per type (a degraded mode logs its first occurrence, not every request).
    if (!g_ignored_logged[k].exchange(true)) {
      std::fprintf(
          stderr,
          "responses: ignoring tools of type '%s' (only function tools reach the model; "
          "counted in deltaserve_router_responses_ignored_tools_total)\n",
          (k + 1 == kKnownToolTypes.size() ? type : std::string(kKnownToolTypes[k])).c_str());
    }
  }
}

// An error from the chat path (routing, rendering, the worker) with its param named as in the
// Responses body.
ApiError ResponsesError(const absl::Status& status) {
  ApiError error = ApiErrorFromStatus(status.ok() ? absl::InternalError("no error") : status);
  if (error.param == "messages") {
    error.param = "input";
  } else if (error.param == "max_tokens") {
    error.param = "max_output_tokens";
  } else if (error.param.starts_with("response_format")) {
    error.param = "text.format";
  }
  return error;
}

// One request's generation seen from the HTTP side.
class ResponsesSession : public internal::CancellableSession {
 public:
  ResponsesSession(std::shared_ptr<http::HttpExchange> exchange, const ResponsesRequest& req,
                   ApiMetrics& metrics)
      : CancellableSession(metrics),
        exchange_(std::move(exchange)),
        metrics_(metrics),
        stream_(req.completion.stream),
        warning_(IgnoredToolsWarning(req.ignored_tool_types)),
        timer_(metrics, "responses", req.completion.model),
        builder_(NewResponseId("resp_"), UnixSecondsNow(), req.completion.model, req.echo) {}

  ~ResponsesSession() override {
    if (stream_counted_) metrics_.StreamEnded();
  }

  void OnStart(const GenerationStart& start) override {
    std::lock_guard<std::mutex> lock(mu_);
    timer_.Started(start.model);
    clamped_ = start.max_tokens_clamped;
    StartLocked(start.model);
  }

  void OnDelta(GenerationDelta delta) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    StartLocked("");
    // A delta with text but no token count (a backend that does not count) is one token.
    if (delta.tokens > 0 || !delta.text.empty()) timer_.Tokens(std::max<int32_t>(delta.tokens, 1));
    Send(builder_.Delta(delta));
  }

  void OnEnd(const GenerationEnd& end) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    StartLocked("");
    finished_ = true;
    timer_.Finished(end.usage, end.finish_reason);
    NoteForLog(end.usage, std::string(FinishReasonName(end.finish_reason)), "");
    Send(builder_.Finish(end));
    if (stream_) {
      sse_->Finish();
      return;
    }
    http::Response response = http::Response::Json(200, builder_.ResponseJson());
    AddWarning(response.headers);
    AddClampedHeader(end.usage.max_tokens_clamped, response.headers);
    exchange_->Respond(std::move(response));
  }

  void OnError(const absl::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    const ApiError error = ResponsesError(status);
    metrics_.RecordGenerationError(error.type);
    timer_.Failed(error.http_status);
    NoteForLog(Usage{}, "error", error.type);
    if (!started_ || !stream_) {
      http::Response response = ApiErrorResponse(error);
      AddWarning(response.headers);
      exchange_->Respond(std::move(response));
      return;
    }
    // Headers are out: the failure becomes response.failed, then the stream ends.
    Send(builder_.Fail(error));
    sse_->Finish();
  }

 private:
  // The request's log line (router/api/access_log.h): what only the generation knows.
  void NoteForLog(const Usage& usage, const std::string& finish, const std::string& error_type) {
    exchange_->Note("model", timer_.model());
    exchange_->Note("finish", finish);
    if (!error_type.empty()) exchange_->Note("error", error_type);
    exchange_->Note("prompt_tokens", std::to_string(usage.prompt_tokens));
    exchange_->Note("cached_tokens", std::to_string(usage.cached_tokens));
    exchange_->Note("completion_tokens", std::to_string(usage.completion_tokens));
    if (timer_.ttft_seconds() >= 0) {
      exchange_->Note("ttft_ms", absl::StrFormat("%.1f", timer_.ttft_seconds() * 1e3));
    }
  }

  void AddWarning(std::vector<http::HeaderField>& headers) const {
    if (!warning_.empty()) headers.push_back(http::HeaderField{kWarningHeader, warning_});
  }

  void Send(const std::vector<ResponseEvent>& events) {
    if (!stream_) return;
    for (const ResponseEvent& e : events) sse_->SendEvent(e.type, e.data);
  }

  void StartLocked(const std::string& model) {
    if (started_) return;
    started_ = true;
    if (!model.empty()) builder_.SetModel(model);
    std::vector<ResponseEvent> events = builder_.Start();
    if (!stream_) return;
    metrics_.StreamStarted();
    stream_counted_ = true;
    std::vector<http::HeaderField> headers;
    AddWarning(headers);
    AddClampedHeader(clamped_, headers);
    sse_ = exchange_->StartSse(std::move(headers));
    Send(events);
  }

  const std::shared_ptr<http::HttpExchange> exchange_;
  ApiMetrics& metrics_;
  const bool stream_;
  const std::string warning_;
  GenerationTimer timer_;  // under mu_

  bool started_ = false;
  bool stream_counted_ = false;
  ResponseBuilder builder_;
  std::shared_ptr<http::SseStream> sse_;
};

}  // namespace

void HandleResponses(std::shared_ptr<http::HttpExchange> exchange, CompletionBackend& backend,
                     ApiMetrics& metrics) {
  const http::Request& http_request = exchange->request();
  absl::StatusOr<ResponsesRequest> parsed = ParseResponsesRequest(http_request.body);
  if (!parsed.ok()) {
    exchange->Respond(ApiErrorResponse(ApiErrorFromStatus(parsed.status())));
    return;
  }
  CountIgnoredTools(parsed->ignored_tool_types);
  parsed->completion.request_id = http_request.request_id;
  parsed->completion.authorization = std::string(http_request.Header("Authorization"));
  auto session = std::make_shared<ResponsesSession>(exchange, *parsed, metrics);
  std::weak_ptr<ResponsesSession> weak = session;
  exchange->OnClientGone([weak] {
    if (auto s = weak.lock()) s->CancelForClient();
  });
  session->AttachHandle(backend.Generate(parsed->completion, session));
}

void WriteResponsesMetrics(PrometheusText& out) {
  for (size_t i = 0; i < kKnownToolTypes.size(); ++i) {
    out.Counter("deltaserve_router_responses_ignored_tools_total",
                "Tools in /v1/responses requests that were ignored because their type is not "
                "\"function\" (web_search, local_shell, ...), by type.",
                {{"type", std::string(kKnownToolTypes[i])}},
                static_cast<double>(g_ignored_tools[i].load(std::memory_order_relaxed)));
  }
}

}  // namespace deltaserve::router::api
