#include "tests/fuzz/router_fuzz_seeds.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gguf_file.h"
#include "common/str_util.h"
#include "tests/support/tokenizer_proto.h"

namespace deltaserve::testing {
namespace {

namespace fs = std::filesystem;

// Writes `selector` followed by `text` as seed `dir`/`prefix`-N.
bool WriteSeed(const fs::path& dir, std::string_view prefix, int n, char selector,
               std::string_view text) {
  std::ofstream out(dir / absl::StrCat(common::Sv(prefix), "-", n),
                    std::ios::binary | std::ios::trunc);
  out.put(selector);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  return static_cast<bool>(out);
}

int WriteAll(const fs::path& dir, std::string_view prefix,
             const std::vector<std::pair<char, std::string>>& seeds) {
  int n = 0;
  for (const auto& [selector, text] : seeds) {
    if (!WriteSeed(dir, prefix, n, selector, text)) {
      std::fprintf(stderr, "fuzz_seed_corpus: cannot write %s\n", dir.c_str());
      return -1;
    }
    ++n;
  }
  return n;
}

}  // namespace

int WriteRequestSeeds(const fs::path& dir) {
  const char kChat = 0, kCompletions = 1;
  return WriteAll(
      dir, "body",
      {
          {kChat, R"({"model":"m","messages":[{"role":"user","content":"Hi"}]})"},
          {kChat,
           R"({"model":"fast","messages":[{"role":"system","content":"Be brief."},)"
           R"({"role":"user","content":[{"type":"text","text":"caf\u00e9 \ud83d\ude00"}]},)"
           R"({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",)"
           R"("function":{"name":"f","arguments":"{\"x\":1}"}}]},)"
           R"({"role":"tool","tool_call_id":"c1","content":"42"}],)"
           R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],)"
           R"("max_completion_tokens":64,"temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05,)"
           R"("presence_penalty":0.5,"frequency_penalty":-0.5,"seed":7,"stop":["\n\n","END"],)"
           R"("n":1,"stream":true,"stream_options":{"include_usage":true},"logprobs":true,)"
           R"("top_logprobs":5,"user":"u","logit_bias":{"15":-100},)"
           R"("chat_template_kwargs":{"enable_thinking":false},"unknown":[1,{"a":null}]})"},
          {kChat, R"({"model":"m","messages":[{"role":"developer","content":"x"},)"
                  R"({"role":"assistant","content":"a","reasoning_content":"r"},)"
                  R"({"role":"user","content":"b","name":"n"}],"max_tokens":1})"},
          {kChat, R"({"model":"m","messages":[]})"},
          {kChat, R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})"},
          {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":2})"},
          {kCompletions, R"({"model":"m","prompt":"Once upon a time","max_tokens":16})"},
          {kCompletions, R"({"model":"m","prompt":[1,2,3],"logprobs":3,"echo":false,)"
                         R"("stop":"x","temperature":0,"stream":false})"},
          {kCompletions, R"({"model":"m","prompt":["one string in an array"]})"},
          {kCompletions, R"({"model":"m","prompt":"x","max_tokens":-1,"top_p":2})"},
          // Output constraints: response_format and the vLLM-style guided fields.
          {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],)"
                  R"("response_format":{"type":"json_schema","json_schema":{"name":"n",)"
                  R"("schema":{"type":"object","properties":{"a":{"enum":[1,"b"]}}}}}})"},
          {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],)"
                  R"("structured_outputs":{"regex":"[a-z]{1,8}(-[0-9]+)?"}})"},
          {kChat, R"x({"model":"m","messages":[{"role":"user","content":"x"}],)x"
                  R"x("guided_choice":["yes","no (maybe)","a|b"]})x"},
          {kCompletions, R"({"model":"m","prompt":"x","guided_json":"{"type":"integer"}"})"},
      });
}

int WriteRouterConfigSeeds(const fs::path& dir) {
  const char kYaml = 0, kKeys = 1;
  return WriteAll(
      dir, "config",
      {
          {kYaml, R"(listen: 127.0.0.1:8080
workers:
  - address: 127.0.0.1:50051
  - address: 127.0.0.1:50052
models:
  - name: qwen3.5-4b
    defaults: {temperature: 0.7, top_p: 0.8, max_tokens: 512, enable_thinking: false}
  - name: qwen2.5-coder-1.5b
aliases:
  fast: [qwen3.5-4b, qwen2.5-coder-1.5b]
api_keys:
  - name: ci
    sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    models: [fast]
    limit: {requests_per_minute: 60, tokens_per_minute: 100000}
routing:
  max_attempts: 3
  retry_backoff_ms: 50
  health_interval_ms: 1000
)"},
          {kYaml, "workers: [{address: '[::1]:50051'}]\nmodels: []\n"},
          {kYaml, "models:\n  - name: a\naliases:\n  x: [y]\n  y: [x]\n"},
          {kYaml, "api_keys_file: keys.txt\nlisten: 0.0.0.0:80\n"},
          {kYaml, "{a: [1, 2, {b: &anchor c}], d: *anchor, e: !!binary aGk=}\n"},
          {kKeys,
           "# name sha256 models\n"
           "ci 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08 a,b\n"
           "\n  other e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"},
          {kKeys, "bad line\n"},
      });
}

int WriteTokenizerProtoSeeds(const fs::path& golden, const fs::path& dir) {
  absl::StatusOr<std::unique_ptr<common::GgufFile>> file =
      common::GgufFile::Open((golden / "tiny-dense-f32.gguf").string());
  if (!file.ok()) {
    std::fprintf(stderr, "fuzz_seed_corpus: %s\n", std::string(file.status().message()).c_str());
    return -1;
  }
  absl::StatusOr<deltaserve::v1::Tokenizer> proto = TokenizerProtoFromGguf(**file);
  if (!proto.ok()) {
    std::fprintf(stderr, "fuzz_seed_corpus: %s\n", std::string(proto.status().message()).c_str());
    return -1;
  }
  std::ofstream out(dir / "tiny-vocab", std::ios::binary | std::ios::trunc);
  const std::string bytes = proto->SerializeAsString();
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  // A second seed with a small vocabulary, so that mutations reach the special-id checks fast.
  deltaserve::v1::Tokenizer small;
  small.set_model("gpt2");
  small.set_pre("qwen35");
  for (const char* t : {"a", "b", "ab", "\xC4\xA0", "<|im_start|>", "<|im_end|>"}) {
    small.add_tokens(t);
  }
  for (int type : {1, 1, 1, 1, 3, 3})
    small.add_token_types(static_cast<deltaserve::v1::TokenType>(type));
  small.add_merges("a b");
  small.mutable_special()->set_eos_id(5);
  std::ofstream out2(dir / "small-vocab", std::ios::binary | std::ios::trunc);
  const std::string small_bytes = small.SerializeAsString();
  out2.write(small_bytes.data(), static_cast<std::streamsize>(small_bytes.size()));
  return out && out2 ? 2 : -1;
}

}  // namespace deltaserve::testing
