#include "router/api/completion_endpoint.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "router/api/api_error.h"
#include "router/api/internal/cancellable_session.h"
#include "router/api/openai_response.h"
#include "router/api/request_parser.h"

namespace deltaserve::router::api {
namespace {

// One request's generation seen from the HTTP side: turns backend events into the answer.
class CompletionSession : public internal::CancellableSession {
 public:
  CompletionSession(std::shared_ptr<http::HttpExchange> exchange, const CompletionRequest& req,
                    ApiMetrics& metrics)
      : CancellableSession(metrics),
        exchange_(std::move(exchange)),
        metrics_(metrics),
        endpoint_(req.endpoint),
        stream_(req.stream),
        include_usage_(req.include_usage),
        with_logprobs_(req.logprobs),
        n_(std::max(1, req.n)),
        timer_(metrics,
               req.endpoint == Endpoint::kChatCompletions ? "chat_completions" : "completions",
               req.model) {
    meta_.id = NewResponseId(endpoint_ == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-");
    meta_.created = UnixSecondsNow();
    meta_.model = req.model;
    choices_.resize(static_cast<size_t>(n_));
    for (CompletionChoice& c : choices_) c.with_logprobs = with_logprobs_;
  }

  ~CompletionSession() override {
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
    StartLocked(meta_.model);
    // A delta with text but no token count (a backend that does not count) is one token.
    if (delta.tokens > 0 || !delta.text.empty()) timer_.Tokens(std::max<int32_t>(delta.tokens, 1));
    const int index = delta.choice;
    if (index < 0 || index >= n_) return;
    if (!stream_) {
      CompletionChoice& choice = choices_[index];
      choice.text += delta.text;
      choice.reasoning_content += delta.reasoning_text;
      for (auto& lp : delta.logprobs) choice.logprobs.push_back(std::move(lp));
      for (ToolCallDelta& call : delta.tool_calls) AddToolCall(choice, std::move(call));
      return;
    }
    if (endpoint_ == Endpoint::kChatCompletions) {
      if (!delta.text.empty() || !delta.reasoning_text.empty() || !delta.logprobs.empty()) {
        sse_->Send(chat_->DeltaChunk(delta.text, delta.reasoning_text, delta.logprobs, index));
      }
      for (const ToolCallDelta& call : delta.tool_calls) {
        sse_->Send(chat_->ToolCallChunk(call, index));
      }
    } else if (!delta.text.empty() || !delta.logprobs.empty()) {
      sse_->Send(text_->DeltaChunk(delta.text, delta.logprobs, index));
    }
  }

  void OnEnd(const GenerationEnd& end) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    StartLocked(meta_.model);
    finished_ = true;
    timer_.Finished(end.usage, end.finish_reason);
    NoteForLog(end.usage, std::string(FinishReasonName(end.finish_reason)), "");
    // Each choice's own end (n > 1), else the one in `end`.
    auto choice_end = [&end](int i) {
      return static_cast<size_t>(i) < end.choices.size()
                 ? end.choices[i]
                 : ChoiceEnd{end.finish_reason, end.content_null_when_empty};
    };
    if (!stream_) {
      for (int i = 0; i < n_; ++i) {
        const ChoiceEnd e = choice_end(i);
        choices_[i].finish_reason = e.finish_reason;
        choices_[i].content_null = e.content_null_when_empty;
      }
      std::string body = endpoint_ == Endpoint::kChatCompletions
                             ? ChatCompletionJson(meta_, choices_, end.usage)
                             : TextCompletionJson(meta_, choices_, end.usage);
      http::Response response = http::Response::Json(200, std::move(body));
      AddClampedHeader(end.usage.max_tokens_clamped, response.headers);
      exchange_->Respond(std::move(response));
      return;
    }
    for (int i = 0; i < n_; ++i) {
      sse_->Send(endpoint_ == Endpoint::kChatCompletions
                     ? chat_->FinishChunk(choice_end(i).finish_reason, i)
                     : text_->FinishChunk(choice_end(i).finish_reason, i));
    }
    // One usage chunk for the whole request: the prompt once, the choices' completions summed.
    if (include_usage_) {
      sse_->Send(endpoint_ == Endpoint::kChatCompletions ? chat_->UsageChunk(end.usage)
                                                         : text_->UsageChunk(end.usage));
    }
    sse_->Send(kSseDone);
    sse_->Finish();
  }

