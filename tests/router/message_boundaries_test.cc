// Message boundaries (router/chat/message_boundaries.h) and what QwenPromptRenderer sends with
// a prompt: the rule on hand-made id lists, then on the real Qwen3 vocabulary
// (../shared/golden/qwen3-vocab-qwen35pre.gguf, its Tokenizer message built from the GGUF as a
// worker sends it). Expected positions are computed independently of the rule: the token count
// of the rendered text cut right after each "<|im_end|>\n", tokenized on its own.
#include "router/chat/message_boundaries.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/gguf_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/chat/qwen_chat_template.h"
#include "router/chat/qwen_prompt_renderer.h"
#include "router/chat/tokenizer_from_proto.h"
#include "tests/support/test_paths.h"
#include "tests/support/tokenizer_proto.h"

namespace deltaserve::router::chat {
namespace {

namespace v1 = ::deltaserve::v1;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int32_t kEot = 9;
constexpr int32_t kNl = 5;

TEST(MessageBoundariesTest, EndAfterTheNewlineThatFollowsTheEndOfTurn) {
  //                          0  1  2     3    4  5  6     7    8  9
  const std::vector<int32_t> ids = {1, 2, 3, kEot, kNl, 1, 2, kEot, kNl, 7};
  EXPECT_THAT(MessageBoundaries(ids, kEot, kNl), ElementsAre(5, 9));
}

TEST(MessageBoundariesTest, EndRightAfterTheEndOfTurnWithoutANewline) {
  EXPECT_THAT(MessageBoundaries({1, kEot, 2, kEot}, kEot, kNl), ElementsAre(2, 4));
  EXPECT_THAT(MessageBoundaries({1, kEot, kNl}, kEot, kNl), ElementsAre(3));  // = prompt length
  EXPECT_THAT(MessageBoundaries({kEot, kEot, kNl}, kEot, kNl), ElementsAre(1, 3));
  // Only a newline right after the end of turn counts; a second one is the next message's.
  EXPECT_THAT(MessageBoundaries({1, kEot, kNl, kNl}, kEot, kNl), ElementsAre(3));
  // No newline token in the vocabulary: the end of turn alone.
  EXPECT_THAT(MessageBoundaries({1, kEot, kNl}, kEot, -1), ElementsAre(2));
}

TEST(MessageBoundariesTest, NoneWithoutAnEndOfTurn) {
  EXPECT_THAT(MessageBoundaries({1, 2, 3}, kEot, kNl), IsEmpty());
  EXPECT_THAT(MessageBoundaries({}, kEot, kNl), IsEmpty());
  EXPECT_THAT(MessageBoundaries({1, kEot, kNl}, -1, kNl), IsEmpty());
}

TEST(MessageBoundariesTest, AscendingAndUniqueEvenIfNewlineIsTheEndOfTurn) {
  EXPECT_THAT(MessageBoundaries({kEot, kEot, kEot}, kEot, kEot), ElementsAre(2, 3));
}

api::ChatMessage Msg(std::string role, std::string content) {
  api::ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

class QwenBoundariesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<v1::Tokenizer> proto =
        testing::TokenizerProtoFromGgufPath(testing::GoldenPath("qwen3-vocab-qwen35pre.gguf"));
    ASSERT_TRUE(proto.ok()) << proto.status();
    auto model = std::make_shared<ModelState>();
    model->name = "qwen";
    model->n_vocab = proto->tokens_size();
    model->context_length = 32768;
    model->tokenizer = std::make_shared<const v1::Tokenizer>(std::move(*proto));
    absl::StatusOr<std::unique_ptr<common::Tokenizer>> tok = TokenizerFromProto(*model->tokenizer);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = tok->release();
    model_ = new std::shared_ptr<ModelState>(std::move(model));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  static RenderedPrompt Render(const std::vector<api::ChatMessage>& messages) {
    api::CompletionRequest r;
    r.messages = messages;
    absl::StatusOr<RenderedPrompt> p = QwenPromptRenderer().Render(r, **model_, *tokenizer_);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : RenderedPrompt{};
  }

  // The token count of the rendered text up to and including each "<|im_end|>\n".
  static std::vector<int32_t> ExpectedBoundaries(const std::vector<api::ChatMessage>& messages) {
    absl::StatusOr<std::string> text = RenderChat(messages, ChatOptions{});
    EXPECT_TRUE(text.ok()) << text.status();
    std::vector<int32_t> out;
    const std::string marker = "<|im_end|>\n";
    for (size_t at = text->find(marker); at != std::string::npos; at = text->find(marker, at + 1)) {
      const std::string head = text->substr(0, at + marker.size());
      out.push_back(static_cast<int32_t>(tokenizer_->Encode(head, /*parse_special=*/true).size()));
    }
    return out;
  }

  static common::Tokenizer* tokenizer_;
  static std::shared_ptr<ModelState>* model_;
};
common::Tokenizer* QwenBoundariesTest::tokenizer_ = nullptr;
std::shared_ptr<ModelState>* QwenBoundariesTest::model_ = nullptr;

TEST_F(QwenBoundariesTest, ThreeMessagesEndWhereEachMessageEnds) {
  const std::vector<api::ChatMessage> messages = {
      Msg("system", "You are a terse assistant."),
      Msg("user", "What is the capital of France?"),
      Msg("assistant", "Paris."),
      Msg("user", "And of Italy?"),
  };
  // Three messages before the question the model answers: system, user, assistant.
  const std::vector<api::ChatMessage> three(messages.begin(), messages.begin() + 3);
  const RenderedPrompt p = Render(three);
  const std::vector<int32_t> expected = ExpectedBoundaries(three);
  ASSERT_EQ(expected.size(), 3u);
  EXPECT_EQ(p.message_boundaries, expected);
  const int32_t im_end = tokenizer_->Find("<|im_end|>");
  ASSERT_GE(im_end, 0);
  for (int32_t b : p.message_boundaries) {
    EXPECT_EQ(p.token_ids[b - 2], im_end);
    EXPECT_EQ(tokenizer_->Piece(p.token_ids[b - 1]), "\n");
  }
  // The generation prompt comes after the last boundary.
  ASSERT_LT(static_cast<size_t>(p.message_boundaries.back()), p.token_ids.size());
  EXPECT_EQ(tokenizer_->Decode(std::vector<int32_t>(
                p.token_ids.begin() + p.message_boundaries.back(), p.token_ids.end())),
            "<|im_start|>assistant\n");
  ASSERT_EQ(p.turn_end_token_ids.size(), 2u);
  EXPECT_EQ(p.turn_end_token_ids[0], im_end);
  EXPECT_EQ(tokenizer_->Piece(p.turn_end_token_ids[1]), "\n");

  const RenderedPrompt four = Render(messages);
  EXPECT_EQ(four.message_boundaries, ExpectedBoundaries(messages));
  EXPECT_EQ(four.message_boundaries.size(), 4u);
}

// An agent's conversation grows by the reply (sent back as an assistant message, its reasoning
// dropped by the template) and a new user message: each turn's boundaries are the previous
// turn's plus two, and the tokens up to the previous turn's last boundary are the same, so the
// snapshot taken there is the prefix of the next turn's prompt.
TEST_F(QwenBoundariesTest, GrowingConversationKeepsEarlierBoundaries) {
  std::vector<api::ChatMessage> conversation = {
      Msg("system", "You are an agent. Use short answers."),
      Msg("user", "List three primes."),
  };
  const std::vector<std::string> replies = {
      "<think>\nSmall primes are easy.\n</think>\n\n2, 3, 5.",
      "<think>\nNext ones.\n</think>\n\n7, 11, 13.",
      "Done: 17, 19, 23.",
  };
  RenderedPrompt previous = Render(conversation);
  ASSERT_EQ(previous.message_boundaries.size(), 2u);
  for (size_t turn = 0; turn < replies.size(); ++turn) {
    conversation.push_back(Msg("assistant", replies[turn]));
    conversation.push_back(Msg("user", "Three more, please."));
    const RenderedPrompt next = Render(conversation);
    EXPECT_EQ(next.message_boundaries, ExpectedBoundaries(conversation)) << "turn " << turn;
    ASSERT_EQ(next.message_boundaries.size(), previous.message_boundaries.size() + 2)
        << "turn " << turn;
    EXPECT_TRUE(std::equal(previous.message_boundaries.begin(), previous.message_boundaries.end(),
                           next.message_boundaries.begin()))
        << "turn " << turn;
    const size_t shared = static_cast<size_t>(previous.message_boundaries.back());
    EXPECT_TRUE(std::equal(previous.token_ids.begin(), previous.token_ids.begin() + shared,
                           next.token_ids.begin()))
        << "turn " << turn;
    previous = next;
  }
}

TEST_F(QwenBoundariesTest, CompletionsGetBoundariesButNoTurnEndTokens) {
  // A raw prompt as ids, carrying ChatML markup.
  const std::vector<int32_t> chat =
      tokenizer_->Encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", true);
  api::CompletionRequest r;
  r.endpoint = api::Endpoint::kCompletions;
  r.prompt_is_tokens = true;
  r.prompt_tokens = chat;
  absl::StatusOr<RenderedPrompt> p = QwenPromptRenderer().Render(r, **model_, *tokenizer_);
  ASSERT_TRUE(p.ok()) << p.status();
  const int32_t expected =
      static_cast<int32_t>(tokenizer_->Encode("<|im_start|>user\nHi<|im_end|>\n", true).size());
  EXPECT_THAT(p->message_boundaries, ElementsAre(expected));
  EXPECT_THAT(p->turn_end_token_ids, IsEmpty());

  // Text completions: the caller's markup is parsed by default, so its turn ends are boundaries.
  r.prompt_is_tokens = false;
  r.prompt = "<|im_start|>user\nHi<|im_end|>\n";
  p = QwenPromptRenderer().Render(r, **model_, *tokenizer_);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->message_boundaries, ElementsAre(expected));
  EXPECT_THAT(p->turn_end_token_ids, IsEmpty());
  // With parse_special_tokens false the markup is plain text: no end of turn.
  r.parse_special_tokens = false;
  p = QwenPromptRenderer().Render(r, **model_, *tokenizer_);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->message_boundaries, IsEmpty());
  EXPECT_THAT(p->turn_end_token_ids, IsEmpty());
}

TEST_F(QwenBoundariesTest, EndOfTurnFromSpecialTokensWinsOverTheLookup) {
  v1::Tokenizer proto = *(*model_)->tokenizer;
  const TurnEndTokens by_text = FindTurnEndTokens(*tokenizer_, &proto);
  EXPECT_EQ(by_text.eot_id, tokenizer_->Find("<|im_end|>"));
  EXPECT_EQ(tokenizer_->Piece(by_text.newline_id), "\n");
  proto.mutable_special()->set_eot_id(42);
  EXPECT_EQ(FindTurnEndTokens(*tokenizer_, &proto).eot_id, 42);
  proto.mutable_special()->set_eot_id(tokenizer_->vocab_size());  // outside: ignored
  EXPECT_EQ(FindTurnEndTokens(*tokenizer_, &proto).eot_id, by_text.eot_id);
  EXPECT_EQ(FindTurnEndTokens(*tokenizer_, nullptr).eot_id, by_text.eot_id);
}

}  // namespace
}  // namespace deltaserve::router::chat
