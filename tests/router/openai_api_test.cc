// Integration tests of router/api over real HTTP on 127.0.0.1 with the FakeCompletionBackend
// TEST DOUBLE in place of workers: errors as OpenAI JSON naming the field, non-streamed and
// streamed answers in OpenAI's shapes ending in [DONE], the first chunk arriving before the
// second token exists, cancellation on disconnect, and the informational endpoints.

#include "router/api/openai_api.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "router/api/api_error.h"
#include "tests/router/fake_completion_backend.h"
#include "tests/router/http_test_client.h"

namespace deltaserve::router::api {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::FakeCompletionBackend;
using testing::RawHttpClient;
using testing::SseDataEvents;

class StubRouterState : public RouterState {
 public:
  std::vector<ModelCard> Models() const override {
    return {{"qwen3.5-4b", 1700000000, "deltaserve"}, {"fast", 1700000001, "deltaserve"}};
  }
  Readiness Ready() const override { return {ready, ready ? "1 of 1 workers" : "no workers"}; }
  void WriteMetrics(PrometheusText& out) const override {
    out.Gauge("deltaserve_router_workers_ready", "Ready workers.", {}, ready ? 1 : 0);
  }
  bool ready = true;
};

FakeCompletionBackend::Script Script(void (*edit)(FakeCompletionBackend::Script&)) {
  FakeCompletionBackend::Script s;
  edit(s);
  return s;
}

constexpr char kChat[] = R"({"model":"qwen3.5-4b","messages":[{"role":"user","content":"hi"}])";

class OpenAiApiTest : public ::testing::Test {
 protected:
  void Start(FakeCompletionBackend::Script script = {}) {
    backend_ = std::make_unique<FakeCompletionBackend>(std::move(script));
    api_ = std::make_unique<OpenAiApi>(*backend_, state_, metrics_);
    http::HttpServerOptions opts;
    OpenAiApi::ConfigureServer(opts, &metrics_);
    server_ = std::make_unique<http::HttpServer>(opts);
    api_->Register(*server_);
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (backend_) backend_->Release();
    if (server_) server_->Stop(absl::Seconds(2));
    server_.reset();
    backend_.reset();  // joins its threads
  }
  std::optional<testing::HttpReply> Call(const std::string& method, const std::string& path,
                                         const std::string& body = "") {
    RawHttpClient c(server_->port());
    if (!c.Send(RawHttpClient::Request(method, path, body))) return std::nullopt;
    return c.ReadResponse(30s);
  }
  // Reads an SSE response to its end; returns the data payloads.
  std::vector<std::string> Stream(RawHttpClient& c) {
    std::string all;
    while (auto chunk = c.ReadChunk(30s)) {
      if (chunk->empty()) break;
      all += *chunk;
    }
    return SseDataEvents(all);
  }

  StubRouterState state_;
  ApiMetrics metrics_;
  std::unique_ptr<FakeCompletionBackend> backend_;
  std::unique_ptr<OpenAiApi> api_;
  std::unique_ptr<http::HttpServer> server_;
};

TEST_F(OpenAiApiTest, MalformedJsonIs400WithOpenAiError) {
  Start();
  auto r = Call("POST", "/v1/chat/completions", "{\"model\": ");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(r->Header("content-type"), "application/json");
  json e = json::parse(r->body);
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], "invalid_json");
  EXPECT_TRUE(e["error"]["param"].is_null());
  EXPECT_NE(e["error"]["message"].get<std::string>().find("not valid JSON"), std::string::npos);
}

TEST_F(OpenAiApiTest, ValidationErrorsNameTheFieldOverHttp) {
  Start();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":9})",
       "temperature"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "messages[0].content[0].type"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":17})", "n"},
      {R"({"messages":[{"role":"user","content":"x"}]})", "model"},
  };
  for (const auto& [body, param] : cases) {
    auto r = Call("POST", "/v1/chat/completions", body);
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, 400) << body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], param) << body;
  }
  auto r = Call("POST", "/v1/completions", R"({"model":"m","prompt":"x","logprobs":99})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "logprobs");
  // Still serving after the errors.
  r = Call("GET", "/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(OpenAiApiTest, NonStreamedChatCompletion) {
  Start(Script([](FakeCompletionBackend::Script& s) { s.answering_model = "qwen3.5-4b-q4"; }));
  auto r = Call("POST", "/v1/chat/completions", std::string(kChat) + R"(,"logprobs":true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["model"], "qwen3.5-4b-q4");  // what answered, not what was asked
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello, world!");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"].size(), 4u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["usage"]["total_tokens"], 11);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  EXPECT_EQ(backend_->last_request().request_id, r->Header("x-request-id"));
}

