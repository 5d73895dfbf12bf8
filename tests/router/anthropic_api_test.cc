// The Anthropic Messages API, /tokenize, /detokenize and GET /v1/models/{id} over real HTTP on
// 127.0.0.1 (router/api) with the FakeCompletionBackend TEST DOUBLE in place of workers and stub
// tokenizer / key gate: answers and event streams with `event:` lines, x-api-key passed on as a
// Bearer key, every error path in Anthropic's shape (the backend's 429 with Retry-After and
// 503, the server's own 404/405/413 under /v1/messages) while the OpenAI endpoints keep theirs.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "router/api/api_error.h"
#include "router/api/openai_api.h"
#include "router/api/prompt_tokenizer.h"
#include "tests/router/fake_completion_backend.h"
#include "tests/router/http_test_client.h"

namespace deltaserve::router::api {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::FakeCompletionBackend;
using testing::RawHttpClient;

class StubRouterState : public RouterState {
 public:
  std::vector<ModelCard> Models() const override {
    return {{"tiny", 1700000000, "deltaserve"}, {"secret", 1700000001, "deltaserve"}};
  }
  Readiness Ready() const override { return {true, "1 of 1 workers"}; }
  void WriteMetrics(PrometheusText&) const override {}
};

// Key "Bearer good" sees every model but "secret"; anything else is 401.
class StubGate : public ModelListGate {
 public:
  absl::StatusOr<std::function<bool(std::string_view)>> Visible(
      std::string_view authorization) const override {
    if (authorization != "Bearer good") return absl::UnauthenticatedError("bad key");
    return std::function<bool(std::string_view)>([](std::string_view m) { return m != "secret"; });
  }
};

// One token per byte; the model "tiny" only.
class StubTokenizer : public PromptTokenizer {
 public:
  absl::StatusOr<TokenizedPrompt> Tokenize(const CompletionRequest& r) const override {
    std::string text;
    for (const ChatMessage& m : r.messages) text += m.role + ":" + m.content + ";";
    return TokenizeText(r.model, text, {});
  }
  absl::StatusOr<TokenizedPrompt> TokenizeText(std::string_view model, std::string_view text,
                                               TextTokenizeOptions) const override {
    if (!model.empty() && model != "tiny") return absl::NotFoundError("no such model");
    TokenizedPrompt t{"tiny", {}, 256};
    for (unsigned char c : text) t.token_ids.push_back(c);
    return t;
  }
  absl::StatusOr<std::string> Detokenize(std::string_view,
                                         const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids) s.push_back(static_cast<char>(id));
    return s;
  }
  absl::StatusOr<std::vector<std::string>> Pieces(
      std::string_view, const std::vector<int32_t>& ids) const override {
    std::vector<std::string> out;
    for (int32_t id : ids) out.emplace_back(1, static_cast<char>(id));
    return out;
  }
};

constexpr char kMessage[] =
    R"({"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"hi"}]})";
constexpr char kStream[] =
    R"({"model":"tiny","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]})";

std::string WithHeader(std::string request, const std::string& header) {
  return request.insert(request.find("\r\n") + 2, header + "\r\n");
}

class AnthropicApiTest : public ::testing::Test {
 protected:
  void Start(FakeCompletionBackend::Script script = {}, bool with_gate = false) {
    backend_ = std::make_unique<FakeCompletionBackend>(std::move(script));
    api_ = std::make_unique<OpenAiApi>(*backend_, state_, metrics_);
    api_->SetPromptTokenizer(&tokenizer_);
    if (with_gate) api_->SetModelListGate(&gate_);
    http::HttpServerOptions opts;
    opts.max_body_bytes = 4096;
    OpenAiApi::ConfigureServer(opts, &metrics_);
    server_ = std::make_unique<http::HttpServer>(opts);
    api_->Register(*server_);
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (backend_) backend_->Release();
    if (server_) server_->Stop(absl::Seconds(2));
    server_.reset();
    backend_.reset();
  }
  testing::HttpReply Send(const std::string& request) {
    RawHttpClient c(server_->port());
    EXPECT_TRUE(c.Send(request));
    std::optional<testing::HttpReply> r = c.ReadResponse(30s);
    EXPECT_TRUE(r.has_value());
    return r.value_or(testing::HttpReply{});
  }
  testing::HttpReply Post(const std::string& path, const std::string& body,
                          const std::string& header = "") {
    std::string request = RawHttpClient::Request("POST", path, body);
    return Send(header.empty() ? request : WithHeader(request, header));
  }
  // The body's Anthropic error type (and that it is exactly Anthropic's shape).
  static std::string AnthropicType(const testing::HttpReply& r) {
    const json body = json::parse(r.body);
    EXPECT_EQ(body["type"], "error") << r.body;
    EXPECT_EQ(body.size(), 2u) << r.body;
    EXPECT_TRUE(body["error"]["message"].is_string()) << r.body;
    return body["error"]["type"].get<std::string>();
  }

