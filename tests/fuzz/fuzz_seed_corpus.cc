// Writes the seed corpora of the fuzz targets into a build-tree directory (binary seeds are not
// kept in the repository):
//   <out>/gguf-seeds/       the first 64 KiB of every golden GGUF, plus small valid files made
//                           with GgufWriter (every value type, nested arrays, tensors of several
//                           block types, versions 2 and 3, alignments 1, 32 and 64);
//   <out>/tokenizer-seeds/  the corpus strings of the golden tokenizer-*.json files, plus a few
//                           edge cases (special-token text, invalid UTF-8);
//   <out>/request_parser-seeds/, router_config-seeds/, tokenizer_proto-seeds/: the router's
//                           targets (router_fuzz_seeds.h; the request bodies again in
//                           json_reader-seeds/);
//   <out>/snapshot_format-seeds/  valid session-snapshot blobs (snapshot_fuzz_seeds.h).
// An empty <out>/<name>-corpus/ beside each is created for what the fuzzers find.
//
//   fuzz_seed_corpus <golden_dir> <out_dir>     ($DELTASERVE_GOLDEN_DIR, when set, wins)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gguf_writer.h"
#include "tests/fuzz/router_fuzz_seeds.h"
#include "tests/fuzz/snapshot_fuzz_seeds.h"
#include "nlohmann/json.hpp"

