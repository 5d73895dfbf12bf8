// SSE through the real deltaserve-router process (label integration): the first chunk of a
// streamed completion reaches the client while the worker has not produced the second token —
// the worker here is the routing tests' ScriptedWorker (a test double of the gRPC Worker, in
// this process), scripted to send one token and then hold until the call is cancelled; so the
// chunk the client reads cannot have waited for a second token. Closing the client connection
// then cancels the worker's call through the router. And the worker's cached prompt tokens and
// reasoning tokens reach the client's usage (each API's own field), streamed and not. And a key's max_concurrent_requests: a request
// beyond it while the first is held open is a 429 with Retry-After; once that stream has ended
// the next request is served.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "router/auth/api_key_authority.h"
#include "tests/router/http_test_client.h"
#include "tests/router/scripted_worker.h"
#include "tests/support/child_process.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

using router::testing::GenerateScript;
using router::testing::RawHttpClient;
using router::testing::ScriptedModel;
using router::testing::ScriptedWorker;
using std::chrono::milliseconds;
using std::chrono::seconds;

// The router's port once it listens and has polled the worker (model "m" ready); 0 if not.
int WaitUntilReady(testing::ChildProcess& router) {
  auto line = router.WaitForLine("listening on ", seconds(30));
  if (!line.has_value()) return 0;
  const int port = std::stoi(line->substr(line->rfind(':') + 1));
  for (int i = 0; i < 200; ++i) {
    RawHttpClient c(port);
    c.Send(RawHttpClient::Request("GET", "/ready", "", /*close=*/true));
    auto r = c.ReadResponse(seconds(5));
    if (r.has_value() && r->status == 200) return port;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return 0;
}

// One request on a fresh connection; the whole answer (de-chunked).
std::optional<router::testing::HttpReply> Post(int port, const std::string& path,
                                               const std::string& body) {
  RawHttpClient c(port);
  if (!c.Send(RawHttpClient::Request("POST", path, body, /*close=*/true))) return std::nullopt;
  return c.ReadResponse(seconds(30));
}

TEST(RouterStreamingTest, FirstChunkArrivesBeforeTheSecondTokenExists) {
  ScriptedWorker worker({ScriptedModel{}});
  GenerateScript script;
  script.pieces = {"Hel", "lo"};
  script.hold_after_first = true;  // the second piece is never produced unless cancelled
  worker.SetScript(script);
  worker.Start();
  testing::ChildProcess router({testing::BinaryPath("router/deltaserve-router"), "--listen",
                                "127.0.0.1:0", "--worker", worker.address()});
  const int port = WaitUntilReady(router);
  ASSERT_NE(port, 0) << router.err();

  RawHttpClient client(port);
  ASSERT_TRUE(client.Send(
      RawHttpClient::Request("POST", "/v1/completions",
                             R"({"model":"m","prompt":[72,105],"stream":true,"max_tokens":8})")));
  auto head = client.ReadHead(seconds(10));
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 200);
  std::string seen;
  while (seen.find("Hel") == std::string::npos) {
    auto chunk = client.ReadChunk(seconds(10));
    ASSERT_TRUE(chunk.has_value()) << "no chunk while the worker holds after its first token";
    ASSERT_FALSE(chunk->empty()) << "the stream ended early: " << seen;
    seen += *chunk;
  }
  EXPECT_EQ(seen.find("lo\""), std::string::npos);  // the second token does not exist yet
  client.Close();
  EXPECT_TRUE(worker.WaitForCancel(10000)) << "closing the client did not cancel the worker call";
  router.Signal(SIGTERM);
  EXPECT_EQ(router.Wait(seconds(30)), 0) << router.err();
}

