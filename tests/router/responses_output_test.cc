// Unit tests of router/api/responses_output: the response object's items for reasoning, text and
// function calls, incomplete and failed answers, and the stream: sequence numbers 0, 1, 2, ...,
// every item opened before its deltas and closed once, and the events replayed the way the
// openai SDK accumulates them (openai/lib/streaming/responses/_responses.py, 1.109.1:
// output_item.added appends the item, content_part.added its part, *.delta extend it) equal the
// final object of response.completed and the object a non-streamed builder returns for the same
// output delivered at once.

#include "router/api/responses_output.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace deltaserve::router::api {
namespace {

using json = nlohmann::json;

GenerationDelta Text(std::string text, std::string reasoning = "") {
  GenerationDelta d;
  d.text = std::move(text);
  d.reasoning_text = std::move(reasoning);
  d.tokens = 1;
  return d;
}

GenerationDelta Call(int index, std::string id, std::string name, std::string args) {
  GenerationDelta d;
  d.tool_calls.push_back(ToolCallDelta{index, std::move(id), std::move(name), std::move(args)});
  return d;
}

GenerationEnd End(FinishReason reason) {
  GenerationEnd e;
  e.finish_reason = reason;
  e.usage.prompt_tokens = 20;
  e.usage.cached_tokens = 16;
  e.usage.completion_tokens = 9;
  e.usage.reasoning_tokens = 3;
  return e;
}

// The SDK's accumulation of a stream into a snapshot of response.output.
json Accumulate(const std::vector<json>& events) {
  json output = json::array();
  for (const json& e : events) {
    const std::string type = e["type"];
    if (type == "response.output_item.added") {
      output.push_back(e["item"]);
    } else if (type == "response.content_part.added") {
      output[e["output_index"].get<size_t>()]["content"].push_back(e["part"]);
    } else if (type == "response.output_text.delta" || type == "response.reasoning_text.delta") {
      json& part =
          output[e["output_index"].get<size_t>()]["content"][e["content_index"].get<size_t>()];
      part["text"] = part["text"].get<std::string>() + e["delta"].get<std::string>();
    } else if (type == "response.function_call_arguments.delta") {
      json& item = output[e["output_index"].get<size_t>()];
      item["arguments"] = item["arguments"].get<std::string>() + e["delta"].get<std::string>();
    } else if (type == "response.output_item.done") {
      output[e["output_index"].get<size_t>()]["status"] = e["item"]["status"];
    }
  }
  return output;
}

std::vector<json> Parse(const std::vector<ResponseEvent>& events) {
  std::vector<json> out;
  for (const ResponseEvent& e : events) {
    json j = json::parse(e.data);
    EXPECT_EQ(j["type"], e.type);
    out.push_back(std::move(j));
  }
  return out;
}

void Append(std::vector<ResponseEvent>& to, std::vector<ResponseEvent> more) {
  for (ResponseEvent& e : more) to.push_back(std::move(e));
}

// Item ids are random: compare everything else.
json WithoutIds(json output) {
  for (json& item : output) item.erase("id");
  return output;
}

TEST(ResponseBuilderTest, StreamAccumulatesToTheFinalObjectAndToTheNonStreamedOne) {
  const std::vector<GenerationDelta> deltas = {Text("", "Let me "),
                                               Text("", "think."),
                                               Text("Calling "),
                                               Text("now."),
                                               Call(0, "call_a", "get_weather", ""),
                                               Call(0, "", "", "{\"city\":"),
                                               Call(0, "", "", "\"Paris\"}"),
                                               Call(1, "call_b", "get_time", "{}")};
  ResponseBuilder streamed("resp_1", 1700000000, "m", json::object());
  std::vector<ResponseEvent> events = streamed.Start();
  for (const GenerationDelta& d : deltas) Append(events, streamed.Delta(d));
  Append(events, streamed.Finish(End(FinishReason::kToolCalls)));
  const std::vector<json> parsed = Parse(events);

  for (size_t i = 0; i < parsed.size(); ++i) EXPECT_EQ(parsed[i]["sequence_number"], i);
  EXPECT_EQ(parsed.front()["type"], "response.created");
  EXPECT_EQ(parsed.front()["response"]["status"], "in_progress");
  EXPECT_EQ(parsed[1]["type"], "response.in_progress");
  ASSERT_EQ(parsed.back()["type"], "response.completed");
  const json final_object = parsed.back()["response"];
  EXPECT_EQ(final_object, json::parse(streamed.ResponseJson()));
  EXPECT_EQ(Accumulate(parsed), final_object["output"]);

  // Opened and closed once each, in order.
  std::vector<std::string> types;
  for (const json& e : parsed) types.push_back(e["type"]);
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  EXPECT_EQ(types, want);

  const json& out = final_object["output"];
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[0]["content"][0]["text"], "Let me think.");
  EXPECT_EQ(out[1]["type"], "message");
  EXPECT_EQ(out[1]["content"][0]["text"], "Calling now.");
  EXPECT_EQ(out[2]["type"], "function_call");
  EXPECT_EQ(out[2]["call_id"], "call_a");
  EXPECT_EQ(out[2]["name"], "get_weather");
  EXPECT_EQ(out[2]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(out[3]["call_id"], "call_b");
  EXPECT_EQ(final_object["status"], "completed");
  EXPECT_EQ(final_object["incomplete_details"], nullptr);
  EXPECT_EQ(final_object["usage"],
            json::parse(R"({"input_tokens":20,"input_tokens_details":{"cached_tokens":16},
                "output_tokens":9,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":29})"));

  // The non-streamed path gets the parsed output in one delta (reasoning, text, calls).
  GenerationDelta whole = Text("Calling now.", "Let me think.");
  whole.tool_calls = {ToolCallDelta{0, "call_a", "get_weather", "{\"city\":\"Paris\"}"},
                      ToolCallDelta{1, "call_b", "get_time", "{}"}};
  ResponseBuilder at_once("resp_2", 1700000000, "m", json::object());
  at_once.Start();
  at_once.Delta(whole);
  at_once.Finish(End(FinishReason::kToolCalls));
  EXPECT_EQ(WithoutIds(json::parse(at_once.ResponseJson())["output"]), WithoutIds(out));
}

TEST(ResponseBuilderTest, LengthLimitIsIncompleteWithItsReason) {
  ResponseBuilder b("resp_1", 1, "m", json::object());
  b.Start();
  b.Delta(Text("cut sh"));
  const std::vector<json> events = Parse(b.Finish(End(FinishReason::kLength)));
  EXPECT_EQ(events.back()["type"], "response.incomplete");
  const json r = json::parse(b.ResponseJson());
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "cut sh");
}

