// The authenticated router<->worker channel with real processes (label integration): certificates
// made by the test with openssl (a CA, the worker's server certificate for 127.0.0.1, the
// router's client certificate, and a rogue CA with its own client certificate).
//  - Mutual TLS: a real completion through the router with the right client certificate; calls
//    without a client certificate are refused UNAUTHENTICATED (Worker RPCs and the health
//    service), counted and logged once; a certificate from the rogue CA and a plain-text client
//    never get past the handshake; a router without a client certificate gets no answer.
//  - Shared secret: a completion through the router with the secret from a file; calls with no
//    or a wrong secret refused, counted by reason, logged once per interval however many come;
//    the secret never appears in the log; the secret from $DELTASERVE_WORKER_SECRET.
//  - Start-up: missing files and half-given settings stop the worker, the router and a bench
//    client with a non-zero exit and a message naming the file or flag.
#include "proto/worker_channel.h"

#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "deltaserve/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/router_service.h"
#include "tests/support/child_process.h"
#include "tests/support/test_certificates.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

using ::deltaserve::testing::BinaryPath;
using ::deltaserve::testing::ChildProcess;
using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::Http;
using ::deltaserve::testing::RouterService;
using ::deltaserve::testing::TestCertFiles;
using ::deltaserve::testing::TestLeafKind;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kSecret[] = "s3cr3t-for-the-worker-channel-test-0123456789";
constexpr char kRefusedLine[] = "refused an unauthenticated call to ";

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/worker_channel_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The test's PKI: the real CA signs the worker's and the router's certificates; the rogue CA
// signs a client certificate the worker must not accept.
struct Pki {
  TestCertFiles ca, worker, router, rogue_ca, rogue_client;
};

std::optional<Pki> MakePki(const std::string& dir) {
  Pki p;
  auto ca = testing::MakeTestCa(dir, "ca");
  auto rogue_ca = testing::MakeTestCa(dir, "rogue-ca");
  if (!ca || !rogue_ca) return std::nullopt;
  auto worker = testing::MakeTestLeaf(dir, "worker", *ca, TestLeafKind::kServer);
  auto router = testing::MakeTestLeaf(dir, "router", *ca, TestLeafKind::kClient);
  auto rogue = testing::MakeTestLeaf(dir, "rogue-client", *rogue_ca, TestLeafKind::kClient);
  if (!worker || !router || !rogue) return std::nullopt;
  return Pki{*ca, *worker, *router, *rogue_ca, *rogue};
}

// What follows "<needle>" on the process's first line containing it.
std::string AfterLine(ChildProcess& p, const std::string& needle) {
  auto line = p.WaitForLine(needle, seconds(60));
  if (!line) return "";
  return line->substr(line->find(needle) + needle.size());
}

int MetricsPort(ChildProcess& worker) {
  const std::string rest = AfterLine(worker, "metrics on 127.0.0.1:");
  return std::atoi(rest.c_str());
}

// deltaserve_worker_unauthenticated_calls_total{reason="<reason>"}, -1 when absent.
int64_t Refused(int metrics_port, const std::string& reason) {
  const std::string body = Http(metrics_port, "GET", "/metrics").body;
  const std::string key =
      "deltaserve_worker_unauthenticated_calls_total{reason=\"" + reason + "\"} ";
  const size_t at = body.find(key);
  return at == std::string::npos ? -1 : std::atoll(body.c_str() + at + key.size());
}

int CountLines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

