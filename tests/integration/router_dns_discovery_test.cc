// Workers found by DNS (router/routing/worker_discovery.h), label integration.
// In process: a WorkerPool fed by WorkerDiscovery with an injected resolver, in front of two
// ScriptedWorker gRPC servers (TEST DOUBLES of deltaserve.v1.Worker) on one port of two
// loopback addresses, 127.0.0.1 and 127.0.0.2, as two pods behind a headless Service: the pool
// follows the name's answers (a worker added, one removed), a Generate stream on the removed
// worker runs to its end after the removal, and a failed lookup keeps the known workers.
// A real process: deltaserve-router with `workers: [dns:///localhost:PORT]` in its config file
// looks the name up with getaddrinfo, serves through the worker it found, counts the lookups in
// /metrics, and logs and counts a name that does not resolve.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "router/routing/worker_discovery.h"
#include "router/routing/worker_pool.h"
#include "tests/router/http_test_client.h"
#include "tests/router/scripted_worker.h"
#include "tests/support/child_process.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

namespace v1 = ::deltaserve::v1;
using router::WorkerDiscovery;
using router::WorkerEndpoint;
using router::WorkerPool;
using router::testing::GenerateScript;
using router::testing::RawHttpClient;
using router::testing::ScriptedModel;
using router::testing::ScriptedWorker;
using std::chrono::milliseconds;
using std::chrono::seconds;

// The DNS answers the test scripts: one name, a list of addresses or a failure.
class ScriptedDns {
 public:
  void Answer(std::vector<std::string> addresses) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = std::move(addresses);
  }
  void Fail() {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = absl::UnavailableError("scripted SERVFAIL");
  }
  router::HostResolver Resolver() {
    return [this](const std::string& name) -> absl::StatusOr<std::vector<std::string>> {
      std::lock_guard<std::mutex> lock(mu_);
      if (name != "workers.test") return absl::NotFoundError(name);
      return answer_;
    };
  }

 private:
  std::mutex mu_;
  absl::StatusOr<std::vector<std::string>> answer_ = std::vector<std::string>{};
};

std::vector<std::string> PoolAddresses(const WorkerPool& pool) {
  std::vector<std::string> out;
  for (const auto& w : pool.Snapshot()) out.push_back(w.address);
  return out;
}

bool AvailableAt(const WorkerPool& pool, const std::string& address) {
  for (const auto& s : pool.ModelsServing("m")) {
    if (s.address == address && s.available) return true;
  }
  return false;
}

