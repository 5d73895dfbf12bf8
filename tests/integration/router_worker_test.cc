// The whole service as real processes on 127.0.0.1 (label integration): deltaserve-worker on a
// golden model and deltaserve-router in front of it, driven with plain HTTP/1.1 over a socket.
// Checks the OpenAI shapes end to end (non-streaming and SSE, usage, [DONE]), that the text
// equals what the worker's greedy tokens decode to (the router adds nothing), the error
// statuses the service issue lists (400 malformed JSON / bad field / too long with the numbers,
// 404 unknown model, 401 / 403 with API keys), aliases with a fallback chain, /v1/models, /ready,
// /metrics, SIGHUP reload, and SIGTERM draining both processes to exit 0.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/gguf_file.h"
#include "common/tokenizer.h"
#include "common/unicode.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "tests/integration/router_service.h"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"
#include "worker/sampling/sampler.h"
#include "tests/support/child_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

using ::deltaserve::testing::BinaryPath;
using ::deltaserve::testing::GoldenPath;
using std::chrono::seconds;

// The raw client of router_service.h: one request per connection, read to the end.
using HttpReply = ::deltaserve::testing::RawHttpReply;
using ::deltaserve::testing::Http;

using ::deltaserve::testing::RouterService;

std::string Chat(const std::string& model, int max_tokens, bool stream) {
  nlohmann::json j{{"model", model},
                   {"max_tokens", max_tokens},
                   {"temperature", 0},
                   {"stream", stream},
                   {"messages", {{{"role", "user"}, {"content", "Hello there"}}}}};
  if (stream) j["stream_options"] = {{"include_usage", true}};
  return j.dump();
}

TEST(RouterWorkerTest, OpenAiShapesErrorsAndDrain) {
  RouterService s;
  ASSERT_GT(s.port(), 0);
  EXPECT_EQ(Http(s.port(), "GET", "/health").status, 200);
  EXPECT_EQ(Http(s.port(), "GET", "/ready").status, 200);
  const HttpReply models = Http(s.port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(nlohmann::json::parse(models.body)["data"][0]["id"], "tiny");

  // Non-streaming chat completion.
  const HttpReply r = Http(s.port(), "POST", "/v1/chat/completions", Chat("tiny", 12, false));
  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 5);
  const std::string text = j["choices"][0]["message"]["content"];
  {
    // Independently of the router: the Qwen3 template's rendering of the one message, tokenized
    // and run greedily through the engine, decodes to exactly this text.
    auto file = common::GgufFile::Open(GoldenPath("tiny-dense-f32.gguf"));
    ASSERT_TRUE(file.ok()) << file.status();
    auto tok = common::Tokenizer::FromGguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.status();
    const std::vector<int32_t> prompt = (*tok)->Encode(
        "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n", true);
    EXPECT_EQ(j["usage"]["prompt_tokens"].get<size_t>(), prompt.size());
    auto backend = kernels::MakeCpuBackend(1);
    auto model = worker::Qwen35Model::Load(GoldenPath("tiny-dense-f32.gguf"), *backend);
    ASSERT_TRUE(model.ok()) << model.status();
    auto seq = (*model)->NewSequence(static_cast<int64_t>(prompt.size()) + 12);
    ASSERT_TRUE(seq.ok());
    std::vector<int32_t> feed = prompt, out;
    std::vector<float> logits;
    for (int i = 0; i < 12; ++i) {
      worker::BatchEntry e{seq->get(), feed, false};
      ASSERT_TRUE((*model)->Forward({&e, 1}, logits).ok());
      out.push_back(worker::Argmax(logits, static_cast<int32_t>((*model)->n_vocab())));
      feed = {out.back()};
    }
    // The worker's streaming detokenizer sends U+FFFD for bytes that never complete a character,
    // as the tokenizer's Decode does for the whole output at once.
    EXPECT_EQ(text, common::SanitizeUtf8((*tok)->Decode(out)));
  }

  // Streaming: the same greedy text, chunk by chunk, usage chunk, [DONE].
  const HttpReply st = Http(s.port(), "POST", "/v1/chat/completions", Chat("tiny", 12, true));
  ASSERT_EQ(st.status, 200);
  EXPECT_NE(st.headers.find("text/event-stream"), std::string::npos);
  std::string streamed;
  int chunks = 0;
  bool done = false, usage = false;
  size_t pos = 0;
  while ((pos = st.body.find("data: ", pos)) != std::string::npos) {
    const size_t end = st.body.find("\n\n", pos);
    const std::string data = st.body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const nlohmann::json c = nlohmann::json::parse(data);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content")) {
      streamed += c["choices"][0]["delta"]["content"].get<std::string>();
      ++chunks;
    }
    if (c.contains("usage") && !c["usage"].is_null()) usage = c["usage"]["completion_tokens"] == 12;
  }
  EXPECT_TRUE(done);
  EXPECT_TRUE(usage);
  EXPECT_GT(chunks, 1);
  EXPECT_EQ(streamed, text);

  // Errors.
  const HttpReply bad_json = Http(s.port(), "POST", "/v1/chat/completions", "{not json");
  EXPECT_EQ(bad_json.status, 400);
  EXPECT_NE(bad_json.body.find("\"error\""), std::string::npos);
  const HttpReply bad_field = Http(s.port(), "POST", "/v1/chat/completions",
                                   R"({"model":"tiny","messages":[],"temperature":"hot"})");
  EXPECT_EQ(bad_field.status, 400);
  const HttpReply unknown = Http(s.port(), "POST", "/v1/chat/completions", Chat("nope", 4, false));
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  const HttpReply too_long =
      Http(s.port(), "POST", "/v1/chat/completions", Chat("tiny", 400, false));
  EXPECT_EQ(too_long.status, 400) << too_long.body;
  EXPECT_NE(too_long.body.find("256"), std::string::npos) << too_long.body;
  const HttpReply metrics = Http(s.port(), "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  // Two finished generations of 12 tokens each; the refused requests generated nothing.
  EXPECT_NE(metrics.body.find("\ndeltaserve_router_completion_tokens_total{model=\"tiny\"} 24\n"),
            std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("deltaserve_router_generations_total{finish_reason=\"length\"} 2\n"),
            std::string::npos)
      << metrics.body;

  // SIGTERM: both drain and exit 0.
  s.router().Signal(SIGTERM);
  EXPECT_EQ(s.router().Wait(seconds(60)), 0) << s.router().err();
  s.worker().Signal(SIGTERM);
  EXPECT_EQ(s.worker().Wait(seconds(60)), 0) << s.worker().err();
}

