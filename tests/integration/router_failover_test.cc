// Failover with real processes on 127.0.0.1 (label integration; issue 5, section "Tests"):
// two deltaserve-worker processes behind one deltaserve-router, one SIGKILLed in the middle of a
// burst of chat requests and then restarted on its port; alias chains whose primary is down or
// too small for the prompt; a key's requests-per-minute limit. Every worker serves the golden
// tiny-dense-f32 model (under different names where a test needs distinct models).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/router_service.h"
#include "tests/support/child_process.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

using ::deltaserve::testing::BinaryPath;
using ::deltaserve::testing::ChildProcess;
using ::deltaserve::testing::GoldenPath;
using std::chrono::milliseconds;
using std::chrono::seconds;

// The raw client of router_service.h: one request per connection, read to the end.
using HttpReply = ::deltaserve::testing::RawHttpReply;
using ::deltaserve::testing::Http;

// A chat request with one user message, greedy.
std::string ChatBody(const std::string& model, const std::string& content, int max_tokens,
                     bool stream) {
  nlohmann::json j{{"model", model},
                   {"max_tokens", max_tokens},
                   {"temperature", 0},
                   {"stream", stream},
                   {"messages", {{{"role", "user"}, {"content", content}}}}};
  return j.dump();
}

// Occurrences of `needle` in `text`.
int CountOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Requests a worker finished: the one log line per request carries `finish=` (docs/worker.md).
int FinishedRequests(const ChildProcess& worker) { return CountOf(worker.err(), " finish="); }

// FinishedRequests once it reaches `at_least` (the worker may write its line just after the
// router has answered), or after five seconds; then a short grace for lines beyond it.
int FinishedRequestsSettled(const ChildProcess& worker, int at_least) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(5);
  while (FinishedRequests(worker) < at_least && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  std::this_thread::sleep_for(milliseconds(100));
  return FinishedRequests(worker);
}

// A deltaserve-worker serving the tiny golden model under each of `names`, on `listen`
// ("127.0.0.1:0" for any free port).
std::unique_ptr<ChildProcess> StartWorker(const std::vector<std::string>& names,
                                          const std::string& listen, int ctx,
                                          std::string* address) {
  std::vector<std::string> argv = {BinaryPath("worker/deltaserve-worker")};
  for (const std::string& name : names) {
    argv.push_back("--model");
    argv.push_back(name + "=" + GoldenPath("tiny-dense-f32.gguf"));
  }
  argv.insert(argv.end(),
              {"--listen", listen, "--threads", "1", "--ctx", std::to_string(ctx), "--parallel",
               "2", "--ram", "2GiB", "--cache-type-k", "f32", "--cache-type-v", "f32"});
  auto worker = std::make_unique<ChildProcess>(argv);
  const std::optional<std::string> line = worker->WaitForLine("listening on ", seconds(60));
  *address = line ? line->substr(line->find("listening on ") + 13) : "";
  return worker;
}

