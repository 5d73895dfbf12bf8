// POST /v1/responses over real HTTP on 127.0.0.1 (label integration) with the
// FakeCompletionBackend TEST DOUBLE in place of workers: the JSON object and the SSE framing
// (each event an `event:` line naming the `data:` object's type, no [DONE]), the first text delta
// on the wire before the second token exists, the X-DeltaServe-Warning header on both, errors
// before the first token in OpenAI's shape, and cancellation when the client goes away.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "router/api/openai_api.h"
#include "tests/router/fake_completion_backend.h"
#include "tests/router/http_test_client.h"

namespace deltaserve::router::api {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::FakeCompletionBackend;
using testing::RawHttpClient;

class OneModelState : public RouterState {
 public:
  std::vector<ModelCard> Models() const override { return {{"m", 1700000000, "deltaserve"}}; }
  Readiness Ready() const override { return {true, "ready"}; }
  void WriteMetrics(PrometheusText&) const override {}
};

struct SseEvent {
  std::string event;
  json data;
};

// Splits a Responses stream into its events; every event must have both lines.
std::vector<SseEvent> ParseEvents(const std::string& stream) {
  std::vector<SseEvent> out;
  size_t pos = 0;
  while (pos < stream.size()) {
    size_t end = stream.find("\n\n", pos);
    if (end == std::string::npos) end = stream.size();
    const std::string block = stream.substr(pos, end - pos);
    pos = end + 2;
    if (block.empty()) continue;
    SseEvent e;
    size_t line_start = 0;
    while (line_start < block.size()) {
      size_t nl = block.find('\n', line_start);
      if (nl == std::string::npos) nl = block.size();
      const std::string line = block.substr(line_start, nl - line_start);
      if (line.rfind("event: ", 0) == 0) e.event = line.substr(7);
      if (line.rfind("data: ", 0) == 0) e.data = json::parse(line.substr(6));
      line_start = nl + 1;
    }
    out.push_back(std::move(e));
  }
  return out;
}

constexpr char kBody[] =
    R"({"model":"m","input":"hi","tools":[{"type":"function","name":"f"},{"type":"web_search"}])";

class ResponsesEndpointTest : public ::testing::Test {
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
    backend_.reset();
  }

  OneModelState state_;
  ApiMetrics metrics_;
  std::unique_ptr<FakeCompletionBackend> backend_;
  std::unique_ptr<OpenAiApi> api_;
  std::unique_ptr<http::HttpServer> server_;
};

TEST_F(ResponsesEndpointTest, NonStreamedObjectWithTheWarningHeader) {
  FakeCompletionBackend::Script s;
  s.answering_model = "m-q4";
  Start(s);
  RawHttpClient c(server_->port());
  ASSERT_TRUE(c.Send(RawHttpClient::Request("POST", "/v1/responses", std::string(kBody) + "}")));
  auto r = c.ReadResponse(30s);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->Header("x-deltaserve-warning").find("web_search"), std::string::npos);
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["model"], "m-q4");
  EXPECT_EQ(j["status"], "completed");
  ASSERT_EQ(j["output"].size(), 1u);
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "Hello, world!");
  EXPECT_EQ(j["usage"]["input_tokens"], 7);
  EXPECT_EQ(j["usage"]["input_tokens_details"]["cached_tokens"], 3);
  EXPECT_EQ(j["usage"]["output_tokens"], 4);
  EXPECT_EQ(j["tools"].size(), 1u);  // the function tool only
  // The backend got the chat translation: one user message and the function tool.
  const CompletionRequest req = backend_->last_request();
  ASSERT_EQ(req.messages.size(), 1u);
  EXPECT_EQ(req.messages[0].role, "user");
  EXPECT_EQ(req.tools_json, R"([{"type":"function","function":{"name":"f"}}])");
}

TEST_F(ResponsesEndpointTest, StreamedEventsArriveAsTheyAreMade) {
  FakeCompletionBackend::Script s;
  s.hold_before = 1;  // the first token is out, the second waits for Release()
  Start(s);
  RawHttpClient c(server_->port());
  ASSERT_TRUE(c.Send(
      RawHttpClient::Request("POST", "/v1/responses", std::string(kBody) + R"(,"stream":true})")));
  auto head = c.ReadHead(30s);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->Header("content-type").rfind("text/event-stream", 0), 0u);
  EXPECT_NE(head->Header("x-deltaserve-warning").find("web_search"), std::string::npos);
  std::string seen;
  while (seen.find("response.output_text.delta") == std::string::npos) {
    auto chunk = c.ReadChunk(30s);
    ASSERT_TRUE(chunk) << "no text delta while the second token is held: " << seen;
    ASSERT_FALSE(chunk->empty()) << seen;
    seen += *chunk;
  }
  EXPECT_EQ(backend_->tokens_emitted(), 1);
  backend_->Release();
  while (auto chunk = c.ReadChunk(30s)) {
    if (chunk->empty()) break;
    seen += *chunk;
  }
  const std::vector<SseEvent> events = ParseEvents(seen);
  ASSERT_GE(events.size(), 5u) << seen;
  std::string text;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].event, events[i].data["type"]) << i;
    EXPECT_EQ(events[i].data["sequence_number"], i);
    if (events[i].event == "response.output_text.delta") text += events[i].data["delta"];
  }
  EXPECT_EQ(events.front().event, "response.created");
  EXPECT_EQ(events.back().event, "response.completed");
  EXPECT_EQ(text, "Hello, world!");
  EXPECT_EQ(events.back().data["response"]["output"][0]["content"][0]["text"], "Hello, world!");
  EXPECT_EQ(seen.find("[DONE]"), std::string::npos);
}

TEST_F(ResponsesEndpointTest, ErrorBeforeTheFirstTokenIsAnOpenAiErrorStatus) {
  FakeCompletionBackend::Script s;
  s.fail_with = absl::NotFoundError("The model 'm' does not exist");
  Start(s);
  RawHttpClient c(server_->port());
  ASSERT_TRUE(c.Send(
      RawHttpClient::Request("POST", "/v1/responses", std::string(kBody) + R"(,"stream":true})")));
  auto r = c.ReadResponse(30s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  const json j = json::parse(r->body);
  EXPECT_EQ(j["error"]["message"], "The model 'm' does not exist");
  EXPECT_TRUE(j["error"].contains("type"));
}

TEST_F(ResponsesEndpointTest, ClientDisconnectCancelsTheGeneration) {
  FakeCompletionBackend::Script s;
  s.hold_before = 2;
  Start(s);
  {
    RawHttpClient c(server_->port());
    ASSERT_TRUE(c.Send(RawHttpClient::Request("POST", "/v1/responses",
                                              std::string(kBody) + R"(,"stream":true})")));
    ASSERT_TRUE(c.ReadHead(30s));
  }
  EXPECT_TRUE(backend_->WaitForCancel(30s));
}

}  // namespace
}  // namespace deltaserve::router::api