TEST(ResponseBuilderTest, AnswerWithoutTextStillHasAnEmptyMessage) {
  ResponseBuilder b("resp_1", 1, "m", json::object());
  b.Start();
  b.Delta(Text("", "only thoughts"));
  b.Finish(End(FinishReason::kStop));
  const json r = json::parse(b.ResponseJson());
  ASSERT_EQ(r["output"].size(), 2u);
  EXPECT_EQ(r["output"][1]["type"], "message");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "");
}

TEST(ResponseBuilderTest, FailureAfterStartIsResponseFailed) {
  ResponseBuilder b("resp_1", 1, "m", json::object());
  b.Start();
  b.Delta(Text("partial"));
  ApiError error;
  error.type = "server_error";
  error.message = "worker lost";
  const std::vector<json> events = Parse(b.Fail(error));
  EXPECT_EQ(events.back()["type"], "response.failed");
  EXPECT_EQ(events.back()["response"]["status"], "failed");
  EXPECT_EQ(events.back()["response"]["error"]["code"], "server_error");
  EXPECT_EQ(events.back()["response"]["error"]["message"], "worker lost");
}

TEST(ResponseBuilderTest, EchoedFieldsKeepTheirPlaceAroundModelOutputAndUsage) {
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
  echo["instructions"] = "be brief";
  echo["max_output_tokens"] = 5;
  echo["tools"] = nlohmann::ordered_json::array();
  echo["user"] = nullptr;
  ResponseBuilder b("resp_1", 1, "m", echo);
  b.SetModel("served");
  b.Start();
  b.Finish(End(FinishReason::kStop));
  const nlohmann::ordered_json r = nlohmann::ordered_json::parse(b.ResponseJson());
  std::vector<std::string> keys;
  for (auto it = r.begin(); it != r.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"id", "object", "created_at", "status", "background", "error",
                                      "incomplete_details", "instructions", "max_output_tokens",
                                      "model", "output", "tools", "usage", "user"}));
  EXPECT_EQ(r["model"], "served");
  EXPECT_EQ(r["object"], "response");
}

}  // namespace
}  // namespace deltaserve::router::api