// A deltaserve-router on a free port with `config_text` as its --config and each of `workers`
// as a --worker; *port is 0 unless it printed its address and answered /ready.
std::unique_ptr<ChildProcess> StartRouter(const std::string& config_text,
                                          const std::vector<std::string>& workers, int* port) {
  static std::atomic<int> serial{0};
  const std::string config_path = ::testing::TempDir() + "/router_failover_" +
                                  std::to_string(::getpid()) + "_" + std::to_string(serial++) +
                                  ".yaml";
  std::ofstream(config_path) << config_text;
  std::vector<std::string> argv = {BinaryPath("router/deltaserve-router"), "--listen",
                                   "127.0.0.1:0", "--config", config_path};
  for (const std::string& w : workers) {
    argv.push_back("--worker");
    argv.push_back(w);
  }
  auto router = std::make_unique<ChildProcess>(argv);
  *port = 0;
  const std::optional<std::string> line = router->WaitForLine("listening on ", seconds(30));
  if (!line) return router;
  const int p = std::stoi(line->substr(line->rfind(':') + 1));
  for (int i = 0; i < 600; ++i) {
    if (Http(p, "GET", "/ready").status == 200) {
      *port = p;
      break;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  return router;
}

// Waits until the router's /metrics reports `worker`'s last health poll as `up` (1) or failed
// (0); false after `timeout`.
// Generate calls the router started on `worker` (deltaserve_router_worker_calls_total): exact
// once the answers are in, with no wait, and counting calls the worker refused at admission
// (which write no ` finish=` line), unlike the worker's log.
int64_t CallsStarted(int router_port, const std::string& worker) {
  const std::string body = Http(router_port, "GET", "/metrics").body;
  const std::string prefix = "deltaserve_router_worker_calls_total{worker=\"" + worker + "\"} ";
  const size_t at = body.find(prefix);
  if (at == std::string::npos) return -1;
  return std::atoll(body.c_str() + at + prefix.size());
}

bool WaitForWorkerUp(int router_port, const std::string& worker, int up, seconds timeout) {
  const std::string line =
      "deltaserve_router_worker_up{worker=\"" + worker + "\"} " + std::to_string(up) + "\n";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Http(router_port, "GET", "/metrics").body.find(line) != std::string::npos) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return false;
}

// Polls fast and keeps circuits open briefly, so a killed and restarted worker is noticed within
// a second instead of the defaults' five.
constexpr char kFastRouting[] = R"(
routing:
  max_attempts: 3
  retry_backoff_ms: 10
  health_interval_ms: 100
  circuit_failures: 2
  circuit_open_ms: 300
)";

// What became of one chat request of the burst.
enum class Outcome {
  kOk,               // 200 and a complete answer ([DONE] after a finish_reason when streamed)
  kErrorAfterStart,  // a stream whose tokens came from the killed worker: an error event
  kFailed,           // anything else: a request the router should have saved
};

struct BurstResult {
  Outcome outcome = Outcome::kFailed;
  bool stream = false;
  std::string detail;
};

BurstResult Classify(const HttpReply& r, bool stream, const std::string& killed_address) {
  BurstResult out;
  out.stream = stream;
  out.detail = std::to_string(r.status) + " " + r.body.substr(0, 400);
  // A non-streaming request never fails for the kill: the client has received nothing, so the
  // router retries it from scratch on the other worker (docs/router.md, Routing).
  if (r.status != 200) return out;
  if (!stream) {
    nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
    if (!j.is_discarded() && j.contains("choices") && !j["choices"].empty() &&
        j["choices"][0]["finish_reason"].is_string()) {
      out.outcome = Outcome::kOk;
    }
    return out;
  }
  bool finished = false, done = false, error_event = false;
  size_t pos = 0;
  while ((pos = r.body.find("data: ", pos)) != std::string::npos) {
    const size_t end = r.body.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string data = r.body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    nlohmann::json c = nlohmann::json::parse(data, nullptr, false);
    if (c.is_discarded()) continue;
    if (c.contains("error")) {
      error_event = c["error"].value("message", "").find(killed_address) != std::string::npos;
      if (!error_event) return out;  // an error that is not the killed worker's: a failure
    }
    if (c.contains("choices") && !c["choices"].empty() &&
        c["choices"][0]["finish_reason"].is_string()) {
      finished = true;
    }
  }
  if (error_event && done) {
    out.outcome = Outcome::kErrorAfterStart;
  } else if (finished && done) {
    out.outcome = Outcome::kOk;
  }
  return out;
}

// One chat request to `model` with a prompt of its own (the affinity key is the conversation up
// to the first user message, so distinct prompts spread over the workers).
BurstResult ChatOnce(int port, const std::string& tag, bool stream,
                     const std::string& killed_address) {
  const HttpReply r =
      Http(port, "POST", "/v1/chat/completions",
           ChatBody("tiny", "Request " + tag + ": tell me a short story.", 16, stream));
  return Classify(r, stream, killed_address);
}