  StubRouterState state_;
  StubGate gate_;
  StubTokenizer tokenizer_;
  ApiMetrics metrics_;
  std::unique_ptr<FakeCompletionBackend> backend_;
  std::unique_ptr<OpenAiApi> api_;
  std::unique_ptr<http::HttpServer> server_;
};

TEST_F(AnthropicApiTest, MessageAndXApiKey) {
  Start();
  const testing::HttpReply r = Post("/v1/messages", kMessage, "x-api-key: sk-1");
  ASSERT_EQ(r.status, 200) << r.body;
  const json m = json::parse(r.body);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["content"], json::parse(R"([{"type":"text","text":"Hello, world!"}])"));
  EXPECT_EQ(m["stop_reason"], "end_turn");
  // The fake reports 7 prompt tokens of which 3 cached, and 4 output tokens.
  EXPECT_EQ(m["usage"], json::parse(R"({"input_tokens":4,"cache_creation_input_tokens":0,
                                       "cache_read_input_tokens":3,"output_tokens":4,
                                       "output_tokens_details":{"thinking_tokens":0}})"));
  EXPECT_EQ(backend_->last_request().authorization, "Bearer sk-1");
}

TEST_F(AnthropicApiTest, ServerToolsAreSkippedWithAWarningAndAMetric) {
  Start();
  const std::string body = R"({"model":"tiny","max_tokens":8,
    "messages":[{"role":"user","content":"hi"}],
    "tools":[{"name":"f","input_schema":{"type":"object"}},
             {"type":"web_search_20250305","name":"web_search","max_uses":3}]})";
  testing::HttpReply r = Post("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Header("x-deltaserve-warning"),
            "server tools of type web_search_20250305 are not supported by DeltaServe and were "
            "ignored");
  // Only the client tool reaches the model.
  EXPECT_EQ(backend_->last_request().tools_json,
            R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])");
  r = Send(RawHttpClient::Request("GET", "/metrics"));
  ASSERT_EQ(r.status, 200);
  // The counter is process-wide; this test is the only one here that skips a web_search tool.
  EXPECT_NE(r.body.find("deltaserve_router_anthropic_ignored_tools_total{type=\"web_search\"} 1"),
            std::string::npos)
      << r.body;
  r = Post("/v1/messages", kMessage);
  EXPECT_EQ(r.Header("x-deltaserve-warning"), "");
}

TEST_F(AnthropicApiTest, StreamHasEventLines) {
  Start();
  RawHttpClient c(server_->port());
  ASSERT_TRUE(c.Send(RawHttpClient::Request("POST", "/v1/messages", kStream)));
  std::optional<testing::HttpReply> head = c.ReadHead(30s);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->Header("content-type").rfind("text/event-stream", 0), 0u);
  std::string all;
  while (auto chunk = c.ReadChunk(30s)) {
    if (chunk->empty()) break;
    all += *chunk;
  }
  EXPECT_EQ(all.rfind("event: message_start\ndata: {", 0), 0u) << all;
  EXPECT_NE(all.find("event: ping\n"), std::string::npos);
  EXPECT_NE(all.find("event: content_block_delta\ndata: {\"type\":\"content_block_delta\""),
            std::string::npos);
  const size_t stop = all.find("event: message_stop\n");
  ASSERT_NE(stop, std::string::npos) << all;
  EXPECT_LT(all.find("event: message_delta\n"), stop);
  EXPECT_EQ(all.find("[DONE]"), std::string::npos);  // an OpenAI marker, not Anthropic's
}

