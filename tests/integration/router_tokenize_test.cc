// POST /tokenize, /detokenize and GET /v1/models/{id} through the real router in front of a real
// worker on the tiny golden model (label integration). The reference tokenizations are llama.cpp's
// (../shared/golden/tokenizer-tiny-vocab2048.json: llama_tokenize with and without special-token
// parsing, llama_token_to_piece, llama_detokenize), which the router's tokenizer — built from the
// proto the worker sent — must reproduce over HTTP; a message list's count must equal the
// prompt_tokens a chat completion of the same messages reports; ids of models a key may not use
// are 404 as unknown ones are.

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/router_service.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::Http;
using ::deltaserve::testing::RawHttpReply;
using ::deltaserve::testing::RouterService;
using ::deltaserve::testing::Sha256HexWithTool;
using json = nlohmann::json;

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

json Post(int port, const std::string& path, const json& body, int want_status = 200,
          const std::string& headers = "Authorization: Bearer sk-full\r\n") {
  const RawHttpReply r = Http(port, "POST", path, body.dump(), headers);
  EXPECT_EQ(r.status, want_status) << path << " " << body.dump() << " -> " << r.body;
  return json::parse(r.body, nullptr, false);
}

// Each test its own worker and router (RouterService names its config after the running test).
class RouterTokenizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string config = "api_keys:\n";
    config += "  - name: full\n    sha256: " + Sha256HexWithTool("sk-full") + "\n";
    config += "  - name: limited\n    sha256: " + Sha256HexWithTool("sk-limited") +
              "\n    models: [other-model]\n";
    service_ = std::make_unique<RouterService>(config);
  }
  int port() const { return service_->port(); }
  std::unique_ptr<RouterService> service_;
};

TEST_F(RouterTokenizeTest, TokenizeAndDetokenizeMatchLlamaCpp) {
  ASSERT_GT(port(), 0);
  const json golden = ReadJson(GoldenPath("tokenizer-tiny-vocab2048.json"));
  ASSERT_GE(golden["cases"].size(), 40u);
  for (const json& c : golden["cases"]) {
    const std::string text = c["text"];
    SCOPED_TRACE(text);
    // vLLM's shape: model + prompt, add_special_tokens.
    json r = Post(port(), "/tokenize",
                  {{"model", "tiny"}, {"prompt", text}, {"add_special_tokens", false}});
    EXPECT_EQ(r["tokens"], c["ids"]);
    EXPECT_EQ(r["count"], c["ids"].size());
    EXPECT_EQ(r["max_model_len"], 256);
    // llama.cpp's shape: content, parse_special, with_pieces; no model (one is served).
    r = Post(port(), "/tokenize",
             {{"content", text}, {"add_special", false}, {"parse_special", false},
              {"with_pieces", true}});
    ASSERT_EQ(r["tokens"].size(), c["ids_plain"].size());
    for (size_t i = 0; i < r["tokens"].size(); ++i) {
      EXPECT_EQ(r["tokens"][i]["id"], c["ids_plain"][i]) << i;
    }
    r = Post(port(), "/tokenize", {{"content", text}, {"add_special", false}, {"with_pieces", true}});
    ASSERT_EQ(r["tokens"].size(), c["pieces"].size());
    for (size_t i = 0; i < c["pieces"].size(); ++i) {
      // Pieces that are incomplete UTF-8 are {"hex": ..} in the golden file (JSON cannot carry
      // them; the router writes U+FFFD there).
      if (c["pieces"][i].is_string()) {
        EXPECT_EQ(r["tokens"][i]["piece"], c["pieces"][i]) << i;
      }
    }
    r = Post(port(), "/detokenize", {{"model", "tiny"}, {"tokens", c["ids"]}});
    EXPECT_EQ(r["prompt"], c["detok"]);
    EXPECT_EQ(r["content"], c["detok"]);
    // Round trip: the text back from its own tokens.
    r = Post(port(), "/tokenize", {{"model", "tiny"}, {"prompt", text}});
    r = Post(port(), "/detokenize", {{"tokens", r["tokens"]}});
    EXPECT_EQ(r["content"], text);
  }
}

TEST_F(RouterTokenizeTest, MessagesCountEqualsAChatCompletionsPromptTokens) {
  ASSERT_GT(port(), 0);
  const json messages = json::parse(R"([{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Hello there"}])");
  const json counted = Post(port(), "/tokenize", {{"model", "tiny"}, {"messages", messages}});
  const json chat = Post(port(), "/v1/chat/completions",
                         {{"model", "tiny"}, {"messages", messages}, {"max_tokens", 1}});
  EXPECT_EQ(counted["count"], chat["usage"]["prompt_tokens"]) << counted.dump() << chat.dump();
  EXPECT_EQ(counted["tokens"].size(), counted["count"]);
  Post(port(), "/tokenize",
       {{"model", "tiny"}, {"messages", messages}, {"add_generation_prompt", false}}, 400);
  Post(port(), "/tokenize", {{"model", "no-such-model"}, {"prompt", "x"}}, 404);
  Post(port(), "/detokenize", {{"model", "tiny"}, {"tokens", {5000}}}, 400);
  Post(port(), "/tokenize", {{"model", "tiny"}, {"prompt", "x"}}, 401, "");
  Post(port(), "/tokenize", {{"model", "tiny"}, {"prompt", "x"}}, 403,
       "Authorization: Bearer sk-limited\r\n");
}

TEST_F(RouterTokenizeTest, ModelById) {
  ASSERT_GT(port(), 0);
  RawHttpReply r = Http(port(), "GET", "/v1/models/tiny", "", "Authorization: Bearer sk-full\r\n");
  ASSERT_EQ(r.status, 200) << r.body;
  const json card = json::parse(r.body);
  EXPECT_EQ(card["id"], "tiny");
  EXPECT_EQ(card["object"], "model");
  // The same card GET /v1/models lists.
  r = Http(port(), "GET", "/v1/models", "", "Authorization: Bearer sk-full\r\n");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["data"][0], card);
  r = Http(port(), "GET", "/v1/models/nope", "", "Authorization: Bearer sk-full\r\n");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "model_not_found");
  r = Http(port(), "GET", "/v1/models/tiny", "", "Authorization: Bearer sk-limited\r\n");
  EXPECT_EQ(r.status, 404) << r.body;  // not visible to this key: as if unknown
  r = Http(port(), "GET", "/v1/models/tiny");
  EXPECT_EQ(r.status, 401);
}

}  // namespace
}  // namespace deltaserve
