// Routing by prefix with real processes on 127.0.0.1 (label integration; issue 11 item 6): two
// deltaserve-worker processes with session snapshots on, serving the golden tiny-dense-f32 model
// (a ChatML vocabulary), behind one deltaserve-router. After one conversation ran on a worker,
// conversations that share only its system prompt go to that worker — it reports the snapshot
// at the system message's boundary — although their session-affinity keys (system prompt +
// first user message) differ and would spread them; they reuse that prefix (cached_tokens).
// With routing.prefix_affinity off, the same requests spread by their affinity keys. The
// conversations are chosen for the workers' addresses so that the affinity keys alone send
// exactly half to each worker (BalancedTasks): both outcomes are decided, not left to chance.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/completion_request.h"
#include "router/routing/worker_choice.h"
#include "tests/integration/router_service.h"
#include "tests/support/child_process.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

using ::deltaserve::testing::BinaryPath;
using ::deltaserve::testing::ChildProcess;
using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::Http;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kSystem[] =
    "You are the build assistant of a small team. Answer in one short line, name files by "
    "their path, and never repeat the question. Prefer commands over explanations.";

std::string TaskMessage(int k) {
  return "Task " + std::to_string(k) + ": which file builds the router?";
}

std::string ChatBody(const std::string& user) {
  nlohmann::json j{
      {"model", "tiny"},
      {"max_tokens", 4},
      {"temperature", 0},
      {"messages",
       {{{"role", "system"}, {"content", kSystem}}, {{"role", "user"}, {"content", user}}}}};
  return j.dump();
}

int CountOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Requests a worker finished: its one log line per request carries `finish=`.
int Finished(const ChildProcess& worker) { return CountOf(worker.err(), " finish="); }

// --ctx 1024 leaves the KV cache room for RAM snapshots to keep their pages; with --ctx 256
// serving needs every page and takes them back from the snapshots (cached_tokens 0).
std::unique_ptr<ChildProcess> StartWorker(std::string* address) {
  auto worker = std::make_unique<ChildProcess>(std::vector<std::string>{
      BinaryPath("worker/deltaserve-worker"), "--model",
      "tiny=" + GoldenPath("tiny-dense-f32.gguf"), "--listen", "127.0.0.1:0", "--threads", "1",
      "--ctx", "1024", "--parallel", "2", "--ram", "2GiB", "--cache-type-k", "f32",
      "--cache-type-v", "f32", "--snapshot-ram", "64MiB"});
  const std::optional<std::string> line = worker->WaitForLine("listening on ", seconds(60));
  *address = line ? line->substr(line->find("listening on ") + 13) : "";
  return worker;
}

std::unique_ptr<ChildProcess> StartRouter(bool prefix_affinity,
                                          const std::vector<std::string>& workers, int* port) {
  static std::atomic<int> serial{0};
  const std::string path = ::testing::TempDir() + "/router_prefix_" + std::to_string(::getpid()) +
                           "_" + std::to_string(serial++) + ".yaml";
  std::ofstream(path) << "routing:\n  health_interval_ms: 50\n  prefix_affinity: "
                      << (prefix_affinity ? "true" : "false") << "\n";
  std::vector<std::string> argv = {BinaryPath("router/deltaserve-router"), "--listen",
                                   "127.0.0.1:0", "--config", path};
  for (const std::string& w : workers) argv.insert(argv.end(), {"--worker", w});
  auto router = std::make_unique<ChildProcess>(argv);
  *port = 0;
  const std::optional<std::string> line = router->WaitForLine("listening on ", seconds(30));
  if (!line) return router;
  const int p = std::stoi(line->substr(line->rfind(':') + 1));
  for (int i = 0; i < 600 && *port == 0; ++i) {
    if (Http(p, "GET", "/ready").status == 200) *port = p;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return router;
}

// The counter `name{outcome="..."}` from the router's /metrics (-1 when absent).
double Metric(int port, const std::string& series) {
  const std::string text = Http(port, "GET", "/metrics").body;
  const size_t at = text.find(series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 1));
}

constexpr int kConversations = 12;

