// The readers of an upstream's bytes (router/upstream/http_response_reader.h, sse_reader.h): every
// way of framing an HTTP/1.1 response body, each input also fed one byte at a time (an upstream's
// TCP segments may split anywhere), server-sent events with every line ending, and malformed
// input refused with a message.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/upstream/http_response_reader.h"
#include "router/upstream/sse_reader.h"

namespace deltaserve::router::upstream {
namespace {

using ::testing::HasSubstr;

struct Read {
  absl::Status status;
  std::string body;
  bool complete = false;
  int http_status = 0;
  std::string content_type;
};

Read ReadAll(const std::string& bytes, size_t piece, bool eof) {
  HttpResponseReader r;
  Read out;
  for (size_t i = 0; i < bytes.size() && out.status.ok(); i += piece) {
    out.status = r.Feed(std::string_view(bytes).substr(i, piece), &out.body);
  }
  if (eof && out.status.ok()) out.status = r.FeedEof();
  out.complete = r.complete();
  out.http_status = r.status();
  out.content_type = std::string(r.Header("CONTENT-type"));
  return out;
}

TEST(HttpResponseReaderTest, BodiesByEveryFraming) {
  const struct {
    std::string bytes;
    bool eof;
    std::string body;
  } cases[] = {
      {"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 5\r\n\r\nhelloXX",
       false, "hello"},
      {"HTTP/1.1 200 OK\r\nContent-Type: a\r\nTransfer-Encoding: chunked\r\n\r\n"
       "5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n",
       false, "hello 0123456789"},
      {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: b\r\n\r\nuntil close", true,
       "until close"},
      {"HTTP/1.0 204 No Content\r\ncontent-type: c\r\n\r\n", false, ""},
  };
  for (const auto& c : cases) {
    for (size_t piece : {c.bytes.size(), size_t{1}, size_t{3}}) {
      Read r = ReadAll(c.bytes, piece, c.eof);
      EXPECT_TRUE(r.status.ok()) << r.status << " piece " << piece << " in " << c.bytes;
      EXPECT_TRUE(r.complete) << c.bytes;
      EXPECT_EQ(r.body, c.body) << "piece " << piece;
      EXPECT_FALSE(r.content_type.empty());
    }
  }
}

// Keep-alive: a connection carries another request only after an answer that ended by its own
// framing with nothing after it, in HTTP/1.1, without "Connection: close".
TEST(HttpResponseReaderTest, ReusableOnlyAfterAnExactlyDelimitedAnswer) {
  const struct {
    std::string bytes;
    bool eof;
    bool reusable;
    bool trailing;
  } cases[] = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, true, false},
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloX", false, false, true},
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhell", false, false, false},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
       false, true, false},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nH",
       false, false, true},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n", false,
       false, false},
      {"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, CLOSE\r\nContent-Length: 0\r\n\r\n", false,
       false, false},
      {"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", false,
       true, false},
      {"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, false, false},
      {"HTTP/1.1 200 OK\r\n\r\nuntil close", true, false, false},
      {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", false, true, false},
  };
  for (const auto& c : cases) {
    for (size_t piece : {c.bytes.size(), size_t{1}}) {
      HttpResponseReader r;
      std::string body;
      for (size_t i = 0; i < c.bytes.size(); i += piece) {
        ASSERT_TRUE(r.Feed(std::string_view(c.bytes).substr(i, piece), &body).ok()) << c.bytes;
      }
      if (c.eof) {
        ASSERT_TRUE(r.FeedEof().ok());
      }
      EXPECT_EQ(r.reusable(), c.reusable) << c.bytes << " piece " << piece;
      EXPECT_EQ(r.trailing_bytes(), c.trailing) << c.bytes << " piece " << piece;
    }
  }
}

TEST(HttpResponseReaderTest, MalformedAnswersAreRefused) {
  const struct {
    std::string bytes;
    const char* message;
  } cases[] = {
      {"SSH-2.0-OpenSSH\r\n\r\n", "does not start with an HTTP/1.x status line"},
      {"HTTP/1.1 2x0 OK\r\n\r\n", "no valid status code"},
      {"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header"},
      {"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "invalid Content-Length"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n", "invalid Content"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "transfer coding"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "invalid chunk size"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
       "invalid chunk size"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", "longer than its size"},
      {"HTTP/1.1 200 OK\r\nX: " + std::string(70000, 'a'), "larger than 64 KiB"},
  };
  for (const auto& c : cases) {
    Read r = ReadAll(c.bytes, c.bytes.size(), false);
    EXPECT_FALSE(r.status.ok()) << c.bytes.substr(0, 80);
    EXPECT_THAT(r.status.message(), HasSubstr(c.message)) << c.bytes.substr(0, 80);
  }
  // Closed early: inside the headers, inside a Content-Length body, inside a chunk.
  for (const char* cut : {"HTTP/1.1 200 OK\r\nContent-", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"}) {
    Read r = ReadAll(cut, 1000, true);
    EXPECT_FALSE(r.status.ok()) << cut;
    EXPECT_THAT(r.status.message(), HasSubstr("closed the connection")) << cut;
  }
  Read empty = ReadAll("", 1, true);
  EXPECT_THAT(empty.status.message(), HasSubstr("without an answer"));
}

std::vector<SseEvent> Events(const std::string& text, size_t piece) {
  SseReader r;
  std::vector<SseEvent> out;
  for (size_t i = 0; i < text.size(); i += piece) {
    EXPECT_TRUE(r.Feed(std::string_view(text).substr(i, piece), &out).ok());
  }
  return out;
}

TEST(SseReaderTest, EventsWithEveryLineEnding) {
  const std::string text =
      ": comment\r\n"
      "event: message_start\r\ndata: {\"a\":1}\r\n\r\n"
      "data: one\ndata:two\nid: 7\nretry: 10\n\n"
      "event: x\rdata: cr\r\r"
      "event: empty-without-data\n\n"
      "data\n\n"
      "data: [DONE]\n\n"
      "data: never dispatched";
  for (size_t piece : {text.size(), size_t{1}, size_t{2}, size_t{7}}) {
    std::vector<SseEvent> e = Events(text, piece);
    ASSERT_EQ(e.size(), 5u) << "piece " << piece;
    EXPECT_EQ(e[0].event, "message_start");
    EXPECT_EQ(e[0].data, "{\"a\":1}");
    EXPECT_EQ(e[1].event, "");
    EXPECT_EQ(e[1].data, "one\ntwo");
    EXPECT_EQ(e[2].event, "x");
    EXPECT_EQ(e[2].data, "cr");
    EXPECT_EQ(e[3].data, "");  // "data" alone: an empty data line
    EXPECT_EQ(e[4].data, "[DONE]");
  }
}

TEST(SseReaderTest, AnOverlongEventIsRefused) {
  SseReader r;
  std::vector<SseEvent> out;
  const std::string line = "data: " + std::string(1 << 20, 'x') + "\n";
  absl::Status s;
  for (int i = 0; i < 10 && s.ok(); ++i) s = r.Feed(line, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("larger than 8 MiB"));
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace deltaserve::router::upstream
