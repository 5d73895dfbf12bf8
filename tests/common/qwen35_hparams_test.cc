// Qwen35 hyperparameter view on synthetic GGUF files built with GgufWriter: a consistent file
// is read field by field, and each constraint of GGUF_QWEN35.md ("Constraints") is refused with
// a message naming the key.
#include <memory>
#include <string>
#include <vector>

#include "common/gguf_file.h"
#include "common/gguf_writer.h"
#include "common/qwen35_hparams.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::common {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Metadata of a small dense qwen35 model (the tiny golden model's shape); `override` replaces
// or drops ("" value type) keys to build inconsistent variants.
struct Key {
  std::string name;
  GgufMetadataValue value;
};

std::vector<Key> DenseKeys(const std::string& arch = "qwen35") {
  const std::string p = arch + ".";
  std::vector<Key> keys = {
      {"general.architecture", GgufMetadataValue::String(arch)},
      {p + "context_length", GgufMetadataValue::Uint32(262144)},
      {p + "embedding_length", GgufMetadataValue::Uint32(256)},
      {p + "block_count", GgufMetadataValue::Uint32(8)},
      {p + "feed_forward_length", GgufMetadataValue::Uint32(512)},
      {p + "attention.head_count", GgufMetadataValue::Uint32(4)},
      {p + "attention.head_count_kv", GgufMetadataValue::Uint32(2)},
      {p + "attention.key_length", GgufMetadataValue::Uint32(64)},
      {p + "attention.value_length", GgufMetadataValue::Uint32(64)},
      {p + "rope.dimension_count", GgufMetadataValue::Uint32(16)},
      {p + "rope.dimension_sections", GgufMetadataValue::Int32Array(std::vector<int32_t>{3, 3, 2, 0})},
      {p + "rope.freq_base", GgufMetadataValue::Float32(1e7f)},
      {p + "attention.layer_norm_rms_epsilon", GgufMetadataValue::Float32(1e-6f)},
      {p + "ssm.conv_kernel", GgufMetadataValue::Uint32(4)},
      {p + "ssm.state_size", GgufMetadataValue::Uint32(32)},
      {p + "ssm.group_count", GgufMetadataValue::Uint32(2)},
      {p + "ssm.time_step_rank", GgufMetadataValue::Uint32(4)},
      {p + "ssm.inner_size", GgufMetadataValue::Uint32(128)},
  };
  return keys;
}

class Qwen35HParamsTest : public ::testing::Test {
 protected:
  // Writes `keys` (plus the extra ones) into an in-memory GGUF and reads the hparams.
  absl::StatusOr<Qwen35HParams> Read(const std::vector<Key>& keys) {
    GgufWriter w;
    for (const Key& k : keys) {
      absl::Status s = w.AddMetadata(k.name, k.value);
      if (!s.ok()) return s;
    }
    std::vector<float> embd(256 * 10, 0.0f);
    absl::Status s = w.AddF32Tensor("token_embd.weight", std::vector<int64_t>{256, 10}, embd);
    if (!s.ok()) return s;
    absl::StatusOr<std::vector<uint8_t>> bytes = w.Build();
    if (!bytes.ok()) return bytes.status();
    bytes_ = std::move(*bytes);
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBuffer(bytes_, "synthetic");
    if (!file.ok()) return file.status();
    file_ = std::move(*file);
    return ReadQwen35HParams(*file_);
  }

  static std::vector<Key> With(std::vector<Key> keys, const std::string& name,
                               const GgufMetadataValue& value) {
    for (Key& k : keys) {
      if (k.name == name) {
        k.value = value;
        return keys;
      }
    }
    keys.push_back({name, value});
    return keys;
  }

  static std::vector<Key> Without(std::vector<Key> keys, const std::string& name) {
    std::erase_if(keys, [&](const Key& k) { return k.name == name; });
    return keys;
  }

  std::vector<uint8_t> bytes_;
  std::unique_ptr<GgufFile> file_;
};

TEST_F(Qwen35HParamsTest, ReadsConsistentDenseFile) {
  absl::StatusOr<Qwen35HParams> hp = Read(DenseKeys());
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_FALSE(hp->is_moe);
  EXPECT_EQ(hp->n_layer, 8);
  EXPECT_EQ(hp->n_head, 4);
  EXPECT_EQ(hp->n_head_kv, 2);
  EXPECT_EQ(hp->head_dim, 64);
  EXPECT_EQ(hp->n_rot, 16);
  EXPECT_EQ(hp->ssm_conv_channels(), 2 * 2 * 32 + 4 * 32);
  EXPECT_EQ(hp->n_vocab, 10);
  EXPECT_TRUE(hp->tied_output);
  EXPECT_THAT(hp->rope_sections, ElementsAre(3, 3, 2, 0));
  // full_attention_interval defaults to 4: layers 3 and 7 are attention.
  EXPECT_THAT(hp->LayersOf(LayerKind::kFullAttention), ElementsAre(3, 7));
  EXPECT_THAT(hp->LayersOf(LayerKind::kDeltaNet), ElementsAre(0, 1, 2, 4, 5, 6));
}

