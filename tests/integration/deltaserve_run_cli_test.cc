// deltaserve-run as a real process: --dump-logits reproduces llama.cpp's golden rows for the
// tiny MoE model (tolerance 1e-3, as for the in-process F32 golden test); generation streams
// text and ends with the machine-readable timing line; bad input exits non-zero with a message.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/gguf_file.h"
#include "common/streaming_detokenizer.h"
#include "common/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

ProcessResult RunCli(std::vector<std::string> args) {
  args.insert(args.begin(), BinaryPath("worker/deltaserve-run"));
  return RunProcess(args);
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v;
  float f;
  while (in.read(reinterpret_cast<char*>(&f), sizeof(f))) v.push_back(f);
  return v;
}

TEST(DeltaserveRunCli, DumpLogitsReproducesGoldenRowsOfTinyMoe) {
  std::ifstream manifest(GoldenPath("tiny-moe-f32.json"));
  const nlohmann::json doc = nlohmann::json::parse(manifest);
  const int64_t n_vocab = doc.at("n_vocab");
  const nlohmann::json& seq = doc.at("sequences").at(1);  // len17: every position dumped
  const std::vector<int> tokens = seq.at("tokens");
  const std::vector<int> positions = seq.at("positions");
  const int64_t offset = seq.at("offset_floats");
  const std::string out = ::testing::TempDir() + "/tiny-moe-len17-" + std::to_string(getpid()) + ".bin";
  ProcessResult r = RunCli({"-m", GoldenPath("tiny-moe-f32.gguf"), "--tokens",
                         absl::StrJoin(tokens, ","), "--dump-logits", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<float> ours = ReadFloats(out);
  std::remove(out.c_str());
  ASSERT_EQ(ours.size(), tokens.size() * n_vocab);
  const std::vector<float> golden = ReadFloats(GoldenPath("tiny-moe-f32.logits.bin"));
  double max_diff = 0;
  for (size_t r_i = 0; r_i < positions.size(); ++r_i) {
    for (int64_t i = 0; i < n_vocab; ++i) {
      const float got = ours[positions[r_i] * n_vocab + i];
      const float want = golden[offset + r_i * n_vocab + i];
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(got - want)));
    }
  }
  EXPECT_LE(max_diff, 1e-3);
}

TEST(DeltaserveRunCli, GenerationEndsWithTimingLine) {
  ProcessResult r = RunCli({"-m", GoldenPath("tiny-dense-f32.gguf"), "-p", "Hello, my name is", "-n",
                         "8", "--temp", "0", "--ignore-eos", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, ContainsRegex("timing: prompt_tokens=7 prefill_tok_s=[0-9.]+ "
                                   "decode_tokens=7 decode_tok_s=[0-9.]+ peak_rss_mb=[0-9.]+"));
  EXPECT_THAT(r.err, HasSubstr("memory plan: weights"));
}

// Greedy text must be the golden greedy continuation (first 8 tokens, detokenized the way the
// CLI streams it); --chat must frame the prompt as ChatML.
TEST(DeltaserveRunCli, GreedyTextIsTheGoldenContinuationAndChatUsesChatMl) {
  std::ifstream manifest(GoldenPath("tiny-dense-f32.json"));
  const nlohmann::json doc = nlohmann::json::parse(manifest);
  const nlohmann::json& greedy = doc.at("greedy").at(0);
  ASSERT_EQ(greedy.at("prompt_text"), "Hello, my name is");
  auto file = common::GgufFile::Open(GoldenPath("tiny-dense-f32.gguf"));
  ASSERT_TRUE(file.ok());
  auto tok = common::Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok());
  common::StreamingDetokenizer detok(**tok);
  std::string expected;
  const std::vector<int> generated = greedy.at("generated_tokens");
  for (int i = 0; i < 8; ++i) expected += detok.Push(generated[i]);
  expected += detok.Flush();
  ProcessResult r = RunCli({"-m", GoldenPath("tiny-dense-f32.gguf"), "-p", "Hello, my name is", "-n",
                         "8", "--temp", "0", "--ignore-eos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected + "\n");

  const size_t chat_tokens =
      (*tok)->Encode("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", true)
          .size();
  ProcessResult chat = RunCli({"-m", GoldenPath("tiny-dense-f32.gguf"), "-p", "What is 2+2?",
                            "--chat", "-n", "4", "--temp", "0"});
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_THAT(chat.err, HasSubstr("prompt_tokens=" + std::to_string(chat_tokens) + " "));
}

TEST(DeltaserveRunCli, BadInputFailsWithMessage) {
  ProcessResult no_model = RunCli({"-p", "x"});
  EXPECT_EQ(no_model.exit_code, 2);
  EXPECT_THAT(no_model.err, HasSubstr("-m FILE is required"));
  ProcessResult missing = RunCli({"-m", "/nonexistent.gguf", "-p", "x"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("cannot open"));
  ProcessResult vocab_only = RunCli({"-m", GoldenPath("qwen3-vocab-qwen35pre.gguf"), "-p", "x"});
  EXPECT_EQ(vocab_only.exit_code, 1);
  EXPECT_THAT(vocab_only.err, HasSubstr("missing key 'qwen35.context_length'"));
  ProcessResult bad_token = RunCli({"-m", GoldenPath("tiny-dense-f32.gguf"), "--tokens", "1,99999",
                                 "--dump-logits", "/dev/null"});
  EXPECT_EQ(bad_token.exit_code, 1);
  EXPECT_THAT(bad_token.err, HasSubstr("outside the vocabulary"));
}

}  // namespace
}  // namespace deltaserve::testing
