#include "router/api/anthropic_endpoint.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "router/api/anthropic_request.h"
#include "router/api/anthropic_response.h"
#include "router/api/api_error.h"
#include "router/api/internal/cancellable_session.h"
#include "router/api/tokenize_endpoint.h"

namespace deltaserve::router::api {
namespace {

// Server-tool families counted by name; the versioned types (web_search_20250305) map onto them by
// prefix and anything else is "other", so a client cannot grow the label set.
constexpr std::array<std::string_view, 8> kToolFamilies = {
    "web_search", "web_fetch", "bash", "text_editor", "code_execution", "computer", "memory",
    "other"};
std::array<std::atomic<uint64_t>, kToolFamilies.size()> g_ignored_tools{};
std::array<std::atomic<bool>, kToolFamilies.size()> g_ignored_logged{};

void CountIgnoredTools(const std::vector<std::string>& types) {
  for (const std::string& type : types) {
    size_t k = kToolFamilies.size() - 1;
    for (size_t i = 0; i + 1 < kToolFamilies.size(); ++i) {
      if (std::string_view(type).starts_with(kToolFamilies[i])) k = i;
    }
    g_ignored_tools[k].fetch_add(1, std::memory_order_relaxed);
    // Logged once per family: a degraded mode logs its first occurrence, not every request.
    if (!g_ignored_logged[k].exchange(true)) {
      std::fprintf(stderr,
                   "anthropic: skipping server tools of type '%s' (they run on Anthropic's side; "
                   "counted in deltaserve_router_anthropic_ignored_tools_total)\n",
                   type.c_str());
    }
  }
}

// The X-DeltaServe-Warning header's value for skipped server tools ("" when none). The parser
// kept only header-safe, distinct types (internal/ignored_tools.h); the list is still capped.
std::string IgnoredToolsWarning(const std::vector<std::string>& types) {
  if (types.empty()) return "";
  std::string names;
  for (const std::string& t : types) {
    if (names.size() > 200) break;  // a header, not a list of everything
    absl::StrAppend(&names, names.empty() ? "" : ", ", t);
  }
  return absl::StrCat("server tools of type ", names,
                      " are not supported by DeltaServe and were ignored");
}

// One /v1/messages generation seen from the HTTP side.
class MessagesSession : public internal::CancellableSession {
 public:
  MessagesSession(std::shared_ptr<http::HttpExchange> exchange, const CompletionRequest& req,
                  ApiMetrics& metrics, std::string warning, bool thinking_omitted)
      : CancellableSession(metrics),
        exchange_(std::move(exchange)),
        warning_(std::move(warning)),
        thinking_omitted_(thinking_omitted),
        metrics_(metrics),
        stream_(req.stream),
        stops_(req.stop),
        id_(NewMessageId()),
        model_(req.model),
        timer_(metrics, "messages", req.model) {}

  ~MessagesSession() override {
    if (stream_counted_) metrics_.StreamEnded();
  }

  void OnStart(const GenerationStart& start) override {
    std::lock_guard<std::mutex> lock(mu_);
    timer_.Started(start.model);
    clamped_ = start.max_tokens_clamped;
    StartLocked(start.model, start.prompt_tokens);
  }

  void OnDelta(GenerationDelta delta) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    StartLocked(model_, 0);
    if (delta.tokens > 0 || !delta.text.empty()) timer_.Tokens(std::max<int32_t>(delta.tokens, 1));
    if (!stream_) {
      blocks_.Add(delta);
      return;
    }
    Send(writer_->Delta(delta));
  }

  void OnEnd(const GenerationEnd& end) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    StartLocked(model_, end.usage.prompt_tokens);
    finished_ = true;
    timer_.Finished(end.usage, end.finish_reason);
    if (!stream_) {
      http::Response r = http::Response::Json(
          200, AnthropicMessageJson(id_, model_, blocks_.blocks(), AnthropicStop(end, stops_),
                                    end.usage, thinking_omitted_));
      if (!warning_.empty()) r.headers.push_back({"X-DeltaServe-Warning", warning_});
      AddClampedHeader(end.usage.max_tokens_clamped, r.headers);
      exchange_->Respond(std::move(r));
      return;
    }
    Send(writer_->End(end));
    sse_->Finish();
  }

  void OnError(const absl::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    ApiError error = ApiErrorFromStatus(status.ok() ? absl::InternalError("no error") : status);
    metrics_.RecordGenerationError(error.type);
    timer_.Failed(error.http_status);
    if (!started_ || !stream_) {
      exchange_->Respond(AnthropicErrorResponse(error));
      return;
    }
    // Headers are out: Anthropic's `error` event, and the stream ends.
    const SseEvent event = AnthropicStreamWriter::Error(error);
    sse_->SendEvent(event.name, event.data);
    sse_->Finish();
  }

