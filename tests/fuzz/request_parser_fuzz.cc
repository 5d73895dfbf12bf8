// Fuzz target: untrusted HTTP request bodies through the router's OpenAI request parser, then
// the chat template. The first byte picks the endpoint (even: chat, odd: completions); the rest
// is the body. Checks: the parser never crashes or hangs; a refusal is InvalidArgument naming a
// field (or the body) — the 400 the router answers; an accepted request keeps every documented
// bound of completion_request.h (the rest of the router relies on them); an accepted chat
// request renders through the Qwen template (RenderChat) into valid UTF-8, or is refused with
// InvalidArgument (bad tools / tool_calls JSON), never anything else.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/unicode.h"
#include "router/api/api_error.h"
#include "router/api/request_parser.h"
#include "router/chat/qwen_chat_template.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using deltaserve::router::api::CompletionRequest;

void Check(bool ok, const char* what) { deltaserve::fuzz::Check(ok, "request_parser_fuzz", what); }

void CheckBounds(const CompletionRequest& r) {
  const auto& s = r.sampling;
  Check(!s.temperature || (*s.temperature >= 0 && *s.temperature <= 2), "temperature in [0, 2]");
  Check(!s.top_p || (*s.top_p > 0 && *s.top_p <= 1), "top_p in (0, 1]");
  Check(!s.top_k || *s.top_k >= -1, "top_k >= -1");
  Check(!s.min_p || (*s.min_p >= 0 && *s.min_p <= 1), "min_p in [0, 1]");
  Check(s.presence_penalty >= -2 && s.presence_penalty <= 2, "presence_penalty in [-2, 2]");
  Check(s.frequency_penalty >= -2 && s.frequency_penalty <= 2, "frequency_penalty in [-2, 2]");
  Check(!s.repetition_penalty || (*s.repetition_penalty > 0 && *s.repetition_penalty <= 2),
        "repetition_penalty in (0, 2]");
  for (const auto& [id, bias] : s.logit_bias) {
    Check(bias >= -100 && bias <= 100, "logit_bias in [-100, 100]");
  }
  Check(!r.max_tokens || *r.max_tokens >= 1, "max_tokens >= 1");
  Check(r.stop.size() <= 4, "at most 4 stops");
  for (const std::string& stop : r.stop) {
    Check(!stop.empty(), "no empty stop");
    Check(deltaserve::common::IsValidUtf8(stop), "stop is UTF-8");
  }
  Check(r.top_logprobs >= 0 && r.top_logprobs <= 20, "top_logprobs in [0, 20]");
  Check(deltaserve::common::IsValidUtf8(r.model), "model is UTF-8");
  if (r.endpoint == deltaserve::router::api::Endpoint::kChatCompletions) {
    Check(!r.messages.empty(), "chat has messages");
    for (const auto& m : r.messages) {
      Check(deltaserve::common::IsValidUtf8(m.content), "content is UTF-8");
      Check(deltaserve::common::IsValidUtf8(m.role), "role is UTF-8");
    }
  } else {
    Check(r.prompt_is_tokens || deltaserve::common::IsValidUtf8(r.prompt), "prompt is UTF-8");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) == 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<CompletionRequest> r =
      chat ? deltaserve::router::api::ParseChatCompletionRequest(body)
           : deltaserve::router::api::ParseCompletionRequest(body);
  if (!r.ok()) {
    Check(r.status().code() == absl::StatusCode::kInvalidArgument, "refusals are 400s");
    Check(!r.status().message().empty(), "refusals say why");
    return 0;
  }
  CheckBounds(*r);
  if (chat) {
    deltaserve::router::chat::ChatOptions options;
    options.tools_json = r->tools_json;
    if (r->enable_thinking) options.enable_thinking = *r->enable_thinking;
    absl::StatusOr<std::string> text = deltaserve::router::chat::RenderChat(r->messages, options);
    if (text.ok()) {
      Check(deltaserve::common::IsValidUtf8(*text), "rendered prompt is UTF-8");
    } else {
      Check(text.status().code() == absl::StatusCode::kInvalidArgument,
            "render refusals are 400s");
    }
  }
  return 0;
}
