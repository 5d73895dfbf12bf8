// The golden GGUF files open with GgufFile, and hold what ../shared/golden/README.md and
// ../shared/docs/GGUF_QWEN35.md say they hold. Expected counts are derived from those documents:
//  - tiny-dense: 8 layers, 6 DeltaNet (14 tensors each: attn_norm, post_attention_norm,
//    attn_qkv, attn_gate, ssm_conv1d, ssm_dt.bias, ssm_a, ssm_beta, ssm_alpha, ssm_norm,
//    ssm_out, ffn_gate, ffn_up, ffn_down) and 2 attention layers (11 each: the two norms, attn_q,
//    attn_k, attn_v, attn_q_norm, attn_k_norm, attn_output, ffn_gate/up/down), plus
//    token_embd, output_norm, output: 6 * 14 + 2 * 11 + 3 = 109.
//  - tiny-moe: the dense FFN (3) becomes 8 MoE tensors (router, gate/up/down_exps, shared-expert
//    gate, gate/up/down_shexp) and output.weight is tied: 6 * 19 + 2 * 16 + 2 = 148.
//  - Quantized 2-D weights: 8 per DeltaNet layer (attn_qkv, attn_gate, ssm_beta, ssm_alpha,
//    ssm_out, ffn x3), 7 per attention layer, token_embd and output: 6 * 8 + 2 * 7 + 2 = 64,
//    the README's 49 q4_K + 9 q6_K + 6 q5_0; the other 45 stay f32.
// Shapes: d = 256, C = 2 * nk * dk + nv * dk = 2 * 2 * 32 + 4 * 32 = 256, attn_q = 2 * H * hd =
// 512, attn_k = Hk * hd = 128, n_vocab = 2048, n_exp = 16, n_ff_exp = 32, n_ff_sh = 128.
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/gguf_file.h"
#include "common/gguf_writer.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace deltaserve::common {
namespace {

std::unique_ptr<GgufFile> OpenGolden(const std::string& name) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f =
      GgufFile::Open(deltaserve::testing::GoldenPath(name));
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? std::move(*f) : nullptr;
}

std::map<GgmlType, int> CountByType(const GgufFile& f) {
  std::map<GgmlType, int> counts;
  for (const GgufTensorInfo& t : f.tensors()) ++counts[t.type];
  return counts;
}

std::string Shape(const GgufFile& f, std::string_view tensor) {
  const GgufTensorInfo* t = f.FindTensor(tensor);
  return t == nullptr ? "missing" : t->ShapeString();
}

// Checks that every tensor's size follows its type and shape and that its bytes are in the file.
void ExpectTensorsWellFormed(const GgufFile& f) {
  for (const GgufTensorInfo& t : f.tensors()) {
    absl::StatusOr<uint64_t> n =
        GgufTensorByteSize(t.type, absl::MakeConstSpan(t.ne.data(), t.n_dims));
    ASSERT_TRUE(n.ok()) << t.name;
    EXPECT_EQ(*n, t.n_bytes) << t.name;
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_LE(t.offset + t.n_bytes, f.file_size()) << t.name;
    EXPECT_EQ(f.TensorData(t).size(), t.n_bytes) << t.name;
  }
}

