#include "router/api/anthropic_response.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/json_reader.h"
#include "router/api/internal/reasoning_fields.h"
#include "router/api/openai_response.h"

namespace deltaserve::router::api {
namespace {

// Ordered: a tool_use block's input keeps the model's key order.
using json = nlohmann::ordered_json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A tool call's arguments as the `input` object; anything that is not a JSON object (the tool-call
// parser only emits objects) becomes {}.
json InputOf(const std::string& arguments) {
  if (arguments.empty()) return json::object();
  absl::StatusOr<json> v = common::ReadOrderedJson(arguments, common::JsonReadLimits{});
  return v.ok() && v->is_object() ? std::move(*v) : json::object();
}

json UsageObject(const Usage& usage) {
  const int64_t cached = std::min(usage.cached_tokens, usage.prompt_tokens);
  json out = {{"input_tokens", usage.prompt_tokens - cached},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", cached},
              {"output_tokens", usage.completion_tokens}};
  if (usage.max_tokens_clamped) {
    out["max_tokens_clamped"] = {{"from", usage.max_tokens_clamped->from},
                                 {"to", usage.max_tokens_clamped->to}};
  }
  return out;
}

// The usage of a whole message and of the final message_delta: with the thinking tokens
// (output_tokens_details, which Anthropic sends only there).
json FinalUsageObject(const Usage& usage) {
  json out = UsageObject(usage);
  out["output_tokens_details"] = {{"thinking_tokens", usage.reasoning_tokens}};
  return out;
}

ContentBlock Block(ContentBlock::Type type) {
  ContentBlock b;
  b.type = type;
  return b;
}

json NullIfEmpty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

std::string_view AnthropicErrorType(int http_status) {
  switch (http_status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return http_status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string AnthropicErrorJson(const ApiError& error) {
  json body = {{"type", "error"},
               {"error",
                {{"type", std::string(AnthropicErrorType(error.http_status))},
                 {"message", error.message}}}};
  return Dump(body);
}

http::Response AnthropicErrorResponse(const ApiError& error) {
  http::Response r = http::Response::Json(error.http_status, AnthropicErrorJson(error));
  if (error.retry_after_seconds > 0) {
    r.headers.push_back({"Retry-After", std::to_string(error.retry_after_seconds)});
  }
  return r;
}

std::string NewMessageId() { return NewResponseId("msg_"); }

StopInfo AnthropicStop(const GenerationEnd& end, const std::vector<std::string>& stop_sequences) {
  switch (end.finish_reason) {
    case FinishReason::kLength:
      return {"max_tokens", ""};
    case FinishReason::kToolCalls:
      return {"tool_use", ""};
    default:
      break;
  }
  if (!end.matched_stop.empty() &&
      std::find(stop_sequences.begin(), stop_sequences.end(), end.matched_stop) !=
          stop_sequences.end()) {
    return {"stop_sequence", end.matched_stop};
  }
  return {"end_turn", ""};
}

std::string AnthropicUsageJson(const Usage& usage) { return Dump(UsageObject(usage)); }

void ContentBlocks::Add(const GenerationDelta& delta) {
  auto append = [this](ContentBlock::Type type, const std::string& text) {
    if (text.empty()) return;
    if (blocks_.empty() || blocks_.back().type != type) blocks_.push_back(Block(type));
    blocks_.back().text += text;
  };
  append(ContentBlock::Type::kThinking, delta.reasoning_text);
  append(ContentBlock::Type::kText, delta.text);
  for (const ToolCallDelta& call : delta.tool_calls) {
    auto it = std::find_if(blocks_.begin(), blocks_.end(), [&](const ContentBlock& b) {
      return b.type == ContentBlock::Type::kToolUse && b.call_index == call.index;
    });
    if (it == blocks_.end()) {
      ContentBlock b = Block(ContentBlock::Type::kToolUse);
      b.call_index = call.index;
      blocks_.push_back(std::move(b));
      it = blocks_.end() - 1;
    }
    if (!call.id.empty()) it->id = call.id;
    if (!call.name.empty()) it->name = call.name;
    it->arguments += call.arguments;
  }
}

std::string AnthropicMessageJson(std::string_view id, std::string_view model,
                                 const std::vector<ContentBlock>& blocks, const StopInfo& stop,
                                 const Usage& usage, bool thinking_omitted) {
  json content = json::array();
  for (const ContentBlock& b : blocks) {
    switch (b.type) {
      case ContentBlock::Type::kText:
        content.push_back({{"type", "text"}, {"text", b.text}});
        break;
      case ContentBlock::Type::kThinking:
        // No signature: the thinking is the model's own text, not Anthropic's encrypted form;
        // omitted, the text travels in the signature instead.
        if (thinking_omitted) {
          content.push_back({{"type", "thinking"},
                             {"thinking", ""},
                             {"signature", internal::ThinkingSignature(b.text)}});
        } else {
          content.push_back({{"type", "thinking"}, {"thinking", b.text}, {"signature", ""}});
        }
        break;
      case ContentBlock::Type::kToolUse:
        content.push_back({{"type", "tool_use"},
                           {"id", b.id},
                           {"name", b.name},
                           {"input", InputOf(b.arguments)}});
        break;
    }
  }
  json body = {{"id", std::string(id)},
               {"type", "message"},
               {"role", "assistant"},
               {"model", std::string(model)},
               {"content", std::move(content)},
               {"stop_reason", stop.reason},
               {"stop_sequence", NullIfEmpty(stop.sequence)},
               {"usage", FinalUsageObject(usage)}};
  return Dump(body);
}

AnthropicStreamWriter::AnthropicStreamWriter(std::string id, std::string model,
                                             std::vector<std::string> stops, bool thinking_omitted)
    : id_(std::move(id)),
      model_(std::move(model)),
      stops_(std::move(stops)),
      thinking_omitted_(thinking_omitted) {}

std::vector<SseEvent> AnthropicStreamWriter::Start(int64_t prompt_tokens) {
  Usage usage;
  usage.prompt_tokens = prompt_tokens;
  json message = {{"id", id_},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", model_},
                  {"content", json::array()},
                  {"stop_reason", nullptr},
                  {"stop_sequence", nullptr},
                  {"usage", UsageObject(usage)}};
  return {{"message_start", Dump({{"type", "message_start"}, {"message", std::move(message)}})},
          {"ping", R"({"type":"ping"})"}};
}

void AnthropicStreamWriter::Close(std::vector<SseEvent>& out) {
  if (!open_) return;
  open_ = false;
  if (thinking_omitted_ && type_ == ContentBlock::Type::kThinking) {
    out.push_back({"content_block_delta",
                   Dump({{"type", "content_block_delta"},
                         {"index", index_},
                         {"delta",
                          {{"type", "signature_delta"},
                           {"signature", internal::ThinkingSignature(omitted_thinking_)}}}})});
    omitted_thinking_.clear();
  }
  out.push_back({"content_block_stop", Dump({{"type", "content_block_stop"}, {"index", index_}})});
}

void AnthropicStreamWriter::Open(ContentBlock::Type type, std::vector<SseEvent>& out,
                                 const ToolCallDelta* call) {
  Close(out);
  open_ = true;
  type_ = type;
  ++index_;
  json block;
  switch (type) {
    case ContentBlock::Type::kText:
      block = {{"type", "text"}, {"text", ""}};
      break;
    case ContentBlock::Type::kThinking:
      block = {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
      break;
    case ContentBlock::Type::kToolUse:
      call_index_ = call->index;
      block = {{"type", "tool_use"},
               {"id", call->id},
               {"name", call->name},
               {"input", json::object()}};
      break;
  }
  out.push_back({"content_block_start", Dump({{"type", "content_block_start"},
                                              {"index", index_},
                                              {"content_block", std::move(block)}})});
}

std::vector<SseEvent> AnthropicStreamWriter::Delta(const GenerationDelta& delta) {
  std::vector<SseEvent> out;
  auto send = [&](ContentBlock::Type type, const char* delta_type, const char* field,
                  const std::string& text) {
    if (text.empty()) return;
    if (!open_ || type_ != type) Open(type, out, nullptr);
    if (thinking_omitted_ && type == ContentBlock::Type::kThinking) {
      omitted_thinking_ += text;  // sent as the block's signature when it closes
      return;
    }
    out.push_back(
        {"content_block_delta",
         Dump({{"type", "content_block_delta"},
               {"index", index_},
               {"delta", {{"type", delta_type}, {field, text}}}})});
  };
  send(ContentBlock::Type::kThinking, "thinking_delta", "thinking", delta.reasoning_text);
  send(ContentBlock::Type::kText, "text_delta", "text", delta.text);
  for (const ToolCallDelta& call : delta.tool_calls) {
    const bool same_call =
        open_ && type_ == ContentBlock::Type::kToolUse && call_index_ == call.index;
    if (!same_call) Open(ContentBlock::Type::kToolUse, out, &call);
    if (call.arguments.empty()) continue;
    out.push_back({"content_block_delta",
                   Dump({{"type", "content_block_delta"},
                         {"index", index_},
                         {"delta", {{"type", "input_json_delta"}, {"partial_json", call.arguments}}}})});
  }
  return out;
}

std::vector<SseEvent> AnthropicStreamWriter::End(const GenerationEnd& end) {
  std::vector<SseEvent> out;
  Close(out);
  const StopInfo stop = AnthropicStop(end, stops_);
  // Usage in message_delta is cumulative; input and cache counts are first known here.
  out.push_back({"message_delta",
                 Dump({{"type", "message_delta"},
                       {"delta",
                        {{"stop_reason", stop.reason}, {"stop_sequence", NullIfEmpty(stop.sequence)}}},
                       {"usage", FinalUsageObject(end.usage)}})});
  out.push_back({"message_stop", R"({"type":"message_stop"})"});
  return out;
}

SseEvent AnthropicStreamWriter::Error(const ApiError& error) {
  return {"error", AnthropicErrorJson(error)};
}

}  // namespace deltaserve::router::api
