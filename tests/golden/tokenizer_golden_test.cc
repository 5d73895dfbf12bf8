// The tokenizer against llama.cpp's tokenizations in ../shared/golden: ids with and without
// special-token parsing, pieces, detokenized text, for the full Qwen3 vocabulary and the
// truncated 2,048-entry one of the tiny models. Every case must match exactly.
#include <memory>
#include <string>
#include <vector>

#include "common/gguf_file.h"
#include "common/streaming_detokenizer.h"
#include "common/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/support/golden_tokenizer_cases.h"
#include "tests/support/test_paths.h"

namespace deltaserve::common {
namespace {

using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::GoldenTokenizerCase;
using ::deltaserve::testing::LoadGoldenTokenizerCases;

struct GoldenVocab {
  const char* gguf;
  const char* cases;
};

class TokenizerGoldenTest : public ::testing::TestWithParam<GoldenVocab> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(GoldenPath(GetParam().gguf));
    ASSERT_TRUE(file.ok()) << file.status();
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    cases_ = LoadGoldenTokenizerCases(GetParam().cases);
    ASSERT_EQ(cases_.size(), 46u) << "the golden corpus has 46 strings";
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<GoldenTokenizerCase> cases_;
};

TEST_P(TokenizerGoldenTest, IdsWithSpecialParsingMatchLlamaCpp) {
  for (const GoldenTokenizerCase& c : cases_) {
    EXPECT_EQ(tokenizer_->Encode(c.text, /*parse_special=*/true), c.ids) << "text: " << c.text;
  }
}

TEST_P(TokenizerGoldenTest, IdsWithoutSpecialParsingMatchLlamaCpp) {
  for (const GoldenTokenizerCase& c : cases_) {
    EXPECT_EQ(tokenizer_->Encode(c.text, /*parse_special=*/false), c.ids_plain)
        << "text: " << c.text;
  }
}

TEST_P(TokenizerGoldenTest, PiecesMatchLlamaCpp) {
  for (const GoldenTokenizerCase& c : cases_) {
    ASSERT_EQ(c.pieces.size(), c.ids.size());
    for (size_t i = 0; i < c.ids.size(); ++i) {
      EXPECT_EQ(tokenizer_->Piece(c.ids[i]), c.pieces[i]) << "id " << c.ids[i];
    }
  }
}

TEST_P(TokenizerGoldenTest, DetokenizedTextMatchesLlamaCpp) {
  for (const GoldenTokenizerCase& c : cases_) {
    EXPECT_EQ(tokenizer_->Decode(c.ids), c.detok) << "text: " << c.text;
    EXPECT_EQ(c.detok, c.text) << "the golden corpus round-trips";
  }
}

TEST_P(TokenizerGoldenTest, StreamingDetokenizerRebuildsTextInValidChunks) {
  for (const GoldenTokenizerCase& c : cases_) {
    StreamingDetokenizer detok(*tokenizer_);
    std::string text;
    for (int32_t id : c.ids) {
      const std::string chunk = detok.Push(id);
      // Each chunk must stand on its own as UTF-8 (the golden text is valid UTF-8).
      std::string joined = text + chunk;
      EXPECT_EQ(joined.substr(text.size()), chunk);
      text = joined;
    }
    text += detok.Flush();
    EXPECT_EQ(text, c.detok) << "text: " << c.text;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Vocabularies, TokenizerGoldenTest,
    ::testing::Values(GoldenVocab{"qwen3-vocab-qwen35pre.gguf",
                                  "tokenizer-qwen3vocab-qwen35pre.json"},
                      GoldenVocab{"tiny-dense-f32.gguf", "tokenizer-tiny-vocab2048.json"},
                      GoldenVocab{"tiny-moe-f32.gguf", "tokenizer-tiny-vocab2048.json"}),
    [](const ::testing::TestParamInfo<GoldenVocab>& info) {
      return info.index == 0 ? std::string("Qwen3FullVocab")
             : info.index == 1 ? std::string("TinyDenseVocab")
                               : std::string("TinyMoeVocab");
    });

// Special ids from the golden manifests (tokenizer-*.json `bos`/`eos`, golden README).
TEST(TokenizerGoldenSpecials, FullVocabSpecialIds) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::Open(GoldenPath("qwen3-vocab-qwen35pre.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 151936);
  EXPECT_EQ((*tok)->bos_id(), 151643);
  EXPECT_EQ((*tok)->eos_id(), 151645);
  EXPECT_EQ((*tok)->pre_tokenizer(), PreTokenizerKind::kQwen35);
  for (const char* eog : {"<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>",
                          "<|file_sep|>"}) {
    const TokenId id = (*tok)->Find(eog);
    ASSERT_GE(id, 0) << eog;
    EXPECT_TRUE((*tok)->IsEndOfGeneration(id)) << eog;
  }
  EXPECT_FALSE((*tok)->IsEndOfGeneration((*tok)->Find("<|im_start|>")));
  EXPECT_EQ((*tok)->Type((*tok)->Find("<think>")), TokenType::kUserDefined);
  EXPECT_EQ((*tok)->Type((*tok)->Find("<|im_start|>")), TokenType::kControl);
}

}  // namespace
}  // namespace deltaserve::common
