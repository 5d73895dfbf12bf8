// Reasoning tokens end to end (label integration): a deltaserve-worker on the tiny golden model
// behind a deltaserve-router that renders it with the Qwen3.5 fixture template, whose generation
// prompt opens a think block (`<think>\n`), so the generated tokens are reasoning until a
// `</think>`. The reference count is taken from the generated tokens themselves, independently of
// the worker's counter: chat's logprobs list every generated token with its text, and the tokens
// before the one whose text is `</think>` are the reasoning (all of them when none closes the
// block). Each API must report that number in its own usage field, whole and streamed: chat and
// completions (completion_tokens_details.reasoning_tokens), Responses
// (output_tokens_details.reasoning_tokens) and Anthropic (output_tokens_details.thinking_tokens),
// the last two for the same greedy generation as chat's (the same prompt, rendered alike).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/router_service.h"
#include "tests/support/test_paths.h"

namespace deltaserve {
namespace {

using json = nlohmann::json;
using testing::Http;
using testing::RouterService;

constexpr char kUser[] = R"([{"role":"user","content":"Hello there"}])";

std::string Config() {
  return "models:\n"
         "  - name: think\n"
         "    served_name: tiny\n"
         "    chat_template: " +
         testing::FixturesPath("templates/qwen3.5.jinja") + "\n";
}

// The data of each `data:` line of an SSE body, in order ("[DONE]" included).
std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find('\n', at);
    out.push_back(body.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6));
    at = end == std::string::npos ? body.size() : end;
  }
  return out;
}

// The count of generated tokens before the first `</think>` (all of them when there is none).
int64_t TokensBeforeClose(const std::vector<std::string>& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == "</think>") return static_cast<int64_t>(i);
  }
  return static_cast<int64_t>(tokens.size());
}

struct ChatRun {
  std::vector<std::string> tokens;  // from logprobs
  int64_t reasoning = -1;           // usage.completion_tokens_details.reasoning_tokens
  int64_t completion = -1;
};

ChatRun Chat(int port, const std::string& extra, bool stream) {
  ChatRun run;
  const std::string body = std::string(R"({"model":"think","temperature":0,"logprobs":true,)") +
                           R"("messages":)" + kUser + "," + extra +
                           (stream ? R"(,"stream":true,"stream_options":{"include_usage":true})"
                                   : "") +
                           "}";
  const testing::RawHttpReply r = Http(port, "POST", "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return run;
  std::vector<json> objects;
  if (stream) {
    for (const std::string& d : SseData(r.body)) {
      if (d != "[DONE]") objects.push_back(json::parse(d));
    }
  } else {
    objects.push_back(json::parse(r.body));
  }
  for (const json& o : objects) {
    if (!o["choices"].empty() && o["choices"][0]["logprobs"].is_object()) {
      for (const json& lp : o["choices"][0]["logprobs"]["content"]) run.tokens.push_back(lp["token"]);
    }
    if (o.contains("usage") && o["usage"].is_object()) {
      run.reasoning = o["usage"]["completion_tokens_details"]["reasoning_tokens"];
      run.completion = o["usage"]["completion_tokens"];
    }
  }
  return run;
}

TEST(RouterReasoningUsageTest, EveryApiReportsTheTokensInsideTheThinkBlock) {
  RouterService s(Config());
  ASSERT_GT(s.port(), 0);
  const int port = s.port();

  // A budget of 4: the worker closes the block after 4 reasoning tokens; without one the random
  // model stays inside the block for all 8 tokens.
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "whole");
    const ChatRun budget = Chat(port, R"("max_tokens":10,"thinking_budget":4)", stream);
    ASSERT_EQ(budget.completion, 10);
    ASSERT_EQ(static_cast<int64_t>(budget.tokens.size()), budget.completion);
    EXPECT_EQ(budget.reasoning, TokensBeforeClose(budget.tokens));
    EXPECT_EQ(budget.reasoning, 4);
    const ChatRun open = Chat(port, R"("max_tokens":8)", stream);
    ASSERT_EQ(static_cast<int64_t>(open.tokens.size()), 8);
    EXPECT_EQ(open.reasoning, TokensBeforeClose(open.tokens));
  }
  const ChatRun budget = Chat(port, R"("max_tokens":10,"thinking_budget":4)", false);
  const ChatRun open = Chat(port, R"("max_tokens":8)", false);
  const int64_t want_budget = TokensBeforeClose(budget.tokens);
  const int64_t want_open = TokensBeforeClose(open.tokens);

  // Responses: effort low (a budget of 1,024, more than 8 tokens) is the unbudgeted run.
  const std::string responses = std::string(R"({"model":"think","temperature":0,)") +
                                R"("max_output_tokens":8,"reasoning":{"effort":"low"},"input":)" +
                                kUser;
  testing::RawHttpReply r = Http(port, "POST", "/v1/responses", responses + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["usage"]["output_tokens_details"]["reasoning_tokens"], want_open);
  r = Http(port, "POST", "/v1/responses", responses + R"(,"stream":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json last = json::parse(SseData(r.body).back());
  EXPECT_EQ(last["response"]["usage"]["output_tokens_details"]["reasoning_tokens"], want_open)
      << last.dump();

  // Anthropic: budget_tokens 4 is chat's thinking_budget 4.
  const std::string message = std::string(R"({"model":"think","temperature":0,"max_tokens":10,)") +
                              R"("thinking":{"type":"enabled","budget_tokens":4},"messages":)" +
                              kUser;
  r = Http(port, "POST", "/v1/messages", message + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["usage"]["output_tokens_details"]["thinking_tokens"], want_budget);
  r = Http(port, "POST", "/v1/messages", message + R"(,"stream":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  int64_t streamed = -1;
  for (const std::string& d : SseData(r.body)) {
    const json e = json::parse(d);
    if (e["type"] == "message_delta") streamed = e["usage"]["output_tokens_details"]["thinking_tokens"];
  }
  EXPECT_EQ(streamed, want_budget);

  // Completions: a raw prompt that opens the block counts the same way.
  const std::string prompt =
      R"(<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n<think>\n)";
  r = Http(port, "POST", "/v1/completions",
           std::string(R"({"model":"think","temperature":0,"max_tokens":6,"logprobs":0,)") +
               R"("prompt":")" + prompt + R"("})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json c = json::parse(r.body);
  std::vector<std::string> tokens;
  for (const json& t : c["choices"][0]["logprobs"]["tokens"]) tokens.push_back(t);
  ASSERT_EQ(tokens.size(), 6u) << r.body;
  EXPECT_EQ(c["usage"]["completion_tokens_details"]["reasoning_tokens"], TokensBeforeClose(tokens));
}

}  // namespace
}  // namespace deltaserve
