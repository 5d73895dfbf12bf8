// The `upstreams:` section of the router config (router/config/upstream_config.h): parsing,
// validation with the key path and line, base URLs, key material from a file or the
// environment (errors never quoting a key), and upstreams in alias chains (candidates.h).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/config/router_config_yaml.h"
#include "router/config/upstream_config.h"
#include "router/routing/candidates.h"

namespace deltaserve::router {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string ErrorMessage(const std::string& yaml) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(yaml);
  EXPECT_FALSE(c.ok()) << yaml;
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(UpstreamConfigTest, ParsesEveryField) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(R"(
upstreams:
  - name: cloud
    kind: anthropic
    base_url: https://api.example.com/v1/
    model: some-hosted-model
    api_key_env: CLOUD_API_KEY
    tls_ca_file: ca.pem
    connect_timeout_ms: 1500
    first_byte_timeout_ms: 20000
    idle_timeout_ms: 3000
    max_concurrent_requests: 8
    context_window: 200000
  - {name: vllm, base_url: "http://10.0.0.5:8000/v1", model: qwen}
models: [{name: qwen}]
aliases:
  smart: [qwen, cloud]
)");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->upstreams.size(), 2u);
  const UpstreamConfig& u = c->upstreams[0];
  EXPECT_EQ(u.name, "cloud");
  EXPECT_EQ(u.kind, UpstreamKind::kAnthropic);
  EXPECT_EQ(u.base_url, "https://api.example.com/v1/");
  EXPECT_EQ(u.model, "some-hosted-model");
  EXPECT_EQ(u.api_key_env, "CLOUD_API_KEY");
  EXPECT_EQ(u.tls_ca_file, "ca.pem");
  EXPECT_EQ(u.connect_timeout_ms, 1500);
  EXPECT_EQ(u.first_byte_timeout_ms, 20000);
  EXPECT_EQ(u.idle_timeout_ms, 3000);
  EXPECT_EQ(u.max_concurrent_requests, 8);
  EXPECT_EQ(u.context_window, 200000);
  EXPECT_TRUE(u.api_key.empty());  // parsing alone reads no key material
  const UpstreamConfig& v = c->upstreams[1];
  EXPECT_EQ(v.kind, UpstreamKind::kOpenAi);  // the default
  EXPECT_EQ(v.connect_timeout_ms, 5000);
  EXPECT_EQ(v.max_concurrent_requests, 0);
}

TEST(UpstreamConfigTest, RefusalsNameTheKeyAndLine) {
  EXPECT_THAT(ErrorMessage("upstreams:\n  - {name: a, kind: gemini, base_url: http://h, model: m}\n"),
              HasSubstr("upstreams[0].kind (line 2, column 21): must be openai or anthropic"));
  EXPECT_THAT(ErrorMessage("upstreams:\n  - {name: a, model: m}\n"),
              HasSubstr("upstreams[0].base_url"));
  EXPECT_THAT(ErrorMessage("upstreams:\n  - {name: a, base_url: http://h}\n"),
              HasSubstr("upstreams[0].model"));
  EXPECT_THAT(ErrorMessage("upstreams:\n  - {base_url: http://h, model: m}\n"),
              HasSubstr("upstreams[0].name"));
  EXPECT_THAT(ErrorMessage("upstreams:\n  - {name: a, base_url: http://h, model: m, api_key: x}\n"),
              HasSubstr("unknown key 'api_key'"));
  EXPECT_THAT(ErrorMessage("upstreams:\n  - {name: a, base_url: ftp://h, model: m}\n"),
              HasSubstr("upstreams[0].base_url (line 2, column 25): 'ftp://h' must start with "
                        "http:// or https://"));
  EXPECT_THAT(ErrorMessage("upstreams:\n  - {name: a, base_url: 'https://u:p@h/v1', model: m}\n"),
              HasSubstr("must not hold user information"));
  EXPECT_THAT(
      ErrorMessage("upstreams:\n  - {name: a, base_url: http://h, model: m, api_key_env: A, "
                   "api_key_file: f}\n"),
      HasSubstr("upstreams[0].api_key_env"));
  EXPECT_THAT(
      ErrorMessage("upstreams:\n  - {name: a, base_url: http://h, model: m, tls_ca_file: c}\n"),
      HasSubstr("only meaningful with an https:// base_url"));
  EXPECT_THAT(ErrorMessage("upstreams:\n  - {name: a, base_url: http://h, model: m, "
                           "idle_timeout_ms: 0}\n"),
              HasSubstr("upstreams[0].idle_timeout_ms"));
  EXPECT_THAT(ErrorMessage("upstreams:\n  - {name: a, base_url: http://h, model: m, "
                           "max_concurrent_requests: -1}\n"),
              HasSubstr("must not be negative"));
  // Models, upstreams and aliases share one namespace.
  EXPECT_THAT(ErrorMessage("models: [{name: a}]\nupstreams:\n  - {name: a, base_url: http://h, "
                           "model: m}\n"),
              HasSubstr("duplicate name 'a' (also models[0])"));
  // With `models` listed, an alias may name an upstream.
  EXPECT_TRUE(ParseRouterConfigYaml("models: [{name: q}]\nupstreams:\n  - {name: c, base_url: "
                                    "http://h, model: m}\naliases:\n  s: [q, c]\n")
                  .ok());
}

