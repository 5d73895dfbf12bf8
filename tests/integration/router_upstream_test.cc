// Upstream models through real processes on 127.0.0.1 (docs/upstreams.md; label integration):
//  - an OpenAI upstream that is a second deltaserve-router with its own worker (requiring its own
//    API key), reached by pass-through (chat completions, streamed and not, with the answer and
//    usage the upstream gives directly) and by translation (a Messages request);
//  - an Anthropic upstream that is tests/integration/upstream/fake_anthropic_upstream.py (a test
//    double: a real HTTP server that records what it receives): chat completions translated to
//    Messages both ways (system, tools, tool results, streamed tool calls, usage), Messages passed
//    through untouched, the request id forwarded;
//  - faults: HTTP 500, 429 with Retry-After (waited out, or passed on), a stalled stream before
//    and after output, a refused connection, a wrong key — each a fallback or the client's own
//    error shape, never a hang; per-key model access; the key rotated by SIGHUP; metrics by
//    upstream; and no key material in any answer, in /metrics or in the router's log;
//  - the official openai and anthropic SDKs through an alias [local, upstream] with the local
//    worker killed (tests/integration/upstream/upstream_sdk_check.py; SKIPPED without an
//    interpreter that imports both, as the other SDK tests).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/router_service.h"
#include "tests/integration/sdk_python.h"
#include "tests/support/child_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

using json = nlohmann::json;
using ::deltaserve::testing::BinaryPath;
using ::deltaserve::testing::ChildProcess;
using ::deltaserve::testing::FindSdkPython;
using ::deltaserve::testing::Http;
using ::deltaserve::testing::RawHttpReply;
using ::deltaserve::testing::RouterService;
using ::deltaserve::testing::RunProcess;
using ::deltaserve::testing::SdkPython;
using ::deltaserve::testing::Sha256HexWithTool;
using ::testing::HasSubstr;
using ::testing::Not;

// Key material: none of these may ever leave the router (answers, /metrics, log).
constexpr const char* kAnthropicKey = "sk-ant-upstream-key-7Q2w9E4r";
constexpr const char* kDeltaServeKey = "sk-ds-upstream-key-5T8y1U3i";
constexpr const char* kWrongKey = "sk-wrong-key-material-0Z9x8C7v";
constexpr const char* kClientKey = "sk-client-all-models-123456";
constexpr const char* kLimitedKey = "sk-client-local-only-654321";
constexpr const char* kOncePerMinuteKey = "sk-client-once-a-minute-987";

std::string Temp(const std::string& name) {
  return ::testing::TempDir() + "/upstream_" + std::to_string(::getpid()) + "_" + name;
}

int PortFrom(const std::string& line) { return std::atoi(line.substr(line.rfind(' ') + 1).c_str()); }

// The fake Anthropic upstream, started and its port read; `tls_args` make it serve HTTPS.
struct FakeAnthropic {
  explicit FakeAnthropic(const std::vector<std::string>& tls_args = {})
      : process(Argv(tls_args)) {
    auto line = process.WaitForLine("listening on ", std::chrono::seconds(30));
    EXPECT_TRUE(line.has_value()) << process.err();
    if (line) port = std::atoi(line->substr(line->rfind(' ') + 1).c_str());
  }
  static std::vector<std::string> Argv(const std::vector<std::string>& tls_args) {
    std::vector<std::string> argv = {"/usr/bin/python3", DELTASERVE_FAKE_ANTHROPIC_SCRIPT, "--key",
                                      kAnthropicKey, "--stall-seconds", "30"};
    argv.insert(argv.end(), tls_args.begin(), tls_args.end());
    return argv;
  }
  json Recorded() { return json::parse(Http(port, "GET", "/recorded").body); }
  void Forget() { Http(port, "DELETE", "/recorded"); }
  ChildProcess process;
  int port = 0;
};

