// Session snapshots end to end (label integration; issue 11): a 10-turn chat through the real
// deltaserve-router and deltaserve-worker on 127.0.0.1, greedy, each reply sent back verbatim,
// against the same conversation on a second router + worker started with --snapshot-ram 0 (every
// prompt computed in full: the cold reference). Every turn's answer must be the cold one, and
// from turn 2 on the router must report (usage.prompt_tokens_details.cached_tokens, streamed and
// not) that at least the previous turn's prompt less 16 tokens was restored instead of computed:
// the router sends the message boundaries, the worker snapshots at them and at the end of each
// reply, and resumes there.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/router_service.h"

namespace deltaserve {
namespace {

using ::deltaserve::testing::Http;
using ::deltaserve::testing::RouterService;
using json = nlohmann::json;

struct Answer {
  std::string content;
  int64_t prompt_tokens = -1;
  int64_t cached_tokens = -1;
};

// One chat completion; streamed answers are reassembled from their SSE chunks.
Answer Chat(int port, const json& messages, bool stream) {
  json body = {{"model", "tiny"},   {"messages", messages}, {"temperature", 0},
               {"max_tokens", 8},   {"stream", stream}};
  if (stream) body["stream_options"] = {{"include_usage", true}};
  const testing::RawHttpReply r = Http(port, "POST", "/v1/chat/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  Answer a;
  auto read_usage = [&a](const json& u) {
    a.prompt_tokens = u.at("prompt_tokens").get<int64_t>();
    a.cached_tokens = u.at("prompt_tokens_details").at("cached_tokens").get<int64_t>();
  };
  if (!stream) {
    const json doc = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(doc.is_discarded()) << r.body;
    if (doc.is_discarded()) return a;
    a.content = doc.at("choices").at(0).at("message").value("content", "");
    read_usage(doc.at("usage"));
    return a;
  }
  size_t pos = 0;
  while ((pos = r.body.find("data: ", pos)) != std::string::npos) {
    const size_t end = r.body.find("\n\n", pos);
    const std::string data = r.body.substr(pos + 6, end - pos - 6);
    pos = end == std::string::npos ? r.body.size() : end;
    if (data == "[DONE]") break;
    const json chunk = json::parse(data, nullptr, false);
    EXPECT_FALSE(chunk.is_discarded()) << data;
    if (chunk.is_discarded()) continue;
    if (!chunk["choices"].empty()) {
      const json& delta = chunk["choices"][0]["delta"];
      if (delta.contains("content") && delta["content"].is_string()) {
        a.content += delta["content"].get<std::string>();
      }
    }
    if (chunk.contains("usage") && chunk["usage"].is_object()) read_usage(chunk["usage"]);
  }
  return a;
}

TEST(RouterSnapshotTest, TenTurnChatEqualsColdAndRestoresThePreviousTurn) {
  RouterService cached("", {"--ctx", "2048", "--parallel", "1"});
  RouterService cold("", {"--ctx", "2048", "--parallel", "1", "--snapshot-ram", "0"});
  ASSERT_NE(cached.port(), 0);
  ASSERT_NE(cold.port(), 0);
  json history = json::array();
  history.push_back({{"role", "system"},
                     {"content", "You are a careful assistant in a long planning session."}});
  int64_t previous_prompt = 0;
  for (int turn = 1; turn <= 10; ++turn) {
    std::string user = "Turn " + std::to_string(turn) + ": ";
    for (int i = 0; i < 6 + turn; ++i) {
      user += "step " + std::to_string(turn * 31 + i * 7) + " of the plan needs review; ";
    }
    history.push_back({{"role", "user"}, {"content", user}});
    const bool stream = turn % 2 == 0;
    const Answer got = Chat(cached.port(), history, stream);
    const Answer want = Chat(cold.port(), history, stream);
    const std::string what = "turn " + std::to_string(turn) + (stream ? " (streamed)" : "");
    EXPECT_EQ(got.content, want.content) << what;
    EXPECT_EQ(got.prompt_tokens, want.prompt_tokens) << what;
    EXPECT_EQ(want.cached_tokens, 0) << what;
    if (turn >= 2) {
      EXPECT_GE(got.cached_tokens, previous_prompt - 16) << what;
      EXPECT_LT(got.cached_tokens, got.prompt_tokens) << what;
    }
    std::printf("turn %d: prompt %lld tokens, cached %lld\n", turn,
                static_cast<long long>(got.prompt_tokens),
                static_cast<long long>(got.cached_tokens));
    previous_prompt = got.prompt_tokens;
    history.push_back({{"role", "assistant"}, {"content", got.content}});
  }
}

}  // namespace
}  // namespace deltaserve
