// Fuzz target: untrusted POST /v1/messages and /v1/messages/count_tokens bodies through the
// Anthropic translation (router/api/anthropic_request.h), the chat template and the Anthropic
// answer writers (anthropic_response.h). The first byte picks the endpoint. Checks: the parser
// never crashes or hangs; a refusal is InvalidArgument with a message (the 400); an accepted
// request is a non-empty conversation of UTF-8 messages in chat's roles in which every tool
// message answers a call of an earlier assistant message, with tools and tool calls the router
// can re-read as JSON arrays, and the skipped server-tool types are header-safe; it renders
// through the Qwen template into UTF-8 (or is refused with InvalidArgument); and the message
// object and the streamed events built from its text are JSON objects.
// Seeds: tests/fuzz/seeds/anthropic_request/.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "common/json_reader.h"
#include "common/unicode.h"
#include "router/api/anthropic_request.h"
#include "router/api/anthropic_response.h"
#include "router/chat/qwen_chat_template.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace api = deltaserve::router::api;

void Check(bool ok, const char* what) {
  deltaserve::fuzz::Check(ok, "anthropic_request_fuzz", what);
}

bool IsJson(const std::string& text, bool array) {
  absl::StatusOr<nlohmann::ordered_json> doc =
      deltaserve::common::ReadOrderedJson(text, deltaserve::common::kNoJsonReadLimits);
  return doc.ok() && (array ? doc->is_array() : doc->is_object());
}

void CheckConversation(const api::CompletionRequest& c, const api::AnthropicParseNotes& notes) {
  Check(!c.messages.empty(), "a conversation has messages");
  Check(deltaserve::common::IsValidUtf8(c.model) && !c.model.empty(), "model is UTF-8");
  Check(!c.max_tokens || *c.max_tokens >= 1, "max_tokens >= 1");
  std::set<std::string> call_ids;
  for (const auto& m : c.messages) {
    Check(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool",
          "a chat role");
    Check(deltaserve::common::IsValidUtf8(m.content), "content is UTF-8");
    Check(deltaserve::common::IsValidUtf8(m.reasoning_content), "thinking is UTF-8");
    if (!m.tool_calls_json.empty()) {
      Check(m.role == "assistant", "only assistants call");
      absl::StatusOr<nlohmann::ordered_json> calls = deltaserve::common::ReadOrderedJson(
          m.tool_calls_json, deltaserve::common::kNoJsonReadLimits);
      Check(calls.ok() && calls->is_array(), "tool calls re-read as an array");
      for (const auto& call : *calls) {
        Check(call.contains("id") && call["id"].is_string(), "a call has an id");
        call_ids.insert(call["id"].get<std::string>());
      }
    }
    if (m.role == "tool") Check(call_ids.contains(m.tool_call_id), "results answer earlier calls");
  }
  if (!c.tools_json.empty()) Check(IsJson(c.tools_json, true), "tools re-read as an array");
  for (const std::string& t : notes.ignored_tool_types) {
    for (char ch : t) Check(ch >= 0x20 && ch < 0x7f, "skipped tool types are printable ASCII");
  }
}

void CheckAnswer(const api::CompletionRequest& c) {
  api::GenerationDelta d;
  d.reasoning_text = c.messages.front().reasoning_content;
  d.text = c.messages.back().content;  // any UTF-8, as a model might write
  d.tokens = 1;
  api::GenerationEnd end;
  api::ContentBlocks blocks;
  blocks.Add(d);
  const api::StopInfo stop = api::AnthropicStop(end, c.stop);
  Check(
      IsJson(api::AnthropicMessageJson("msg_x", c.model, blocks.blocks(), stop, end.usage), false),
      "the message is a JSON object");
  api::AnthropicStreamWriter w("msg_x", c.model, c.stop);
  auto events = w.Start(1);
  for (auto& e : w.Delta(d)) events.push_back(std::move(e));
  for (auto& e : w.End(end)) events.push_back(std::move(e));
  for (const auto& e : events) Check(IsJson(e.data, false), "events are JSON objects");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool count_tokens = data[0] & 1;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  api::AnthropicParseNotes notes;
  absl::StatusOr<api::CompletionRequest> r = count_tokens
                                                 ? api::ParseAnthropicCountTokensRequest(body)
                                                 : api::ParseAnthropicMessagesRequest(body, &notes);
  if (!r.ok()) {
    Check(r.status().code() == absl::StatusCode::kInvalidArgument, "refusals are 400s");
    Check(!r.status().message().empty(), "refusals say why");
    return 0;
  }
  CheckConversation(*r, notes);
  deltaserve::router::chat::ChatOptions options;
  options.tools_json = r->tools_json;
  if (r->enable_thinking) options.enable_thinking = *r->enable_thinking;
  absl::StatusOr<std::string> text = deltaserve::router::chat::RenderChat(r->messages, options);
  if (text.ok()) {
    Check(deltaserve::common::IsValidUtf8(*text), "rendered prompt is UTF-8");
  } else {
    Check(text.status().code() == absl::StatusCode::kInvalidArgument, "render refusals are 400s");
  }
  CheckAnswer(*r);
  return 0;
}