// The line of a Prometheus text exposition that starts with `name`, or "" when none does.
std::string MetricLine(const std::string& metrics, const std::string& name) {
  for (size_t at = metrics.find(name); at != std::string::npos; at = metrics.find(name, at + 1)) {
    if (at == 0 || metrics[at - 1] == '\n') return metrics.substr(at, metrics.find('\n', at) - at);
  }
  return "";
}

TEST(RouterFailoverTest, WorkerKilledMidBurstThenRestartedOnItsPortIsUsedAgain) {
  std::string address[2];
  std::unique_ptr<ChildProcess> workers[2];
  for (int i = 0; i < 2; ++i) {
    workers[i] = StartWorker({"tiny"}, "127.0.0.1:0", 256, &address[i]);
    ASSERT_FALSE(address[i].empty()) << workers[i]->err();
  }
  int port = 0;
  std::unique_ptr<ChildProcess> router = StartRouter(kFastRouting, {address[0], address[1]}, &port);
  ASSERT_GT(port, 0) << router->err();
  for (const std::string& a : address) ASSERT_TRUE(WaitForWorkerUp(port, a, 1, seconds(30))) << a;
  const std::string killed = address[0];
  const std::string killed_port = killed.substr(killed.rfind(':') + 1);

  // The burst: 8 clients, 5 requests each, streaming and non-streaming alternating; worker 0 is
  // killed once 10 have completed, when both workers are busy and more requests are queued.
  constexpr int kClients = 8, kPerClient = 5, kKillAfter = 10;
  std::vector<BurstResult> results(kClients * kPerClient);
  std::atomic<int> completed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < kPerClient; ++i) {
        const int index = t * kPerClient + i;
        results[index] = ChatOnce(port, "burst-" + std::to_string(index), index % 2 == 0, killed);
        ++completed;
      }
    });
  }
  const auto kill_deadline = std::chrono::steady_clock::now() + seconds(120);
  while (completed.load() < kKillAfter && std::chrono::steady_clock::now() < kill_deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  const int completed_at_kill = completed.load();
  const int finished_on_killed = FinishedRequests(*workers[0]);
  workers[0]->Signal(SIGKILL);
  EXPECT_EQ(workers[0]->Wait(seconds(10)), 128 + SIGKILL);
  for (std::thread& c : clients) c.join();
  EXPECT_TRUE(WaitForWorkerUp(port, killed, 0, seconds(10))) << "the router never saw it down";
  EXPECT_LT(completed_at_kill, kClients * kPerClient) << "the kill came after the burst";

  int ok = 0, stream_errors = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const BurstResult& r = results[i];
    switch (r.outcome) {
      case Outcome::kOk:
        ++ok;
        break;
      case Outcome::kErrorAfterStart:
        ++stream_errors;
        break;
      case Outcome::kFailed:
        ADD_FAILURE() << "request " << i << (r.stream ? " (stream)" : "")
                      << " failed although it had not started on the killed worker: " << r.detail;
        break;
    }
  }
  // Each error after the first token is one the router logged and counted as such.
  const auto log_deadline = std::chrono::steady_clock::now() + seconds(2);
  while (CountOf(router->err(), "error after the first token") < stream_errors &&
         std::chrono::steady_clock::now() < log_deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  const int logged_after_start = CountOf(router->err(), "error after the first token");
  EXPECT_EQ(logged_after_start, stream_errors) << router->err();
  const std::string metrics = Http(port, "GET", "/metrics").body;
  const std::string retries_line = MetricLine(metrics, "deltaserve_router_retries_total");
  ASSERT_FALSE(retries_line.empty()) << metrics;
  const int retries = std::stoi(retries_line.substr(retries_line.rfind(' ') + 1));
  const std::string partial_line = MetricLine(metrics, "deltaserve_router_partial_retries_total");
  EXPECT_FALSE(partial_line.empty()) << metrics;
  // The kill hit work in flight: some request was retried elsewhere or broke mid-generation.
  EXPECT_GT(retries + stream_errors, 0) << metrics;
  std::cout << "[ burst    ] " << results.size() << " requests, worker " << killed
            << " killed after " << completed_at_kill << " completed (" << finished_on_killed
            << " of them on it): " << ok << " ok, " << stream_errors
            << " streams ended by an error event; " << retries << " retries ("
            << partial_line.substr(partial_line.rfind(' ') + 1)
            << " of them non-streaming requests cut mid-generation)\n";

  // Served on by the surviving worker.
  const int survivor_before = FinishedRequests(*workers[1]);
  for (int i = 0; i < 10; ++i) {
    const BurstResult r = ChatOnce(port, "after-" + std::to_string(i), i % 2 == 0, killed);
    EXPECT_EQ(r.outcome, Outcome::kOk) << "request after the kill: " << r.detail;
  }
  EXPECT_GE(FinishedRequestsSettled(*workers[1], survivor_before + 10) - survivor_before, 10)
      << workers[1]->err();

  // Restarted on the same port (retried while the kernel still holds the old socket): the router
  // reconnects and sends it requests again — its own log gains finished-request lines.
  std::string restarted_address;
  for (int attempt = 0; attempt < 20 && restarted_address.empty(); ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(milliseconds(250));
    workers[0] = StartWorker({"tiny"}, "127.0.0.1:" + killed_port, 256, &restarted_address);
  }
  ASSERT_EQ(restarted_address, killed) << workers[0]->err();
  EXPECT_TRUE(WaitForWorkerUp(port, killed, 1, seconds(30))) << router->err();
  const auto use_deadline = std::chrono::steady_clock::now() + seconds(60);
  int round = 0;
  while (FinishedRequests(*workers[0]) == 0 && std::chrono::steady_clock::now() < use_deadline) {
    std::vector<std::thread> wave;
    std::vector<BurstResult> wave_results(4);
    for (int i = 0; i < 4; ++i) {
      wave.emplace_back([&, i] {
        wave_results[i] = ChatOnce(
            port, "restart-" + std::to_string(round) + "-" + std::to_string(i), i % 2 == 0, killed);
      });
    }
    for (std::thread& w : wave) w.join();
    for (const BurstResult& r : wave_results) {
      EXPECT_EQ(r.outcome, Outcome::kOk) << "request after the restart: " << r.detail;
    }
    ++round;
  }
  EXPECT_GT(FinishedRequestsSettled(*workers[0], 1), 0)
      << "the restarted worker got no request in 60 s; router log:\n"
      << router->err();
  std::cout << "[ restart  ] worker " << killed << " back on its port, finished "
            << FinishedRequests(*workers[0]) << " requests after " << round << " waves of 4\n";
}