TEST(RouterWorkerTest, ApiKeysAliasesAndReload) {
  // Key "sk-test" may use "fast" only (its digest replaces the placeholder below).
  const std::string config = R"(
models:
  - name: tiny
  - name: missing-model   # listed, but no worker serves it
aliases:
  fast: [missing-model, tiny]
api_keys:
  - name: tester
    sha256: 6ad4a9a0bd9fec75a49cf9d4ebdc8c8f2b1d2e4f16ba2e06b0e1f2a3b8bdb5b1
    models: [fast]
)";
  // The real digest is computed with sha256sum (independent of the router's own hashing).
  std::string cfg = config;
  const std::string hex = ::deltaserve::testing::Sha256HexWithTool("sk-test");
  ASSERT_EQ(hex.size(), 64u);
  cfg.replace(cfg.find("6ad4a9a0"), 64, hex);
  RouterService s(cfg);
  ASSERT_GT(s.port(), 0);
  const std::string key = "Authorization: Bearer sk-test\r\n";
  EXPECT_EQ(Http(s.port(), "POST", "/v1/chat/completions", Chat("fast", 4, false)).status, 401);
  EXPECT_EQ(Http(s.port(), "POST", "/v1/chat/completions", Chat("fast", 4, false),
                 "Authorization: Bearer wrong\r\n")
                .status,
            401);
  EXPECT_EQ(Http(s.port(), "POST", "/v1/chat/completions", Chat("tiny", 4, false), key).status,
            403);
  // The model list needs a key too, and shows only what the key may use.
  const HttpReply no_key_models = Http(s.port(), "GET", "/v1/models");
  EXPECT_EQ(no_key_models.status, 401) << no_key_models.body;
  EXPECT_NE(no_key_models.body.find("\"error\""), std::string::npos) << no_key_models.body;
  EXPECT_EQ(Http(s.port(), "GET", "/v1/models", "", "Authorization: Bearer wrong\r\n").status, 401);
  const HttpReply key_models = Http(s.port(), "GET", "/v1/models", "", key);
  ASSERT_EQ(key_models.status, 200) << key_models.body;
  const nlohmann::json listed = nlohmann::json::parse(key_models.body)["data"];
  ASSERT_EQ(listed.size(), 1u) << key_models.body;
  EXPECT_EQ(listed[0]["id"], "fast");
  // The alias falls back from a model no worker serves to "tiny"; the answer names "tiny".
  const HttpReply ok = Http(s.port(), "POST", "/v1/chat/completions", Chat("fast", 4, false), key);
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(nlohmann::json::parse(ok.body)["model"], "tiny");

  // SIGHUP with a broken file keeps the running config.
  std::ofstream(s.config_path()) << "models: [\n";
  s.router().Signal(SIGHUP);
  ASSERT_TRUE(s.router().WaitForLine("reload refused", seconds(10)).has_value());
  EXPECT_EQ(Http(s.port(), "POST", "/v1/chat/completions", Chat("fast", 4, false), key).status,
            200);
}

TEST(RouterWorkerTest, BadStartsExitNonZero) {
  using ::deltaserve::testing::RunProcess;
  const std::string bin = BinaryPath("router/deltaserve-router");
  EXPECT_EQ(RunProcess({bin, "--bogus"}).exit_code, 2);
  const auto no_connections = RunProcess({bin, "--max-connections", "0"});
  EXPECT_EQ(no_connections.exit_code, 2);
  EXPECT_NE(no_connections.err.find("--max-connections needs a count >= 1"), std::string::npos)
      << no_connections.err;
  const auto no_workers = RunProcess({bin, "--listen", "127.0.0.1:0"});
  EXPECT_EQ(no_workers.exit_code, 1);
  EXPECT_NE(no_workers.err.find("no workers"), std::string::npos);
  const auto open_wide = RunProcess({bin, "--listen", "0.0.0.0:0", "--worker", "127.0.0.1:1"});
  EXPECT_EQ(open_wide.exit_code, 1);
  EXPECT_NE(open_wide.err.find("only binds 127.0.0.1"), std::string::npos) << open_wide.err;
  const auto bad_config =
      RunProcess({bin, "--config", "/nonexistent.yaml", "--worker", "127.0.0.1:1"});
  EXPECT_EQ(bad_config.exit_code, 1);
  EXPECT_NE(bad_config.err.find("/nonexistent.yaml"), std::string::npos) << bad_config.err;
}

}  // namespace
}  // namespace deltaserve
