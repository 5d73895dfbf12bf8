#include "router/api/responses_output.h"

#include <utility>

#include "router/api/openai_response.h"

namespace deltaserve::router::api {
namespace {

using json = nlohmann::ordered_json;

std::string Dump(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

json OutputTextPart(const std::string& text) {
  return json{{"type", "output_text"},
              {"annotations", json::array()},
              {"logprobs", json::array()},
              {"text", text}};
}

json ReasoningTextPart(const std::string& text) {
  return json{{"type", "reasoning_text"}, {"text", text}};
}

}  // namespace

json ResponsesUsageJson(const Usage& usage) {
  json out{{"input_tokens", usage.prompt_tokens},
           {"input_tokens_details", json{{"cached_tokens", usage.cached_tokens}}},
           {"output_tokens", usage.completion_tokens},
           {"output_tokens_details", json{{"reasoning_tokens", usage.reasoning_tokens}}},
           {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  if (usage.max_tokens_clamped) {
    out["max_tokens_clamped"] = json{{"from", usage.max_tokens_clamped->from},
                                     {"to", usage.max_tokens_clamped->to}};
  }
  return out;
}

ResponseBuilder::ResponseBuilder(std::string id, int64_t created_at, std::string model, json echo)
    : id_(std::move(id)),
      created_at_(created_at),
      model_(std::move(model)),
      echo_(std::move(echo)) {}

json ResponseBuilder::ItemJson(const Item& item) {
  switch (item.kind) {
    case Kind::kReasoning:
      return json{{"id", item.id},
                  {"type", "reasoning"},
                  {"summary", json::array()},
                  {"content", json::array({ReasoningTextPart(item.text)})},
                  {"status", item.status}};
    case Kind::kMessage:
      return json{{"id", item.id},
                  {"type", "message"},
                  {"status", item.status},
                  {"role", "assistant"},
                  {"content", json::array({OutputTextPart(item.text)})}};
    case Kind::kFunctionCall:
      return json{{"id", item.id},           {"type", "function_call"}, {"status", item.status},
                  {"call_id", item.call_id}, {"name", item.name},       {"arguments", item.text}};
  }
  return json::object();
}

json ResponseBuilder::ResponseObject() const {
  json r = json::object();
  r["id"] = id_;
  r["object"] = "response";
  r["created_at"] = created_at_;
  r["status"] = status_;
  r["background"] = false;
  r["error"] = error_;
  r["incomplete_details"] =
      incomplete_reason_.empty() ? json(nullptr) : json{{"reason", incomplete_reason_}};
  json output = json::array();
  for (const Item& item : items_) output.push_back(ItemJson(item));
  for (auto it = echo_.begin(); it != echo_.end(); ++it) {
    if (it.key() == "user") r["usage"] = has_usage_ ? ResponsesUsageJson(usage_) : json(nullptr);
    r[it.key()] = it.value();
    if (it.key() == "max_output_tokens") {
      r["model"] = model_;
      r["output"] = std::move(output);
    }
  }
  // An echo without those keys (unit tests) still yields a complete object.
  if (!r.contains("model")) r["model"] = model_;
  if (!r.contains("output")) r["output"] = std::move(output);
  if (!r.contains("usage")) r["usage"] = has_usage_ ? ResponsesUsageJson(usage_) : json(nullptr);
  return r;
}

std::string ResponseBuilder::ResponseJson() const { return Dump(ResponseObject()); }

void ResponseBuilder::Emit(std::vector<ResponseEvent>& out, json event) {
  json e = json::object();
  const std::string type = event["type"].get<std::string>();
  e["type"] = type;
  e["sequence_number"] = sequence_++;
  for (auto it = event.begin(); it != event.end(); ++it) {
    if (it.key() != "type") e[it.key()] = std::move(it.value());
  }
  out.push_back(ResponseEvent{type, Dump(e)});
}

std::vector<ResponseEvent> ResponseBuilder::Start() {
  std::vector<ResponseEvent> out;
  Emit(out, json{{"type", "response.created"}, {"response", ResponseObject()}});
  Emit(out, json{{"type", "response.in_progress"}, {"response", ResponseObject()}});
  return out;
}

ResponseBuilder::Item& ResponseBuilder::Open(Kind kind, std::vector<ResponseEvent>& out,
                                             std::string call_id, std::string name) {
  if (open_ && items_.back().kind == kind && kind != Kind::kFunctionCall) return items_.back();
  CloseOpen("completed", out);
  Item item;
  item.kind = kind;
  item.id = NewResponseId(kind == Kind::kReasoning ? "rs_"
                          : kind == Kind::kMessage ? "msg_"
                                                   : "fc_");
  item.call_id = std::move(call_id);
  item.name = std::move(name);
  items_.push_back(std::move(item));
  open_ = true;
  const Item& added = items_.back();
  const size_t index = items_.size() - 1;
  // The added item has no content parts yet; content_part.added brings the (empty) one.
  json shown = ItemJson(added);
  if (kind != Kind::kFunctionCall) shown["content"] = json::array();
  Emit(out, json{{"type", "response.output_item.added"}, {"output_index", index}, {"item", shown}});
  if (kind != Kind::kFunctionCall) {
    Emit(out,
         json{{"type", "response.content_part.added"},
              {"item_id", added.id},
              {"output_index", index},
              {"content_index", 0},
              {"part", kind == Kind::kReasoning ? ReasoningTextPart("") : OutputTextPart("")}});
  }
  return items_.back();
}

void ResponseBuilder::CloseOpen(std::string_view status, std::vector<ResponseEvent>& out) {
  if (!open_) return;
  open_ = false;
  Item& item = items_.back();
  item.status = std::string(status);
  const size_t index = items_.size() - 1;
  switch (item.kind) {
    case Kind::kReasoning:
      Emit(out, json{{"type", "response.reasoning_text.done"},
                     {"item_id", item.id},
                     {"output_index", index},
                     {"content_index", 0},
                     {"text", item.text}});
      Emit(out, json{{"type", "response.content_part.done"},
                     {"item_id", item.id},
                     {"output_index", index},
                     {"content_index", 0},
                     {"part", ReasoningTextPart(item.text)}});
      break;
    case Kind::kMessage:
      Emit(out, json{{"type", "response.output_text.done"},
                     {"item_id", item.id},
                     {"output_index", index},
                     {"content_index", 0},
                     {"text", item.text},
                     {"logprobs", json::array()}});
      Emit(out, json{{"type", "response.content_part.done"},
                     {"item_id", item.id},
                     {"output_index", index},
                     {"content_index", 0},
                     {"part", OutputTextPart(item.text)}});
      break;
    case Kind::kFunctionCall:
      Emit(out, json{{"type", "response.function_call_arguments.done"},
                     {"item_id", item.id},
                     {"output_index", index},
                     {"name", item.name},
                     {"arguments", item.text}});
      break;
  }
  Emit(out, json{{"type", "response.output_item.done"},
                 {"output_index", index},
                 {"item", ItemJson(item)}});
}

std::vector<ResponseEvent> ResponseBuilder::Delta(const GenerationDelta& delta) {
  std::vector<ResponseEvent> out;
  if (!delta.reasoning_text.empty()) {
    Item& item = Open(Kind::kReasoning, out);
    item.text += delta.reasoning_text;
    Emit(out, json{{"type", "response.reasoning_text.delta"},
                   {"item_id", item.id},
                   {"output_index", items_.size() - 1},
                   {"content_index", 0},
                   {"delta", delta.reasoning_text}});
  }
  if (!delta.text.empty()) {
    Item& item = Open(Kind::kMessage, out);
    item.text += delta.text;
    Emit(out, json{{"type", "response.output_text.delta"},
                   {"item_id", item.id},
                   {"output_index", items_.size() - 1},
                   {"content_index", 0},
                   {"delta", delta.text},
                   {"logprobs", json::array()}});
  }
  for (const ToolCallDelta& call : delta.tool_calls) {
    if (call.index < 0) continue;
    size_t position;
    if (auto it = call_items_.find(call.index); it != call_items_.end()) {
      position = it->second;
    } else {
      Open(Kind::kFunctionCall, out, call.id.empty() ? NewResponseId("call_") : call.id, call.name);
      position = items_.size() - 1;
      call_items_[call.index] = position;
    }
    Item& item = items_[position];
    if (call.arguments.empty()) continue;
    item.text += call.arguments;
    // A piece for a call already closed (not a pattern the parser produces) only extends it.
    if (!open_ || position != items_.size() - 1) continue;
    Emit(out, json{{"type", "response.function_call_arguments.delta"},
                   {"item_id", item.id},
                   {"output_index", position},
                   {"delta", call.arguments}});
  }
  return out;
}

std::vector<ResponseEvent> ResponseBuilder::Finish(const GenerationEnd& end) {
  std::vector<ResponseEvent> out;
  bool answered = false;
  for (const Item& item : items_) answered = answered || item.kind != Kind::kReasoning;
  // An answer without text or calls still has its (empty) message, so output_text is "".
  if (!answered) Open(Kind::kMessage, out);
  const bool incomplete = end.finish_reason == FinishReason::kLength ||
                          end.finish_reason == FinishReason::kContentFilter;
  CloseOpen(incomplete ? "incomplete" : "completed", out);
  has_usage_ = true;
  usage_ = end.usage;
  if (incomplete) {
    status_ = "incomplete";
    incomplete_reason_ =
        end.finish_reason == FinishReason::kLength ? "max_output_tokens" : "content_filter";
  } else {
    status_ = "completed";
  }
  Emit(out, json{{"type", incomplete ? "response.incomplete" : "response.completed"},
                 {"response", ResponseObject()}});
  return out;
}

std::vector<ResponseEvent> ResponseBuilder::Fail(const ApiError& error) {
  std::vector<ResponseEvent> out;
  CloseOpen("incomplete", out);
  status_ = "failed";
  error_ = json{{"code", error.code.empty() ? error.type : error.code}, {"message", error.message}};
  Emit(out, json{{"type", "response.failed"}, {"response", ResponseObject()}});
  return out;
}

}  // namespace deltaserve::router::api