TEST_F(OpenAiApiTest, NonStreamedCompletionHitsMaxTokens) {
  Start();
  auto r = Call("POST", "/v1/completions", R"({"model":"m","prompt":"Say","max_tokens":2})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["text"], "Hello,");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

TEST_F(OpenAiApiTest, BackendErrorBeforeFirstTokenIsHttpStatus) {
  Start(Script([](FakeCompletionBackend::Script& s) {
    s.fail_with = WithErrorDetail(absl::NotFoundError("model 'x' does not exist"), "model",
                                  "model_not_found");
  }));
  auto r = Call("POST", "/v1/chat/completions", std::string(kChat) + R"(,"stream":true})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  json e = json::parse(r->body);
  EXPECT_EQ(e["error"]["param"], "model");
  EXPECT_EQ(e["error"]["code"], "model_not_found");
}

TEST_F(OpenAiApiTest, StreamIsValidOpenAiChunksEndingInDone) {
  Start();
  RawHttpClient c(server_->port());
  ASSERT_TRUE(c.Send(RawHttpClient::Request(
      "POST", "/v1/chat/completions",
      std::string(kChat) + R"(,"stream":true,"stream_options":{"include_usage":true}})")));
  auto head = c.ReadHead(30s);
  ASSERT_TRUE(head);
  ASSERT_EQ(head->status, 200);
  EXPECT_EQ(head->Header("content-type"), "text/event-stream; charset=utf-8");
  std::vector<std::string> events = Stream(c);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string id, text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json j = json::parse(events[i]);
    EXPECT_EQ(j["object"], "chat.completion.chunk");
    if (id.empty()) id = j["id"];
    EXPECT_EQ(j["id"], id);  // one id for the whole stream
    EXPECT_TRUE(j.contains("usage"));
    if (i == 0) {
      EXPECT_EQ(j["choices"][0]["delta"]["role"], "assistant");
    }
    if (i + 2 == events.size()) {  // the usage chunk
      EXPECT_EQ(j["choices"], json::array());
      EXPECT_EQ(j["usage"]["completion_tokens"], 4);
      EXPECT_EQ(j["usage"]["total_tokens"], 11);
      continue;
    }
    EXPECT_TRUE(j["usage"].is_null());
    const json& ch = j["choices"][0];
    if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
    if (i + 3 == events.size()) {
      EXPECT_EQ(ch["finish_reason"], "stop");
    } else {
      EXPECT_TRUE(ch["finish_reason"].is_null());
    }
  }
  EXPECT_EQ(text, "Hello, world!");
}

TEST_F(OpenAiApiTest, StreamedCompletionWithoutUsage) {
  Start();
  RawHttpClient c(server_->port());
  ASSERT_TRUE(c.Send(RawHttpClient::Request("POST", "/v1/completions",
                                            R"({"model":"m","prompt":"x","stream":true})")));
  ASSERT_TRUE(c.ReadHead(30s));
  std::vector<std::string> events = Stream(c);
  ASSERT_EQ(events.size(), 6u);  // 4 tokens, finish, [DONE]
  EXPECT_EQ(events.back(), "[DONE]");
  json fin = json::parse(events[4]);
  EXPECT_EQ(fin["object"], "text_completion");
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(fin.contains("usage"));
}

// The issue's SSE requirement: the first content chunk reaches the client before the
// generator has produced the second token. The test double holds before token 1 until the
// test, having read token 0's chunk, releases it.
TEST_F(OpenAiApiTest, FirstChunkArrivesBeforeSecondTokenIsProduced) {
  Start(Script([](FakeCompletionBackend::Script& s) { s.hold_before = 1; }));
  RawHttpClient c(server_->port());
  ASSERT_TRUE(c.Send(RawHttpClient::Request("POST", "/v1/chat/completions",
                                            std::string(kChat) + R"(,"stream":true})")));
  ASSERT_TRUE(c.ReadHead(30s));
  std::string got;
  while (got.find("Hello") == std::string::npos) {
    auto chunk = c.ReadChunk(30s);
    ASSERT_TRUE(chunk) << "no first token chunk while the generator is held";
    got += *chunk;
  }
  EXPECT_EQ(backend_->tokens_emitted(), 1);  // the second token does not exist yet
  backend_->Release();
  std::vector<std::string> rest = Stream(c);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back(), "[DONE]");
  EXPECT_EQ(backend_->tokens_emitted(), 4);
}

TEST_F(OpenAiApiTest, ClientDisconnectCancelsTheGeneration) {
  Start(Script([](FakeCompletionBackend::Script& s) { s.hold_before = 2; }));
  {
    RawHttpClient c(server_->port());
    ASSERT_TRUE(c.Send(RawHttpClient::Request("POST", "/v1/chat/completions",
                                              std::string(kChat) + R"(,"stream":true})")));
    ASSERT_TRUE(c.ReadHead(30s));
    ASSERT_TRUE(c.ReadChunk(30s));
  }
  EXPECT_TRUE(backend_->WaitForCancel(30s));
  EXPECT_LT(backend_->tokens_emitted(), 4);
}

TEST_F(OpenAiApiTest, NonStreamedDisconnectCancelsToo) {
  Start(Script([](FakeCompletionBackend::Script& s) { s.hold_before = 0; }));
  {
    RawHttpClient c(server_->port());
    ASSERT_TRUE(
        c.Send(RawHttpClient::Request("POST", "/v1/chat/completions", std::string(kChat) + "}")));
    // Closed only once the request reached the backend: a close before that is a request
    // never made, with nothing to cancel.
    ASSERT_TRUE(backend_->WaitForGenerate(30s));
  }
  EXPECT_TRUE(backend_->WaitForCancel(30s));
}

TEST_F(OpenAiApiTest, ModelsHealthReadyMetrics) {
  Start();
  auto models = Call("GET", "/v1/models");
  ASSERT_TRUE(models);
  json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 2u);
  EXPECT_EQ(m["data"][0], json({{"id", "qwen3.5-4b"},
                                {"object", "model"},
                                {"created", 1700000000},
                                {"owned_by", "deltaserve"}}));
  EXPECT_EQ(Call("GET", "/health")->status, 200);
  EXPECT_EQ(Call("GET", "/ready")->status, 200);
  state_.ready = false;
  EXPECT_EQ(Call("GET", "/ready")->status, 503);
  state_.ready = true;
  api_->SetDraining(true);
  EXPECT_EQ(Call("GET", "/ready")->status, 503);
  api_->SetDraining(false);

  ASSERT_EQ(Call("POST", "/v1/completions", R"({"model":"m","prompt":"x"})")->status, 200);
  // The exchange is recorded once the server's write completes, which may be just after the
  // client has the response: poll briefly.
  const std::string counted =
      "deltaserve_router_http_requests_total{route=\"/v1/completions\",method=\"POST\","
      "code=\"200\"} 1";
  auto metrics = Call("GET", "/metrics");
  for (int i = 0; i < 100 && metrics && metrics->body.find(counted) == std::string::npos; ++i) {
    std::this_thread::sleep_for(10ms);
    metrics = Call("GET", "/metrics");
  }
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->Header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::string& text = metrics->body;
  EXPECT_NE(text.find(counted), std::string::npos) << text;
  // The fake answers as the model the request named ("m").
  EXPECT_NE(text.find("deltaserve_router_completion_tokens_total{model=\"m\"} 4"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("deltaserve_router_requests_total{endpoint=\"completions\",model=\"m\","
                      "code=\"200\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("deltaserve_router_workers_ready 1"), std::string::npos);
  EXPECT_NE(text.find("# TYPE deltaserve_router_time_to_first_token_seconds histogram"),
            std::string::npos);
}

}  // namespace
}  // namespace deltaserve::router::api