TEST_F(Qwen35HParamsTest, RecurrentLayersArrayDecidesOverInterval) {
  static constexpr bool kRecurrent[8] = {true, false, true, false, true, true, true, false};
  auto hp = Read(With(DenseKeys(), "qwen35.attention.recurrent_layers",
                      GgufMetadataValue::BoolArray(kRecurrent)));
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_THAT(hp->LayersOf(LayerKind::kFullAttention), ElementsAre(1, 3, 7));
}

TEST_F(Qwen35HParamsTest, MtpLayersAreLeftOutOfTheForwardPass) {
  auto hp = Read(With(DenseKeys(), "qwen35.nextn_predict_layers", GgufMetadataValue::Uint32(1)));
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->n_block, 8);
  EXPECT_EQ(hp->n_layer, 7);
  EXPECT_EQ(hp->layers.size(), 7u);
}

TEST_F(Qwen35HParamsTest, ReadsMoeFields) {
  std::vector<Key> keys = DenseKeys("qwen35moe");
  keys.push_back({"qwen35moe.expert_count", GgufMetadataValue::Uint32(16)});
  keys.push_back({"qwen35moe.expert_used_count", GgufMetadataValue::Uint32(4)});
  keys.push_back({"qwen35moe.expert_feed_forward_length", GgufMetadataValue::Uint32(32)});
  keys.push_back({"qwen35moe.expert_shared_feed_forward_length", GgufMetadataValue::Uint32(128)});
  auto hp = Read(keys);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_TRUE(hp->is_moe);
  EXPECT_EQ(hp->n_expert, 16);
  EXPECT_EQ(hp->n_expert_used, 4);
  EXPECT_EQ(hp->n_ff_shared_expert, 128);

  auto too_many = Read(With(keys, "qwen35moe.expert_used_count", GgufMetadataValue::Uint32(17)));
  EXPECT_THAT(too_many.status().message(), HasSubstr("qwen35moe.expert_used_count"));
  auto missing = Read(Without(keys, "qwen35moe.expert_count"));
  EXPECT_THAT(missing.status().message(), HasSubstr("qwen35moe.expert_count"));
}

// Each broken constraint and the key its message must name.
struct BadCase {
  std::string key;
  GgufMetadataValue value;
  std::string named;
};

TEST_F(Qwen35HParamsTest, InconsistentFilesAreRefusedNamingTheKey) {
  const std::vector<BadCase> cases = {
      {"qwen35.ssm.inner_size", GgufMetadataValue::Uint32(100), "qwen35.ssm.inner_size"},
      {"qwen35.ssm.time_step_rank", GgufMetadataValue::Uint32(3), "qwen35.ssm.inner_size"},
      {"qwen35.ssm.group_count", GgufMetadataValue::Uint32(3), "qwen35.ssm.time_step_rank"},
      {"qwen35.attention.value_length", GgufMetadataValue::Uint32(32),
       "qwen35.attention.value_length"},
      {"qwen35.attention.head_count_kv", GgufMetadataValue::Uint32(3),
       "qwen35.attention.head_count_kv"},
      {"qwen35.rope.dimension_count", GgufMetadataValue::Uint32(65),
       "qwen35.rope.dimension_count"},
      {"qwen35.nextn_predict_layers", GgufMetadataValue::Uint32(8),
       "qwen35.nextn_predict_layers"},
      {"qwen35.block_count", GgufMetadataValue::Uint32(0), "qwen35.block_count"},
      {"qwen35.embedding_length", GgufMetadataValue::String("256"), "qwen35.embedding_length"},
      {"qwen35.attention.layer_norm_rms_epsilon", GgufMetadataValue::Float32(0.0f),
       "qwen35.attention.layer_norm_rms_epsilon"},
      {"general.architecture", GgufMetadataValue::String("llama"), "general.architecture"},
  };
  for (const BadCase& c : cases) {
    auto hp = Read(With(DenseKeys(), c.key, c.value));
    ASSERT_FALSE(hp.ok()) << c.key;
    EXPECT_THAT(hp.status().message(), HasSubstr(c.named)) << c.key;
  }
  for (const char* required : {"qwen35.context_length", "qwen35.ssm.conv_kernel",
                               "qwen35.rope.dimension_sections", "qwen35.feed_forward_length"}) {
    auto hp = Read(Without(DenseKeys(), required));
    ASSERT_FALSE(hp.ok()) << required;
    EXPECT_THAT(hp.status().message(), HasSubstr(required));
  }
}

}  // namespace
}  // namespace deltaserve::common