// A user message well over 64 tokens (the tiny vocabulary has 2,048 entries: every word here
// is at least one token).
std::string LongPrompt() {
  std::string text;
  for (int i = 0; i < 15; ++i) text += "alpha beta gamma delta " + std::to_string(i) + " ";
  return text;
}

TEST(RouterFailoverTest, AliasAnswersFromFallbackWhenPrimaryIsDownOrTooSmall) {
  // primary: its worker is killed below; small: a 64-position context; big: 1024 positions.
  std::string primary_address, small_address, big_address;
  std::unique_ptr<ChildProcess> primary =
      StartWorker({"primary"}, "127.0.0.1:0", 256, &primary_address);
  ASSERT_FALSE(primary_address.empty()) << primary->err();
  std::unique_ptr<ChildProcess> small = StartWorker({"small"}, "127.0.0.1:0", 64, &small_address);
  ASSERT_FALSE(small_address.empty()) << small->err();
  std::unique_ptr<ChildProcess> big = StartWorker({"big"}, "127.0.0.1:0", 1024, &big_address);
  ASSERT_FALSE(big_address.empty()) << big->err();
  const std::string config = std::string(kFastRouting) + R"(
models:
  - name: primary
  - name: small
  - name: big
aliases:
  steady: [primary, big]
  fast: [small, big]
)";
  int port = 0;
  std::unique_ptr<ChildProcess> router =
      StartRouter(config, {primary_address, small_address, big_address}, &port);
  ASSERT_GT(port, 0) << router->err();
  for (const std::string& a : {primary_address, small_address, big_address}) {
    ASSERT_TRUE(WaitForWorkerUp(port, a, 1, seconds(30))) << a;
  }
  auto answer = [&](const std::string& model, const std::string& content, bool stream) {
    return Http(port, "POST", "/v1/chat/completions", ChatBody(model, content, 4, stream));
  };
  auto answered_by = [](const HttpReply& r) -> std::string {
    const nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
    return j.is_discarded() ? "" : j.value("model", "");
  };

  // Too small: a short prompt fits "small" (64 positions); a long one does not and is answered
  // by "big", which the response names, streamed or not.
  const HttpReply short_fast = answer("fast", "Hi", false);
  ASSERT_EQ(short_fast.status, 200) << short_fast.body;
  EXPECT_EQ(answered_by(short_fast), "small");
  const HttpReply long_fast = answer("fast", LongPrompt(), false);
  ASSERT_EQ(long_fast.status, 200) << long_fast.body;
  EXPECT_EQ(answered_by(long_fast), "big");
  nlohmann::json long_json = nlohmann::json::parse(long_fast.body);
  EXPECT_GT(long_json["usage"]["prompt_tokens"].get<int>(), 64) << "the premise: over 64 tokens";
  const HttpReply long_stream = answer("fast", LongPrompt() + "again", true);
  ASSERT_EQ(long_stream.status, 200) << long_stream.body;
  EXPECT_NE(long_stream.body.find("\"model\":\"big\""), std::string::npos) << long_stream.body;
  EXPECT_EQ(long_stream.body.find("\"model\":\"small\""), std::string::npos) << long_stream.body;
  EXPECT_EQ(CallsStarted(port, small_address), 1)
      << "small must not be called for the long prompts";
  // The asked name is kept: calling "small" directly with the long prompt is a 400 with numbers.
  const HttpReply small_direct = answer("small", LongPrompt(), false);
  EXPECT_EQ(small_direct.status, 400) << small_direct.body;
  EXPECT_NE(small_direct.body.find("64"), std::string::npos) << small_direct.body;

  // Down: the primary answers while its worker runs; killed, the alias answers from "big" at
  // once (the call fails, the next candidate is tried) and after the router has noticed.
  const HttpReply before = answer("steady", "Hello there", false);
  ASSERT_EQ(before.status, 200) << before.body;
  EXPECT_EQ(answered_by(before), "primary");
  primary->Signal(SIGKILL);
  EXPECT_EQ(primary->Wait(seconds(10)), 128 + SIGKILL);
  const HttpReply at_once = answer("steady", "Hello there", false);
  ASSERT_EQ(at_once.status, 200) << at_once.body << router->err();
  EXPECT_EQ(answered_by(at_once), "big");
  // After the router has noticed: its health poll marks the primary down.
  ASSERT_TRUE(WaitForWorkerUp(port, primary_address, 0, seconds(10))) << router->err();
  const HttpReply later = answer("steady", "Hello there", true);
  ASSERT_EQ(later.status, 200) << later.body;
  EXPECT_NE(later.body.find("\"model\":\"big\""), std::string::npos) << later.body;
  EXPECT_NE(later.body.find("data: [DONE]"), std::string::npos) << later.body;

  // Each fallback is logged and counted (docs/router.md, degraded modes).
  EXPECT_TRUE(router->WaitForLine("fallback from 'small' to 'big'", seconds(5)).has_value())
      << router->err();
  EXPECT_TRUE(router->WaitForLine("fallback from 'primary' to 'big'", seconds(5)).has_value())
      << router->err();
  const std::string metrics = Http(port, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("deltaserve_router_fallbacks_total{from=\"small\",to=\"big\"} 2"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("deltaserve_router_fallbacks_total{from=\"primary\",to=\"big\"} 2"),
            std::string::npos)
      << metrics;
}

