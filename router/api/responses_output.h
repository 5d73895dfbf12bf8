#pragma once
// The answer of POST /v1/responses: a `response` object whose output items (reasoning, message,
// function_call) are built from a generation's deltas, and, when streamed, the `response.*`
// events that build the same object step by step (each with its sequence_number, sent as
// "event: <type>" + "data: <json>"). One builder serves both, so a streamed answer accumulated
// by a client equals the object a non-streamed one returns. Shapes follow the openai SDK's types
// (openai.types.responses, 1.109.1); docs/responses_api.md lists them.
//
//   ResponseBuilder b(NewResponseId("resp_"), UnixSecondsNow(), model, request.echo);
//   events = b.Start();                // response.created, response.in_progress
//   events = b.Delta(delta);           // output_item.added, output_text.delta, ...
//   events = b.Finish(end);            // the open item's *.done events, response.completed
//   std::string body = b.ResponseJson();

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "router/api/api_error.h"
#include "router/api/completion_backend.h"

namespace deltaserve::router::api {

// One server-sent event of a Responses stream.
struct ResponseEvent {
  std::string type;  // "response.output_text.delta", ...
  std::string data;  // the event object as compact JSON (its "type" repeats `type`)
};

class ResponseBuilder {
 public:
  // `echo`: ResponsesRequest::echo, the request fields the response object repeats.
  ResponseBuilder(std::string id, int64_t created_at, std::string model,
                  nlohmann::ordered_json echo);

  // The model that answers (after aliases); before Start().
  void SetModel(std::string model) { model_ = std::move(model); }

  std::vector<ResponseEvent> Start();
  // Reasoning text, then text, then tool-call pieces (the order GenerationDelta defines). A kind
  // of output other than the open item's closes that item and opens a new one.
  std::vector<ResponseEvent> Delta(const GenerationDelta& delta);
  // Closes the open item; status "incomplete" (incomplete_details.reason "max_output_tokens")
  // when the generation hit its token limit, else "completed". Ends with response.completed or
  // response.incomplete carrying the whole object.
  std::vector<ResponseEvent> Finish(const GenerationEnd& end);
  // A failure after Start(): response.failed with status "failed" and error {code, message}.
  std::vector<ResponseEvent> Fail(const ApiError& error);

  // The response object as it stands (the final one after Finish or Fail).
  std::string ResponseJson() const;

  const std::string& id() const { return id_; }

 private:
  enum class Kind { kReasoning, kMessage, kFunctionCall };
  struct Item {
    Kind kind;
    std::string id;
    std::string text;  // reasoning text, message text or call arguments
    std::string call_id, name;
    std::string status = "in_progress";
  };

  nlohmann::ordered_json ResponseObject() const;
  static nlohmann::ordered_json ItemJson(const Item& item);
  // The open item, if it is of `kind`; else closes the open one and opens a new one (announced
  // by output_item.added and, for reasoning and messages, content_part.added).
  // A function_call item always opens anew, with its call_id and name.
  Item& Open(Kind kind, std::vector<ResponseEvent>& out, std::string call_id = "",
             std::string name = "");
  void CloseOpen(std::string_view status, std::vector<ResponseEvent>& out);
  void Emit(std::vector<ResponseEvent>& out, nlohmann::ordered_json event);

  const std::string id_;
  const int64_t created_at_;
  std::string model_;
  const nlohmann::ordered_json echo_;

  std::vector<Item> items_;
  bool open_ = false;  // items_.back() is still receiving deltas
  // A tool call's index in the generation → its item in items_.
  std::map<int, size_t> call_items_;
  int64_t sequence_ = 0;
  std::string status_ = "in_progress";
  std::string incomplete_reason_;  // "" unless incomplete
  nlohmann::ordered_json error_;   // null unless failed
  bool has_usage_ = false;
  Usage usage_;
};

// {"input_tokens", "input_tokens_details":{"cached_tokens"}, "output_tokens",
//  "output_tokens_details":{"reasoning_tokens"}, "total_tokens"}. reasoning_tokens is 0: the
// worker does not report which generated tokens were reasoning (output_tokens counts them).
nlohmann::ordered_json ResponsesUsageJson(const Usage& usage);

}  // namespace deltaserve::router::api