TEST(RouterDnsDiscoveryTest, PoolFollowsTheNameAndAStreamOnARemovedWorkerFinishes) {
  ScriptedWorker a({ScriptedModel{}});
  GenerateScript held;
  held.pieces = {"one ", "two ", "three"};
  held.hold_until_release = true;
  a.SetScript(held);
  a.Start(0, "127.0.0.1");
  ScriptedWorker b({ScriptedModel{}});
  b.Start(a.port(), "127.0.0.2");  // the same port on another address: a second pod
  ASSERT_NE(b.port(), 0) << "127.0.0.2:" << a.port() << " is not free";
  const std::string port = std::to_string(a.port());

  ScriptedDns dns;
  dns.Answer({"127.0.0.1"});
  router::RoutingSettings settings;
  settings.health_interval_ms = 50;
  WorkerPool pool({}, settings);
  WorkerDiscovery discovery(&pool, dns.Resolver());
  discovery.SetEndpoints({WorkerEndpoint{"dns:///workers.test:" + port}}, absl::Hours(1));
  pool.Start();
  ASSERT_TRUE(pool.WaitForFirstPolls(absl::Seconds(10)));
  EXPECT_EQ(PoolAddresses(pool), std::vector<std::string>{"127.0.0.1:" + port});
  EXPECT_TRUE(AvailableAt(pool, "127.0.0.1:" + port));

  // A call on a, held after its first piece.
  std::unique_ptr<WorkerPool::CallTicket> ticket = pool.BeginCall("127.0.0.1:" + port, "m");
  ASSERT_NE(ticket, nullptr);
  grpc::ClientContext context;
  // Every Read below ends by this deadline (DEADLINE_EXCEEDED from Finish) if a never comes.
  context.set_deadline(std::chrono::system_clock::now() + seconds(60));
  v1::GenerateRequest request;
  request.set_model("m");
  request.add_prompt_token_ids('h');
  request.mutable_sampling()->set_max_tokens(8);
  std::unique_ptr<grpc::ClientReaderInterface<v1::GenerateEvent>> stream =
      ticket->stub->Generate(&context, request);
  v1::GenerateEvent event;
  ASSERT_TRUE(stream->Read(&event));
  std::string text = event.token_event().text();

  // The name now answers b and a: b is added; then only b: a is removed from the pool.
  dns.Answer({"127.0.0.1", "127.0.0.2"});
  discovery.Refresh();
  EXPECT_EQ(PoolAddresses(pool),
            (std::vector<std::string>{"127.0.0.1:" + port, "127.0.0.2:" + port}));
  dns.Answer({"127.0.0.2"});
  discovery.Refresh();
  EXPECT_EQ(PoolAddresses(pool), std::vector<std::string>{"127.0.0.2:" + port});
  ASSERT_TRUE(pool.WaitForFirstPolls(absl::Seconds(10)));
  EXPECT_TRUE(AvailableAt(pool, "127.0.0.2:" + port));
  EXPECT_EQ(pool.BeginCall("127.0.0.1:" + port, "m"), nullptr);  // no new calls to a

  // The call in flight on a is not cut: it runs to its final event.
  a.Release();
  bool final_seen = false;
  while (stream->Read(&event)) {
    if (event.has_token_event()) text += event.token_event().text();
    final_seen |= event.has_final_event();
  }
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << "the Generate stream on the removed worker: "
                           << status.error_message() << " (its deadline is 60 s)";
  EXPECT_TRUE(final_seen);
  EXPECT_EQ(text, "one two three");
  pool.EndCall(*ticket, router::CallOutcome::kSuccess);

  // A failed lookup keeps b; the metrics count both results.
  dns.Fail();
  discovery.Refresh();
  EXPECT_EQ(PoolAddresses(pool), std::vector<std::string>{"127.0.0.2:" + port});
  router::api::PrometheusText metrics;
  discovery.WriteMetrics(metrics);
  EXPECT_NE(metrics.text().find(
                R"(deltaserve_router_dns_lookups_total{name="workers.test",result="error"} 1)"),
            std::string::npos)
      << metrics.text();
  EXPECT_NE(metrics.text().find(
                R"(deltaserve_router_dns_lookups_total{name="workers.test",result="ok"} 3)"),
            std::string::npos)
      << metrics.text();
  EXPECT_NE(metrics.text().find(R"(deltaserve_router_dns_addresses{name="workers.test"} 1)"),
            std::string::npos)
      << metrics.text();
  discovery.Stop();
  pool.Stop();
}