TEST(RouterFailoverTest, KeyOverItsRequestsPerMinuteGets429WithOpenAiError) {
  std::string address;
  std::unique_ptr<ChildProcess> worker = StartWorker({"tiny"}, "127.0.0.1:0", 256, &address);
  ASSERT_FALSE(address.empty()) << worker->err();
  const std::string limited = ::deltaserve::testing::Sha256HexWithTool("sk-limited"),
                    unlimited = ::deltaserve::testing::Sha256HexWithTool("sk-unlimited");
  ASSERT_EQ(limited.size(), 64u);
  ASSERT_EQ(unlimited.size(), 64u);
  const std::string config = R"(
api_keys:
  - name: limited
    sha256: )" + limited + R"(
    requests_per_minute: 2
  - name: unlimited
    sha256: )" + unlimited + "\n";
  int port = 0;
  std::unique_ptr<ChildProcess> router = StartRouter(config, {address}, &port);
  ASSERT_GT(port, 0) << router->err();
  const std::string limited_key = "Authorization: Bearer sk-limited\r\n";
  auto chat = [&](const std::string& headers, bool stream) {
    return Http(port, "POST", "/v1/chat/completions", ChatBody("tiny", "Hello", 2, stream),
                headers);
  };

  // A new key starts with a full bucket of 2: two requests pass, the third within the minute
  // (the bucket refills 2/60 requests per second) is refused.
  const HttpReply first = chat(limited_key, false);
  EXPECT_EQ(first.status, 200) << first.body;
  const HttpReply second = chat(limited_key, true);
  EXPECT_EQ(second.status, 200) << second.body;
  const HttpReply third = chat(limited_key, false);
  ASSERT_EQ(third.status, 429) << third.body;
  EXPECT_NE(third.headers.find("Retry-After: "), std::string::npos) << third.headers;
  const nlohmann::json error = nlohmann::json::parse(third.body, nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << third.body;
  ASSERT_TRUE(error.contains("error")) << third.body;
  const nlohmann::json& e = error["error"];
  for (const char* field : {"message", "type", "param", "code"}) {
    EXPECT_TRUE(e.contains(field)) << "missing error." << field << ": " << third.body;
  }
  EXPECT_EQ(e.value("type", ""), "rate_limit_error") << third.body;
  EXPECT_EQ(e.value("code", ""), "rate_limit_exceeded") << third.body;
  EXPECT_NE(e.value("message", "").find("limited"), std::string::npos) << third.body;
  EXPECT_EQ(e.value("message", "").find("sk-limited"), std::string::npos)
      << "the key itself must never be echoed: " << third.body;
  // Streaming requests are refused the same way, before any SSE.
  const HttpReply fourth = chat(limited_key, true);
  EXPECT_EQ(fourth.status, 429) << fourth.body;
  EXPECT_EQ(fourth.headers.find("text/event-stream"), std::string::npos) << fourth.headers;

  // The limit is the key's own: another key is still served; a wrong key is 401, not 429.
  const HttpReply other = chat("Authorization: Bearer sk-unlimited\r\n", false);
  EXPECT_EQ(other.status, 200) << other.body;
  EXPECT_EQ(chat("Authorization: Bearer sk-wrong\r\n", false).status, 401);
  // Refused requests reached no worker: two limited, one unlimited.
  EXPECT_EQ(CallsStarted(port, address), 3) << worker->err();
}

}  // namespace
}  // namespace deltaserve