TEST(GgufGoldenTest, TinyDenseF32MatchesTheReadme) {
  std::unique_ptr<GgufFile> f = OpenGolden("tiny-dense-f32.gguf");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(*f->GetString("general.architecture"), "qwen35");
  EXPECT_EQ(*f->GetInt("qwen35.embedding_length"), 256);
  EXPECT_EQ(*f->GetInt("qwen35.block_count"), 8);
  EXPECT_EQ(*f->GetInt("qwen35.ssm.inner_size"), 128);
  EXPECT_EQ(*f->GetDouble("qwen35.rope.freq_base"), 1.0e7);
  absl::StatusOr<const GgufValue*> sections = f->GetArray("qwen35.rope.dimension_sections");
  ASSERT_TRUE(sections.ok());
  ASSERT_EQ((*sections)->ArraySize(), 4u);
  EXPECT_EQ((*sections)->DebugString(), "[i32; 4] 3, 3, 2, 0");

  EXPECT_EQ(f->tensors().size(), 109u);
  EXPECT_EQ(CountByType(*f), (std::map<GgmlType, int>{{GgmlType::kF32, 109}}));
  EXPECT_EQ(Shape(*f, "token_embd.weight"), "{256, 2048}");
  EXPECT_EQ(Shape(*f, "output.weight"), "{256, 2048}");
  EXPECT_EQ(Shape(*f, "output_norm.weight"), "{256}");
  EXPECT_EQ(Shape(*f, "blk.0.attn_qkv.weight"), "{256, 256}");
  EXPECT_EQ(Shape(*f, "blk.0.attn_gate.weight"), "{256, 128}");
  EXPECT_EQ(Shape(*f, "blk.0.ssm_conv1d.weight"), "{4, 256}");
  EXPECT_EQ(Shape(*f, "blk.0.ssm_a"), "{4}");
  EXPECT_EQ(Shape(*f, "blk.0.ssm_out.weight"), "{128, 256}");
  EXPECT_EQ(Shape(*f, "blk.3.attn_q.weight"), "{256, 512}");
  EXPECT_EQ(Shape(*f, "blk.3.attn_k.weight"), "{256, 128}");
  EXPECT_EQ(Shape(*f, "blk.3.attn_output.weight"), "{256, 256}");
  EXPECT_EQ(Shape(*f, "blk.7.ffn_down.weight"), "{256, 256}");
  EXPECT_EQ(f->FindTensor("blk.3.ssm_a"), nullptr);          // layer 3 is full attention
  EXPECT_EQ(f->FindTensor("blk.0.attn_q.weight"), nullptr);  // layer 0 is DeltaNet
  ExpectTensorsWellFormed(*f);

  // Values: ssm_a = -exp(A_log), A_log uniform in [ln 0.1, 0] (README), so in [-1, -0.1].
  for (int layer : {0, 1, 2, 4, 5, 6}) {
    const GgufTensorInfo* a = f->FindTensor(absl::StrCat("blk.", layer, ".ssm_a"));
    ASSERT_NE(a, nullptr);
    absl::Span<const uint8_t> bytes = f->TensorData(*a);
    for (size_t i = 0; i < 4; ++i) {
      float v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      EXPECT_GE(v, -1.0f) << layer;
      EXPECT_LE(v, -0.1f) << layer;
    }
  }
}

TEST(GgufGoldenTest, TinyMoeIsTiedAndStacksExperts) {
  std::unique_ptr<GgufFile> f = OpenGolden("tiny-moe-f32.gguf");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*f->GetString("general.architecture"), "qwen35moe");
  EXPECT_EQ(*f->GetInt("qwen35moe.expert_count"), 16);
  EXPECT_EQ(*f->GetInt("qwen35moe.expert_used_count"), 4);
  EXPECT_EQ(f->tensors().size(), 148u);
  EXPECT_EQ(CountByType(*f), (std::map<GgmlType, int>{{GgmlType::kF32, 148}}));
  EXPECT_EQ(f->FindTensor("output.weight"), nullptr);  // tied to token_embd
  EXPECT_EQ(Shape(*f, "token_embd.weight"), "{256, 2048}");
  EXPECT_EQ(Shape(*f, "blk.0.ffn_gate_inp.weight"), "{256, 16}");
  EXPECT_EQ(Shape(*f, "blk.0.ffn_gate_exps.weight"), "{256, 32, 16}");
  EXPECT_EQ(Shape(*f, "blk.0.ffn_up_exps.weight"), "{256, 32, 16}");
  EXPECT_EQ(Shape(*f, "blk.0.ffn_down_exps.weight"), "{32, 256, 16}");
  EXPECT_EQ(Shape(*f, "blk.3.ffn_gate_inp_shexp.weight"), "{256}");
  EXPECT_EQ(Shape(*f, "blk.3.ffn_gate_shexp.weight"), "{256, 128}");
  EXPECT_EQ(Shape(*f, "blk.3.ffn_down_shexp.weight"), "{128, 256}");
  EXPECT_EQ(f->FindTensor("blk.0.ffn_gate.weight"), nullptr);
  ExpectTensorsWellFormed(*f);
}

TEST(GgufGoldenTest, TinyDenseQ8_0QuantizesOnlyTheMatrices) {
  std::unique_ptr<GgufFile> f = OpenGolden("tiny-dense-q8_0.gguf");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->tensors().size(), 109u);
  EXPECT_EQ(CountByType(*f),
            (std::map<GgmlType, int>{{GgmlType::kF32, 45}, {GgmlType::kQ8_0, 64}}));
  // README: norms, ssm_a, ssm_dt.bias and ssm_conv1d stay F32.
  for (const char* name :
       {"output_norm.weight", "blk.0.ssm_a", "blk.0.ssm_dt.bias", "blk.0.ssm_conv1d.weight",
        "blk.0.ssm_norm.weight", "blk.3.attn_q_norm.weight"}) {
    ASSERT_NE(f->FindTensor(name), nullptr) << name;
    EXPECT_EQ(f->FindTensor(name)->type, GgmlType::kF32) << name;
  }
  EXPECT_EQ(f->FindTensor("blk.0.attn_qkv.weight")->type, GgmlType::kQ8_0);
  // q8_0 {256, 2048}: 8 blocks of 34 bytes per row (ggml block_q8_0).
  EXPECT_EQ(f->FindTensor("token_embd.weight")->n_bytes, 8u * 34 * 2048);
  ExpectTensorsWellFormed(*f);
}

