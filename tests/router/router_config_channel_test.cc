// The router config's worker channel (docs/router.md, "Worker channel"): `worker_channel` and a
// worker's own `channel` parse; settings that only work together are refused naming the key;
// LoadRouterConfigFile reads the PEM files (relative to the config's folder) and the secret, and
// a missing file stops the load with a message naming the key and the file.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/config/router_config_yaml.h"

namespace deltaserve::router {
namespace {

using ::testing::HasSubstr;

constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

// A fresh folder with the files of the config.
std::string Folder(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/router_config_channel_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const char* f : {"ca.crt", "router.crt", "router.key", "other-ca.crt"}) {
    std::ofstream(dir + "/" + f) << kPem;
  }
  std::ofstream(dir + "/worker.secret") << kSecret << "\n";
  return dir;
}

std::string Write(const std::string& dir, const std::string& yaml) {
  const std::string path = dir + "/router.yaml";
  std::ofstream(path) << yaml;
  return path;
}

TEST(RouterConfigChannelTest, GlobalAndPerWorkerChannelsParse) {
  auto c = ParseRouterConfigYaml(R"yaml(
workers:
  - 10.0.0.1:50051
  - address: 10.0.0.2:50051
    channel:
      tls_ca_file: other-ca.crt
      tls_server_name: worker2.internal
worker_channel:
  tls_ca_file: ca.crt
  tls_cert_file: router.crt
  tls_key_file: router.key
  secret_file: worker.secret
)yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->workers.size(), 2u);
  EXPECT_FALSE(c->workers[0].channel.has_value());
  ASSERT_TRUE(c->workers[1].channel.has_value());
  EXPECT_EQ(c->workers[1].address, "10.0.0.2:50051");
  EXPECT_EQ(c->workers[1].channel->tls_ca_file, "other-ca.crt");
  EXPECT_EQ(c->workers[1].channel->tls_server_name, "worker2.internal");
  EXPECT_EQ(c->workers[1].channel->secret_file, "");
  EXPECT_EQ(c->worker_channel.tls_cert_file, "router.crt");
  EXPECT_EQ(c->worker_channel.secret_file, "worker.secret");
  // Parsing text reads no files.
  EXPECT_EQ(c->worker_channel.ca_pem, "");
}

TEST(RouterConfigChannelTest, SettingsThatGoTogetherAreRefusedByKey) {
  struct Case {
    const char* yaml;
    const char* message;
  };
  const Case cases[] = {
      {"worker_channel: {tls_ca_file: a, tls_cert_file: b}",
       "worker_channel.tls_key_file (line 1, column 17): is missing"},
      {"worker_channel: {tls_cert_file: b, tls_key_file: c}",
       "worker_channel.tls_cert_file (line 1, column 33): needs tls_ca_file"},
      {"worker_channel: {tls_server_name: w}", "worker_channel.tls_server_name"},
      {"worker_channel: {secret_file: a, secret_env: B}",
       "worker_channel.secret_env (line 1, column 46): and secret_file are both given"},
      {"worker_channel: {tls_ca: a}", "unknown key 'tls_ca' in worker_channel"},
      {"workers: [{channel: {secret_env: X}}]", "workers[0].address"},
      {"workers: [{address: 'h:1', channel: {tls_key_file: k}}]",
       "workers[0].channel.tls_cert_file"},
      {"workers: [{address: 'h:1', port: 2}]", "unknown key 'port' in workers[0]"},
  };
  for (const Case& c : cases) {
    auto r = ParseRouterConfigYaml(c.yaml);
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message)) << c.yaml;
  }
}

TEST(RouterConfigChannelTest, LoadReadsTheFilesRelativeToTheConfig) {
  const std::string dir = Folder("load");
  auto c = LoadRouterConfigFile(Write(dir, R"yaml(
workers:
  - address: 127.0.0.1:50052
    channel: {secret_env: DELTASERVE_ROUTER_CONFIG_CHANNEL_TEST}
worker_channel:
  tls_ca_file: ca.crt
  tls_cert_file: router.crt
  tls_key_file: )yaml" + dir + R"yaml(/router.key
  secret_file: worker.secret
)yaml"));
  // The per-worker secret_env is not set: the load stops, naming the variable.
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("workers[0].channel.secret_env"));
  EXPECT_THAT(c.status().message(), HasSubstr("DELTASERVE_ROUTER_CONFIG_CHANNEL_TEST"));

  ::setenv("DELTASERVE_ROUTER_CONFIG_CHANNEL_TEST", "from-the-environment-0123", 1);
  c = LoadRouterConfigFile(dir + "/router.yaml");
  ::unsetenv("DELTASERVE_ROUTER_CONFIG_CHANNEL_TEST");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->worker_channel.ca_pem, kPem);
  EXPECT_EQ(c->worker_channel.cert_pem, kPem);
  EXPECT_EQ(c->worker_channel.key_pem, kPem);
  EXPECT_EQ(c->worker_channel.secret, kSecret);  // the file's newline is not part of it
  EXPECT_EQ(c->workers[0].channel->secret, "from-the-environment-0123");
}

TEST(RouterConfigChannelTest, AMissingOrBadFileIsNamed) {
  const std::string dir = Folder("missing");
  struct Case {
    std::string yaml;
    std::string message;
  };
  const Case cases[] = {
      {"worker_channel: {tls_ca_file: nope.crt}",
       "worker_channel.tls_ca_file (line 1, column 31): tls_ca_file " + dir + "/nope.crt: "},
      {"worker_channel: {tls_ca_file: ca.crt, tls_cert_file: router.crt, tls_key_file: x.key}",
       "tls_key_file " + dir + "/x.key"},
      {"worker_channel: {secret_file: gone.secret}",
       "worker_channel.secret_file (line 1, column 31): secret file " + dir + "/gone.secret"},
      {"workers: [{address: 'h:1', channel: {tls_ca_file: /nonexistent/ca.crt}}]",
       "workers[0].channel.tls_ca_file"},
  };
  for (const Case& c : cases) {
    auto r = LoadRouterConfigFile(Write(dir, c.yaml));
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message)) << c.yaml;
    EXPECT_THAT(r.status().message(), HasSubstr(dir + "/router.yaml: ")) << c.yaml;
  }
  std::ofstream(dir + "/not-pem.crt") << "hello";
  auto r = LoadRouterConfigFile(Write(dir, "worker_channel: {tls_ca_file: not-pem.crt}"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("not PEM"));
  std::ofstream(dir + "/weak.secret") << "hunter2";
  r = LoadRouterConfigFile(Write(dir, "worker_channel: {secret_file: weak.secret}"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("at least 16"));
  EXPECT_THAT(r.status().message(), ::testing::Not(HasSubstr("hunter2")));
}

}  // namespace
}  // namespace deltaserve::router
