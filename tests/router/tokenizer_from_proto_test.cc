// TokenizerFromProto: a Tokenizer message filled from the golden Qwen3 vocabulary's GGUF
// metadata (tokenizer.ggml.tokens / token_type / merges / pre / special ids, as the worker
// sends it) gives a tokenizer that encodes and decodes exactly like common::Tokenizer::FromGguf
// on the same file; the expected ids of the corpus are llama.cpp's
// (../shared/golden/tokenizer-qwen3vocab-qwen35pre.json).

#include "router/chat/tokenizer_from_proto.h"

#include <memory>
#include <string>
#include <vector>

#include "common/gguf_file.h"
#include "gtest/gtest.h"
#include "tests/support/golden_tokenizer_cases.h"
#include "tests/support/test_paths.h"
#include "tests/support/tokenizer_proto.h"

namespace deltaserve::router::chat {
namespace {

namespace pb = deltaserve::v1;
using common::GgufFile;
using common::TokenId;
using common::Tokenizer;

class TokenizerFromProtoTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<GgufFile>> f =
        GgufFile::Open(testing::GoldenPath("qwen3-vocab-qwen35pre.gguf"));
    ASSERT_TRUE(f.ok()) << f.status();
    file_ = f->release();
    absl::StatusOr<pb::Tokenizer> proto = testing::TokenizerProtoFromGguf(*file_);
    ASSERT_TRUE(proto.ok()) << proto.status();
    proto_ = new pb::Tokenizer(std::move(*proto));
  }
  static void TearDownTestSuite() {
    delete proto_;
    delete file_;
  }
  static GgufFile* file_;
  static pb::Tokenizer* proto_;
};
GgufFile* TokenizerFromProtoTest::file_ = nullptr;
pb::Tokenizer* TokenizerFromProtoTest::proto_ = nullptr;

TEST_F(TokenizerFromProtoTest, EncodesLikeFromGgufOnQwen3Vocabulary) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> reference = Tokenizer::FromGguf(*file_);
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = TokenizerFromProto(*proto_);
  ASSERT_TRUE(tok.ok()) << tok.status();

  EXPECT_EQ((*tok)->vocab_size(), 151936);
  EXPECT_EQ((*tok)->vocab_size(), (*reference)->vocab_size());
  EXPECT_EQ((*tok)->bos_id(), (*reference)->bos_id());
  EXPECT_EQ((*tok)->eos_id(), (*reference)->eos_id());
  EXPECT_EQ((*tok)->pad_id(), (*reference)->pad_id());
  EXPECT_EQ((*tok)->pre_tokenizer(), (*reference)->pre_tokenizer());

  const std::vector<std::string> texts = {
      "Hello world",
      "<|im_start|>user\nWhat's 2+2? Answer in one word.<|im_end|>\n<|im_start|>assistant\n",
      "<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
      "  indented\tcode() { return 12345678; }\r\n",
      "Grüße, 世界! 🙂 ¿Qué tal?",
  };
  for (const std::string& text : texts) {
    for (bool parse_special : {true, false}) {
      const std::vector<TokenId> want = (*reference)->Encode(text, parse_special);
      EXPECT_EQ((*tok)->Encode(text, parse_special), want)
          << "text: " << text << " parse_special=" << parse_special;
      EXPECT_EQ((*tok)->Decode(want), (*reference)->Decode(want)) << text;
    }
  }
  // The chat control tokens are single tokens when special parsing is on.
  EXPECT_EQ((*tok)->Encode("<|im_start|>", true).size(), 1u);
  EXPECT_EQ((*tok)->Encode("<|im_start|>", true),
            std::vector<TokenId>{(*tok)->Find("<|im_start|>")});
}

TEST_F(TokenizerFromProtoTest, MatchesLlamaCppOnGoldenCorpus) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = TokenizerFromProto(*proto_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<testing::GoldenTokenizerCase> cases =
      testing::LoadGoldenTokenizerCases("tokenizer-qwen3vocab-qwen35pre.json");
  ASSERT_FALSE(cases.empty());
  for (const testing::GoldenTokenizerCase& c : cases) {
    EXPECT_EQ((*tok)->Encode(c.text, /*parse_special=*/true), c.ids) << c.text;
    EXPECT_EQ((*tok)->Encode(c.text, /*parse_special=*/false), c.ids_plain) << c.text;
  }
}

TEST_F(TokenizerFromProtoTest, RefusesInconsistentMessages) {
  {
    pb::Tokenizer t = *proto_;
    t.set_model("llama");
    EXPECT_EQ(TokenizerFromProto(t).status().code(), absl::StatusCode::kUnimplemented);
  }
  {
    pb::Tokenizer t = *proto_;
    t.set_pre("gpt-9");
    EXPECT_EQ(TokenizerFromProto(t).status().code(), absl::StatusCode::kUnimplemented);
  }
  {
    pb::Tokenizer t = *proto_;
    t.mutable_token_types()->RemoveLast();
    const absl::Status s = TokenizerFromProto(t).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("token_types"), absl::string_view::npos) << s;
  }
  {
    pb::Tokenizer t = *proto_;
    t.set_token_types(5, static_cast<pb::TokenType>(42));
    const absl::Status s = TokenizerFromProto(t).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("token_types[5]"), absl::string_view::npos) << s;
  }
  {
    pb::Tokenizer t = *proto_;
    t.mutable_special()->set_eos_id(t.tokens_size());
    const absl::Status s = TokenizerFromProto(t).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("special.eos_id"), absl::string_view::npos) << s;
  }
  {
    pb::Tokenizer t;
    t.set_model("gpt2");
    t.set_pre("qwen35");
    EXPECT_EQ(TokenizerFromProto(t).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace deltaserve::router::chat