TEST(UpstreamConfigTest, BaseUrls) {
  absl::StatusOr<UpstreamUrl> u = ParseUpstreamUrl("https://api.example.com/v1/");
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "api.example.com");
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->path, "/v1");
  u = ParseUpstreamUrl("http://127.0.0.1:8080");
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->tls);
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->path, "");
  u = ParseUpstreamUrl("http://[::1]:9/x");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 9);
  for (const char* bad : {"", "http://", "http://h:0", "http://h:65536", "http://h:", "http://h?x",
                          "http://h/a b", "http://[::1", "http://h#f", "http://h/%zz\x01"}) {
    EXPECT_FALSE(ParseUpstreamUrl(bad).ok()) << bad;
  }
}

class UpstreamKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("upstream_keys_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  std::filesystem::path dir_;
};

TEST_F(UpstreamKeyTest, KeyFromAFileOrTheEnvironment) {
  Write("key.txt", "sk-file-key-0123456789abcdef\n");
  const std::string config = Write("router.yaml", R"(
upstreams:
  - {name: a, base_url: http://h/v1, model: m, api_key_file: key.txt}
  - {name: b, base_url: http://h/v1, model: m, api_key_env: UPSTREAM_TEST_KEY_B}
  - {name: c, base_url: http://h/v1, model: m}
)");
  ::setenv("UPSTREAM_TEST_KEY_B", "sk-env-key-0123456789abcdef", 1);
  absl::StatusOr<RouterConfig> c = LoadRouterConfigFile(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->upstreams[0].api_key, "sk-file-key-0123456789abcdef");
  EXPECT_EQ(c->upstreams[1].api_key, "sk-env-key-0123456789abcdef");
  EXPECT_EQ(c->upstreams[2].api_key, "");

  // A reload reads the key again.
  Write("key.txt", "sk-rotated-key-0123456789abcdef\n");
  c = LoadRouterConfigFile(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->upstreams[0].api_key, "sk-rotated-key-0123456789abcdef");
  ::unsetenv("UPSTREAM_TEST_KEY_B");
}

TEST_F(UpstreamKeyTest, MissingOrBadKeyMaterialStopsTheLoadWithoutQuotingIt) {
  ::unsetenv("UPSTREAM_TEST_KEY_UNSET");
  std::string config = Write("unset.yaml", "upstreams:\n  - {name: a, base_url: http://h, model: "
                                           "m, api_key_env: UPSTREAM_TEST_KEY_UNSET}\n");
  absl::StatusOr<RouterConfig> c = LoadRouterConfigFile(config);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("upstreams[0].api_key_env: $UPSTREAM_TEST_KEY_UNSET is not set"));

  // A key with a space (typed wrongly) is refused; the message never quotes it.
  Write("bad.txt", "sk-secret part two of the key\n");
  config = Write("bad.yaml", "upstreams:\n  - {name: a, base_url: http://h, model: m, "
                             "api_key_file: bad.txt}\n");
  c = LoadRouterConfigFile(config);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("upstreams[0].api_key_file"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("secret part")));

  config = Write("ca.yaml", "upstreams:\n  - {name: a, base_url: https://h, model: m, "
                            "tls_ca_file: nowhere.pem}\n");
  c = LoadRouterConfigFile(config);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("upstreams[0].tls_ca_file"));
}

TEST(UpstreamCandidatesTest, AliasChainsMixModelsAndUpstreams) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(R"(
models: [{name: qwen}]
upstreams:
  - {name: cloud, base_url: http://h/v1, model: hosted}
aliases:
  smart: [qwen, cloud]
  cloud-first: [cloud, qwen]
)");
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::vector<Candidate>> smart = ResolveCandidates("smart", *c);
  ASSERT_TRUE(smart.ok());
  ASSERT_EQ(smart->size(), 2u);
  EXPECT_EQ((*smart)[0].name, "qwen");
  EXPECT_EQ((*smart)[0].upstream, nullptr);
  EXPECT_EQ((*smart)[1].name, "cloud");
  ASSERT_NE((*smart)[1].upstream, nullptr);
  EXPECT_EQ((*smart)[1].upstream->model, "hosted");
  absl::StatusOr<std::vector<Candidate>> first = ResolveCandidates("cloud-first", *c);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)[0].name, "cloud");
  absl::StatusOr<std::vector<Candidate>> direct = ResolveCandidates("cloud", *c);
  ASSERT_TRUE(direct.ok());
  ASSERT_EQ(direct->size(), 1u);
  EXPECT_NE((*direct)[0].upstream, nullptr);
}

}  // namespace
}  // namespace deltaserve::router
