// GgufWriter: byte layout (checked against the GGUF spec by hand), alignment and padding,
// validation of what is added, and files that GgufFile reads back.
#include "common/gguf_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gguf_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::common {
namespace {

using ::testing::HasSubstr;

std::string MessageOf(const absl::Status& s) { return s.ok() ? "OK" : std::string(s.message()); }
template <typename T>
std::string MessageOf(const absl::StatusOr<T>& s) {
  return MessageOf(s.status());
}

void PutLe(std::vector<uint8_t>& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

std::vector<uint8_t> Bytes(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(first + i);
  return v;
}

// The layout of the GGUF spec (ggml docs/gguf.md): u32 magic "GGUF", u32 version, u64 tensor
// count, u64 kv count, kvs as {u64 len, key, u32 type, value}, tensor infos as {u64 len, name,
// u32 n_dims, u64 ne[n_dims], u32 type, u64 offset}, zero padding to the alignment, data.
TEST(GgufWriterTest, SmallFileMatchesHandAssembledBytes) {
  GgufWriter w;
  ASSERT_TRUE(w.AddMetadata("a.key", GgufMetadataValue::Uint32(0x11223344)).ok());
  ASSERT_TRUE(w.AddTensor("t", GgmlType::kF32, {2}, Bytes(8, 0xA0)).ok());
  absl::StatusOr<std::vector<uint8_t>> image = w.Build();
  ASSERT_TRUE(image.ok()) << image.status();

  std::vector<uint8_t> want = {'G', 'G', 'U', 'F'};
  PutLe(want, 3, 4);  // version
  PutLe(want, 1, 8);  // tensors
  PutLe(want, 1, 8);  // kvs
  PutLe(want, 5, 8);
  want.insert(want.end(), {'a', '.', 'k', 'e', 'y'});
  PutLe(want, 4, 4);  // GGUF_TYPE_UINT32
  PutLe(want, 0x11223344, 4);
  PutLe(want, 1, 8);
  want.push_back('t');
  PutLe(want, 1, 4);                      // n_dims
  PutLe(want, 2, 8);                      // ne[0]
  PutLe(want, 0, 4);                      // GGML_TYPE_F32
  PutLe(want, 0, 8);                      // offset in the data section
  ASSERT_EQ(want.size(), 24u + 21 + 33);  // header, kv, tensor info
  want.resize(96, 0);                     // padded to the default alignment of 32
  const std::vector<uint8_t> data = Bytes(8, 0xA0);
  want.insert(want.end(), data.begin(), data.end());
  want.resize(128, 0);  // the last tensor is padded too, as llama.cpp's gguf writer does

  EXPECT_EQ(*image, want);
  EXPECT_EQ(w.DataOffset(), 96u);
  EXPECT_EQ(w.FileSize(), 128u);
}

TEST(GgufWriterTest, NestedArrayIsWrittenAsTypeCountItems) {
  GgufWriter w;
  std::vector<GgufMetadataValue> items;
  items.push_back(GgufMetadataValue::Uint8Array({7}));
  items.push_back(GgufMetadataValue::StringArray({"x"}));
  ASSERT_TRUE(w.AddMetadata("n", GgufMetadataValue::ArrayOfArrays(std::move(items))).ok());
  absl::StatusOr<std::vector<uint8_t>> image = w.Build();
  ASSERT_TRUE(image.ok());
  // After the 24-byte header: u64 1, "n", u32 9 (array), u32 9 (of arrays), u64 2, then
  // {u32 0 (u8), u64 1, 7} and {u32 8 (string), u64 1, u64 1, "x"}.
  std::vector<uint8_t> want;
  PutLe(want, 1, 8);
  want.push_back('n');
  PutLe(want, 9, 4);
  PutLe(want, 9, 4);
  PutLe(want, 2, 8);
  PutLe(want, 0, 4);
  PutLe(want, 1, 8);
  want.push_back(7);
  PutLe(want, 8, 4);
  PutLe(want, 1, 8);
  PutLe(want, 1, 8);
  want.push_back('x');
  ASSERT_GE(image->size(), 24 + want.size());
  EXPECT_EQ(std::vector<uint8_t>(image->begin() + 24, image->begin() + 24 + want.size()), want);
}

TEST(GgufWriterTest, TensorsArePaddedToTheAlignment) {
  for (uint64_t alignment : {uint64_t{1}, uint64_t{32}, uint64_t{64}, uint64_t{4096}}) {
    SCOPED_TRACE(alignment);
    GgufWriter w;
    if (alignment != kGgufDefaultAlignment) {
      ASSERT_TRUE(w.SetAlignment(alignment).ok());
    }
    ASSERT_TRUE(w.AddTensor("a", GgmlType::kF32, {3}, Bytes(12, 1)).ok());
    ASSERT_TRUE(w.AddTensor("b", GgmlType::kQ8_0, {32, 2}, Bytes(68, 50)).ok());
    ASSERT_TRUE(w.AddTensor("c", GgmlType::kF16, {5}, Bytes(10, 200)).ok());
    absl::StatusOr<std::vector<uint8_t>> image = w.Build();
    ASSERT_TRUE(image.ok());
    EXPECT_EQ(image->size(), w.FileSize());
    EXPECT_EQ(image->size() % alignment, 0u);

    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBuffer(*image, "padded");
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->alignment(), alignment);
    EXPECT_EQ((*f)->data_offset(), w.DataOffset());
    EXPECT_EQ((*f)->data_offset() % alignment, 0u);
    // Expected offsets: each tensor starts at the previous end rounded up to the alignment.
    uint64_t expect = (*f)->data_offset();
    for (const char* name : {"a", "b", "c"}) {
      const GgufTensorInfo* t = (*f)->FindTensor(name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->offset, expect) << name;
      expect = (t->offset + t->n_bytes + alignment - 1) / alignment * alignment;
    }
    EXPECT_EQ(expect, image->size());
    // Padding is zeros: the bytes after tensor "a" up to tensor "b".
    const GgufTensorInfo* a = (*f)->FindTensor("a");
    const GgufTensorInfo* b = (*f)->FindTensor("b");
    for (uint64_t i = a->offset + a->n_bytes; i < b->offset; ++i) EXPECT_EQ((*image)[i], 0) << i;
  }
}

TEST(GgufWriterTest, SetAlignmentWritesOrReplacesTheKey) {
  GgufWriter w;
  ASSERT_TRUE(w.SetAlignment(64).ok());
  ASSERT_TRUE(w.AddMetadata("x", GgufMetadataValue::Bool(true)).ok());
  ASSERT_TRUE(w.SetAlignment(128).ok());
  EXPECT_EQ(w.metadata_count(), 2u);
  EXPECT_EQ(w.alignment(), 128u);
  absl::StatusOr<std::vector<uint8_t>> image = w.Build();
  ASSERT_TRUE(image.ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBuffer(*image, "aligned");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata()[0].key, "general.alignment");  // stays where it was first added
  EXPECT_EQ((*f)->metadata()[0].value.type(), GgufValueType::kUint32);
  EXPECT_EQ(*(*f)->GetInt("general.alignment"), 128);
  EXPECT_EQ((*f)->alignment(), 128u);
}

TEST(GgufWriterTest, AlignmentMustBeAU32PowerOfTwo) {
  GgufWriter w;
  for (uint64_t bad : {uint64_t{0}, uint64_t{3}, uint64_t{48}, uint64_t{1} << 31}) {
    EXPECT_THAT(MessageOf(w.SetAlignment(bad)), HasSubstr("power of two")) << bad;
  }
  EXPECT_THAT(MessageOf(w.AddMetadata("general.alignment", GgufMetadataValue::Uint32(48))),
              HasSubstr("general.alignment"));
  EXPECT_THAT(MessageOf(w.AddMetadata("general.alignment", GgufMetadataValue::Int32(64))),
              HasSubstr("got a i32"));
  EXPECT_THAT(MessageOf(w.AddMetadata("general.alignment", GgufMetadataValue::String("64"))),
              HasSubstr("got a string"));
  EXPECT_EQ(w.metadata_count(), 0u);
  EXPECT_EQ(w.alignment(), 32u);
  EXPECT_TRUE(w.AddMetadata("general.alignment", GgufMetadataValue::Uint32(1)).ok());
  EXPECT_EQ(w.alignment(), 1u);
}

TEST(GgufWriterTest, RefusesDuplicateAndEmptyNames) {
  GgufWriter w;
  ASSERT_TRUE(w.AddMetadata("k", GgufMetadataValue::Uint8(1)).ok());
  EXPECT_THAT(MessageOf(w.AddMetadata("k", GgufMetadataValue::Uint8(2))),
              HasSubstr("duplicate GGUF metadata key 'k'"));
  EXPECT_THAT(MessageOf(w.AddMetadata("", GgufMetadataValue::Uint8(2))), HasSubstr("key is empty"));
  ASSERT_TRUE(w.AddTensor("t", GgmlType::kF32, {1}, Bytes(4, 0)).ok());
  EXPECT_THAT(MessageOf(w.AddTensor("t", GgmlType::kF32, {1}, Bytes(4, 0))),
              HasSubstr("duplicate GGUF tensor 't'"));
  EXPECT_THAT(MessageOf(w.AddTensor("", GgmlType::kF32, {1}, Bytes(4, 0))),
              HasSubstr("tensor name is empty"));
  EXPECT_EQ(w.metadata_count(), 1u);
  EXPECT_EQ(w.tensor_count(), 1u);
}

TEST(GgufWriterTest, RefusesShapesTheTypeCannotHold) {
  GgufWriter w;
  // q4_K blocks hold 256 values (ggml QK_K), so a row of 100 cannot be stored.
  EXPECT_THAT(MessageOf(w.AddTensor("q", GgmlType::kQ4_K, {100, 2}, {})),
              HasSubstr("tensor 'q': tensor shape {100, 2}: first dimension 100 is not a "
                        "multiple of the q4_K block size 256"));
  EXPECT_THAT(MessageOf(w.AddTensor("d0", GgmlType::kF32, {}, {})), HasSubstr("0 dimensions"));
  EXPECT_THAT(MessageOf(w.AddTensor("d5", GgmlType::kF32, {1, 1, 1, 1, 1}, Bytes(4, 0))),
              HasSubstr("tensor 'd5': tensor shape {1, 1, 1, 1, 1} has 5 dimensions"));
  EXPECT_THAT(MessageOf(w.AddTensor("neg", GgmlType::kF32, {4, -1}, {})),
              HasSubstr("dimension 1 is negative"));
  EXPECT_THAT(
      MessageOf(w.AddTensor("big", GgmlType::kF32, {int64_t{1} << 32, int64_t{1} << 32}, {})),
      HasSubstr("tensor 'big': tensor shape {4294967296, 4294967296}: dimension 1 "
                "overflows"));
  EXPECT_EQ(w.tensor_count(), 0u);
}

TEST(GgufWriterTest, RefusesDataOfTheWrongSize) {
  GgufWriter w;
  // q8_0: 34 bytes per 32 values (ggml block_q8_0), so {64, 3} takes 2 * 34 * 3 = 204 bytes.
  EXPECT_THAT(MessageOf(w.AddTensor("w", GgmlType::kQ8_0, {64, 3}, Bytes(200, 0))),
              HasSubstr("tensor 'w': 200 bytes of data, but q8_0 {64, 3} takes 204"));
  EXPECT_TRUE(w.AddTensor("w", GgmlType::kQ8_0, {64, 3}, Bytes(204, 0)).ok());
  EXPECT_THAT(MessageOf(w.AddF32Tensor("f", {2, 2}, {1.0f, 2.0f, 3.0f})),
              HasSubstr("12 bytes of data, but f32 {2, 2} takes 16"));
}

TEST(GgufWriterTest, TensorByteSizeFollowsTheBlockLayout) {
  // Block sizes from ggml-common.h: q4_K 144 bytes per 256 values, q6_K 210, q5_0 22 per 32.
  EXPECT_EQ(*GgufTensorByteSize(GgmlType::kQ4_K, {512, 3}), 2u * 144 * 3);
  EXPECT_EQ(*GgufTensorByteSize(GgmlType::kQ6_K, {256, 2, 2}), 210u * 4);
  EXPECT_EQ(*GgufTensorByteSize(GgmlType::kQ5_0, {128, 256}), 4u * 22 * 256);
  EXPECT_EQ(*GgufTensorByteSize(GgmlType::kF16, {3, 5, 1, 2}), 2u * 30);
  EXPECT_EQ(*GgufTensorByteSize(GgmlType::kF32, {0, 7}), 0u);
}

TEST(GgufWriterTest, ArrayOfArraysItemsMustBeArrays) {
  GgufWriter w;
  std::vector<GgufMetadataValue> inner;
  inner.push_back(GgufMetadataValue::Int32Array({1}));
  inner.push_back(GgufMetadataValue::Int32Array({2}));
  inner.push_back(GgufMetadataValue::Int32(3));
  std::vector<GgufMetadataValue> outer;
  outer.push_back(GgufMetadataValue::Uint8Array({}));
  outer.push_back(GgufMetadataValue::ArrayOfArrays(std::move(inner)));
  EXPECT_THAT(MessageOf(w.AddMetadata("deep", GgufMetadataValue::ArrayOfArrays(std::move(outer)))),
              HasSubstr("key 'deep': item [1][2] of an array of arrays is a i32, not an array"));
  std::vector<GgufMetadataValue> flat;
  flat.push_back(GgufMetadataValue::String("s"));
  EXPECT_THAT(MessageOf(w.AddMetadata("flat", GgufMetadataValue::ArrayOfArrays(std::move(flat)))),
              HasSubstr("item [0] of an array of arrays is a string"));
  EXPECT_EQ(w.metadata_count(), 0u);
}

// `levels` arrays, each holding the next: [[[...[u8 7]...]]].
GgufMetadataValue NestedArrays(int levels) {
  GgufMetadataValue v = GgufMetadataValue::Uint8Array({7});
  for (int i = 1; i < levels; ++i) {
    std::vector<GgufMetadataValue> items;
    items.push_back(std::move(v));
    v = GgufMetadataValue::ArrayOfArrays(std::move(items));
  }
  return v;
}

TEST(GgufWriterTest, ArraysNestAtMostAsDeepAsGgufFileReads) {
  // GgufFile reads 8 levels of arrays (gguf_file.cc kMaxArrayNesting) and refuses a ninth.
  GgufWriter w;
  ASSERT_TRUE(w.AddMetadata("eight", NestedArrays(8)).ok());
  EXPECT_THAT(MessageOf(w.AddMetadata("nine", NestedArrays(9))),
              HasSubstr("key 'nine': item [0][0][0][0][0][0][0][0] nests arrays deeper than 8"));
  absl::StatusOr<std::vector<uint8_t>> image = w.Build();
  ASSERT_TRUE(image.ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBuffer(*image, "nested");
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufValue* v = (*f)->Find("eight");
  for (int level = 1; level < 8; ++level) {
    ASSERT_NE(v, nullptr);
    v = v->ArrayItem(0);
  }
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(*v->ArrayInt(0), 7);
}

TEST(GgufWriterTest, OnlyVersionsTwoAndThreeAreWritten) {
  for (uint32_t version : {2u, 3u}) {
    GgufWriter w(version);
    absl::StatusOr<std::vector<uint8_t>> image = w.Build();
    ASSERT_TRUE(image.ok());
    ASSERT_EQ(image->size(), 32u);  // 24-byte header padded to 32
    uint32_t stored = 0;
    std::memcpy(&stored, image->data() + 4, 4);
    EXPECT_EQ(stored, version);
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBuffer(*image, "empty");
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->version(), version);
    EXPECT_TRUE((*f)->metadata().empty());
    EXPECT_TRUE((*f)->tensors().empty());
  }
  for (uint32_t version : {0u, 1u, 4u}) {
    GgufWriter w(version);
    EXPECT_THAT(MessageOf(w.Build()), HasSubstr(absl::StrCat("GGUF version ", version)));
    EXPECT_THAT(MessageOf(w.WriteFile(::testing::TempDir() + "/never.gguf")),
                HasSubstr("cannot be written"));
  }
}

TEST(GgufWriterTest, WriteFileProducesTheBuiltImage) {
  GgufWriter w;
  ASSERT_TRUE(w.SetAlignment(64).ok());
  ASSERT_TRUE(w.AddMetadata("general.architecture", GgufMetadataValue::String("qwen35")).ok());
  ASSERT_TRUE(w.AddF32Tensor("norm", {4}, {1.0f, -2.0f, 0.5f, 8.0f}).ok());
  ASSERT_TRUE(w.AddTensor("blocks", GgmlType::kQ4_0, {64}, Bytes(36, 9)).ok());
  absl::StatusOr<std::vector<uint8_t>> image = w.Build();
  ASSERT_TRUE(image.ok());

  const std::string path = ::testing::TempDir() + "/gguf_writer_test.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
  EXPECT_EQ(on_disk, *image);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "qwen35");
  const GgufTensorInfo* norm = (*f)->FindTensor("norm");
  ASSERT_NE(norm, nullptr);
  float values[4];
  ASSERT_EQ((*f)->TensorData(*norm).size(), sizeof(values));
  std::memcpy(values, (*f)->TensorData(*norm).data(), sizeof(values));
  EXPECT_EQ(values[1], -2.0f);
  EXPECT_EQ(values[3], 8.0f);
  std::filesystem::remove(path);
}