// The worker's Usage.reasoning_tokens reaches each API's own field, whole and streamed: chat's
// completion_tokens_details.reasoning_tokens (the usage chunk), Responses'
// output_tokens_details.reasoning_tokens (response.completed), Anthropic's
// output_tokens_details.thinking_tokens (the message; the last message_delta only). The scripted
// worker sends one token per piece and counts, as a worker does, those inside the think block:
// here the three between "<think>" and "</think>", which the client sees as the reasoning text.
TEST(RouterStreamingTest, ReasoningTokensReachEveryApisUsageStreamedAndNot) {
  ScriptedWorker worker({ScriptedModel{}});
  GenerateScript script;
  script.pieces = {"<think>", "Let", " me", " think", "</think>", "\n\n", "Hi"};
  worker.SetScript(script);
  worker.Start();
  const int64_t inside = std::find(script.pieces.begin(), script.pieces.end(), "</think>") -
                         std::find(script.pieces.begin(), script.pieces.end(), "<think>") - 1;
  ASSERT_EQ(inside, 3);
  testing::ChildProcess router({testing::BinaryPath("router/deltaserve-router"), "--listen",
                                "127.0.0.1:0", "--worker", worker.address()});
  const int port = WaitUntilReady(router);
  ASSERT_NE(port, 0) << router.err();
  using nlohmann::json;
  const std::string user = R"([{"role":"user","content":"Hello there"}])";

  // Chat.
  auto r = Post(port, "/v1/chat/completions", R"({"model":"m","messages":)" + user + "}");
  ASSERT_TRUE(r.has_value() && r->status == 200) << (r ? r->body : "no reply");
  json body = json::parse(r->body);
  EXPECT_EQ(body["choices"][0]["message"]["reasoning_content"], "Let me think");
  EXPECT_EQ(body["usage"]["completion_tokens_details"]["reasoning_tokens"], inside);
  EXPECT_EQ(body["usage"]["completion_tokens"], 7);
  r = Post(port, "/v1/chat/completions", R"({"model":"m","messages":)" + user +
                                             R"(,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(r.has_value() && r->status == 200) << (r ? r->body : "no reply");
  std::vector<std::string> events = router::testing::SseDataEvents(r->body);
  ASSERT_GE(events.size(), 2u) << r->body;
  EXPECT_EQ(json::parse(events[events.size() - 2])["usage"]["completion_tokens_details"]
                                                  ["reasoning_tokens"],
            inside);

  // Responses.
  r = Post(port, "/v1/responses", R"({"model":"m","input":)" + user + "}");
  ASSERT_TRUE(r.has_value() && r->status == 200) << (r ? r->body : "no reply");
  body = json::parse(r->body);
  EXPECT_EQ(body["output"][0]["content"][0]["text"], "Let me think");
  EXPECT_EQ(body["usage"]["output_tokens_details"]["reasoning_tokens"], inside);
  r = Post(port, "/v1/responses", R"({"model":"m","stream":true,"input":)" + user + "}");
  ASSERT_TRUE(r.has_value() && r->status == 200) << (r ? r->body : "no reply");
  events = router::testing::SseDataEvents(r->body);
  ASSERT_FALSE(events.empty()) << r->body;
  const json completed = json::parse(events.back());
  EXPECT_EQ(completed["type"], "response.completed") << events.back();
  EXPECT_EQ(completed["response"]["usage"]["output_tokens_details"]["reasoning_tokens"], inside);

  // Anthropic Messages.
  const std::string message = R"({"model":"m","max_tokens":50,"messages":)" + user;
  r = Post(port, "/v1/messages", message + "}");
  ASSERT_TRUE(r.has_value() && r->status == 200) << (r ? r->body : "no reply");
  body = json::parse(r->body);
  EXPECT_EQ(body["content"][0]["thinking"], "Let me think");
  EXPECT_EQ(body["usage"]["output_tokens_details"]["thinking_tokens"], inside);
  r = Post(port, "/v1/messages", message + R"(,"stream":true})");
  ASSERT_TRUE(r.has_value() && r->status == 200) << (r ? r->body : "no reply");
  int with_details = 0;
  for (const std::string& data : router::testing::SseDataEvents(r->body)) {
    const json e = json::parse(data);
    const json* usage = e.contains("usage")             ? &e["usage"]
                        : e.contains("message")         ? &e["message"]["usage"]
                                                        : nullptr;
    if (usage == nullptr || !usage->contains("output_tokens_details")) continue;
    ++with_details;
    EXPECT_EQ(e["type"], "message_delta") << data;
    EXPECT_EQ((*usage)["output_tokens_details"]["thinking_tokens"], inside);
  }
  EXPECT_EQ(with_details, 1) << r->body;
  router.Signal(SIGTERM);
  EXPECT_EQ(router.Wait(seconds(30)), 0) << router.err();
}

// usage.prompt_tokens_details.cached_tokens is the worker's Usage.cached_prompt_tokens (the
// prompt tokens restored from a session snapshot), in the non-streamed body and in the usage
// chunk a stream ends with under stream_options.include_usage, for chat and completions.
TEST(RouterStreamingTest, CachedPromptTokensReachUsageStreamedAndNot) {
  ScriptedWorker worker({ScriptedModel{}});
  GenerateScript script;
  script.cached_prompt_tokens = 5;
  worker.SetScript(script);
  worker.Start();
  testing::ChildProcess router({testing::BinaryPath("router/deltaserve-router"), "--listen",
                                "127.0.0.1:0", "--worker", worker.address()});
  const int port = WaitUntilReady(router);
  ASSERT_NE(port, 0) << router.err();

  const std::string chat = R"("model":"m","messages":[{"role":"user","content":"Hello there"}])";
  const std::string text = R"("model":"m","prompt":"Hello there")";
  for (const auto& [path, fields] : {std::pair{std::string("/v1/chat/completions"), chat},
                                     std::pair{std::string("/v1/completions"), text}}) {
    auto r = Post(port, path, "{" + fields + "}");
    ASSERT_TRUE(r.has_value()) << path;
    ASSERT_EQ(r->status, 200) << path << ": " << r->body;
    const nlohmann::json body = nlohmann::json::parse(r->body);
    EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 5) << path;
    EXPECT_EQ(body["usage"]["prompt_tokens"], worker.last_request().prompt_token_ids_size());

    r = Post(port, path,
             "{" + fields + R"(,"stream":true,"stream_options":{"include_usage":true}})");
    ASSERT_TRUE(r.has_value()) << path;
    ASSERT_EQ(r->status, 200) << path << ": " << r->body;
    const std::vector<std::string> events = router::testing::SseDataEvents(r->body);
    ASSERT_GE(events.size(), 2u) << r->body;
    EXPECT_EQ(events.back(), "[DONE]");
    const nlohmann::json usage_chunk = nlohmann::json::parse(events[events.size() - 2]);
    EXPECT_TRUE(usage_chunk["choices"].empty()) << usage_chunk.dump();
    EXPECT_EQ(usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"], 5) << path;
  }
  router.Signal(SIGTERM);
  EXPECT_EQ(router.Wait(seconds(30)), 0) << router.err();
}

TEST(RouterStreamingTest, KeyOverMaxConcurrentRequestsGets429UntilItsStreamEnds) {
  ScriptedWorker worker({ScriptedModel{}});
  GenerateScript held;
  held.pieces = {"Hel", "lo"};
  held.hold_after_first = true;  // the first request stays in flight until its client leaves
  worker.SetScript(held);
  worker.Start();
  const std::string config_path =
      ::testing::TempDir() + "/router_concurrency_" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(config_path) << "api_keys:\n  - name: agent\n    sha256: "
                             << router::auth::Sha256Hex("sk-agent")
                             << "\n    max_concurrent_requests: 1\n";
  testing::ChildProcess router({testing::BinaryPath("router/deltaserve-router"), "--listen",
                                "127.0.0.1:0", "--worker", worker.address(), "--config",
                                config_path});
  const int port = WaitUntilReady(router);
  ASSERT_NE(port, 0) << router.err();
  auto request = [](bool stream) {
    const std::string body = std::string(R"({"model":"m","prompt":[72,105],"max_tokens":8,)") +
                             (stream ? R"("stream":true})" : R"("stream":false})");
    return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-agent\r\n"
           "Content-Type: application/json\r\nConnection: close\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };

  RawHttpClient first(port);
  ASSERT_TRUE(first.Send(request(true)));
  auto head = first.ReadHead(seconds(10));
  ASSERT_TRUE(head.has_value());
  ASSERT_EQ(head->status, 200);
  auto chunk = first.ReadChunk(seconds(10));  // the held stream's first token: it is in flight
  ASSERT_TRUE(chunk.has_value() && !chunk->empty());

  RawHttpClient second(port);
  ASSERT_TRUE(second.Send(request(false)));
  auto refused = second.ReadResponse(seconds(10));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 429) << refused->body;
  EXPECT_EQ(refused->Header("retry-after"), "1");
  const nlohmann::json error = nlohmann::json::parse(refused->body, nullptr, false);
  ASSERT_TRUE(error.contains("error")) << refused->body;
  EXPECT_EQ(error["error"].value("type", ""), "rate_limit_error") << refused->body;
  EXPECT_NE(error["error"].value("message", "").find("1 requests in flight"), std::string::npos)
      << refused->body;

  // The held stream ends when its client leaves (the router cancels the worker call); then the
  // key's place is free again.
  first.Close();
  ASSERT_TRUE(worker.WaitForCancel(10000));
  GenerateScript quick;
  quick.pieces = {"ok"};
  worker.SetScript(quick);
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    RawHttpClient third(port);
    ASSERT_TRUE(third.Send(request(false)));
    auto served = third.ReadResponse(seconds(10));
    ASSERT_TRUE(served.has_value());
    status = served->status;
    if (status != 200) std::this_thread::sleep_for(milliseconds(20));  // the cancel settling
  }
  EXPECT_EQ(status, 200);
  router.Signal(SIGTERM);
  EXPECT_EQ(router.Wait(seconds(30)), 0) << router.err();
}

}  // namespace
}  // namespace deltaserve