grpc::Status CallInfo(const std::string& address, const proto::WorkerClientSecurity& security) {
  auto stub =
      v1::Worker::NewStub(proto::CreateWorkerChannel(address, security, grpc::ChannelArguments()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
  v1::WorkerInfoRequest req;
  v1::WorkerInfo info;
  return stub->GetWorkerInfo(&ctx, req, &info);
}

grpc::Status CallHealth(const std::string& address, const proto::WorkerClientSecurity& security) {
  auto stub = grpc::health::v1::Health::NewStub(
      proto::CreateWorkerChannel(address, security, grpc::ChannelArguments()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  return stub->Check(&ctx, req, &resp);
}

std::string Chat() {
  return nlohmann::json{{"model", "tiny"},
                        {"max_tokens", 4},
                        {"temperature", 0},
                        {"messages", {{{"role", "user"}, {"content", "Hello there"}}}}}
      .dump();
}

std::vector<std::string> WorkerArgv(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {BinaryPath("worker/deltaserve-worker"),
                                   "--model",
                                   "tiny=" + GoldenPath("tiny-dense-f32.gguf"),
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--threads",
                                   "1",
                                   "--ctx",
                                   "256",
                                   "--ram",
                                   "2GiB",
                                   "--cache-type-k",
                                   "f32",
                                   "--cache-type-v",
                                   "f32"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

TEST(WorkerChannelTest, MutualTlsServesTheRouterAndRefusesOthers) {
  const std::string dir = FreshDir("mtls");
  const std::optional<Pki> pki = MakePki(dir);
  ASSERT_TRUE(pki);
  RouterService s("worker_channel:\n  tls_ca_file: " + pki->ca.cert + "\n  tls_cert_file: " +
                      pki->router.cert + "\n  tls_key_file: " + pki->router.key + "\n",
                  {"--tls-cert", pki->worker.cert, "--tls-key", pki->worker.key, "--tls-client-ca",
                   pki->ca.cert, "--metrics-port", "0"});
  ASSERT_GT(s.port(), 0);
  EXPECT_THAT(s.worker().err(), HasSubstr("gRPC port: mutual TLS\n"));
  EXPECT_THAT(s.router().err(), HasSubstr(": mutual TLS\n"));
  const auto r = Http(s.port(), "POST", "/v1/chat/completions", Chat());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(nlohmann::json::parse(r.body)["usage"]["completion_tokens"], 4);

  const std::string address = AfterLine(s.worker(), "listening on ");
  const int metrics = MetricsPort(s.worker());
  ASSERT_GT(metrics, 0);
  EXPECT_EQ(Refused(metrics, "no_client_cert"), 0);

  proto::WorkerClientSecurity good{ReadText(pki->ca.cert), ReadText(pki->router.cert),
                                   ReadText(pki->router.key), "", ""};
  EXPECT_TRUE(CallInfo(address, good).ok());
  EXPECT_TRUE(CallHealth(address, good).ok());

  // TLS that verifies the worker, but no client certificate: a call, refused.
  proto::WorkerClientSecurity no_cert{ReadText(pki->ca.cert), "", "", "", ""};
  grpc::Status st = CallInfo(address, no_cert);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("client certificate"));
  EXPECT_EQ(CallHealth(address, no_cert).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Refused(metrics, "no_client_cert"), 2);

  // A client certificate from another CA, and plain text: the handshake fails, no call exists.
  proto::WorkerClientSecurity rogue{ReadText(pki->ca.cert), ReadText(pki->rogue_client.cert),
                                    ReadText(pki->rogue_client.key), "", ""};
  st = CallInfo(address, rogue);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  st = CallInfo(address, proto::WorkerClientSecurity{});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  // The worker's certificate checked against the wrong CA: the client refuses the worker.
  proto::WorkerClientSecurity wrong_root{ReadText(pki->rogue_ca.cert), ReadText(pki->router.cert),
                                         ReadText(pki->router.key), "", ""};
  EXPECT_FALSE(CallInfo(address, wrong_root).ok());
  EXPECT_EQ(Refused(metrics, "no_client_cert"), 2);

  // One log line for the two refusals (rate-limited), naming the method and the reason.
  const std::string log = s.worker().err();
  EXPECT_EQ(CountLines(log, kRefusedLine), 1) << log;
  EXPECT_THAT(log, HasSubstr(std::string(kRefusedLine) +
                             "/deltaserve.v1.Worker/GetWorkerInfo (no_client_cert)"));

  // A router that trusts the worker but has no client certificate is served nothing.
  const std::string cfg = dir + "/no-cert-router.yaml";
  std::ofstream(cfg) << "worker_channel:\n  tls_ca_file: " << pki->ca.cert << "\n";
  ChildProcess router({BinaryPath("router/deltaserve-router"), "--listen", "127.0.0.1:0",
                       "--worker", address, "--config", cfg});
  const int port = std::atoi(AfterLine(router, "listening on 127.0.0.1:").c_str());
  ASSERT_GT(port, 0) << router.err();
  for (int i = 0; i < 200 && Refused(metrics, "no_client_cert") == 2; ++i) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_GT(Refused(metrics, "no_client_cert"), 2);
  EXPECT_NE(Http(port, "POST", "/v1/chat/completions", Chat()).status, 200);
}

TEST(WorkerChannelTest, SharedSecretServesTheRouterAndRefusesOthers) {
  const std::string dir = FreshDir("secret");
  const std::string secret_file = dir + "/worker.secret";
  std::ofstream(secret_file) << kSecret << "\n";
  RouterService s("worker_channel:\n  secret_file: " + secret_file + "\n",
                  {"--auth-secret-file", secret_file, "--metrics-port", "0"});
  ASSERT_GT(s.port(), 0);
  EXPECT_THAT(s.worker().err(), HasSubstr("gRPC port: plain text, shared secret required\n"));
  EXPECT_THAT(s.router().err(), HasSubstr(": plain text, shared secret\n"));
  const auto r = Http(s.port(), "POST", "/v1/chat/completions", Chat());
  ASSERT_EQ(r.status, 200) << r.body;

  const std::string address = AfterLine(s.worker(), "listening on ");
  const int metrics = MetricsPort(s.worker());
  ASSERT_GT(metrics, 0);
  proto::WorkerClientSecurity right, wrong, none;
  right.secret = kSecret;
  wrong.secret = std::string(kSecret).substr(0, sizeof(kSecret) - 2) + "X";
  EXPECT_TRUE(CallInfo(address, right).ok());
  EXPECT_TRUE(CallHealth(address, right).ok());

  grpc::Status st = CallInfo(address, none);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(st.error_message(), HasSubstr("no x-deltaserve-worker-secret"));
  EXPECT_EQ(CallHealth(address, none).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // A scanner's burst: every call refused and counted, one log line for all of them.
  for (int i = 0; i < 20; ++i) {
    st = CallInfo(address, wrong);
    ASSERT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_THAT(st.error_message(), HasSubstr("wrong x-deltaserve-worker-secret"));
  EXPECT_EQ(Refused(metrics, "missing_secret"), 2);
  EXPECT_EQ(Refused(metrics, "wrong_secret"), 20);
  EXPECT_EQ(Refused(metrics, "no_client_cert"), 0);
  const std::string log = s.worker().err();
  EXPECT_EQ(CountLines(log, kRefusedLine), 1) << log;
  EXPECT_THAT(log, HasSubstr("/deltaserve.v1.Worker/GetWorkerInfo (missing_secret)"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr(kSecret)));
  EXPECT_THAT(s.router().err(), ::testing::Not(HasSubstr(kSecret)));
}

TEST(WorkerChannelTest, SecretFromTheEnvironment) {
  ::setenv(proto::kWorkerSecretEnv, kSecret, 1);
  ChildProcess worker(WorkerArgv({}));
  ::unsetenv(proto::kWorkerSecretEnv);
  const std::string address = AfterLine(worker, "listening on ");
  ASSERT_FALSE(address.empty()) << worker.err();
  EXPECT_THAT(worker.err(), HasSubstr("shared secret required"));
  EXPECT_EQ(CallInfo(address, {}).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  proto::WorkerClientSecurity right;
  right.secret = kSecret;
  EXPECT_TRUE(CallInfo(address, right).ok());
}

TEST(WorkerChannelTest, BadSettingsStopTheProcessesNamingTheFile) {
  const std::string dir = FreshDir("startup");
  const std::optional<Pki> pki = MakePki(dir);
  ASSERT_TRUE(pki);
  const std::string missing = dir + "/missing.crt";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--tls-cert", missing, "--tls-key", pki->worker.key}, "--tls-cert " + missing},
      {{"--tls-cert", pki->worker.cert, "--tls-key", pki->worker.key, "--tls-client-ca", missing},
       "--tls-client-ca " + missing},
      {{"--tls-cert", pki->worker.cert}, "--tls-cert and --tls-key go together"},
      {{"--tls-client-ca", pki->ca.cert}, "--tls-client-ca needs --tls-cert"},
      {{"--auth-secret-file", dir + "/nope.secret"}, "secret file " + dir + "/nope.secret"},
      {{"--auth-secret", kSecret}, "visible to every user"},
  };
  for (const Case& c : cases) {
    ChildProcess worker(WorkerArgv(c.args));
    const std::optional<int> code = worker.Wait(seconds(30));
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 2) << worker.err();
    EXPECT_THAT(worker.err(), HasSubstr(c.message));
    EXPECT_THAT(worker.err(), ::testing::Not(HasSubstr("listening on")));
  }
  // A key that is not the certificate's: gRPC cannot listen with it.
  ChildProcess mismatched(
      WorkerArgv({"--tls-cert", pki->worker.cert, "--tls-key", pki->router.key}));
  const std::optional<int> code = mismatched.Wait(seconds(60));
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  EXPECT_THAT(mismatched.err(), HasSubstr("TLS certificate"));

  // The other clients of a worker: the bench's stand-in worker reads its --info-from channel's
  // files before anything else.
  for (const auto& [flag, value] : {std::pair<std::string, std::string>{"--worker-tls-ca", missing},
                                    {"--worker-secret-file", dir + "/nope.secret"}}) {
    ChildProcess client({BinaryPath("bench/deltaserve-bench-stand-in-worker"), "--info-from",
                         "127.0.0.1:1", "--mode", "instant", flag, value});
    const std::optional<int> ccode = client.Wait(seconds(30));
    ASSERT_TRUE(ccode.has_value());
    EXPECT_EQ(*ccode, 2) << client.err();
    EXPECT_THAT(client.err(), HasSubstr(value));
  }

  const std::string cfg = dir + "/router.yaml";
  std::ofstream(cfg) << "worker_channel:\n  tls_ca_file: missing.crt\n";
  ChildProcess router({BinaryPath("router/deltaserve-router"), "--listen", "127.0.0.1:0",
                       "--worker", "127.0.0.1:1", "--config", cfg});
  const std::optional<int> rcode = router.Wait(seconds(30));
  ASSERT_TRUE(rcode.has_value());
  EXPECT_EQ(*rcode, 1);
  EXPECT_THAT(router.err(), HasSubstr("worker_channel.tls_ca_file"));
  EXPECT_THAT(router.err(), HasSubstr(dir + "/missing.crt"));
}

}  // namespace
}  // namespace deltaserve
