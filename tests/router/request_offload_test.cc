// Integration tests over real HTTP on 127.0.0.1 of where router/api handles POST bodies
// (issue 17): a body above OpenAiApiOptions::inline_body_bytes is handled on the request pool,
// so a small request is answered while large ones are still being worked on — here a backend
// TEST DOUBLE holds the large ones inside Generate (standing in for a long parse or render)
// until the test releases them, which makes the order of completion certain without timing.
// Before, the handler ran on the io threads and both were held, so the small request waited.
// Also: the pool's queue bound answers 429 with Retry-After, and large bodies still get their
// OpenAI-shaped 400s (a request limit, through the pool).

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "router/api/openai_api.h"
#include "tests/router/http_test_client.h"

namespace deltaserve::router::api {
namespace {

using namespace std::chrono_literals;
using testing::RawHttpClient;

// Generate() for model "slow" blocks until Release(); every request is then answered at once.
class GatedBackend : public CompletionBackend {
 public:
  std::unique_ptr<GenerationHandle> Generate(const CompletionRequest& request,
                                             std::shared_ptr<GenerationObserver> obs) override {
    if (request.model == "slow") {
      std::unique_lock<std::mutex> lock(mu_);
      ++held_;
      changed_.notify_all();
      changed_.wait(lock, [this] { return released_; });
    }
    obs->OnStart({request.model});
    obs->OnEnd({});
    return std::make_unique<NoHandle>();
  }
  // True once `n` requests are held (a generous bound: the test fails rather than hangs).
  bool WaitHeld(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, 30s, [&] { return held_ >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    changed_.notify_all();
  }
  bool released() {
    std::lock_guard<std::mutex> lock(mu_);
    return released_;
  }

 private:
  class NoHandle : public GenerationHandle {
   public:
    void Cancel() override {}
  };
  std::mutex mu_;
  std::condition_variable changed_;
  int held_ = 0;
  bool released_ = false;
};

class NoState : public RouterState {
 public:
  std::vector<ModelCard> Models() const override { return {}; }
  Readiness Ready() const override { return {true, ""}; }
  void WriteMetrics(PrometheusText&) const override {}
};

// A chat body for `model` padded past the 64 KiB inline threshold with a field no API defines.
std::string LargeBody(const std::string& model) {
  return absl::StrCat(R"({"model":")", model,
                      R"(","messages":[{"role":"user","content":"hi"}],"x_padding":")",
                      std::string(200 << 10, 'x'), R"("})");
}

constexpr char kSmall[] = R"({"model":"fast","messages":[{"role":"user","content":"hi"}]})";

class RequestOffloadTest : public ::testing::Test {
 protected:
  void Start(OpenAiApiOptions options = {}) {
    api_ = std::make_unique<OpenAiApi>(backend_, state_, metrics_, options);
    http::HttpServerOptions opts;  // two io threads: as many as the large requests below
    OpenAiApi::ConfigureServer(opts, &metrics_);
    server_ = std::make_unique<http::HttpServer>(opts);
    api_->Register(*server_);
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    backend_.Release();
    if (server_) server_->Stop(absl::Seconds(5));
    server_.reset();
    api_.reset();
  }
  std::unique_ptr<RawHttpClient> Send(const std::string& body) {
    auto c = std::make_unique<RawHttpClient>(server_->port());
    EXPECT_TRUE(c->Send(RawHttpClient::Request("POST", "/v1/chat/completions", body)));
    return c;
  }

  GatedBackend backend_;
  NoState state_;
  ApiMetrics metrics_;
  std::unique_ptr<OpenAiApi> api_;
  std::unique_ptr<http::HttpServer> server_;
};

TEST_F(RequestOffloadTest, SmallRequestIsAnsweredWhileLargeOnesAreHeld) {
  Start();
  auto large1 = Send(LargeBody("slow"));
  auto large2 = Send(LargeBody("slow"));
  ASSERT_TRUE(backend_.WaitHeld(2));  // both large requests are inside their handlers
  auto small = Send(kSmall);
  auto reply = small->ReadResponse(30s);
  ASSERT_TRUE(reply) << "the small request was not answered while two large ones were held";
  EXPECT_EQ(reply->status, 200);
  EXPECT_FALSE(backend_.released());  // the order: small answered before the large ones
  backend_.Release();
  for (auto* c : {large1.get(), large2.get()}) {
    auto r = c->ReadResponse(30s);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
}

TEST_F(RequestOffloadTest, FullQueueIs429WithRetryAfter) {
  Start(OpenAiApiOptions{.request_threads = 1, .max_queued_requests = 1});
  auto running = Send(LargeBody("slow"));
  ASSERT_TRUE(backend_.WaitHeld(1));
  auto queued = Send(LargeBody("slow"));
  for (int i = 0; i < 3000 && api_->queued_requests() < 1; ++i) {
    std::this_thread::sleep_for(10ms);  // polls for the state; the bound only stops a hang
  }
  ASSERT_EQ(api_->queued_requests(), 1u);
  auto refused = Send(LargeBody("slow"));
  auto r = refused->ReadResponse(30s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->Header("retry-after"), "1");
  nlohmann::json e = nlohmann::json::parse(r->body);
  EXPECT_EQ(e["error"]["type"], "rate_limit_error");
  backend_.Release();
  for (auto* c : {running.get(), queued.get()}) {
    auto done = c->ReadResponse(30s);
    ASSERT_TRUE(done);
    EXPECT_EQ(done->status, 200);
  }
}

TEST_F(RequestOffloadTest, LargeBodiesGetTheirLimitErrorsThroughThePool) {
  Start();
  std::string wide = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"metadata":{)";
  for (int i = 0; i < 200'000; ++i) absl::StrAppend(&wide, i ? "," : "", "\"k", i, "\":1");
  wide += "}}";
  auto r = Send(wide)->ReadResponse(30s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  nlohmann::json e = nlohmann::json::parse(r->body);
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], "request_limit_exceeded");
  EXPECT_EQ(e["error"]["param"], "metadata");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("max_object_keys"), std::string::npos);
}

}  // namespace
}  // namespace deltaserve::router::api
