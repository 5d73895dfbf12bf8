// SSE through the real deltaserve-router process (label integration): the first chunk of a
// streamed completion reaches the client while the worker has not produced the second token —
// the worker here is the routing tests' ScriptedWorker (a test double of the gRPC Worker, in
// this process), scripted to send one token and then hold until the call is cancelled; so the
// chunk the client reads cannot have waited for a second token. Closing the client connection
// then cancels the worker's call through the router.
#include <csignal>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

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

TEST(RouterStreamingTest, FirstChunkArrivesBeforeTheSecondTokenExists) {
  ScriptedWorker worker({ScriptedModel{}});
  GenerateScript script;
  script.pieces = {"Hel", "lo"};
  script.hold_after_first = true;  // the second piece is never produced unless cancelled
  worker.SetScript(script);
  worker.Start();
  testing::ChildProcess router({testing::BinaryPath("router/deltaserve-router"), "--listen",
                                "127.0.0.1:0", "--worker", worker.address()});
  auto line = router.WaitForLine("listening on ", seconds(30));
  ASSERT_TRUE(line.has_value()) << router.err();
  const int port = std::stoi(line->substr(line->rfind(':') + 1));
  // Wait until the router has polled the worker (model "m" ready).
  bool ready = false;
  for (int i = 0; i < 200 && !ready; ++i) {
    RawHttpClient c(port);
    c.Send(RawHttpClient::Request("GET", "/ready", "", /*close=*/true));
    auto r = c.ReadResponse(seconds(5));
    ready = r.has_value() && r->status == 200;
    if (!ready) std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_TRUE(ready) << router.err();

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

}  // namespace
}  // namespace deltaserve
