// DNS discovery of workers (router/routing/worker_discovery.h), label unit: dns:///NAME:PORT
// parsing, the expansion of the configured list into the pool's list (row by row against the
// rules in the header), getaddrinfo on names whose answers RFC 6761 fixes (`localhost` is
// loopback, `.invalid` never resolves), and the config file's validation of dns:/// entries
// and of routing.dns_interval_ms. The pool side (workers added and removed while serving) is
// tests/integration/router_dns_discovery_test.cc.
#include "router/routing/worker_discovery.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "router/config/router_config_yaml.h"

namespace deltaserve::router {
namespace {

TEST(ParseDnsTargetTest, TakesNameAndPortOfDnsAddressesOnly) {
  auto t = ParseDnsTarget("dns:///deltaserve-workers.ns.svc.cluster.local:50051");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->name, "deltaserve-workers.ns.svc.cluster.local");
  EXPECT_EQ(t->port, 50051);
  EXPECT_FALSE(ParseDnsTarget("10.0.0.5:50051").has_value());
  EXPECT_FALSE(ParseDnsTarget("dns:///name").has_value());    // no port
  EXPECT_FALSE(ParseDnsTarget("dns:///:50051").has_value());  // no name
  EXPECT_FALSE(ParseDnsTarget("dns:///n:0").has_value());     // port out of range
  EXPECT_FALSE(ParseDnsTarget("dns:///n:65536").has_value());
  EXPECT_FALSE(ParseDnsTarget("dns://n:50051").has_value());  // not dns:///
}

WorkerEndpoint Endpoint(std::string address) {
  WorkerEndpoint e;
  e.address = std::move(address);
  return e;
}

std::vector<std::string> Addresses(const std::vector<WorkerEndpoint>& v) {
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(e.address);
  return out;
}

TEST(ExpandWorkersTest, DnsEntriesBecomeOneWorkerPerAddressInConfiguredOrder) {
  const std::vector<WorkerEndpoint> configured = {
      Endpoint("10.0.0.1:7000"), Endpoint("dns:///w:50051"), Endpoint("10.0.0.9:7000")};
  const auto out = ExpandWorkers(configured, {{"w", {"10.1.0.2", "10.1.0.3", "fd00::7"}}});
  EXPECT_EQ(Addresses(out),
            (std::vector<std::string>{"10.0.0.1:7000", "10.1.0.2:50051", "10.1.0.3:50051",
                                      "[fd00::7]:50051", "10.0.0.9:7000"}));
}

TEST(ExpandWorkersTest, UnresolvedNamesAddNothingAndDuplicatesKeepTheFirst) {
  const std::vector<WorkerEndpoint> configured = {Endpoint("dns:///a:1"), Endpoint("dns:///b:1"),
                                                  Endpoint("10.0.0.2:1")};
  // b not resolved (yet); a's second address is also written out as a plain entry.
  const auto out = ExpandWorkers(configured, {{"a", {"10.0.0.1", "10.0.0.2"}}});
  EXPECT_EQ(Addresses(out), (std::vector<std::string>{"10.0.0.1:1", "10.0.0.2:1"}));
}

TEST(ExpandWorkersTest, TlsChecksTheDnsNameUnlessAServerNameIsGiven) {
  WorkerEndpoint tls = Endpoint("dns:///workers.ns.svc:50051");
  tls.channel.emplace();
  tls.channel->ca_pem = "CA";
  tls.channel->secret = "s3cret-s3cret-s3cret";
  WorkerEndpoint named = Endpoint("dns:///other:50051");
  named.channel = tls.channel;
  named.channel->tls_server_name = "worker.internal";
  WorkerEndpoint plain = Endpoint("dns:///plain:50051");
  plain.channel.emplace();  // no TLS: no server name to check
  const auto out = ExpandWorkers(
      {tls, named, plain},
      {{"workers.ns.svc", {"10.0.0.1"}}, {"other", {"10.0.0.2"}}, {"plain", {"10.0.0.3"}}});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].channel->tls_server_name, "workers.ns.svc");
  EXPECT_EQ(out[0].channel->secret, "s3cret-s3cret-s3cret");
  EXPECT_EQ(out[1].channel->tls_server_name, "worker.internal");
  EXPECT_EQ(out[2].channel->tls_server_name, "");
}

TEST(SystemResolverTest, LocalhostIsLoopbackAndInvalidNamesFail) {
  const HostResolver resolve = SystemResolver();
  absl::StatusOr<std::vector<std::string>> local = resolve("localhost");
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_FALSE(local->empty());
  for (const std::string& a : *local) {
    EXPECT_TRUE(a.starts_with("127.") || a == "::1") << a;  // RFC 6761 §6.3
  }
  EXPECT_FALSE(resolve("deltaserve-no-such-worker.invalid").ok());  // RFC 6761 §6.4
}

// ParseRouterConfigYaml validates what it parses.
absl::Status Validate(const std::string& yaml) { return ParseRouterConfigYaml(yaml).status(); }

TEST(DnsWorkerConfigTest, DnsAddressesAndTheIntervalAreValidated) {
  EXPECT_TRUE(Validate("workers: [\"dns:///w.ns.svc.cluster.local:50051\"]\n"
                       "routing: {dns_interval_ms: 2000}\n")
                  .ok());
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml("routing: {dns_interval_ms: 2000}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->routing.dns_interval_ms, 2000);
  EXPECT_EQ(RouterConfig{}.routing.dns_interval_ms, 5000);
  for (const char* bad :
       {"dns:///w", "dns:///:50051", "dns:///w:0", "dns:///[::1]:50051", "dns:///w x:50051"}) {
    const absl::Status s = Validate(absl::StrCat("workers: [\"", bad, "\"]\n"));
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("workers[0]"), std::string::npos) << s;
  }
  const absl::Status s = Validate("routing: {dns_interval_ms: 5}\n");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("routing.dns_interval_ms"), std::string::npos) << s;
}

}  // namespace
}  // namespace deltaserve::router
