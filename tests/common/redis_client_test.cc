// Unit tests of common/redis_client (no server): ParseRedisUrl row by row, the password never
// appearing in RedactedUrl or in errors, the RESP encoder and the reply reader's cap and error
// handling on hand-written wire bytes (RESP2 as in https://redis.io/docs/reference/protocol-spec/).
#include "common/redis_client.h"

#include <string>

#include "common/internal/redis_protocol.h"
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

TEST(RespEncoderTest, CommandIsAnArrayOfBulkStrings) {
  std::string out;
  const std::string_view argv[] = {"SET", "k", std::string_view("a\0\r\n", 4)};
  internal::AppendRespCommand(argv, out, 1 << 20, nullptr);
  EXPECT_EQ(out, std::string("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\0\r\n\r\n", 30));
}

TEST(RespEncoderTest, LargeArgumentsAreLeftAsGaps) {
  std::string out;
  std::vector<internal::RespGap> gaps;
  const std::string big(100, 'x');
  const std::string_view argv[] = {"SET", "k", big};
  internal::AppendRespCommand(argv, out, 64, &gaps);
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_EQ(gaps[0].arg_index, 2u);
  EXPECT_EQ(out.substr(0, gaps[0].offset), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\n");
  EXPECT_EQ(out.substr(gaps[0].offset), "\r\n");
}

TEST(RespReplyReaderTest, DecodesEveryTypeAcrossSplitFeeds) {
  internal::RespReplyReader reader(1 << 20);
  const std::string wire =
      "+OK\r\n-ERR bad\r\n:-42\r\n$-1\r\n$5\r\nab\r\nc\r\n*3\r\n:1\r\n*-1\r\n*1\r\n$0\r\n\r\n";
  std::vector<RedisReply> replies;
  for (const char c : wire) {  // one byte at a time: every split point
    ASSERT_TRUE(reader.Feed(std::string_view(&c, 1)).ok());
    for (;;) {
      absl::StatusOr<std::optional<RedisReply>> r = reader.Next();
      ASSERT_TRUE(r.ok()) << r.status();
      if (!r->has_value()) break;
      replies.push_back(std::move(**r));
    }
  }
  ASSERT_EQ(replies.size(), 6u);
  EXPECT_EQ(replies[0].type, RedisReply::Type::kStatus);
  EXPECT_EQ(replies[0].str, "OK");
  EXPECT_EQ(replies[1].type, RedisReply::Type::kError);
  EXPECT_EQ(replies[1].str, "ERR bad");
  EXPECT_EQ(replies[2].integer, -42);
  EXPECT_EQ(replies[3].type, RedisReply::Type::kNil);
  EXPECT_EQ(replies[4].str, "ab\r\nc");
  ASSERT_EQ(replies[5].type, RedisReply::Type::kArray);
  ASSERT_EQ(replies[5].elements.size(), 3u);
  EXPECT_EQ(replies[5].elements[0].integer, 1);
  EXPECT_EQ(replies[5].elements[1].type, RedisReply::Type::kNil);
  ASSERT_EQ(replies[5].elements[2].elements.size(), 1u);
  EXPECT_EQ(replies[5].elements[2].elements[0].type, RedisReply::Type::kString);
  EXPECT_EQ(replies[5].elements[2].elements[0].str, "");
  EXPECT_EQ(reader.buffered_bytes(), 0u);
}

TEST(RespReplyReaderTest, BulkStringOverTheCapIsResourceExhausted) {
  internal::RespReplyReader reader(1000);
  // The declared length alone does not allocate: the reader waits for the bytes, and refuses
  // once more than the cap is buffered.
  ASSERT_TRUE(reader.Feed("$1000000000\r\n").ok());
  absl::StatusOr<std::optional<RedisReply>> r = reader.Next();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  absl::Status s = reader.Feed(std::string(2000, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("max_reply_bytes"));
}

TEST(RespReplyReaderTest, CompleteValueOverTheCapIsResourceExhausted) {
  internal::RespReplyReader reader(10);
  ASSERT_TRUE(reader.Feed("$11\r\nhello world\r\n").ok());
  EXPECT_EQ(reader.Next().status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(RespReplyReaderTest, HugeArrayCountIsRefusedBeforeAllocating) {
  internal::RespReplyReader reader(1 << 20);
  ASSERT_TRUE(reader.Feed("*2000000000\r\n").ok());
  absl::StatusOr<std::optional<RedisReply>> r = reader.Next();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
}

TEST(RespReplyReaderTest, ValueOfExactlyTheCapPasses) {
  internal::RespReplyReader reader(5);
  ASSERT_TRUE(reader.Feed("$5\r\nhello\r\n").ok());
  absl::StatusOr<std::optional<RedisReply>> r = reader.Next();
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_EQ((*r)->str, "hello");
}

TEST(RespReplyReaderTest, MalformedInputIsAProtocolErrorAndSticks) {
  internal::RespReplyReader reader(1 << 20);
  ASSERT_TRUE(reader.Feed("?what\r\n").ok());
  absl::StatusOr<std::optional<RedisReply>> r = reader.Next();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("protocol error"));
  EXPECT_FALSE(reader.Feed("+OK\r\n").ok());
}

// Large bulk strings bypass hiredis (direct_bulk_bytes, 3 here); replies keep their order
// whichever path decodes them.
TEST(RespReplyReaderTest, DirectBulkStringsKeepTheOrderOfReplies) {
  internal::RespReplyReader reader(1 << 20, /*direct_bulk_bytes=*/3);
  std::vector<RedisReply> replies;
  auto drain = [&] {
    for (;;) {
      absl::StatusOr<std::optional<RedisReply>> r = reader.Next();
      ASSERT_TRUE(r.ok()) << r.status();
      if (!r->has_value()) return;
      replies.push_back(std::move(**r));
    }
  };
  // A direct string split inside its payload and inside its CRLF, then a second direct one and
  // an integer (hiredis) in the same chunk.
  for (const char* chunk : {"$5\r\nhel", "lo\r", "\n$3\r\nabc\r\n:7\r\n"}) {
    ASSERT_TRUE(reader.Feed(chunk).ok());
    drain();
  }
  // hiredis holds an undelivered reply: the next large string must queue behind it.
  ASSERT_TRUE(reader.Feed(":1\r\n").ok());
  ASSERT_TRUE(reader.Feed("$4\r\nwxyz\r\n").ok());
  drain();
  ASSERT_EQ(replies.size(), 5u);
  EXPECT_EQ(replies[0].str, "hello");
  EXPECT_EQ(replies[1].str, "abc");
  EXPECT_EQ(replies[2].integer, 7);
  EXPECT_EQ(replies[3].integer, 1);
  EXPECT_EQ(replies[4].str, "wxyz");
  EXPECT_EQ(reader.buffered_bytes(), 0u);
}

TEST(RespReplyReaderTest, DirectBulkStringWithoutCrlfIsAProtocolError) {
  internal::RespReplyReader reader(1 << 20, /*direct_bulk_bytes=*/3);
  const absl::Status s = reader.Feed("$3\r\nabcXY");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_FALSE(reader.Next().ok());
}

TEST(RespReplyReaderTest, DirectPathNeverAllocatesOverTheCap) {
  internal::RespReplyReader reader(10, /*direct_bulk_bytes=*/1);
  // Over the cap: left to hiredis, which refuses once the buffered bytes pass it.
  ASSERT_TRUE(reader.Feed("$1000000000000\r\n").ok());
  EXPECT_EQ(reader.buffered_bytes(), 16u);
  EXPECT_EQ(reader.Feed(std::string(100, 'x')).code(), absl::StatusCode::kResourceExhausted);
}

TEST(RedisErrorToStatusTest, MapsByFirstWord) {
  EXPECT_EQ(RedisErrorToStatus("AUTH", "WRONGPASS invalid username-password pair").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(RedisErrorToStatus("GET", "NOAUTH Authentication required.").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(RedisErrorToStatus("SET", "OOM command not allowed").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RedisErrorToStatus("GET", "LOADING Redis is loading").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(RedisErrorToStatus("", "ERR max number of clients reached").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(RedisErrorToStatus("STRLEN", "WRONGTYPE Operation against a key").code(),
            absl::StatusCode::kFailedPrecondition);
  const absl::Status s = RedisErrorToStatus("SELECT", "ERR DB index is out of range");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "SELECT: ERR DB index is out of range");
  EXPECT_EQ(RedisErrorToStatus("", "ERR x").message(), "redis: ERR x");
}

TEST(RedisClientCreateTest, RefusesBadOptionsAndMissingCaFile) {
  RedisOptions o;
  o.port = 0;
  EXPECT_EQ(RedisClient::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.port = 6379;
  o.tls = true;
  o.tls_ca_cert = "/nonexistent/ca.pem";
  absl::StatusOr<std::unique_ptr<RedisClient>> c = RedisClient::Create(o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("/nonexistent/ca.pem"));
}

}  // namespace
}  // namespace deltaserve::common
