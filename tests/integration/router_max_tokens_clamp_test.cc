// clamp_max_tokens through the real deltaserve-router process (label integration) in front of the
// routing tests' ScriptedWorker (a test double of the gRPC Worker, in this process) whose model
// has a 300-token context: a max_tokens of 32000 (what Claude Code asks on every request) does
// not fit beside any prompt. Where the setting is on, the worker is given the room the prompt
// leaves (context minus the prompt ids it received), and the answer reports it in the
// x-deltaserve-max-tokens-clamped header ("32000->ROOM") and in usage.max_tokens_clamped
// {from, to}, streamed and not; where it is off, the request is the API's 400. Defaults: the
// Anthropic API clamps, the OpenAI APIs (chat, completions, responses) refuse; the top level of
// the config turns it on for every API; a model's own setting wins over the top level's.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/router/http_test_client.h"
#include "tests/router/scripted_worker.h"
#include "tests/support/child_process.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

using router::testing::GenerateScript;
using router::testing::HttpReply;
using router::testing::RawHttpClient;
using router::testing::ScriptedModel;
using router::testing::ScriptedWorker;
using std::chrono::milliseconds;
using std::chrono::seconds;
using json = nlohmann::json;

constexpr int32_t kContext = 300;
constexpr char kHeader[] = "x-deltaserve-max-tokens-clamped";

// The four APIs, each asking for 32000 tokens in its own field.
struct Api {
  const char* name;
  const char* path;
  json body;  // without "stream"
};

std::vector<Api> Apis() {
  const json messages = json::array({{{"role", "user"}, {"content", "Hello there"}}});
  return {
      {"chat_completions",
       "/v1/chat/completions",
       {{"model", "m"}, {"messages", messages}, {"max_completion_tokens", 32000}}},
      {"completions",
       "/v1/completions",
       {{"model", "m"}, {"prompt", "Hello there"}, {"max_tokens", 32000}}},
      {"responses",
       "/v1/responses",
       {{"model", "m"}, {"input", "Hello there"}, {"max_output_tokens", 32000}}},
      {"anthropic",
       "/v1/messages",
       {{"model", "m"}, {"messages", messages}, {"max_tokens", 32000}}},
  };
}

// A router in front of one ScriptedWorker, with `config_yaml` (none when empty).
class Router {
 public:
  explicit Router(const std::string& config_yaml) : worker_({Model()}) {
    GenerateScript script;
    script.pieces = {"Hel", "lo"};
    worker_.SetScript(script);
    worker_.Start();
    std::vector<std::string> argv = {testing::BinaryPath("router/deltaserve-router"), "--listen",
                                     "127.0.0.1:0", "--worker", worker_.address()};
    if (!config_yaml.empty()) {
      const std::string path = absl::StrCat(::testing::TempDir(), "/router_clamp_", ::getpid(), "_",
                                            ++configs_, ".yaml");
      std::ofstream(path) << config_yaml;
      argv.insert(argv.end(), {"--config", path});
    }
    router_.emplace(argv);
    port_ = WaitUntilReady();
  }
  ~Router() {
    router_->Signal(SIGTERM);
    router_->Wait(seconds(30));
  }

  int port() const { return port_; }
  std::string err() { return router_->err(); }
  ScriptedWorker& worker() { return worker_; }

  std::optional<HttpReply> Post(const Api& api, bool stream) {
    json body = api.body;
    body["stream"] = stream;
    const std::string path = api.path;
    if (stream && (path == "/v1/chat/completions" || path == "/v1/completions")) {
      body["stream_options"] = {{"include_usage", true}};
    }
    RawHttpClient c(port_);
    if (!c.Send(RawHttpClient::Request("POST", api.path, body.dump(), /*close=*/true))) {
      return std::nullopt;
    }
    return c.ReadResponse(seconds(30));
  }

 private:
  static ScriptedModel Model() {
    ScriptedModel m;
    m.context_length = kContext;
    return m;
  }

  int WaitUntilReady() {
    auto line = router_->WaitForLine("listening on ", seconds(30));
    if (!line.has_value()) return 0;
    const int port = std::stoi(line->substr(line->rfind(':') + 1));
    for (int i = 0; i < 200; ++i) {
      RawHttpClient c(port);
      c.Send(RawHttpClient::Request("GET", "/ready", "", /*close=*/true));
      auto r = c.ReadResponse(seconds(5));
      if (r.has_value() && r->status == 200) return port;
      std::this_thread::sleep_for(milliseconds(50));
    }
    return 0;
  }

  static inline int configs_ = 0;
  ScriptedWorker worker_;
  std::optional<testing::ChildProcess> router_;
  int port_ = 0;
};