// A port nothing listens on: bound, then closed.
int ClosedPort() {
  ChildProcess probe({"/usr/bin/python3", "-c",
                      "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1',0)); "
                      "print('port', s.getsockname()[1], file=sys.stderr, flush=True)"});
  auto line = probe.WaitForLine("port ", std::chrono::seconds(10));
  probe.Wait(std::chrono::seconds(10));
  return line ? PortFrom(*line) : 1;
}

// A CA and a certificate for 127.0.0.1 it signed, made with openssl in `dir`: ca.crt, srv.crt,
// srv.key. False (with the output in `why`) when openssl failed.
bool MakeCertificates(const std::string& dir, std::string* why) {
  const std::string script =
      "set -e; cd '" + dir + "'; "
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key "
      "-out ca.crt -days 1 -subj /CN=upstream-test-ca; "
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout srv.key "
      "-out srv.csr -subj /CN=127.0.0.1; "
      "printf 'subjectAltName=IP:127.0.0.1\n' > san.ext; "
      "openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt "
      "-days 1 -extfile san.ext";
  const auto r = RunProcess({"/bin/sh", "-c", script}, std::chrono::seconds(60));
  *why = r.out + r.err;
  return r.exit_code == 0;
}

std::string Auth(const std::string& key) { return "Authorization: Bearer " + key + "\r\n"; }

std::string UpstreamConfigText(int anthropic_port, int deltaserve_port, int closed_port,
                               const std::string& key_dir, int tls_port) {
  const std::string a = "http://127.0.0.1:" + std::to_string(anthropic_port) + "/v1";
  const std::string d = "http://127.0.0.1:" + std::to_string(deltaserve_port) + "/v1";
  auto anthropic = [&](const std::string& name, const std::string& model,
                       const std::string& extra = "") {
    return "  - {name: " + name + ", kind: anthropic, base_url: \"" + a + "\", model: " + model +
           ", api_key_env: UPSTREAM_TEST_ANTHROPIC_KEY" + extra + "}\n";
  };
  std::string c = "upstreams:\n";
  c += "  - {name: remote, kind: openai, base_url: \"" + d +
       "\", model: tiny, api_key_file: " + key_dir + "/deltaserve.key}\n";
  c += "  - {name: remote-badkey, kind: openai, base_url: \"" + d +
       "\", model: tiny, api_key_file: " + key_dir + "/wrong.key}\n";
  c += anthropic("claude", "claude");
  c += anthropic("fault500", "fault-500");
  c += anthropic("fault429", "fault-429");
  c += anthropic("flaky429", "flaky-429");
  c += anthropic("stall", "stall", ", idle_timeout_ms: 300, first_byte_timeout_ms: 2000");
  c += anthropic("stallmid", "stall-mid", ", idle_timeout_ms: 300");
  c += "  - {name: refused, kind: anthropic, base_url: \"http://127.0.0.1:" +
       std::to_string(closed_port) + "/v1\", model: claude, api_key_env: "
       "UPSTREAM_TEST_ANTHROPIC_KEY}\n";
  c += "  - {name: wrongkey, kind: anthropic, base_url: \"" + a +
       "\", model: claude, api_key_file: " + key_dir + "/rotating.key}\n";
  const std::string t = "https://127.0.0.1:" + std::to_string(tls_port) + "/v1";
  c += "  - {name: claude-tls, kind: anthropic, base_url: \"" + t + "\", model: claude, "
       "api_key_env: UPSTREAM_TEST_ANTHROPIC_KEY, tls_ca_file: " + key_dir + "/ca.crt}\n";
  c += "  - {name: claude-tls-keep, kind: anthropic, base_url: \"" + t + "\", model: whole, "
       "api_key_env: UPSTREAM_TEST_ANTHROPIC_KEY, tls_ca_file: " + key_dir + "/ca.crt}\n";
  c += "  - {name: claude-tls-untrusted, kind: anthropic, base_url: \"" + t + "\", model: "
       "claude, api_key_env: UPSTREAM_TEST_ANTHROPIC_KEY}\n";
  c += "aliases:\n  a500: [fault500, claude]\n  arefused: [refused, claude]\n"
       "  astall: [stall, claude]\n  astallmid: [stallmid, claude]\n";
  c += "routing: {max_attempts: 3, retry_backoff_ms: 10, circuit_failures: 1000}\n";
  c += "api_keys:\n  - {name: all, sha256: " + Sha256HexWithTool(kClientKey) + "}\n";
  c += "  - {name: local-only, sha256: " + Sha256HexWithTool(kLimitedKey) + ", models: [tiny]}\n";
  c += "  - {name: once, sha256: " + Sha256HexWithTool(kOncePerMinuteKey) +
       ", requests_per_minute: 1}\n";
  return c;
}