TEST(GgufGoldenTest, TinyDenseQ4KMHasTheReadmeTypeCounts) {
  std::unique_ptr<GgufFile> f = OpenGolden("tiny-dense-q4_k_m.gguf");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->tensors().size(), 109u);
  // README: 49 tensors Q4_K, 9 Q6_K, 6 Q5_0; 1-D tensors (and ssm_conv1d) F32.
  EXPECT_EQ(CountByType(*f), (std::map<GgmlType, int>{{GgmlType::kF32, 45},
                                                      {GgmlType::kQ4_K, 49},
                                                      {GgmlType::kQ6_K, 9},
                                                      {GgmlType::kQ5_0, 6}}));
  for (const GgufTensorInfo& t : f->tensors()) {
    // q5_0 is the fallback for rows that are not a multiple of the 256-value K-quant block.
    if (t.type == GgmlType::kQ5_0) {
      EXPECT_NE(t.ne[0] % 256, 0) << t.name;
    }
    if (t.n_dims == 1) {
      EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
    }
  }
  EXPECT_EQ(f->FindTensor("blk.0.ssm_out.weight")->type, GgmlType::kQ5_0);  // rows of 128
  ExpectTensorsWellFormed(*f);
}

TEST(GgufGoldenTest, TinyVocabularyIsTheTruncatedQwen3Vocabulary) {
  std::unique_ptr<GgufFile> f = OpenGolden("tiny-dense-f32.gguf");
  ASSERT_NE(f, nullptr);
  // README: 2,000 BPE tokens, 26 added tokens (2000..2025), [PAD2026]..[PAD2047]; the first
  // 1,744 merges; bos = pad = <|endoftext|> = 2000, eos = <|im_end|> = 2002.
  absl::StatusOr<const GgufValue*> tokens = f->GetArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ((*tokens)->ArraySize(), 2048u);
  EXPECT_EQ(*(*tokens)->ArrayString(2000), "<|endoftext|>");
  EXPECT_EQ(*(*tokens)->ArrayString(2002), "<|im_end|>");
  EXPECT_EQ(*(*tokens)->ArrayString(2024), "<think>");
  EXPECT_EQ(*(*tokens)->ArrayString(2047), "[PAD2047]");
  absl::StatusOr<const GgufValue*> types = f->GetArray("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.ok());
  EXPECT_EQ(*(*types)->ArrayInt(0), 1);     // normal
  EXPECT_EQ(*(*types)->ArrayInt(2000), 3);  // control
  EXPECT_EQ(*(*types)->ArrayInt(2024), 4);  // user-defined
  EXPECT_EQ(*(*types)->ArrayInt(2026), 5);  // unused
  EXPECT_EQ((*f->GetArray("tokenizer.ggml.merges"))->ArraySize(), 1744u);
  EXPECT_EQ(*f->GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*f->GetString("tokenizer.ggml.pre"), "qwen35");
  EXPECT_EQ(*f->GetInt("tokenizer.ggml.bos_token_id"), 2000);
  EXPECT_EQ(*f->GetInt("tokenizer.ggml.eos_token_id"), 2002);
  EXPECT_EQ(*f->GetInt("tokenizer.ggml.padding_token_id"), 2000);
  EXPECT_EQ(*f->GetBool("tokenizer.ggml.add_bos_token"), false);
  EXPECT_TRUE(f->GetString("tokenizer.chat_template").ok());
}

TEST(GgufGoldenTest, FullQwen3VocabularyHasNoTensors) {
  std::unique_ptr<GgufFile> f = OpenGolden("qwen3-vocab-qwen35pre.gguf");
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->tensors().empty());
  // README: 151,643 BPE tokens + 26 added, padded to 151,936; 151,387 merges; pre = qwen35.
  EXPECT_EQ((*f->GetArray("tokenizer.ggml.tokens"))->ArraySize(), 151936u);
  EXPECT_EQ((*f->GetArray("tokenizer.ggml.token_type"))->ArraySize(), 151936u);
  EXPECT_EQ((*f->GetArray("tokenizer.ggml.merges"))->ArraySize(), 151387u);
  EXPECT_EQ(*(*f->GetArray("tokenizer.ggml.tokens"))->ArrayString(151643), "<|endoftext|>");
  EXPECT_EQ(*f->GetString("tokenizer.ggml.pre"), "qwen35");
}

}  // namespace
}  // namespace deltaserve::common