// The usage object of an answer: the body's, or the one a stream reports at its end.
json UsageOf(const HttpReply& r, bool stream) {
  if (!stream) return json::parse(r.body)["usage"];
  json usage;
  for (const std::string& data : router::testing::SseDataEvents(r.body)) {
    if (data == "[DONE]") continue;
    const json event = json::parse(data);
    if (event.contains("usage") && event["usage"].is_object()) usage = event["usage"];  // chat
    if (event.contains("response") && event["response"].contains("usage") &&
        event["response"]["usage"].is_object()) {
      usage = event["response"]["usage"];  // responses: response.completed
    }
  }
  return usage;
}

// The request was clamped: the worker got the room, the header and usage say 32000 -> room.
void ExpectClamped(Router& router, const Api& api, bool stream) {
  SCOPED_TRACE(absl::StrCat(api.name, stream ? " streamed" : ""));
  const std::optional<HttpReply> r = router.Post(api, stream);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->status, 200) << r->body << router.err();
  const deltaserve::v1::GenerateRequest sent = router.worker().last_request();
  const int64_t room = kContext - sent.prompt_token_ids_size();
  ASSERT_GT(room, 0);
  EXPECT_EQ(sent.sampling().max_tokens(), room);
  EXPECT_EQ(r->Header(kHeader), absl::StrCat("32000->", room));
  const json usage = UsageOf(*r, stream);
  ASSERT_TRUE(usage.contains("max_tokens_clamped")) << usage.dump() << "\n" << r->body;
  EXPECT_EQ(usage["max_tokens_clamped"], json({{"from", 32000}, {"to", room}}));
}

// The request was refused as the API refuses a context overflow.
void ExpectRefused(Router& router, const Api& api) {
  SCOPED_TRACE(api.name);
  const std::optional<HttpReply> r = router.Post(api, /*stream=*/false);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(r->Header(kHeader), "");
  const json error = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(error.contains("error")) << r->body;
  EXPECT_NE(error["error"].value("message", "").find("maximum context length is 300"),
            std::string::npos)
      << r->body;
}

TEST(RouterMaxTokensClamp, DefaultsClampAnthropicAndRefuseForTheOpenAiApis) {
  Router router("");
  ASSERT_NE(router.port(), 0) << router.err();
  const std::vector<Api> apis = Apis();
  ExpectRefused(router, apis[0]);
  ExpectRefused(router, apis[1]);
  ExpectRefused(router, apis[2]);
  ExpectClamped(router, apis[3], /*stream=*/false);
  ExpectClamped(router, apis[3], /*stream=*/true);
}

TEST(RouterMaxTokensClamp, TopLevelTrueClampsEveryApiStreamedAndNot) {
  Router router("clamp_max_tokens: true\n");
  ASSERT_NE(router.port(), 0) << router.err();
  for (const Api& api : Apis()) {
    ExpectClamped(router, api, /*stream=*/false);
    ExpectClamped(router, api, /*stream=*/true);
  }
}

TEST(RouterMaxTokensClamp, AModelsSettingWinsOverTheTopLevel) {
  Router router(
      "clamp_max_tokens:\n  chat_completions: false\n  responses: true\n"
      "models:\n  - name: m\n    clamp_max_tokens:\n      chat_completions: true\n"
      "      anthropic: false\n");
  ASSERT_NE(router.port(), 0) << router.err();
  const std::vector<Api> apis = Apis();
  ExpectClamped(router, apis[0], /*stream=*/false);  // the model's true over the top's false
  ExpectRefused(router, apis[1]);                    // neither sets it: OpenAI's default
  ExpectClamped(router, apis[2], /*stream=*/false);  // the top level's, the model says nothing
  ExpectRefused(router, apis[3]);                    // the model's false over the default
}

TEST(RouterMaxTokensClamp, AMaxTokensThatFitsIsLeftAlone) {
  Router router("clamp_max_tokens: true\n");
  ASSERT_NE(router.port(), 0) << router.err();
  for (Api api : Apis()) {
    SCOPED_TRACE(api.name);
    for (const char* field : {"max_tokens", "max_completion_tokens", "max_output_tokens"}) {
      if (api.body.contains(field)) api.body[field] = 7;
    }
    const std::optional<HttpReply> r = router.Post(api, /*stream=*/false);
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(router.worker().last_request().sampling().max_tokens(), 7);
    EXPECT_EQ(r->Header(kHeader), "");
    EXPECT_FALSE(json::parse(r->body)["usage"].contains("max_tokens_clamped")) << r->body;
  }
}

}  // namespace
}  // namespace deltaserve
