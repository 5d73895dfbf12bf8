// Unit tests of the request limits (router/api/request_parser.h, docs/router.md "Request
// limits"): each limit, passed by one, is a 400 with code request_limit_exceeded whose message
// names the limit and whose param is the JSON path where it was passed; at the limit the body
// is accepted. Also the reader's semantics the rest of the router relies on: the client's key
// order, duplicate keys (last value wins at the first position), and issue 17's 200,000-key
// object refused by its limit. Behaviour only: speed is in bench/request_parse_bench.cc.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "router/api/api_error.h"
#include "router/api/request_parser.h"

namespace deltaserve::router::api {
namespace {

constexpr char kUser[] = R"({"role":"user","content":"hi"})";

std::string Chat(const std::string& extra) {
  return absl::StrCat(R"({"model":"m","messages":[)", kUser, "]", extra.empty() ? "" : ",", extra,
                      "}");
}

// "[v,v,...]" with n copies of v.
std::string ArrayOf(size_t n, const std::string& v) {
  std::string out = "[";
  out.reserve(n * (v.size() + 1) + 2);
  for (size_t i = 0; i < n; ++i) absl::StrAppend(&out, i ? "," : "", v);
  return out + "]";
}

// {"k0":0,"k1":1,...} with n keys "<prefix><i>" and values i % 100 (valid logit biases).
std::string ObjectOf(size_t n, const std::string& prefix = "k") {
  std::string out = "{";
  for (size_t i = 0; i < n; ++i)
    absl::StrAppend(&out, i ? "," : "", "\"", prefix, i, "\":", i % 100);
  return out + "}";
}

std::string Tool(const std::string& name, const std::string& parameters = "{}") {
  return absl::StrCat(R"({"type":"function","function":{"name":")", name, R"(","parameters":)",
                      parameters, "}}");
}

void ExpectLimit(const absl::StatusOr<CompletionRequest>& r, const std::string& limit,
                 const std::string& param) {
  ASSERT_FALSE(r.ok()) << limit;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(ErrorCode(r.status()), "request_limit_exceeded") << r.status();
  EXPECT_EQ(ErrorParam(r.status()), param) << r.status();
  EXPECT_NE(r.status().message().find(limit), absl::string_view::npos) << r.status();
  const ApiError e = ApiErrorFromStatus(r.status());
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
}

TEST(RequestLimitsTest, EachLimitPassedByOneIsA400NamingIt) {
  const std::string deep = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  std::string deep_path;
  for (int i = 0; i + 1 < kMaxJsonDepth; ++i) deep_path += "[0]";
  ExpectLimit(ParseChatCompletionRequest(Chat(R"("metadata":)" + deep)), "max_json_depth",
              "metadata" + deep_path);
  ExpectLimit(ParseChatCompletionRequest(Chat(R"("metadata":)" + ObjectOf(kMaxObjectKeys + 1))),
              "max_object_keys", "metadata");
  ExpectLimit(
      ParseChatCompletionRequest(Chat(R"("metadata":[)" + ObjectOf(kMaxObjectKeys + 1) + "]")),
      "max_object_keys", "metadata[0]");
  ExpectLimit(ParseCompletionRequest(R"({"model":"m","prompt":)" +
                                     ArrayOf(kMaxArrayElements + 1, "1") + "}"),
              "max_array_elements", "prompt");
  // The body, "messages" and its message are 3 containers, "metadata" the 4th; item i opens the
  // (5 + 2i)th and (6 + 2i)th, so the (2^20 + 1)th is item 2^19 - 2's outer array. The padding
  // string makes the body large enough (> 8 MiB) for the density bound to allow 2^20.
  const std::string pad = absl::StrCat(R"("user":")", std::string(7 << 20, 'u'), R"(",)");
  ExpectLimit(ParseChatCompletionRequest(Chat(pad + R"("metadata":)" +
                                              ArrayOf(kMaxJsonContainers / 2, "[[]]"))),
              "max_json_containers", absl::StrCat("metadata[", kMaxJsonContainers / 2 - 2, "]"));
  // Without padding the density bound (4,096 + one per 8 bytes) is what stops it: the body is
  // 5 bytes per item of 2 containers, so it allows 4,096 + 5n/8 containers of 4 + 2n.
  {
    const size_t n = 100'000;
    const std::string body = Chat(R"("metadata":)" + ArrayOf(n, "[[]]"));
    const size_t allowed = kFreeJsonContainers + body.size() / kJsonBytesPerContainer;
    ASSERT_LT(allowed, 4 + 2 * n);
    // The (allowed + 1)th container: item i opens the (5 + 2i)th and, inside it, the (6 + 2i)th.
    const size_t item = (allowed + 1 - 5) / 2;
    const bool inner = (allowed + 1 - 5) % 2 == 1;
    ExpectLimit(ParseChatCompletionRequest(body), "max_json_containers",
                absl::StrCat("metadata[", item, "]", inner ? "[0]" : ""));
  }
  ExpectLimit(ParseChatCompletionRequest(R"({"model":"m","messages":)" +
                                         ArrayOf(kMaxMessages + 1, kUser) + "}"),
              "max_messages", "messages");
  ExpectLimit(ParseChatCompletionRequest(Chat(R"("tools":)" + ArrayOf(kMaxTools + 1, Tool("f")))),
              "max_tools", "tools");
  const std::string big_schema = absl::StrCat(R"({"type":"object","description":")",
                                              std::string(kMaxToolSchemaBytes, 'x'), R"("})");
  ExpectLimit(ParseChatCompletionRequest(
                  Chat(absl::StrCat(R"("tools":[)", Tool("a"), ",", Tool("b", big_schema), "]"))),
              "max_tool_schema_bytes", "tools[1].function.parameters");
  ExpectLimit(ParseChatCompletionRequest(Chat(R"("stop":["a","b","c","d","e"])")), "max_stop",
              "stop");
  ExpectLimit(ParseChatCompletionRequest(Chat(
                  absl::StrCat(R"("stop":["a",")", std::string(kMaxStopBytes + 1, 's'), R"("])"))),
              "max_stop_bytes", "stop[1]");
  ExpectLimit(
      ParseChatCompletionRequest(Chat(R"("logit_bias":)" + ObjectOf(kMaxLogitBias + 1, ""))),
      "max_logit_bias", "logit_bias");
}