 private:
  void Send(const std::vector<SseEvent>& events) {
    for (const SseEvent& e : events) sse_->SendEvent(e.name, e.data);
  }

  void StartLocked(const std::string& model, int64_t prompt_tokens) {
    if (started_) return;
    started_ = true;
    if (!model.empty()) model_ = model;
    if (!stream_) return;
    metrics_.StreamStarted();
    stream_counted_ = true;
    std::vector<http::HeaderField> headers;
    if (!warning_.empty()) headers.push_back({"X-DeltaServe-Warning", warning_});
    AddClampedHeader(clamped_, headers);
    sse_ = exchange_->StartSse(std::move(headers));
    writer_.emplace(id_, model_, stops_, thinking_omitted_);
    Send(writer_->Start(prompt_tokens));
  }

  const std::shared_ptr<http::HttpExchange> exchange_;
  const std::string warning_;  // X-DeltaServe-Warning, "" for none
  const bool thinking_omitted_;  // thinking.display "omitted"
  ApiMetrics& metrics_;
  const bool stream_;
  const std::vector<std::string> stops_;
  const std::string id_;
  std::string model_;
  GenerationTimer timer_;  // under mu_ (deltaserve_router_requests_total and latencies)

  bool started_ = false;
  bool stream_counted_ = false;
  ContentBlocks blocks_;
  std::shared_ptr<http::SseStream> sse_;
  std::optional<AnthropicStreamWriter> writer_;
};

}  // namespace

void WriteAnthropicMetrics(PrometheusText& out) {
  for (size_t i = 0; i < kToolFamilies.size(); ++i) {
    out.Counter("deltaserve_router_anthropic_ignored_tools_total",
                "Anthropic server tools (web_search_*, bash_*, ...) in /v1/messages requests that "
                "were skipped because they run on Anthropic's side, by family.",
                {{"type", std::string(kToolFamilies[i])}},
                static_cast<double>(g_ignored_tools[i].load(std::memory_order_relaxed)));
  }
}

std::string AnthropicAuthorization(const http::Request& request) {
  std::string_view authorization = request.Header("authorization");
  if (!authorization.empty()) return std::string(authorization);
  std::string_view key = request.Header("x-api-key");
  return key.empty() ? std::string() : absl::StrCat("Bearer ", std::string(key));
}

void HandleAnthropicMessages(std::shared_ptr<http::HttpExchange> exchange,
                             CompletionBackend& backend, ApiMetrics& metrics) {
  const http::Request& http_request = exchange->request();
  AnthropicParseNotes notes;
  absl::StatusOr<CompletionRequest> parsed =
      ParseAnthropicMessagesRequest(http_request.body, &notes);
  if (!parsed.ok()) {
    exchange->Respond(AnthropicErrorResponse(ApiErrorFromStatus(parsed.status())));
    return;
  }
  CountIgnoredTools(notes.ignored_tool_types);
  parsed->request_id = http_request.request_id;
  // Shares the exchange's body (no copy); the exchange lives while the request does.
  parsed->raw_body = std::shared_ptr<const std::string>(exchange, &http_request.body);
  parsed->authorization = AnthropicAuthorization(http_request);
  auto session = std::make_shared<MessagesSession>(
      exchange, *parsed, metrics, IgnoredToolsWarning(notes.ignored_tool_types),
      notes.thinking_omitted);
  std::weak_ptr<MessagesSession> weak = session;
  exchange->OnClientGone([weak] {
    if (auto s = weak.lock()) s->CancelForClient();
  });
  session->AttachHandle(backend.Generate(*parsed, session));
}

void HandleAnthropicCountTokens(std::shared_ptr<http::HttpExchange> exchange,
                                const PromptTokenizer* tokenizer, const ModelListGate* gate) {
  const http::Request& http_request = exchange->request();
  auto fail = [&](const absl::Status& status) {
    exchange->Respond(AnthropicErrorResponse(ApiErrorFromStatus(status)));
  };
  absl::StatusOr<CompletionRequest> parsed = ParseAnthropicCountTokensRequest(http_request.body);
  if (!parsed.ok()) return fail(parsed.status());
  if (absl::Status s = CheckModelAccess(gate, AnthropicAuthorization(http_request), parsed->model);
      !s.ok()) {
    return fail(s);
  }
  if (tokenizer == nullptr) return fail(absl::UnavailableError("token counting is not available"));
  absl::StatusOr<TokenizedPrompt> tokens = tokenizer->Tokenize(*parsed);
  if (!tokens.ok()) return fail(tokens.status());
  exchange->Respond(http::Response::Json(
      200, absl::StrCat(R"({"input_tokens":)", tokens->token_ids.size(), "}")));
}

}  // namespace deltaserve::router::api