// Every SSE `data:` payload of a streamed answer, in order.
std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find('\n', at);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

class UpstreamTest : public ::testing::Test {
 protected:
  // Every answer's bytes are kept, to check that no key material was in any.
  RawHttpReply Post(const std::string& path, const json& body, const std::string& extra = "") {
    RawHttpReply r = Http(port_, "POST", path, body.dump(), Auth(kClientKey) + extra);
    seen_ += r.headers + "\n" + r.body + "\n";
    return r;
  }
  int port_ = 0;
  std::string seen_;
};

TEST_F(UpstreamTest, TranslationPassThroughFaultsAndKeys) {
  FakeAnthropic fake;
  ASSERT_GT(fake.port, 0);
  // The OpenAI upstream: a deltaserve-router with its own worker and its own key.
  RouterService remote("api_keys:\n  - {name: r1, sha256: " + Sha256HexWithTool(kDeltaServeKey) +
                       "}\n");
  ASSERT_GT(remote.port(), 0);
  const std::string key_dir = Temp("keys");
  ASSERT_EQ(::system(("mkdir -p " + key_dir).c_str()), 0);
  // The same fake over HTTPS, its certificate signed by a CA of the test's own.
  std::string openssl_output;
  ASSERT_TRUE(MakeCertificates(key_dir, &openssl_output)) << openssl_output;
  FakeAnthropic tls_fake({"--tls-cert", key_dir + "/srv.crt", "--tls-key", key_dir + "/srv.key"});
  ASSERT_GT(tls_fake.port, 0);
  std::ofstream(key_dir + "/deltaserve.key") << kDeltaServeKey << "\n";
  std::ofstream(key_dir + "/wrong.key") << kWrongKey << "\n";
  std::ofstream(key_dir + "/rotating.key") << kWrongKey << "\n";
  ::setenv("UPSTREAM_TEST_ANTHROPIC_KEY", kAnthropicKey, 1);
  const std::string config_path = Temp("router.yaml");
  std::ofstream(config_path) << UpstreamConfigText(fake.port, remote.port(), ClosedPort(), key_dir,
                                                   tls_fake.port);
  // No worker: upstreams alone make a router that serves.
  ChildProcess router({BinaryPath("router/deltaserve-router"), "--listen", "127.0.0.1:0",
                       "--config", config_path, "--log-format", "json"});
  auto line = router.WaitForLine("listening on ", std::chrono::seconds(30));
  ASSERT_TRUE(line.has_value()) << router.err();
  port_ = std::atoi(line->substr(line->rfind(':') + 1).c_str());
  ASSERT_EQ(Http(port_, "GET", "/ready").status, 200) << router.err();

  // --- OpenAI upstream, passed through: the same greedy answer and usage as asking it directly.
  const json chat = {{"model", "remote"}, {"max_tokens", 8}, {"temperature", 0},
                     {"messages", {{{"role", "user"}, {"content", "Hello there"}}}}};
  json direct_body = chat;
  direct_body["model"] = "tiny";
  RawHttpReply direct = Http(remote.port(), "POST", "/v1/chat/completions", direct_body.dump(),
                             Auth(kDeltaServeKey));
  ASSERT_EQ(direct.status, 200) << direct.body;
  const json want = json::parse(direct.body);
  RawHttpReply r = Post("/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body << router.err();
  json got = json::parse(r.body);
  EXPECT_EQ(got["model"], "remote");
  EXPECT_EQ(got["choices"][0]["message"]["content"], want["choices"][0]["message"]["content"]);
  EXPECT_EQ(got["choices"][0]["finish_reason"], want["choices"][0]["finish_reason"]);
  EXPECT_EQ(got["usage"]["prompt_tokens"], want["usage"]["prompt_tokens"]);
  EXPECT_EQ(got["usage"]["completion_tokens"], want["usage"]["completion_tokens"]);

  json streamed = chat;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  r = Post("/v1/chat/completions", streamed);
  ASSERT_EQ(r.status, 200) << r.body;
  std::string text;
  json usage;
  for (const std::string& d : SseData(r.body)) {
    if (d == "[DONE]") break;
    json chunk = json::parse(d);
    if (!chunk["usage"].is_null()) usage = chunk["usage"];
    if (!chunk["choices"].empty()) text += chunk["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(text, want["choices"][0]["message"]["content"]);
  EXPECT_EQ(usage["completion_tokens"], want["usage"]["completion_tokens"]);

  // --- A Messages request to the OpenAI upstream: translated to chat completions.
  r = Post("/v1/messages", {{"model", "remote"}, {"max_tokens", 8}, {"temperature", 0},
                            {"messages", {{{"role", "user"}, {"content", "Hello there"}}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  got = json::parse(r.body);
  EXPECT_EQ(got["model"], "remote");
  EXPECT_EQ(got["content"][0]["text"], want["choices"][0]["message"]["content"]);
  EXPECT_EQ(got["usage"]["output_tokens"], want["usage"]["completion_tokens"]);

  // --- A Responses request: translated to chat completions too.
  r = Post("/v1/responses", {{"model", "remote"}, {"max_output_tokens", 8}, {"temperature", 0},
                             {"input", "Hello there"}});
  ASSERT_EQ(r.status, 200) << r.body;
  got = json::parse(r.body);
  std::string output_text;
  for (const json& item : got["output"]) {
    if (item["type"] != "message") continue;
    for (const json& part : item["content"]) output_text += part.value("text", "");
  }
  EXPECT_EQ(output_text, want["choices"][0]["message"]["content"]);

  // --- Chat completions to the Anthropic upstream: translated both ways.
  fake.Forget();
  const json tools = {{{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"parameters", {{"type", "object"},
                                         {"properties", {{"city", {{"type", "string"}}}}}}}}}}};
  r = Post("/v1/chat/completions",
           {{"model", "claude"}, {"max_tokens", 50}, {"tools", tools},
            {"messages", {{{"role", "system"}, {"content", "Be brief."}},
                          {{"role", "user"}, {"content", "Weather in Paris?"}}}}},
           "X-Request-Id: up28-rid-1\r\n");
  ASSERT_EQ(r.status, 200) << r.body;
  got = json::parse(r.body);
  EXPECT_EQ(got["model"], "claude");
  EXPECT_EQ(got["choices"][0]["finish_reason"], "tool_calls");
  const json& call = got["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(call["id"], "toolu_01");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(got["usage"]["prompt_tokens"], 14);  // 11 + 3 read from the cache
  EXPECT_EQ(got["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  EXPECT_EQ(got["usage"]["completion_tokens"], 7);
  json rec = fake.Recorded();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0]["path"], "/v1/messages");
  EXPECT_EQ(rec[0]["headers"]["x-request-id"], "up28-rid-1");
  EXPECT_EQ(rec[0]["headers"]["anthropic-version"], "2023-06-01");
  EXPECT_EQ(rec[0]["body"], json::parse(R"({"model": "claude", "system": "Be brief.",
      "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}],
      "max_tokens": 50, "tools": [{"name": "get_weather", "input_schema": {"type": "object",
      "properties": {"city": {"type": "string"}}}}], "tool_choice": {"type": "auto"},
      "stream": true})"));

  // The tool's result goes back as a tool_result block; streamed, the answer's text arrives in
  // the upstream's pieces.
  fake.Forget();
  json round = {{"model", "claude"}, {"stream", true}, {"tools", tools},
                {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}},
                              {{"role", "assistant"}, {"content", nullptr},
                               {"tool_calls", {{{"id", "toolu_01"}, {"type", "function"},
                                                {"function", {{"name", "get_weather"},
                                                              {"arguments", "{\"city\":\"Paris\"}"}}}}}}},
                              {{"role", "tool"}, {"tool_call_id", "toolu_01"}, {"content", "22 C"}}}}};
  r = Post("/v1/chat/completions", round);
  ASSERT_EQ(r.status, 200) << r.body;
  text.clear();
  int pieces = 0;
  for (const std::string& d : SseData(r.body)) {
    if (d == "[DONE]") break;
    const std::string piece = json::parse(d)["choices"][0]["delta"].value("content", "");
    pieces += !piece.empty();
    text += piece;
  }
  EXPECT_EQ(text, "Hello from the Anthropic upstream.");
  EXPECT_EQ(pieces, 5);
  rec = fake.Recorded();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0]["body"]["messages"][1]["content"][0],
            json::parse(R"({"type": "tool_use", "id": "toolu_01", "name": "get_weather",
                            "input": {"city": "Paris"}})"));
  EXPECT_EQ(rec[0]["body"]["messages"][2]["content"][0],
            json::parse(R"({"type": "tool_result", "tool_use_id": "toolu_01", "content": "22 C"})"));

  // --- Messages to the Anthropic upstream: passed through as sent (model and stream aside).
  fake.Forget();
  const json messages = json::parse(R"({"model": "claude", "max_tokens": 2000,
      "metadata": {"user_id": "u-1"}, "thinking": {"type": "enabled", "budget_tokens": 1024},
      "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi",
                    "cache_control": {"type": "ephemeral"}}]}]})");
  r = Http(port_, "POST", "/v1/messages", messages.dump(),
           std::string("x-api-key: ") + kClientKey + "\r\n");
  seen_ += r.body;
  ASSERT_EQ(r.status, 200) << r.body;
  got = json::parse(r.body);
  EXPECT_EQ(got["content"][0]["type"], "thinking");
  EXPECT_EQ(got["content"][1]["text"], "Hello from the Anthropic upstream.");
  EXPECT_EQ(got["usage"]["input_tokens"], 11);
  EXPECT_EQ(got["usage"]["cache_read_input_tokens"], 3);
  rec = fake.Recorded();
  ASSERT_EQ(rec.size(), 1u);
  json sent = messages;
  sent["stream"] = true;
  EXPECT_EQ(rec[0]["body"], sent);
  EXPECT_EQ(rec[0]["headers"]["x-api-key"], kAnthropicKey);

  // --- Faults.
  const json hi = {{"model", "a500"}, {"max_tokens", 5},
                   {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  auto ask = [&](const std::string& model, bool stream = false) {
    json b = hi;
    b["model"] = model;
    if (stream) b["stream"] = true;
    return Post("/v1/chat/completions", b);
  };
  for (const char* alias : {"a500", "arefused", "astall", "astallmid"}) {
    r = ask(alias);
    EXPECT_EQ(r.status, 200) << alias << ": " << r.body;
    if (r.status == 200) {
      EXPECT_EQ(json::parse(r.body)["model"], "claude") << alias;
    }
  }
  r = ask("fault500");
  EXPECT_EQ(r.status, 503);
  EXPECT_THAT(r.body, HasSubstr("upstream exploded"));
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "server_error");
  r = Post("/v1/messages", {{"model", "fault500"}, {"max_tokens", 5},
                            {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["type"], "error");  // Anthropic's shape for a Messages client
  r = ask("fault429");
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_THAT(r.headers, HasSubstr("Retry-After: 30"));
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "rate_limit_error");
  // A 429 asking for one second: waited out, then answered (the same request id both times).
  fake.Forget();
  r = Post("/v1/chat/completions", {{"model", "flaky429"}, {"max_tokens", 5},
                                    {"messages", {{{"role", "user"}, {"content", "Hi"}}}}},
           "X-Request-Id: up28-flaky\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
  rec = fake.Recorded();
  ASSERT_EQ(rec.size(), 2u);
  EXPECT_GE(rec[1]["time"].get<double>() - rec[0]["time"].get<double>(), 1.0);
  // A stream that stalls after its first piece: the client's stream ends with an error event.
  r = ask("stallmid", /*stream=*/true);
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.timed_out);
  EXPECT_THAT(r.body, HasSubstr("\"error\""));
  EXPECT_THAT(r.body, HasSubstr("stalled"));
  // A raw completions prompt has no Messages form: a 400 naming it, nothing sent.
  fake.Forget();
  r = Post("/v1/completions", {{"model", "claude"}, {"prompt", "Once"}, {"max_tokens", 5}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("cannot be translated"));
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "prompt");
  EXPECT_TRUE(fake.Recorded().empty());
  // Token counting needs the model's tokenizer, which the router lacks for an upstream: a 400
  // that says so, in the client's shape (not a 404 for a model that exists).
  r = Post("/v1/messages/count_tokens",
           {{"model", "claude"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("served by an upstream"));
  EXPECT_EQ(json::parse(r.body)["type"], "error");
  // HTTPS: the upstream's certificate checked against tls_ca_file; without it (the system's CAs)
  // the same server is not trusted, which is a connect failure, not an answer.
  r = ask("claude-tls");
  EXPECT_EQ(r.status, 200) << r.body;
  // Keep-alive over TLS: the second request reuses the first one's connection (metrics below).
  for (int i = 0; i < 2; ++i) {
    r = ask("claude-tls-keep");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_THAT(r.body, HasSubstr("Hello from the Anthropic upstream."));
  }
  r = ask("claude-tls-untrusted");
  EXPECT_EQ(r.status, 503);
  EXPECT_THAT(r.body, HasSubstr("is not trusted"));
  r = ask("refused");
  EXPECT_EQ(r.status, 503);
  EXPECT_THAT(r.body, HasSubstr("cannot connect"));
  // Wrong keys: the upstream's 401 (whose message quotes the key) becomes a 503 that does not.
  r = ask("wrongkey");
  EXPECT_EQ(r.status, 503);
  EXPECT_THAT(r.body, HasSubstr("refused the router's credentials"));
  r = ask("remote-badkey");
  EXPECT_EQ(r.status, 503);
  // Per-key model access covers upstreams.
  json for_claude = hi;
  for_claude["model"] = "claude";
  r = Http(port_, "POST", "/v1/chat/completions", for_claude.dump(), Auth(kLimitedKey));
  EXPECT_EQ(r.status, 403) << r.body;
  // Rate limits count upstream requests: a key allowed one request a minute gets a 429 next.
  r = Http(port_, "POST", "/v1/chat/completions", for_claude.dump(), Auth(kOncePerMinuteKey));
  EXPECT_EQ(r.status, 200) << r.body;
  r = Http(port_, "POST", "/v1/chat/completions", for_claude.dump(), Auth(kOncePerMinuteKey));
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_THAT(r.headers, HasSubstr("Retry-After: "));

  // The key file rewritten and SIGHUP: the next request uses the new key.
  std::ofstream(key_dir + "/rotating.key") << kAnthropicKey << "\n";
  router.Signal(SIGHUP);
  ASSERT_TRUE(router.WaitForLine("config reloaded", std::chrono::seconds(30)).has_value())
      << router.err();
  r = ask("wrongkey");
  EXPECT_EQ(r.status, 200) << r.body;

  // --- Metrics by upstream.
  const std::string metrics = Http(port_, "GET", "/metrics").body;
  seen_ += metrics;
  for (const char* needle :
       {"deltaserve_router_upstream_requests_total{upstream=\"remote\",outcome=\"ok\"} 4\n",
        "deltaserve_router_upstream_errors_total{upstream=\"fault500\",kind=\"server\"} ",
        "deltaserve_router_upstream_errors_total{upstream=\"fault429\",kind=\"rate_limited\"} ",
        "deltaserve_router_upstream_errors_total{upstream=\"refused\",kind=\"connect\"} ",
        "deltaserve_router_upstream_errors_total{upstream=\"stall\",kind=\"timeout\"} ",
        "deltaserve_router_upstream_errors_total{upstream=\"wrongkey\",kind=\"auth\"} ",
        "deltaserve_router_upstream_errors_total{upstream=\"claude\",kind=\"untranslatable\"} 1\n",
        "deltaserve_router_upstream_tokens_total{upstream=\"claude\",type=\"completion\"} ",
        "deltaserve_router_upstream_ttft_seconds_count{upstream=\"claude\"} "}) {
    EXPECT_NE(metrics.find(needle), std::string::npos) << "/metrics lacks " << needle;
  }
  EXPECT_EQ(metrics.find("upstream=\"fault500\",kind=\"server\"} 0\n"), std::string::npos);
  // Keep-alive: the upstream router's answers end by their framing, so its requests shared
  // connections.
  for (const char* kind : {"new", "reused"}) {
    const std::string line = std::string("deltaserve_router_upstream_connections_total{upstream=") +
                             "\"remote\",kind=\"" + kind + "\"} ";
    EXPECT_NE(metrics.find(line), std::string::npos) << "/metrics lacks " << line;
  }
  EXPECT_EQ(metrics.find("upstream=\"remote\",kind=\"reused\"} 0\n"), std::string::npos);
  for (const char* kind : {"new", "reused"}) {
    const std::string line = std::string("deltaserve_router_upstream_connections_total{upstream=") +
                             "\"claude-tls-keep\",kind=\"" + kind + "\"} 1\n";
    EXPECT_NE(metrics.find(line), std::string::npos) << "/metrics lacks " << line;
  }

  // --- No key material anywhere the router writes.
  router.Signal(SIGTERM);
  EXPECT_EQ(router.Wait(std::chrono::seconds(30)), 0);
  const std::string log = router.err();
  EXPECT_THAT(log, HasSubstr("up28-rid-1"));  // the request id is in the log lines
  for (const char* key :
       {kAnthropicKey, kDeltaServeKey, kWrongKey, kClientKey, kLimitedKey, kOncePerMinuteKey}) {
    EXPECT_THAT(seen_, Not(HasSubstr(key))) << "answers or /metrics hold " << key;
    EXPECT_THAT(log, Not(HasSubstr(key))) << "the log holds " << key;
    // Not even a recognisable part of one (OpenAI-style "sk-...abcd" masking).
    EXPECT_THAT(seen_ + log, Not(HasSubstr(std::string(key).substr(std::string(key).size() - 8))));
  }
  ::unsetenv("UPSTREAM_TEST_ANTHROPIC_KEY");
}

TEST(UpstreamSdkTest, OfficialClientsFallBackToTheUpstreamWhenTheLocalWorkerIsDown) {
  const SdkPython py =
      FindSdkPython("DELTASERVE_OPENAI_PYTHON", DELTASERVE_UPSTREAM_SDK_DEFAULT_PYTHON,
                    "import openai, anthropic", "pip install openai==1.109.1 anthropic==2.10.0");
  if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;
  const std::string& python = py.path;
  RouterService remote;  // the upstream: another deltaserve-router with its worker
  ASSERT_GT(remote.port(), 0);
  RouterService local("models: [{name: tiny}]\nupstreams:\n  - {name: remote, kind: openai, base_url: "
                      "\"http://127.0.0.1:" + std::to_string(remote.port()) +
                      "/v1\", model: tiny}\naliases:\n  smart: [tiny, remote]\n");
  ASSERT_GT(local.port(), 0);
  local.worker().Signal(SIGKILL);
  local.worker().Wait(std::chrono::seconds(30));
  const auto run = RunProcess({python, DELTASERVE_UPSTREAM_SDK_SCRIPT, "--base-url",
                               "http://127.0.0.1:" + std::to_string(local.port())},
                              std::chrono::seconds(200));  // the script's alarm(180) first
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err << "\n--- router stderr ---\n"
                              << local.router().err();
}

}  // namespace
}  // namespace deltaserve
