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

// EncodeMarked against the same llama.cpp ids: with nothing marked it is special parsing, with
// the whole text marked as request text it is no special parsing (issue 17).
TEST_P(TokenizerGoldenTest, EncodeMarkedMatchesLlamaCppWithAndWithoutParsing) {
  for (const GoldenTokenizerCase& c : cases_) {
    EXPECT_EQ(tokenizer_->EncodeMarked(c.text, {}), c.ids) << "text: " << c.text;
    EXPECT_EQ(tokenizer_->EncodeMarked(c.text, {{0, c.text.size()}}), c.ids_plain)
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

// RFC 3629 UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF, nothing cut.
bool IsStrictUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (b < 0x80) {
      ++i;
      continue;
    } else if (b >= 0xC2 && b <= 0xDF) {
      n = 1, cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 2, cp = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 3, cp = b & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // the sequence is cut by the end
    for (int k = 1; k <= n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

TEST(StrictUtf8Test, AcceptsAndRejects) {
  EXPECT_TRUE(IsStrictUtf8("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsStrictUtf8("\xC3"));          // cut
  EXPECT_FALSE(IsStrictUtf8("\xE2\x82"));      // cut
  EXPECT_FALSE(IsStrictUtf8("\xC0\x80"));      // overlong
  EXPECT_FALSE(IsStrictUtf8("\xED\xA0\x80"));  // surrogate
  EXPECT_FALSE(IsStrictUtf8("\x80"));          // stray continuation
}

TEST_P(TokenizerGoldenTest, StreamingDetokenizerRebuildsTextInValidChunks) {
  for (const GoldenTokenizerCase& c : cases_) {
    StreamingDetokenizer detok(*tokenizer_);
    std::string text;
    for (int32_t id : c.ids) {
      const std::string chunk = detok.Push(id);
      // Each chunk must stand on its own as UTF-8 (the golden text is valid UTF-8), checked by
      // this file's own validator rather than the library's.
      EXPECT_TRUE(IsStrictUtf8(chunk)) << "chunk after id " << id << " of: " << c.text;
      text += chunk;
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
