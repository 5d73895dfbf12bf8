// Fuzz target: untrusted POST /v1/responses bodies through the Responses translation
// (router/api/responses_request.h), the chat template and the response builder. Checks: the
// parser never crashes or hangs; a refusal is InvalidArgument with a message (the 400 the router
// answers); an accepted request has a non-empty conversation of UTF-8 messages in chat's roles,
// every tool message answers a call of an earlier assistant message, its tools and tool calls are
// JSON the router can re-read, and the warning header names only header-safe characters; it
// renders through the Qwen template (or is refused with InvalidArgument); and a response built
// from its text, streamed and not, is valid JSON. Seeds: tests/fuzz/seeds/responses_request/.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "common/json_reader.h"
#include "common/unicode.h"
#include "router/api/responses_output.h"
#include "router/api/responses_request.h"
#include "router/chat/qwen_chat_template.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using deltaserve::router::api::ResponsesRequest;

void Check(bool ok, const char* what) {
  deltaserve::fuzz::Check(ok, "responses_request_fuzz", what);
}

bool IsJsonArray(const std::string& text) {
  absl::StatusOr<nlohmann::ordered_json> doc =
      deltaserve::common::ReadOrderedJson(text, deltaserve::common::kNoJsonReadLimits);
  return doc.ok() && doc->is_array();
}

void CheckConversation(const ResponsesRequest& r) {
  const auto& c = r.completion;
  Check(!c.messages.empty(), "a conversation has messages");
  Check(deltaserve::common::IsValidUtf8(c.model) && !c.model.empty(), "model is UTF-8");
  Check(!c.max_tokens || *c.max_tokens >= 1, "max_output_tokens >= 1");
  std::set<std::string> call_ids;
  for (const auto& m : c.messages) {
    Check(m.role == "system" || m.role == "developer" || m.role == "user" ||
              m.role == "assistant" || m.role == "tool",
          "a chat role");
    Check(deltaserve::common::IsValidUtf8(m.content), "content is UTF-8");
    Check(deltaserve::common::IsValidUtf8(m.reasoning_content), "reasoning is UTF-8");
    if (!m.tool_calls_json.empty()) {
      Check(m.role == "assistant", "only assistants call");
      absl::StatusOr<nlohmann::ordered_json> calls = deltaserve::common::ReadOrderedJson(
          m.tool_calls_json, deltaserve::common::kNoJsonReadLimits);
      Check(calls.ok() && calls->is_array(), "tool calls re-read as an array");
      for (const auto& call : *calls) call_ids.insert(call["id"].get<std::string>());
    }
    if (m.role == "tool") Check(call_ids.contains(m.tool_call_id), "outputs answer earlier calls");
  }
  if (!c.tools_json.empty()) Check(IsJsonArray(c.tools_json), "tools re-read as an array");
  for (char ch : deltaserve::router::api::IgnoredToolsWarning(r.ignored_tool_types)) {
    Check(ch >= 0x20 && ch < 0x7f, "the warning header is printable ASCII");
  }
}

void CheckOutput(const ResponsesRequest& r) {
  using deltaserve::router::api::GenerationDelta;
  using deltaserve::router::api::GenerationEnd;
  using deltaserve::router::api::ResponseBuilder;
  ResponseBuilder b("resp_x", 0, r.completion.model, r.echo);
  GenerationDelta d;
  d.reasoning_text = r.completion.messages.front().reasoning_content;
  d.text = r.completion.messages.back().content;  // any UTF-8, as a model might write
  auto events = b.Start();
  for (auto& e : b.Delta(d)) events.push_back(std::move(e));
  for (auto& e : b.Finish(GenerationEnd{})) events.push_back(std::move(e));
  for (const auto& e : events) {
    absl::StatusOr<nlohmann::ordered_json> j =
        deltaserve::common::ReadOrderedJson(e.data, deltaserve::common::kNoJsonReadLimits);
    Check(j.ok() && j->is_object(), "events are JSON objects");
  }
  absl::StatusOr<nlohmann::ordered_json> whole =
      deltaserve::common::ReadOrderedJson(b.ResponseJson(), deltaserve::common::kNoJsonReadLimits);
  Check(whole.ok() && whole->is_object(), "the response is a JSON object");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ResponsesRequest> r = deltaserve::router::api::ParseResponsesRequest(body);
  if (!r.ok()) {
    Check(r.status().code() == absl::StatusCode::kInvalidArgument, "refusals are 400s");
    Check(!r.status().message().empty(), "refusals say why");
    return 0;
  }
  CheckConversation(*r);
  deltaserve::router::chat::ChatOptions options;
  options.tools_json = r->completion.tools_json;
  if (r->completion.enable_thinking) options.enable_thinking = *r->completion.enable_thinking;
  absl::StatusOr<std::string> text =
      deltaserve::router::chat::RenderChat(r->completion.messages, options);
  if (text.ok()) {
    Check(deltaserve::common::IsValidUtf8(*text), "rendered prompt is UTF-8");
  } else {
    Check(text.status().code() == absl::StatusCode::kInvalidArgument, "render refusals are 400s");
  }
  CheckOutput(*r);
  return 0;
}
