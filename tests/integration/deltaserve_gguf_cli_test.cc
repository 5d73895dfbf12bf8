// deltaserve-gguf run as a real process: `info` on the golden models, `tokenize --json` against
// llama.cpp's golden tokenizations, `detokenize`, and clean failures on bad input.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/golden_tokenizer_cases.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

using ::testing::HasSubstr;

ProcessResult Gguf(std::vector<std::string> args) {
  args.insert(args.begin(), BinaryPath("common/deltaserve-gguf"));
  return RunProcess(args);
}

// Expected values from ../shared/golden/README.md ("The models" table).
TEST(DeltaserveGgufCli, InfoShowsTinyMoeLayerPlan) {
  ProcessResult r = Gguf({"info", GoldenPath("tiny-moe-f32.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("model: qwen35moe"));
  EXPECT_THAT(r.out, HasSubstr("blocks: 8 "));
  EXPECT_THAT(r.out, HasSubstr("layer plan: DeltaNet 0,1,2,4,5,6; attention 3,7"));
  EXPECT_THAT(r.out, HasSubstr("16 experts, 4 used per token"));
  EXPECT_THAT(r.out, HasSubstr("output: tied"));
  EXPECT_THAT(r.out, HasSubstr("tensors: 148"));
  EXPECT_THAT(r.out, HasSubstr("tokenizer.ggml.pre"));
}

// A vocabulary-only file has a partial set of model keys by design: it is named as a tokenizer
// file, not called INVALID.
TEST(DeltaserveGgufCli, InfoNamesAVocabularyOnlyFile) {
  ProcessResult r = Gguf({"info", GoldenPath("qwen3-vocab-qwen35pre.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("vocabulary only: no tensors"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("INVALID")));
  EXPECT_THAT(r.out, HasSubstr("tensors: 0"));
}

TEST(DeltaserveGgufCli, InfoShowsDenseQ4KMTypes) {
  ProcessResult r = Gguf({"info", GoldenPath("tiny-dense-q4_k_m.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("model: qwen35\n"));
  EXPECT_THAT(r.out, HasSubstr("output: separate"));
  EXPECT_THAT(r.out, HasSubstr("feed-forward: 256"));
  // 49 q4_K, 9 q6_K and 6 q5_0 tensors (golden README, "Files").
  EXPECT_THAT(r.out, ::testing::ContainsRegex("q4_K +49 "));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("q6_K +9 "));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("q5_0 +6 "));
}

TEST(DeltaserveGgufCli, TokenizeJsonMatchesGoldenForEveryCase) {
  const std::string model = GoldenPath("qwen3-vocab-qwen35pre.gguf");
  for (const GoldenTokenizerCase& c :
       LoadGoldenTokenizerCases("tokenizer-qwen3vocab-qwen35pre.json")) {
    if (c.text.empty()) continue;  // an empty argv string is still passed; checked below
    ProcessResult r = Gguf({"tokenize", model, c.text, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json out = nlohmann::json::parse(r.out);
    EXPECT_EQ(out.at("ids").get<std::vector<int32_t>>(), c.ids) << c.text;
    ProcessResult plain = Gguf({"tokenize", model, c.text, "--json", "--no-special"});
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_EQ(nlohmann::json::parse(plain.out).at("ids").get<std::vector<int32_t>>(),
              c.ids_plain)
        << c.text;
  }
}

TEST(DeltaserveGgufCli, TokenizeEmptyTextGivesNoIds) {
  ProcessResult r = Gguf({"tokenize", GoldenPath("tiny-dense-f32.gguf"), "", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out).at("ids").empty());
}

TEST(DeltaserveGgufCli, DetokenizeInvertsTokenize) {
  const std::string model = GoldenPath("qwen3-vocab-qwen35pre.gguf");
  const std::string text = "Hello, 世界! <think>x</think> 🦙";
  ProcessResult tok = Gguf({"tokenize", model, text, "--json"});
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  std::vector<std::string> args = {"detokenize", model};
  const nlohmann::json ids = nlohmann::json::parse(tok.out).at("ids");
  for (int id : ids) args.push_back(std::to_string(id));
  ProcessResult detok = Gguf(args);
  ASSERT_EQ(detok.exit_code, 0) << detok.err;
  EXPECT_EQ(detok.out, text + "\n");
}

TEST(DeltaserveGgufCli, BadInputFailsWithMessage) {
  ProcessResult missing = Gguf({"info", "/nonexistent/model.gguf"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr("cannot open"));

  ProcessResult not_gguf = Gguf({"info", GoldenPath("tiny-dense-f32.json")});
  EXPECT_NE(not_gguf.exit_code, 0);
  EXPECT_THAT(not_gguf.err, HasSubstr("not a GGUF file"));

  ProcessResult bad_id = Gguf({"detokenize", GoldenPath("tiny-dense-f32.gguf"), "12", "99999"});
  EXPECT_NE(bad_id.exit_code, 0);
  EXPECT_THAT(bad_id.err, HasSubstr("'99999' is not a token id"));

  ProcessResult usage = Gguf({"frobnicate", "x"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.err, HasSubstr("usage:"));
}

}  // namespace
}  // namespace deltaserve::testing