// The periodic thread finds a new address without any call to Refresh.
TEST(RouterDnsDiscoveryTest, BackgroundLookupsAddWorkers) {
  ScriptedWorker a({ScriptedModel{}});
  a.Start(0, "127.0.0.1");
  ScriptedWorker b({ScriptedModel{}});
  b.Start(a.port(), "127.0.0.2");
  ASSERT_NE(b.port(), 0);
  const std::string port = std::to_string(a.port());
  ScriptedDns dns;
  dns.Answer({"127.0.0.1"});
  router::RoutingSettings settings;
  settings.health_interval_ms = 50;
  WorkerPool pool({}, settings);
  WorkerDiscovery discovery(&pool, dns.Resolver());
  discovery.SetEndpoints({WorkerEndpoint{"dns:///workers.test:" + port}}, absl::Milliseconds(20));
  pool.Start();
  discovery.Start();
  dns.Answer({"127.0.0.1", "127.0.0.2"});
  // Lookups every 20 ms and health polls every 50 ms: 30 s is slack for a loaded machine, not a
  // measurement.
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  while (!AvailableAt(pool, "127.0.0.2:" + port)) {
    ASSERT_TRUE(std::chrono::steady_clock::now() < deadline)
        << "127.0.0.2:" << port << " (the name's new answer) not available in the pool after 30 s; "
        << "the pool has " << ::testing::PrintToString(PoolAddresses(pool));
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(PoolAddresses(pool),
            (std::vector<std::string>{"127.0.0.1:" + port, "127.0.0.2:" + port}));
  discovery.Stop();
  pool.Stop();
}

// The router's port once it listens and /ready answers 200; 0 if not.
int WaitUntilReady(testing::ChildProcess& router) {
  auto line = router.WaitForLine("listening on ", seconds(30));
  if (!line.has_value()) return 0;
  const int port = std::stoi(line->substr(line->rfind(':') + 1));
  for (int i = 0; i < 400; ++i) {
    RawHttpClient c(port);
    c.Send(RawHttpClient::Request("GET", "/ready", "", /*close=*/true));
    auto r = c.ReadResponse(seconds(5));
    if (r.has_value() && r->status == 200) return port;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return 0;
}

TEST(RouterDnsDiscoveryTest, RouterProcessResolvesLocalhostAndServes) {
  ScriptedWorker worker({ScriptedModel{}});
  worker.Start();
  const std::string port = std::to_string(worker.port());
  const std::string config_path =
      ::testing::TempDir() + "/router_dns_" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(config_path) << "workers:\n  - dns:///localhost:" << port
                             << "\n  - dns:///deltaserve-no-such-worker.invalid:" << port
                             << "\nrouting:\n  dns_interval_ms: 200\n";
  testing::ChildProcess router({testing::BinaryPath("router/deltaserve-router"), "--listen",
                                "127.0.0.1:0", "--config", config_path});
  const int http = WaitUntilReady(router);
  ASSERT_NE(http, 0) << "the router did not print 'listening on' within 30 s, or its /ready did "
                        "not answer 200 within 400 polls; its stderr:\n"
                     << router.err();

  RawHttpClient c(http);
  ASSERT_TRUE(c.Send(RawHttpClient::Request(
      "POST", "/v1/completions", R"({"model":"m","prompt":"hi","max_tokens":8})", true)));
  auto r = c.ReadResponse(seconds(30));
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(nlohmann::json::parse(r->body)["choices"][0]["text"], "Hello!");
  EXPECT_EQ(worker.generate_calls(), 1);

  RawHttpClient m(http);
  ASSERT_TRUE(m.Send(RawHttpClient::Request("GET", "/metrics", "", true)));
  auto metrics = m.ReadResponse(seconds(10));
  ASSERT_TRUE(metrics.has_value());
  const std::string& body = metrics->body;
  EXPECT_NE(body.find("deltaserve_router_worker_up{worker=\"127.0.0.1:" + port + "\"} 1"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find(R"(deltaserve_router_dns_lookups_total{name="localhost",result="ok"})"),
            std::string::npos);
  EXPECT_NE(body.find("deltaserve_router_dns_lookups_total{name=\"deltaserve-no-such-worker."
                      "invalid\",result=\"error\"}"),
            std::string::npos);
  EXPECT_TRUE(
      router.WaitForLine("dns:///deltaserve-no-such-worker.invalid: lookup failed", seconds(10))
          .has_value())
      << router.err();
  router.Signal(SIGTERM);
  EXPECT_EQ(router.Wait(seconds(30)), 0) << router.err();
  ::unlink(config_path.c_str());
}

}  // namespace
}  // namespace deltaserve
