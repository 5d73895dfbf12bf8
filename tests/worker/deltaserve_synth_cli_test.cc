// deltaserve-synth run as a real process: a 4-layer 0.8B q4_k_m file with the golden Qwen3
// vocabulary read back through GgufFile / ReadQwen35HParams / Tokenizer, byte-identical output
// for any thread count, and clean failures on bad arguments, files and paths.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/gguf_file.h"
#include "common/gguf_writer.h"
#include "common/qwen35_hparams.h"
#include "common/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/quants.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

using common::GgmlType;
using ::testing::HasSubstr;

ProcessResult Synth(std::vector<std::string> args) {
  args.insert(args.begin(), BinaryPath("worker/deltaserve-synth"));
  return RunProcess(args);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// use_more_bits(i, 4) of llama-quant.cpp: 4/8 = 0, 7*4/8 = 3, so layers 2 ((2-0)%3 == 2) and 3.
GgmlType ExpectedQ4KMType(const common::GgufTensorInfo& t) {
  const std::string name(t.name);
  if (t.n_dims == 1 || absl::StrContains(name, "ssm_conv1d")) return GgmlType::kF32;
  if (name == "token_embd.weight") return GgmlType::kQ6_K;  // tied: the embedding is the head
  const bool promoted_layer = absl::StartsWith(name, "blk.2.") || absl::StartsWith(name, "blk.3.");
  const bool value_or_down = absl::EndsWith(name, ".attn_qkv.weight") ||
                             absl::EndsWith(name, ".attn_v.weight") ||
                             absl::EndsWith(name, ".ffn_down.weight");
  return promoted_layer && value_or_down ? GgmlType::kQ6_K : GgmlType::kQ4_K;
}

TEST(DeltaserveSynthCli, WritesAFourLayer08bQ4KMFileWithRealShapes) {
  const std::string vocab = GoldenPath("qwen3-vocab-qwen35pre.gguf");
  const std::string out = ::testing::TempDir() + "/synth-0.8b-q4km-l4.gguf";
  ProcessResult r = Synth(
      {"--preset", "0.8b", "--type", "q4_k_m", "--layers", "4", "--vocab-from", vocab, "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("100.0%"));
  EXPECT_THAT(r.err, HasSubstr("MB/s"));

  absl::StatusOr<std::unique_ptr<common::GgufFile>> f = common::GgufFile::Open(out);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<common::Qwen35HParams> hp = common::ReadQwen35HParams(**f);
  ASSERT_TRUE(hp.ok()) << hp.status();
  // MODEL_SPEC §1.2, 0.8B row; the vocabulary file has 151,936 tokens (golden README).
  EXPECT_EQ(hp->arch, "qwen35");
  EXPECT_EQ(hp->n_embd, 1024);
  EXPECT_EQ(hp->n_layer, 4);
  EXPECT_EQ(hp->n_head, 8);
  EXPECT_EQ(hp->n_head_kv, 2);
  EXPECT_EQ(hp->head_dim, 256);
  EXPECT_EQ(hp->n_rot, 64);
  EXPECT_EQ(hp->rope_freq_base, 1e7);
  EXPECT_EQ(hp->rope_sections, (std::array<int32_t, 4>{11, 11, 10, 0}));
  EXPECT_EQ(hp->ssm_n_k_heads, 16);
  EXPECT_EQ(hp->ssm_n_v_heads, 16);
  EXPECT_EQ(hp->ssm_head_dim, 128);
  EXPECT_EQ(hp->ssm_conv_kernel, 4);
  EXPECT_EQ(hp->n_ff, 3584);
  EXPECT_EQ(hp->n_ctx_train, 262144);
  EXPECT_EQ(hp->n_vocab, 151936);
  EXPECT_TRUE(hp->tied_output);
  EXPECT_EQ(hp->LayersOf(common::LayerKind::kFullAttention), std::vector<int>{3});

  // 1 embedding + 3 DeltaNet layers x 14 + 1 attention layer x 11 + output_norm (the golden
  // tiny-dense files have the same 14 and 11 per layer).
  EXPECT_EQ((*f)->tensors().size(), 1u + 3 * 14 + 11 + 1);
  const common::GgufTensorInfo* qkv = (*f)->FindTensor("blk.0.attn_qkv.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->ShapeString(), "{1024, 6144}");
  EXPECT_EQ((*f)->FindTensor("blk.3.attn_q.weight")->ShapeString(), "{1024, 4096}");
  EXPECT_EQ((*f)->FindTensor("blk.3.attn_output.weight")->ShapeString(), "{2048, 1024}");
  EXPECT_EQ((*f)->FindTensor("blk.1.ssm_conv1d.weight")->ShapeString(), "{4, 6144}");

  for (const common::GgufTensorInfo& t : (*f)->tensors()) {
    EXPECT_EQ(t.type, ExpectedQ4KMType(t)) << t.name;
    // Every value finite: F32 as stored, quantized ones decoded row by row.
    const auto type = static_cast<kernels::WeightType>(t.type);
    const absl::Span<const uint8_t> data = (*f)->TensorData(t);
    const int64_t rows = t.n_elements / t.ne[0];
    const size_t row_bytes = kernels::RowBytes(type, t.ne[0]);
    std::vector<float> row(t.ne[0]);
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; r += (t.type == GgmlType::kF32 ? 1 : 97)) {
      ASSERT_EQ(kernels::DequantizeRow(type, data.data() + r * row_bytes, row.data(), t.ne[0]),
                kernels::KernelStatus::kOk);
      for (float x : row) bad += !std::isfinite(x);
    }
    EXPECT_EQ(bad, 0) << t.name;
  }

  // The tokenizer keys are copied: same tokens, merges, template, and the same encoding.
  absl::StatusOr<std::unique_ptr<common::GgufFile>> v = common::GgufFile::Open(vocab);
  ASSERT_TRUE(v.ok());
  for (const char* key :
       {"tokenizer.ggml.pre", "tokenizer.chat_template", "tokenizer.ggml.model"}) {
    EXPECT_EQ(*(*f)->GetString(key), *(*v)->GetString(key)) << key;
  }
  EXPECT_EQ(*(*f)->GetInt("tokenizer.ggml.eos_token_id"), 151645);
  EXPECT_EQ((*(*f)->GetArray("tokenizer.ggml.merges"))->ArraySize(), 151387u);
  absl::StatusOr<std::unique_ptr<common::Tokenizer>> tok_out = common::Tokenizer::FromGguf(**f);
  absl::StatusOr<std::unique_ptr<common::Tokenizer>> tok_in = common::Tokenizer::FromGguf(**v);
  ASSERT_TRUE(tok_out.ok() && tok_in.ok());
  const std::string text = "<|im_start|>user\nHello, 世界!<|im_end|>";
  EXPECT_EQ((*tok_out)->Encode(text, true), (*tok_in)->Encode(text, true));
  std::filesystem::remove(out);
}

// The tiny golden model's 2,048-token vocabulary keeps these runs short.
TEST(DeltaserveSynthCli, OutputIsTheSameForEveryThreadCount) {
  const std::string vocab = GoldenPath("tiny-dense-f32.gguf");
  const std::string a = ::testing::TempDir() + "/synth-t1.gguf";
  const std::string b = ::testing::TempDir() + "/synth-t3.gguf";
  ProcessResult r1 = Synth({"--preset=0.8b", "--type=q5_k_m", "--layers=4", "--seed=9",
                            "--vocab-from", vocab, "--threads", "1", "-o", a});
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  ProcessResult r3 = Synth({"--preset", "0.8b", "--type", "q5_k_m", "--layers", "4", "--seed", "9",
                            "--vocab-from", vocab, "--threads", "3", "-o", b});
  ASSERT_EQ(r3.exit_code, 0) << r3.err;
  const std::string bytes = ReadAll(a);
  EXPECT_GT(bytes.size(), 50u << 20);
  EXPECT_TRUE(bytes == ReadAll(b));
  absl::StatusOr<std::unique_ptr<common::GgufFile>> f = common::GgufFile::Open(a);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->FindTensor("token_embd.weight")->ne[1], 2048);
  EXPECT_EQ((*f)->FindTensor("blk.0.ffn_up.weight")->type, GgmlType::kQ5_K);
  EXPECT_THAT(std::string(*(*f)->GetString("general.description")), HasSubstr("seed 9"));
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

TEST(DeltaserveSynthCli, HelpNamesTheRealVocabularySize) {
  ProcessResult r = Synth({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("248,320"));
  EXPECT_THAT(r.out, HasSubstr("122b-a10b"));
}

TEST(DeltaserveSynthCli, BadArgumentsFailWithAMessage) {
  const std::string vocab = GoldenPath("tiny-dense-f32.gguf");
  const std::string out = ::testing::TempDir() + "/never.gguf";
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--type", "q8_0", "--vocab-from", vocab, "-o", out}, "--preset is required"},
           {{"--preset", "7b", "--type", "q8_0", "--vocab-from", vocab, "-o", out},
            "unknown preset '7b'"},
           {{"--preset", "2b", "--type", "q3_k", "--vocab-from", vocab, "-o", out},
            "unknown weight type 'q3_k'"},
           {{"--preset", "2b", "--type", "f16", "--vocab-from", vocab}, "-o OUT.gguf is required"},
           {{"--preset", "2b", "--type", "f16", "--vocab-from", vocab, "-o", out, "--layers", "0"},
            "--layers '0'"},
           {{"--preset", "2b", "--type", "f16", "--vocab-from", vocab, "-o", out, "--seed"},
            "--seed needs a value"},
           {{"--preset", "2b", "--bogus"}, "unknown argument '--bogus'"},
           {{"--preset", "9b", "--type", "f16", "--vocab-from", vocab, "-o", out, "--expert-skew",
             "1"},
            "an expert skew needs a MoE preset"},
           {{"--preset", "35b-a3b", "--type", "f16", "--vocab-from", vocab, "-o", out,
             "--expert-topics", "4"},
            "--expert-topics and --topic-stickiness go with --expert-skew"},
           {{"--preset", "35b-a3b", "--type", "f16", "--vocab-from", vocab, "-o", out,
             "--expert-skew", "nine"},
            "--expert-skew needs a Zipf exponent in [0, 8]"},
           {{"--preset", "35b-a3b", "--type", "f16", "--vocab-from", vocab, "-o", out,
             "--expert-skew", "1", "--expert-topics", "65"},
            "--expert-topics needs a topic count (1..64)"},
       }) {
    ProcessResult r = Synth(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.message;
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(DeltaserveSynthCli, ThePlanOfASkewedModelSaysSo) {
  ProcessResult r = Synth({"--preset", "35b-a3b", "--type", "q4_k_m", "--vocab-from",
                           GoldenPath("tiny-dense-f32.gguf"), "--layers", "2", "--plan",
                           "--expert-skew", "1.2", "--expert-topics", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("expert skew 1.2 over 4 topics (stickiness 16)"));
}

TEST(DeltaserveSynthCli, BadFilesAndPathsFailWithAMessage) {
  const std::string dir = ::testing::TempDir();
  const std::string out = dir + "/never.gguf";
  ProcessResult missing = Synth({"--preset", "0.8b", "--type", "f32", "--vocab-from",
                                 dir + "/no-such-vocab.gguf", "-o", out});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("no-such-vocab.gguf"));

  // A valid GGUF without tokenizer keys.
  const std::string bare = dir + "/no-tokenizer.gguf";
  common::GgufWriter w;
  ASSERT_TRUE(
      w.AddMetadata("general.architecture", common::GgufMetadataValue::String("qwen35")).ok());
  ASSERT_TRUE(w.WriteFile(bare).ok());
  ProcessResult no_tok =
      Synth({"--preset", "0.8b", "--type", "f32", "--vocab-from", bare, "-o", out});
  EXPECT_EQ(no_tok.exit_code, 1);
  EXPECT_THAT(no_tok.err, HasSubstr("has no usable tokenizer"));
  EXPECT_FALSE(std::filesystem::exists(out));

  const std::string unwritable = dir + "/no-such-dir/out.gguf";
  ProcessResult r = Synth({"--preset", "0.8b", "--type", "q8_0", "--layers", "1", "--vocab-from",
                           GoldenPath("tiny-dense-f32.gguf"), "-o", unwritable});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot create " + unwritable + ".tmp"));
  std::filesystem::remove(bare);
}

}  // namespace
}  // namespace deltaserve::testing