TEST(GgufWriterTest, WriteFileNamesThePathItCannotCreate) {
  GgufWriter w;
  const std::string path = ::testing::TempDir() + "/no-such-dir/x.gguf";
  absl::Status s = w.WriteFile(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(MessageOf(s), HasSubstr("cannot create " + path + ".tmp"));
}

TEST(GgufWriterTest, StreamedTensorsGiveTheSameFileAsAddedOnes) {
  // The same three tensors, once with data and once declared and produced in small pieces.
  const std::vector<uint8_t> a = Bytes(12, 1), b = Bytes(68, 50), c = Bytes(10, 200);
  GgufWriter in_memory;
  ASSERT_TRUE(in_memory.AddMetadata("k", GgufMetadataValue::String("v")).ok());
  ASSERT_TRUE(in_memory.AddTensor("a", GgmlType::kF32, {3}, a).ok());
  ASSERT_TRUE(in_memory.AddTensor("b", GgmlType::kQ8_0, {32, 2}, b).ok());
  ASSERT_TRUE(in_memory.AddTensor("c", GgmlType::kF16, {5}, c).ok());
  absl::StatusOr<std::vector<uint8_t>> image = in_memory.Build();
  ASSERT_TRUE(image.ok());

  GgufWriter streamed;
  ASSERT_TRUE(streamed.AddMetadata("k", GgufMetadataValue::String("v")).ok());
  ASSERT_TRUE(streamed.DeclareTensor("a", GgmlType::kF32, {3}).ok());
  ASSERT_TRUE(streamed.AddTensor("b", GgmlType::kQ8_0, {32, 2}, b).ok());  // mixed: from memory
  ASSERT_TRUE(streamed.DeclareTensor("c", GgmlType::kF16, {5}).ok());
  EXPECT_EQ(streamed.FileSize(), in_memory.FileSize());
  EXPECT_EQ(streamed.tensor(1).n_bytes, 68u);
  EXPECT_EQ(streamed.tensor(2).name, "c");
  std::vector<size_t> asked;
  const std::string path = ::testing::TempDir() + "/gguf_writer_streamed.gguf";
  absl::Status s = streamed.WriteFileStreaming(path, [&](size_t i, GgufTensorSink& sink) {
    asked.push_back(i);
    const std::vector<uint8_t>& src = i == 0 ? a : c;
    for (size_t off = 0; off < src.size(); off += 3) {
      const size_t n = std::min<size_t>(3, src.size() - off);
      if (absl::Status w = sink.Write(absl::MakeConstSpan(src.data() + off, n)); !w.ok()) return w;
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(asked, (std::vector<size_t>{0, 2}));
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
  EXPECT_EQ(on_disk, *image);
  std::filesystem::remove(path);
}

TEST(GgufWriterTest, StreamingRefusesWrongByteCountsAndKeepsNoPartialFile) {
  GgufWriter w;
  ASSERT_TRUE(w.DeclareTensor("t", GgmlType::kF32, {4}).ok());
  EXPECT_THAT(MessageOf(w.Build()), HasSubstr("tensor 't' was declared without data"));
  const std::string path = ::testing::TempDir() + "/gguf_writer_short.gguf";
  EXPECT_THAT(MessageOf(w.WriteFile(path)), HasSubstr("WriteFileStreaming"));

  const std::vector<uint8_t> twelve = Bytes(12, 0), twenty = Bytes(20, 0);
  EXPECT_THAT(MessageOf(w.WriteFileStreaming(
                  path, [&](size_t, GgufTensorSink& sink) { return sink.Write(twelve); })),
              HasSubstr("tensor 't': producer wrote 12 bytes, but it takes 16"));
  EXPECT_THAT(MessageOf(w.WriteFileStreaming(
                  path, [&](size_t, GgufTensorSink& sink) { return sink.Write(twenty); })),
              HasSubstr("tensor 't': producer wrote 20 bytes, but it takes 16"));
  EXPECT_THAT(MessageOf(w.WriteFileStreaming(path,
                                             [](size_t, GgufTensorSink&) {
                                               return absl::CancelledError("stopped by test");
                                             })),
              HasSubstr("stopped by test"));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_THAT(MessageOf(w.DeclareTensor("t", GgmlType::kF32, {4})), HasSubstr("duplicate"));
  EXPECT_THAT(MessageOf(w.DeclareTensor("k", GgmlType::kQ4_K, {100})),
              HasSubstr("not a multiple of the q4_K block size 256"));
}

TEST(GgufWriterTest, CopyOfReproducesEveryValueType) {
  GgufWriter w;
  ASSERT_TRUE(w.AddMetadata("u8", GgufMetadataValue::Uint8(200)).ok());
  ASSERT_TRUE(w.AddMetadata("i8", GgufMetadataValue::Int8(-5)).ok());
  ASSERT_TRUE(w.AddMetadata("u16", GgufMetadataValue::Uint16(60000)).ok());
  ASSERT_TRUE(w.AddMetadata("i16", GgufMetadataValue::Int16(-300)).ok());
  ASSERT_TRUE(w.AddMetadata("u32", GgufMetadataValue::Uint32(4000000000u)).ok());
  ASSERT_TRUE(w.AddMetadata("i32", GgufMetadataValue::Int32(-7)).ok());
  ASSERT_TRUE(w.AddMetadata("f32", GgufMetadataValue::Float32(1e-6f)).ok());
  ASSERT_TRUE(w.AddMetadata("b", GgufMetadataValue::Bool(true)).ok());
  ASSERT_TRUE(w.AddMetadata("s", GgufMetadataValue::String("{% if x %}")).ok());
  ASSERT_TRUE(w.AddMetadata("u64", GgufMetadataValue::Uint64(uint64_t{1} << 40)).ok());
  ASSERT_TRUE(w.AddMetadata("i64", GgufMetadataValue::Int64(-(int64_t{1} << 40))).ok());
  ASSERT_TRUE(w.AddMetadata("f64", GgufMetadataValue::Float64(0.1)).ok());
  ASSERT_TRUE(w.AddMetadata("ai32", GgufMetadataValue::Int32Array({1, -3, 5})).ok());
  ASSERT_TRUE(w.AddMetadata("af32", GgufMetadataValue::Float32Array({0.5f, -2.25f})).ok());
  ASSERT_TRUE(w.AddMetadata("ab", GgufMetadataValue::BoolArray({true, false, true})).ok());
  ASSERT_TRUE(w.AddMetadata("as", GgufMetadataValue::StringArray({"a b", "", "c"})).ok());
  ASSERT_TRUE(w.AddMetadata("au64", GgufMetadataValue::Uint64Array({7, uint64_t{1} << 50})).ok());
  std::vector<GgufMetadataValue> items;
  items.push_back(GgufMetadataValue::Uint8Array({7}));
  items.push_back(GgufMetadataValue::StringArray({"x"}));
  ASSERT_TRUE(w.AddMetadata("nested", GgufMetadataValue::ArrayOfArrays(std::move(items))).ok());
  absl::StatusOr<std::vector<uint8_t>> image = w.Build();
  ASSERT_TRUE(image.ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBuffer(*image, "all-types");
  ASSERT_TRUE(f.ok()) << f.status();

  GgufWriter copy;
  for (const GgufKeyValue& kv : (*f)->metadata()) {
    ASSERT_TRUE(copy.AddMetadata(kv.key, GgufMetadataValue::CopyOf(kv.value)).ok()) << kv.key;
  }
  absl::StatusOr<std::vector<uint8_t>> copied = copy.Build();
  ASSERT_TRUE(copied.ok());
  EXPECT_EQ(*copied, *image);  // byte for byte: same types, same values
}

}  // namespace
}  // namespace deltaserve::common

namespace deltaserve::common {
namespace {

// CopyOf copies stored bits: a u64 above INT64_MAX, negative zero and float arrays survive a
// write -> parse -> CopyOf -> write -> parse round trip exactly.
TEST(GgufWriterCopyOf, CopiesScalarsAndArraysBitExactly) {
  GgufWriter w;
  ASSERT_TRUE(w.AddMetadata("u64", GgufMetadataValue::Uint64(~0ull)).ok());
  ASSERT_TRUE(w.AddMetadata("f32", GgufMetadataValue::Float32(-0.0f)).ok());
  const std::vector<float> floats = {1.5f, -2.25f, 3.0e-39f};
  ASSERT_TRUE(w.AddMetadata("f32s", GgufMetadataValue::Float32Array(floats)).ok());
  const std::vector<uint64_t> big = {~0ull, 1ull << 63};
  ASSERT_TRUE(w.AddMetadata("u64s", GgufMetadataValue::Uint64Array(big)).ok());
  auto bytes = w.Build();
  ASSERT_TRUE(bytes.ok());
  auto file = GgufFile::FromBuffer(*bytes, "first");
  ASSERT_TRUE(file.ok()) << file.status();
  GgufWriter copy;
  for (const GgufKeyValue& kv : (*file)->metadata()) {
    ASSERT_TRUE(copy.AddMetadata(kv.key, GgufMetadataValue::CopyOf(kv.value)).ok());
  }
  auto copied = copy.Build();
  ASSERT_TRUE(copied.ok());
  EXPECT_EQ(*copied, *bytes);
}

}  // namespace
}  // namespace deltaserve::common