TEST_F(AnthropicApiTest, BackendErrorsInAnthropicShape) {
  FakeCompletionBackend::Script busy;
  busy.fail_with = WithRetryAfter(absl::ResourceExhaustedError("too many"), 3);
  Start(busy);
  testing::HttpReply r = Post("/v1/messages", kStream);
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(AnthropicType(r), "rate_limit_error");
  EXPECT_EQ(r.Header("retry-after"), "3");
}

TEST_F(AnthropicApiTest, UnavailableIsOverloaded) {
  FakeCompletionBackend::Script down;
  down.fail_with = absl::UnavailableError("no worker");
  Start(down);
  testing::HttpReply r = Post("/v1/messages", kMessage);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(AnthropicType(r), "overloaded_error");
}

TEST_F(AnthropicApiTest, ServerErrorsUnderMessagesAreAnthropicShaped) {
  Start();
  const std::string big = std::string(R"({"model":"tiny","pad":")") + std::string(5000, 'x') + "\"}";
  testing::HttpReply r = Post("/v1/messages", big);
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(AnthropicType(r), "request_too_large");
  r = Send(RawHttpClient::Request("GET", "/v1/messages"));
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(AnthropicType(r), "invalid_request_error");
  r = Post("/v1/messages", "{");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(AnthropicType(r), "invalid_request_error");
  // The OpenAI endpoints keep the OpenAI shape.
  r = Post("/v1/chat/completions", big);
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "request_too_large");
}

TEST_F(AnthropicApiTest, CountTokensAndItsKeys) {
  Start({}, /*with_gate=*/true);
  testing::HttpReply r = Post("/v1/messages/count_tokens",
                              R"({"model":"tiny","messages":[{"role":"user","content":"hi"}]})",
                              "x-api-key: good");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"input_tokens":8})"));  // "user:hi;"
  r = Post("/v1/messages/count_tokens",
           R"({"model":"tiny","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(AnthropicType(r), "authentication_error");
  r = Post("/v1/messages/count_tokens",
           R"({"model":"secret","messages":[{"role":"user","content":"hi"}]})",
           "Authorization: Bearer good");
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(AnthropicType(r), "permission_error");
}

TEST_F(AnthropicApiTest, TokenizeDetokenizeAndModelById) {
  Start({}, /*with_gate=*/true);
  const std::string key = "Authorization: Bearer good";
  testing::HttpReply r = Post("/tokenize", R"({"model":"tiny","prompt":"ab"})", key);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body),
            json::parse(R"({"tokens":[97,98],"count":2,"max_model_len":256,"model":"tiny"})"));
  r = Post("/tokenize", R"({"content":"ab","with_pieces":true})", key);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["tokens"],
            json::parse(R"([{"id":97,"piece":"a"},{"id":98,"piece":"b"}])"));
  r = Post("/detokenize", R"({"model":"tiny","tokens":[104,105]})", key);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["prompt"], "hi");
  EXPECT_EQ(json::parse(r.body)["content"], "hi");
  r = Post("/detokenize", R"({"tokens":[-1]})", key);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "tokens[0]");
  r = Post("/tokenize", R"({"model":"tiny"})", key);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "prompt");
  r = Post("/tokenize", R"({"model":"tiny","prompt":"x"})");
  EXPECT_EQ(r.status, 401);

  r = Send(WithHeader(RawHttpClient::Request("GET", "/v1/models/tiny"), key));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"id":"tiny","object":"model",
                                                "created":1700000000,"owned_by":"deltaserve"})"));
  // A model the key may not see is as unknown as one that does not exist (OpenAI's 404).
  for (const std::string path : {"/v1/models/secret", "/v1/models/nope"}) {
    r = Send(WithHeader(RawHttpClient::Request("GET", path), key));
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(json::parse(r.body)["error"]["code"], "model_not_found") << path;
  }
  r = Send(RawHttpClient::Request("GET", "/v1/models/tiny"));
  EXPECT_EQ(r.status, 401);
}

}  // namespace
}  // namespace deltaserve::router::api
