// Unit tests of common/redis_url: ParseRedisUrl row by row, the password never appearing in
// RedactedUrl or in errors.
#include "common/redis_url.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::common {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ParseRedisUrlTest, HostAndDefaults) {
  absl::StatusOr<RedisOptions> o = ParseRedisUrl("redis://cache.internal");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->host, "cache.internal");
  EXPECT_EQ(o->port, 6379);
  EXPECT_EQ(o->db, 0);
  EXPECT_FALSE(o->tls);
  EXPECT_TRUE(o->user.empty());
  EXPECT_TRUE(o->password.empty());
}

TEST(ParseRedisUrlTest, PortDbAndPassword) {
  absl::StatusOr<RedisOptions> o = ParseRedisUrl("redis://:s3cret@10.0.0.5:6380/2");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->host, "10.0.0.5");
  EXPECT_EQ(o->port, 6380);
  EXPECT_EQ(o->db, 2);
  EXPECT_EQ(o->user, "");
  EXPECT_EQ(o->password, "s3cret");
}

TEST(ParseRedisUrlTest, AclUserAndPercentDecoding) {
  absl::StatusOr<RedisOptions> o = ParseRedisUrl("redis://snap%2Dwriter:p%40ss%3Aw%2Frd@h:1/0");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->user, "snap-writer");
  EXPECT_EQ(o->password, "p@ss:w/rd");
  EXPECT_EQ(o->port, 1);
}

TEST(ParseRedisUrlTest, UnencodedAtInPasswordUsesTheLastAt) {
  absl::StatusOr<RedisOptions> o = ParseRedisUrl("redis://u:a@b@host:7000");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->password, "a@b");
  EXPECT_EQ(o->host, "host");
}

TEST(ParseRedisUrlTest, Ipv6) {
  absl::StatusOr<RedisOptions> o = ParseRedisUrl("redis://[::1]:6390/1");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->host, "::1");
  EXPECT_EQ(o->port, 6390);
  EXPECT_EQ(o->db, 1);
  o = ParseRedisUrl("redis://[fe80::1:2]");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->host, "fe80::1:2");
  EXPECT_EQ(o->port, 6379);
}

TEST(ParseRedisUrlTest, TlsAndItsParameters) {
  absl::StatusOr<RedisOptions> o =
      ParseRedisUrl("rediss://u:p@redis.example:6380/3?tls_ca_cert=/etc/ca%20s.pem&tls_insecure=0");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->tls);
  EXPECT_EQ(o->tls_ca_cert, "/etc/ca s.pem");
  EXPECT_FALSE(o->tls_insecure);
  o = ParseRedisUrl("REDISS://h?tls_insecure=true&tls_cert=/c.pem&tls_key=/k.pem");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->tls_insecure);
  EXPECT_EQ(o->tls_cert, "/c.pem");
  EXPECT_EQ(o->tls_key, "/k.pem");
}

// Each bad URL with a fragment of the message that must name the problem.
TEST(ParseRedisUrlTest, BadUrlsNameTheProblem) {
  const struct {
    const char* url;
    const char* message;
  } cases[] = {
      {"", "missing scheme"},
      {"localhost:6379", "missing scheme"},
      {"http://localhost", "unsupported scheme \"http\""},
      {"unix:///tmp/redis.sock", "unsupported scheme"},
      {"redis://", "missing host"},
      {"redis://:6379", "missing host"},
      {"redis://h:", "empty port"},
      {"redis://h:0", "invalid port \"0\""},
      {"redis://h:65536", "invalid port"},
      {"redis://h:12a", "invalid port"},
      {"redis://h:-1", "invalid port"},
      {"redis://h:6379/x", "invalid database \"x\""},
      {"redis://h:6379/-1", "invalid database"},
      {"redis://h:6379/1/2", "invalid database"},
      {"redis://h:6379/9999999999", "invalid database"},
      {"redis://::1:6379", "IPv6"},
      {"redis://[::1", "unterminated '['"},
      {"redis://[::1]6379", "expected ':port'"},
      {"redis://[nothex]:1", "not an IPv6 address"},
      {"redis://[::1]:", "empty port"},
      {"redis://user@h", "no ':'"},
      {"redis://u:@h", "empty password"},
      {"redis://u%4:p@h", "percent-escape in the user name"},
      {"redis://u:p%zz@h", "percent-escape in the password"},
      {"redis://h#frag", "fragment"},
      {"redis://h?tls_insecure=1", "needs rediss://"},
      {"rediss://h?tls_ca=/x", "unknown query parameter \"tls_ca\""},
      {"rediss://h?tls_insecure=maybe", "expected true or false"},
      {"rediss://h?tls_ca_cert", "needs name=value"},
      {"rediss://h?tls_ca_cert=", "empty tls_ca_cert"},
      {"rediss://h?tls_cert=/c.pem", "go together"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<RedisOptions> o = ParseRedisUrl(c.url);
    ASSERT_FALSE(o.ok()) << c.url;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << c.url;
    EXPECT_THAT(o.status().message(), HasSubstr(c.message)) << c.url;
  }
}

TEST(ParseRedisUrlTest, ErrorsNeverQuoteThePassword) {
  for (const char* url :
       {"redis://u:topsecret@h:99999", "redis://u:topsecret@h/x", "redis://u:topsecret@[::1",
        "redis://topsecret@h", "redis://u:topsecret@h?x=1"}) {
    absl::StatusOr<RedisOptions> o = ParseRedisUrl(url);
    ASSERT_FALSE(o.ok()) << url;
    EXPECT_THAT(o.status().message(), Not(HasSubstr("topsecret"))) << url;
  }
}

TEST(RedactedUrlTest, HidesThePasswordAndRoundTrips) {
  absl::StatusOr<RedisOptions> o =
      ParseRedisUrl("rediss://svc%20a:topsecret@[::1]:7000/4?tls_ca_cert=/ca.pem");
  ASSERT_TRUE(o.ok()) << o.status();
  const std::string redacted = o->RedactedUrl();
  EXPECT_EQ(redacted, "rediss://svc%20a:***@[::1]:7000/4?tls_ca_cert=/ca.pem");
  EXPECT_THAT(redacted, Not(HasSubstr("topsecret")));
  RedisOptions plain;
  plain.host = "h";
  EXPECT_EQ(plain.RedactedUrl(), "redis://h:6379");
}

}  // namespace
}  // namespace deltaserve::common
