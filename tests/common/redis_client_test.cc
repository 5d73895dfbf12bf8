// Unit tests of common/redis_client (no server): the RESP encoder and the reply reader's cap and
// error handling on hand-written wire bytes (RESP2 as in
// https://redis.io/docs/reference/protocol-spec/), server errors as Status, option refusals.
// The URL parser's tests are in redis_url_test.cc.
#include "common/redis_client.h"

#include <string>

#include "common/internal/redis_protocol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::common {
namespace {

using ::testing::HasSubstr;

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
