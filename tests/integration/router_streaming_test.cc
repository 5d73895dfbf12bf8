// SSE through the real deltaserve-router process (label integration): the first chunk of a
// streamed completion reaches the client while the worker has not produced the second token —
// the worker here is the routing tests' ScriptedWorker (a test double of the gRPC Worker, in
// this process), scripted to send one token and then hold until the call is cancelled; so the
// chunk the client reads cannot have waited for a second token. Closing the client connection
// then cancels the worker's call through the router. And the worker's cached prompt tokens
// reach the client's usage, streamed and not.
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
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
  ASSERT_TRUE(client.Send(RawHttpClient::Request(
      "POST", "/v1/completions",
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

}  // namespace
}  // namespace deltaserve