namespace deltaserve::common {
namespace {

namespace fs = std::filesystem;

bool WriteBytes(const fs::path& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  return static_cast<bool>(out);
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 31 * i);
  return v;
}

// A small valid GGUF that exercises every value type and a few tensor layouts.
absl::StatusOr<std::vector<uint8_t>> SyntheticGguf(uint32_t version, uint64_t alignment) {
  GgufWriter w(version);
  auto add = [&](std::string_view key, GgufMetadataValue v) {
    absl::Status s = w.AddMetadata(key, std::move(v));
    if (!s.ok()) std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
  };
  if (alignment != kGgufDefaultAlignment) {
    if (absl::Status s = w.SetAlignment(alignment); !s.ok()) return s;
  }
  add("general.architecture", GgufMetadataValue::String("qwen35"));
  add("qwen35.block_count", GgufMetadataValue::Uint32(4));
  add("qwen35.embedding_length", GgufMetadataValue::Uint32(256));
  add("qwen35.rope.dimension_sections", GgufMetadataValue::Int32Array({3, 3, 2, 0}));
  add("qwen35.rope.freq_base", GgufMetadataValue::Float32(1e7f));
  add("qwen35.attention.recurrent_layers", GgufMetadataValue::BoolArray({true, true, true, false}));
  add("u8", GgufMetadataValue::Uint8(200));
  add("i8", GgufMetadataValue::Int8(-3));
  add("u16", GgufMetadataValue::Uint16(60000));
  add("i16", GgufMetadataValue::Int16(-30000));
  add("i32", GgufMetadataValue::Int32(-5));
  add("u64", GgufMetadataValue::Uint64(~uint64_t{0}));
  add("i64", GgufMetadataValue::Int64(-1));
  add("f64", GgufMetadataValue::Float64(0.125));
  add("bool", GgufMetadataValue::Bool(false));
  add("arr.u8", GgufMetadataValue::Uint8Array({1, 2}));
  add("arr.i16", GgufMetadataValue::Int16Array({-1, 1}));
  add("arr.u64", GgufMetadataValue::Uint64Array({1, ~uint64_t{0}}));
  add("arr.f64", GgufMetadataValue::Float64Array({0.5}));
  std::vector<GgufMetadataValue> inner;
  inner.push_back(GgufMetadataValue::Float32Array({1.5f}));
  inner.push_back(GgufMetadataValue::StringArray({"a", ""}));
  std::vector<GgufMetadataValue> nested;
  nested.push_back(GgufMetadataValue::ArrayOfArrays(std::move(inner)));
  nested.push_back(GgufMetadataValue::Uint32Array({}));
  add("arr.nested", GgufMetadataValue::ArrayOfArrays(std::move(nested)));
  add("tokenizer.ggml.model", GgufMetadataValue::String("gpt2"));
  add("tokenizer.ggml.tokens",
      GgufMetadataValue::StringArray({"a", "b", "ab", "\xC4\xA0", "<|im_end|>", "[PAD5]"}));
  add("tokenizer.ggml.token_type", GgufMetadataValue::Int32Array({1, 1, 1, 1, 3, 5}));
  add("tokenizer.ggml.merges", GgufMetadataValue::StringArray({"a b"}));

  const struct {
    const char* name;
    GgmlType type;
    std::vector<int64_t> ne;
  } tensors[] = {
      {"output_norm.weight", GgmlType::kF32, {8}},
      {"token_embd.weight", GgmlType::kQ8_0, {32, 6}},
      {"blk.0.ffn_up.weight", GgmlType::kQ4_K, {256, 2}},
      {"blk.0.ffn_down.weight", GgmlType::kQ6_K, {256, 1}},
      {"blk.0.ssm_out.weight", GgmlType::kQ5_0, {64, 2}},
      {"blk.0.ffn_gate_exps.weight", GgmlType::kF16, {4, 2, 3}},
      {"blk.0.attn_q.weight", GgmlType::kBF16, {2, 1, 1, 2}},
  };
  uint8_t seed = 1;
  for (const auto& t : tensors) {
    absl::StatusOr<uint64_t> n = GgufTensorByteSize(t.type, t.ne);
    if (!n.ok()) return n.status();
    if (absl::Status s = w.AddTensor(t.name, t.type, t.ne, Pattern(*n, seed++)); !s.ok()) return s;
  }
  return w.Build();
}

int WriteGgufSeeds(const fs::path& golden, const fs::path& dir) {
  int n = 0;
  for (const char* name : {"tiny-dense-f32.gguf", "tiny-moe-f32.gguf", "tiny-dense-q8_0.gguf",
                           "tiny-dense-q4_k_m.gguf", "qwen3-vocab-qwen35pre.gguf"}) {
    std::ifstream in(golden / name, std::ios::binary);
    std::vector<char> head(64 * 1024);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    if (head.empty()) {
      std::fprintf(stderr, "fuzz_seed_corpus: cannot read %s\n", (golden / name).c_str());
      return -1;
    }
    if (!WriteBytes(dir / absl::StrCat(name, ".head64k"), head.data(), head.size())) return -1;
    ++n;
  }
  for (uint32_t version : {2u, 3u}) {
    for (uint64_t alignment : {uint64_t{1}, uint64_t{32}, uint64_t{64}}) {
      absl::StatusOr<std::vector<uint8_t>> image = SyntheticGguf(version, alignment);
      if (!image.ok()) {
        std::fprintf(stderr, "fuzz_seed_corpus: %s\n",
                     std::string(image.status().message()).c_str());
        return -1;
      }
      const std::string file = absl::StrCat("synthetic-v", version, "-align", alignment, ".gguf");
      if (!WriteBytes(dir / file, image->data(), image->size())) return -1;
      ++n;
    }
  }
  return n;
}

int WriteTokenizerSeeds(const fs::path& golden, const fs::path& dir) {
  std::vector<std::string> texts = {
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
      "\xF0\x9F\x98\x80 e\xCC\x81 \xE4\xB8\xAD\xE6\x96\x87  \t\n\r\n",
      "\xFF\xC3\x28 invalid \xE2\x82 utf8 \xED\xA0\x80",
      "<tool_call>{\"a\": 1}</tool_call><|endoftext|>[PAD2030]",
  };
  for (const char* name :
       {"tokenizer-tiny-vocab2048.json", "tokenizer-qwen3vocab-qwen35pre.json"}) {
    std::ifstream in(golden / name);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("cases")) {
      std::fprintf(stderr, "fuzz_seed_corpus: cannot parse %s\n", (golden / name).c_str());
      return -1;
    }
    for (const nlohmann::json& c : j["cases"]) texts.push_back(c.value("text", ""));
  }
  int n = 0;
  for (const std::string& t : texts) {
    // Names by index; duplicates (both files share the corpus) are harmless to libFuzzer.
    if (!WriteBytes(dir / absl::StrCat("text-", n), t.data(), t.size())) return -1;
    ++n;
  }
  return n;
}

}  // namespace
}  // namespace deltaserve::common

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <golden_dir> <out_dir>\n", argv[0]);
    return 2;
  }
  const char* env = std::getenv("DELTASERVE_GOLDEN_DIR");
  const fs::path golden = env != nullptr && *env != '\0' ? env : argv[1];
  const fs::path out = argv[2];
  std::error_code ec;
  for (const char* target :
       {"gguf", "tokenizer", "request_parser", "json_reader", "router_config", "tokenizer_proto",
        "snapshot_format"}) {
    const std::string seeds = std::string(target) + "-seeds";
    fs::remove_all(out / seeds, ec);
    fs::create_directories(out / seeds, ec);
    fs::create_directories(out / (std::string(target) + "-corpus"), ec);
  }
  const int gguf = deltaserve::common::WriteGgufSeeds(golden, out / "gguf-seeds");
  const int text = deltaserve::common::WriteTokenizerSeeds(golden, out / "tokenizer-seeds");
  const int bodies = deltaserve::testing::WriteRequestSeeds(out / "request_parser-seeds");
  // The JSON reader's differential target starts from the same request bodies.
  if (deltaserve::testing::WriteRequestSeeds(out / "json_reader-seeds") < 0) return 1;
  const int configs = deltaserve::testing::WriteRouterConfigSeeds(out / "router_config-seeds");
  const int protos =
      deltaserve::testing::WriteTokenizerProtoSeeds(golden, out / "tokenizer_proto-seeds");
  const int snapshots = deltaserve::testing::WriteSnapshotSeeds(out / "snapshot_format-seeds");
  if (gguf < 0 || text < 0 || bodies < 0 || configs < 0 || protos < 0 || snapshots < 0) return 1;
  std::printf(
      "fuzz_seed_corpus: %d GGUF, %d tokenizer, %d request, %d config, %d tokenizer-proto, %d "
      "snapshot seeds in %s\n",
      gguf, text, bodies, configs, protos, snapshots, out.c_str());
  return 0;
}