// kConversations user messages (TaskMessage(k) for chosen k) of which session affinity alone
// sends exactly half to `addr_a` and half to `addr_b`, alternating: each message's affinity key
// (system prompt + first user message) is computed with the router's own AffinityKey and its
// rendezvous winner between the two addresses with RendezvousScore (router/routing/
// worker_choice.h; the router hashes the address as given to --worker). The addresses are the
// kernel's ports, new each run, so the messages are chosen here rather than fixed: with fixed
// ones, by chance (p = 2^-11) all keys could fall on one worker, and then the prefix-on check
// would pass without routing by prefix and the prefix-off check would fail for no fault.
std::vector<std::string> BalancedTasks(const std::string& addr_a, const std::string& addr_b) {
  std::vector<std::string> to_a, to_b;
  for (int k = 0; to_a.size() < kConversations / 2 || to_b.size() < kConversations / 2; ++k) {
    router::api::CompletionRequest request;
    request.endpoint = router::api::Endpoint::kChatCompletions;
    request.messages.resize(2);
    request.messages[0].role = "system";
    request.messages[0].content = kSystem;
    request.messages[1].role = "user";
    request.messages[1].content = TaskMessage(k);
    const uint64_t key = router::AffinityKey(request);
    const bool a_wins = router::RendezvousScore(key, addr_a) > router::RendezvousScore(key, addr_b);
    std::vector<std::string>& side = a_wins ? to_a : to_b;
    if (side.size() < kConversations / 2) side.push_back(TaskMessage(k));
  }
  std::vector<std::string> tasks;
  for (int i = 0; i < kConversations / 2; ++i) tasks.insert(tasks.end(), {to_a[i], to_b[i]});
  return tasks;
}

// The conversations of `tasks`, sharing kSystem, one after the other; sets the requests each
// worker finished and the least cached_tokens after the first.
void RunConversations(int port, const std::vector<std::string>& tasks, const ChildProcess& a,
                      const ChildProcess& b, int* on_a, int* on_b, int* cached_min) {
  *cached_min = 1 << 30;
  for (size_t k = 0; k < tasks.size(); ++k) {
    const auto r = Http(port, "POST", "/v1/chat/completions", ChatBody(tasks[k]));
    ASSERT_EQ(r.status, 200) << r.body;
    const nlohmann::json j = nlohmann::json::parse(r.body);
    if (k > 0) {
      *cached_min =
          std::min(*cached_min, j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>());
    }
    // The held keys reach the router with the next health poll (50 ms).
    std::this_thread::sleep_for(milliseconds(300));
  }
  // A worker may write its request line just after the router has answered.
  const auto deadline = std::chrono::steady_clock::now() + seconds(5);
  while (Finished(a) + Finished(b) < kConversations &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  *on_a = Finished(a);
  *on_b = Finished(b);
}

TEST(RouterPrefixTest, ConversationsSharingAPrefixGoToTheWorkerHoldingIt) {
  std::string addr_a, addr_b;
  auto a = StartWorker(&addr_a);
  auto b = StartWorker(&addr_b);
  ASSERT_FALSE(addr_a.empty()) << a->err();
  ASSERT_FALSE(addr_b.empty()) << b->err();
  int port = 0;
  auto router = StartRouter(true, {addr_a, addr_b}, &port);
  ASSERT_NE(port, 0) << router->err();

  int on_a = 0, on_b = 0, cached_min = 0;
  RunConversations(port, BalancedTasks(addr_a, addr_b), *a, *b, &on_a, &on_b, &cached_min);
  // All on one worker: the first by load and rendezvous, the others by the prefix (by session
  // affinity alone these conversations would go half to each).
  EXPECT_EQ(on_a + on_b, kConversations);
  EXPECT_TRUE(on_a == 0 || on_b == 0) << "a: " << on_a << ", b: " << on_b;
  EXPECT_EQ(Metric(port, "deltaserve_router_prefix_routing_total{outcome=\"hit\"}"),
            kConversations - 1);
  EXPECT_EQ(Metric(port, "deltaserve_router_prefix_routing_total{outcome=\"miss\"}"), 1);
  EXPECT_GT(cached_min, 0);  // each reused at least the system prompt

  // Without routing by prefix, the affinity keys differ: the same conversations spread.
  router.reset();
  a = StartWorker(&addr_a);
  b = StartWorker(&addr_b);
  router = StartRouter(false, {addr_a, addr_b}, &port);
  ASSERT_NE(port, 0) << router->err();
  // New workers, new ports: conversations balanced for these addresses.
  RunConversations(port, BalancedTasks(addr_a, addr_b), *a, *b, &on_a, &on_b, &cached_min);
  EXPECT_EQ(on_a, kConversations / 2);
  EXPECT_EQ(on_b, kConversations / 2);
  EXPECT_EQ(Metric(port, "deltaserve_router_prefix_routing_total{outcome=\"off\"}"),
            kConversations);
}

}  // namespace
}  // namespace deltaserve
