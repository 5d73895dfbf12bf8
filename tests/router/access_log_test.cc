// The router's per-request log line and request ids (issue 15 part 5) over real sockets: every
// answer carries X-Request-Id (a sane client id echoed, anything else replaced), what a handler
// notes reaches the exchange record, and the line (router/api/access_log.h) reads back as JSON
// with nlohmann::json; successful probes are not logged.

#include "router/api/access_log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "router/http/http_server.h"
#include "tests/router/http_test_client.h"

namespace deltaserve::router::api {
namespace {

using namespace std::chrono_literals;
using http::ExchangeRecord;
using testing::RawHttpClient;

class AccessLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    http::HttpServerOptions opts;
    opts.port = 0;
    opts.max_body_bytes = 64;
    opts.on_exchange_done = [this](const ExchangeRecord& r) {
      std::lock_guard<std::mutex> lock(mu_);
      records_.push_back(r);
      cv_.notify_all();
    };
    server_ = std::make_unique<http::HttpServer>(opts);
    server_->Route("POST", "/gen", [](std::shared_ptr<http::HttpExchange> ex) {
      ex->Note("model", "tiny");
      ex->Note("completion_tokens", "7");
      ex->Note("ttft_ms", "12.5");
      ex->Respond(http::Response::Json(200, "{}"));
    });
    server_->RouteSync("GET", "/health",
                       [](const http::Request&) { return http::Response::Json(200, "{}"); });
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override { server_->Stop(absl::Seconds(2)); }

  testing::HttpReply Send(const std::string& bytes) {
    RawHttpClient c(server_->port());
    EXPECT_TRUE(c.Send(bytes));
    auto r = c.ReadResponse(30s);
    EXPECT_TRUE(r);
    return r ? *r : testing::HttpReply{};
  }
  // The record of the exchange answered with `request_id` (waits for the server to report it).
  ExchangeRecord RecordOf(const std::string& request_id) {
    std::unique_lock<std::mutex> lock(mu_);
    const ExchangeRecord* found = nullptr;
    cv_.wait_for(lock, 5s, [&] {
      for (const ExchangeRecord& r : records_) {
        if (r.request_id == request_id) found = &r;
      }
      return found != nullptr;
    });
    return found != nullptr ? *found : ExchangeRecord{};
  }

  std::unique_ptr<http::HttpServer> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ExchangeRecord> records_;
};

TEST_F(AccessLogTest, EveryAnswerCarriesARequestId) {
  const std::string sane = "trace-0123_ab.c:d";
  auto r = Send("POST /gen HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + sane +
                "\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("x-request-id"), sane);
  // Not sane: a space, a quote, or longer than 128 bytes; the router makes its own.
  for (const std::string& bad : {std::string("a b"), std::string("x\"y"), std::string(129, 'a')}) {
    auto b = Send("GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + bad +
                  "\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(b.status, 200);
    EXPECT_TRUE(b.Header("x-request-id").starts_with("req-")) << b.Header("x-request-id");
  }
  // Errors the server answers itself: 404, 405, 413.
  for (const std::string& req :
       {RawHttpClient::Request("GET", "/nope", "", true),
        RawHttpClient::Request("GET", "/gen", "", true),
        RawHttpClient::Request("POST", "/gen", std::string(100, 'x'), true)}) {
    auto e = Send(req);
    EXPECT_TRUE(e.status == 404 || e.status == 405 || e.status == 413) << e.status;
    EXPECT_TRUE(e.Header("x-request-id").starts_with("req-")) << e.status;
  }
}

TEST_F(AccessLogTest, NotesReachTheRecordAndTheJsonLine) {
  auto r = Send(
      "POST /gen HTTP/1.1\r\nHost: x\r\nX-Request-Id: log-1\r\nContent-Length: 2\r\n"
      "Connection: close\r\n\r\n{}");
  ASSERT_EQ(r.status, 200);
  const ExchangeRecord rec = RecordOf("log-1");
  ASSERT_EQ(rec.request_id, "log-1");
  ASSERT_EQ(rec.notes.size(), 3u);
  EXPECT_EQ(rec.notes[0].name, "model");
  const nlohmann::json j = nlohmann::json::parse(ExchangeLogLine(rec, common::LogFormat::kJson));
  EXPECT_EQ(j["msg"], "request");
  EXPECT_EQ(j["id"], "log-1");
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["path"], "/gen");
  EXPECT_EQ(j["code"], 200);
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["completion_tokens"], 7);  // counts are numbers
  EXPECT_DOUBLE_EQ(j["ttft_ms"].get<double>(), 12.5);
  EXPECT_GE(j["ms"].get<double>(), 0);
  const std::string text = ExchangeLogLine(rec, common::LogFormat::kText);
  EXPECT_TRUE(text.starts_with("request id=log-1 method=POST path=/gen code=200 ")) << text;
  EXPECT_NE(text.find(" model=tiny completion_tokens=7 ttft_ms=12.5"), std::string::npos) << text;
}

TEST_F(AccessLogTest, SuccessfulProbesAreNotLogged) {
  auto ok = Send(
      "GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: probe-1\r\n"
      "Connection: close\r\n\r\n");
  ASSERT_EQ(ok.status, 200);
  EXPECT_EQ(ExchangeLogLine(RecordOf("probe-1"), common::LogFormat::kJson), "");
  // A refused probe is logged (here: a POST to a GET route, 405).
  auto refused = Send(
      "POST /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: probe-2\r\n"
      "Content-Length: 0\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(refused.status, 405);
  const std::string line = ExchangeLogLine(RecordOf("probe-2"), common::LogFormat::kJson);
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(nlohmann::json::parse(line)["code"], 405);
}

}  // namespace
}  // namespace deltaserve::router::api