  void OnError(const absl::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    ApiError error = ApiErrorFromStatus(status.ok() ? absl::InternalError("no error") : status);
    metrics_.RecordGenerationError(error.type);
    timer_.Failed(error.http_status);
    NoteForLog(Usage{}, "error", error.type);
    if (!started_ || !stream_) {
      exchange_->Respond(ApiErrorResponse(error));
      return;
    }
    // Headers are out: the error becomes an event, then the stream ends as usual.
    sse_->Send(ApiErrorJson(error));
    sse_->Send(kSseDone);
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

  // A non-streamed answer's calls: a first piece opens a call, later pieces extend its arguments.
  static void AddToolCall(CompletionChoice& choice, ToolCallDelta call) {
    if (call.index < 0) return;
    const size_t index = static_cast<size_t>(call.index);
    if (choice.tool_calls.size() <= index) choice.tool_calls.resize(index + 1);
    ToolCall& out = choice.tool_calls[index];
    if (!call.id.empty()) out.id = std::move(call.id);
    if (!call.name.empty()) out.name = std::move(call.name);
    out.arguments += call.arguments;
  }

  void StartLocked(const std::string& model) {
    if (started_) return;
    started_ = true;
    if (!model.empty()) meta_.model = model;
    if (!stream_) return;
    metrics_.StreamStarted();
    stream_counted_ = true;
    std::vector<http::HeaderField> headers;
    AddClampedHeader(clamped_, headers);
    sse_ = exchange_->StartSse(std::move(headers));
    if (endpoint_ == Endpoint::kChatCompletions) {
      chat_.emplace(meta_, include_usage_, with_logprobs_);
      for (int i = 0; i < n_; ++i) sse_->Send(chat_->RoleChunk(i));
    } else {
      text_.emplace(meta_, include_usage_, with_logprobs_);
    }
  }

  const std::shared_ptr<http::HttpExchange> exchange_;
  ApiMetrics& metrics_;
  const Endpoint endpoint_;
  const bool stream_;
  const bool include_usage_;
  const bool with_logprobs_;
  const int n_;  // choices
  GenerationTimer timer_;  // under mu_

  bool started_ = false;
  bool stream_counted_ = false;
  ResponseMeta meta_;
  std::vector<CompletionChoice> choices_;  // by index; non-streamed answers
  std::shared_ptr<http::SseStream> sse_;
  std::optional<ChatChunkWriter> chat_;
  std::optional<TextChunkWriter> text_;
};

}  // namespace

void HandleCompletion(Endpoint endpoint, std::shared_ptr<http::HttpExchange> exchange,
                      CompletionBackend& backend, ApiMetrics& metrics) {
  const http::Request& http_request = exchange->request();
  absl::StatusOr<CompletionRequest> parsed = endpoint == Endpoint::kChatCompletions
                                                 ? ParseChatCompletionRequest(http_request.body)
                                                 : ParseCompletionRequest(http_request.body);
  if (!parsed.ok()) {
    exchange->Respond(ApiErrorResponse(ApiErrorFromStatus(parsed.status())));
    return;
  }
  parsed->request_id = http_request.request_id;
  // Shares the exchange's body (no copy); the exchange lives while the request does.
  parsed->raw_body = std::shared_ptr<const std::string>(exchange, &http_request.body);
  parsed->authorization = std::string(http_request.Header("Authorization"));
  auto session = std::make_shared<CompletionSession>(exchange, *parsed, metrics);
  std::weak_ptr<CompletionSession> weak = session;
  exchange->OnClientGone([weak] {
    if (auto s = weak.lock()) s->CancelForClient();
  });
  session->AttachHandle(backend.Generate(*parsed, session));
}

}  // namespace deltaserve::router::api
