// The router config's `placement` section and the `admin` flag of API keys (router/config): the
// defaults, every key read, and each mistake refused naming the key path and line.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/config/router_config_validation.h"
#include "router/config/router_config_yaml.h"

namespace deltaserve::router {
namespace {

using ::testing::HasSubstr;

constexpr char kHashA[] = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

std::string ErrorMessage(const std::string& yaml) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(yaml);
  EXPECT_FALSE(c.ok()) << yaml;
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(PlacementConfigTest, DefaultsAreOnEveryThirtySecondsWithoutRedis) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->placement.enabled);
  EXPECT_EQ(c->placement.interval_seconds, 30);
  EXPECT_EQ(c->placement.hysteresis, 0.25);
  EXPECT_EQ(c->placement.min_gain, 1.0);
  // The cost-aware planner's machine: the rtx4090 profile of deltaserve-placement-sim.
  EXPECT_EQ(c->placement.device_bandwidth_gbs, 1008);
  EXPECT_EQ(c->placement.host_bandwidth_gbs, 37.4);
  EXPECT_EQ(c->placement.layer_sync_us, 18);
  EXPECT_EQ(c->placement.redis_url, "");
  EXPECT_EQ(c->placement.rpc_timeout_ms, 5000);
  EXPECT_EQ(c->placement.redis_timeout_ms, 1000);
}

TEST(PlacementConfigTest, EveryKeyIsRead) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(R"yaml(
placement:
  enabled: false
  interval_seconds: 120
  hysteresis: 0.5
  min_gain: 8
  device_bandwidth_gbs: 3350
  host_bandwidth_gbs: 120
  layer_sync_us: 0
  redis: redis://:pw@10.0.0.5:6380/2
  rpc_timeout_ms: 250
  redis_timeout_ms: 40
)yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->placement.enabled);
  EXPECT_EQ(c->placement.interval_seconds, 120);
  EXPECT_EQ(c->placement.hysteresis, 0.5);
  EXPECT_EQ(c->placement.min_gain, 8.0);
  EXPECT_EQ(c->placement.device_bandwidth_gbs, 3350);
  EXPECT_EQ(c->placement.host_bandwidth_gbs, 120);
  EXPECT_EQ(c->placement.layer_sync_us, 0);
  EXPECT_EQ(c->placement.redis_url, "redis://:pw@10.0.0.5:6380/2");
  EXPECT_EQ(c->placement.rpc_timeout_ms, 250);
  EXPECT_EQ(c->placement.redis_timeout_ms, 40);
}

TEST(PlacementConfigTest, MistakesAreNamed) {
  EXPECT_THAT(ErrorMessage("placement:\n  interval_seconds: 0\n"),
              HasSubstr("placement.interval_seconds (line 2, column 21): must be in [1, 86400], "
                        "got 0"));
  EXPECT_THAT(ErrorMessage("placement: {hysteresis: -0.1}\n"),
              HasSubstr("placement.hysteresis (line 1, column 25): must be in [0, 100]"));
  EXPECT_THAT(ErrorMessage("placement: {min_gain: -1}\n"), HasSubstr("placement.min_gain"));
  EXPECT_THAT(ErrorMessage("placement: {device_bandwidth_gbs: 0}\n"),
              HasSubstr("placement.device_bandwidth_gbs (line 1, column 35): must be in (0, "));
  EXPECT_THAT(ErrorMessage("placement: {host_bandwidth_gbs: -3}\n"),
              HasSubstr("placement.host_bandwidth_gbs"));
  EXPECT_THAT(ErrorMessage("placement: {host_bandwidth_gbs: fast}\n"),
              HasSubstr("placement.host_bandwidth_gbs"));
  EXPECT_THAT(ErrorMessage("placement: {layer_sync_us: -1}\n"),
              HasSubstr("placement.layer_sync_us"));
  EXPECT_THAT(ErrorMessage("placement: {enabled: maybe}\n"),
              HasSubstr("placement.enabled (line 1, column 22): must be true or false"));
  EXPECT_THAT(ErrorMessage("placement: {interval: 5}\n"),
              HasSubstr("unknown key 'interval' in placement"));
  EXPECT_THAT(ErrorMessage("placement: {redis: 'http://x'}\n"), HasSubstr("placement.redis"));
  EXPECT_THAT(ErrorMessage("placement: {rpc_timeout_ms: 0}\n"),
              HasSubstr("placement.rpc_timeout_ms"));
  EXPECT_THAT(ErrorMessage("placement: {redis_timeout_ms: 0}\n"),
              HasSubstr("placement.redis_timeout_ms"));
  // The password of a bad URL is not quoted.
  EXPECT_THAT(ErrorMessage("placement: {redis: 'redis://:hunter2@host:99999'}\n"),
              ::testing::Not(HasSubstr("hunter2")));
}

TEST(PlacementConfigTest, ApiKeysMayBeAdmins) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(
      "api_keys:\n  - {name: ops, sha256: " + std::string(kHashA) + ", admin: true}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->api_keys.size(), 1u);
  EXPECT_TRUE(c->api_keys[0].admin);
  c = ParseRouterConfigYaml("api_keys:\n  - {name: app, sha256: " + std::string(kHashA) + "}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->api_keys[0].admin);
  EXPECT_THAT(
      ErrorMessage("api_keys:\n  - {name: k, sha256: " + std::string(kHashA) + ", admin: yes}\n"),
      HasSubstr("api_keys[0].admin"));
}

}  // namespace
}  // namespace deltaserve::router