TEST(RequestLimitsTest, AtEachLimitTheBodyIsAccepted) {
  const std::string deep =
      std::string(kMaxJsonDepth - 1, '[') + std::string(kMaxJsonDepth - 1, ']');
  // A field no API defines carries the shapes (metadata must hold strings).
  EXPECT_TRUE(ParseChatCompletionRequest(Chat(R"("x_extension":)" + deep)).ok());
  EXPECT_TRUE(
      ParseChatCompletionRequest(Chat(R"("x_extension":)" + ObjectOf(kMaxObjectKeys))).ok());
  auto tokens =
      ParseCompletionRequest(R"({"model":"m","prompt":)" + ArrayOf(kMaxArrayElements, "7") + "}");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->prompt_tokens.size(), kMaxArrayElements);
  auto messages = ParseChatCompletionRequest(R"({"model":"m","messages":)" +
                                             ArrayOf(kMaxMessages, kUser) + "}");
  ASSERT_TRUE(messages.ok()) << messages.status();
  EXPECT_EQ(messages->messages.size(), kMaxMessages);
  EXPECT_TRUE(ParseChatCompletionRequest(Chat(R"("tools":)" + ArrayOf(kMaxTools, Tool("f")))).ok());
  EXPECT_TRUE(ParseChatCompletionRequest(
                  Chat(absl::StrCat(R"("stop":["a",")", std::string(kMaxStopBytes, 's'), R"("])")))
                  .ok());
  auto bias = ParseChatCompletionRequest(Chat(R"("logit_bias":)" + ObjectOf(kMaxLogitBias, "")));
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_EQ(bias->sampling.logit_bias.size(), kMaxLogitBias);
}

TEST(RequestLimitsTest, TwoHundredThousandKeysAreRefusedByTheKeyLimit) {
  // Issue 17's attack (33.7 s before): refused at key 10,001 while reading, whichever field
  // carries it.
  const std::string wide = ObjectOf(200'000);
  ExpectLimit(ParseChatCompletionRequest(Chat(R"("metadata":)" + wide)), "max_object_keys",
              "metadata");
  ExpectLimit(ParseChatCompletionRequest(Chat(R"("logit_bias":)" + ObjectOf(200'000, ""))),
              "max_object_keys", "logit_bias");
  ExpectLimit(ParseChatCompletionRequest(Chat(R"("chat_template_kwargs":)" + wide)),
              "max_object_keys", "chat_template_kwargs");
}

TEST(RequestLimitsTest, DuplicateKeysLastValueWinsAtTheFirstPosition) {
  // As Python's json.loads (OpenAI's API) and nlohmann's parser: the last value counts.
  auto r = ParseChatCompletionRequest(
      R"({"model":"first","messages":[{"role":"user","content":"hi"}],"model":"m",)"
      R"("temperature":0.5,"temperature":1.5,)"
      R"("chat_template_kwargs":{"a":1,"b":2,"a":3}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->sampling.temperature, 1.5);
  EXPECT_EQ(r->chat_template_kwargs_json, R"({"a":3,"b":2})");
  // A duplicated field's last value is what validation sees.
  auto bad = ParseChatCompletionRequest(Chat(R"("temperature":0.5,"temperature":9)"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(ErrorParam(bad.status()), "temperature");
}

TEST(RequestLimitsTest, WideObjectsKeepTheClientsKeyOrder) {
  // Past the reader's hash index threshold (16 keys), still the client's order, not sorted.
  std::string props = "{";
  for (int i = 0; i < 40; ++i) absl::StrAppend(&props, i ? "," : "", "\"p", 39 - i, "\":{}");
  props += "}";
  auto r = ParseChatCompletionRequest(
      Chat(absl::StrCat(R"("tools":[)", Tool("f", R"({"properties":)" + props + "}"), "]")));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->tools_json.find(R"("properties":{"p39":{},"p38":{})"), std::string::npos);
  EXPECT_NE(r->tools_json.find(R"("p1":{},"p0":{}}})"), std::string::npos);
}

TEST(RequestLimitsTest, ToolMessagesMatchCallsReadFromTheBody) {
  // ValidateToolMessages reads the calls from the parsed body (no re-parse); ids still match.
  auto ok = ParseChatCompletionRequest(
      R"({"model":"m","messages":[{"role":"user","content":"q"},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"a"},{"id":"b"}]},)"
      R"({"role":"tool","tool_call_id":"b","content":"1"},)"
      R"({"role":"tool","tool_call_id":"a","content":"2"}]})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  auto bad = ParseChatCompletionRequest(
      R"({"model":"m","messages":[{"role":"tool","tool_call_id":"a","content":"2"},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"a"}]}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(ErrorParam(bad.status()), "messages[0].tool_call_id");
}

}  // namespace
}  // namespace deltaserve::router::api
