// GgufFile: round trips of every metadata value type and of tensors through GgufWriter (GGUF v2
// and v3), zero-copy views, alignment, and one test per way a file can be malformed, each
// checking that the error names what is wrong. Malformed files are assembled byte by byte with
// RawGguf, following the layout of the GGUF spec (ggml docs/gguf.md).
#include "common/gguf_file.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::common {
namespace {

using ::testing::HasSubstr;

// Little-endian GGUF bytes written field by field.
class RawGguf {
 public:
  RawGguf& U32(uint32_t v) { return Le(v, 4); }
  RawGguf& U64(uint64_t v) { return Le(v, 8); }
  RawGguf& Str(std::string_view s) {
    U64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& Zeros(size_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }
  RawGguf& Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return U32(0x46554747).U32(version).U64(n_tensors).U64(n_kv);
  }
  // Key and value type; the value follows.
  RawGguf& Kv(std::string_view key, GgufValueType type) {
    return Str(key).U32(static_cast<uint32_t>(type));
  }
  RawGguf& TensorInfo(std::string_view name, std::vector<uint64_t> ne, uint32_t type,
                      uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) U64(n);
    return U32(type).U64(offset);
  }
  RawGguf& PadTo(size_t alignment) {
    bytes_.resize((bytes_.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  RawGguf& Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

constexpr uint32_t kF32Id = 0;
constexpr uint32_t kQ8_0Id = 8;

// Parses a copy of `image` held in an allocation of exactly its size, so that AddressSanitizer
// reports any read past its end; returns the error message, or "OK".
std::string ParseError(const std::vector<uint8_t>& image) {
  auto exact = std::make_unique<uint8_t[]>(image.size() + (image.empty() ? 1 : 0));
  if (!image.empty()) std::memcpy(exact.get(), image.data(), image.size());
  absl::StatusOr<std::unique_ptr<GgufFile>> f =
      GgufFile::FromBuffer(absl::MakeConstSpan(exact.get(), image.size()), "raw.gguf");
  return f.ok() ? "OK" : std::string(f.status().message());
}

// A file that keeps its image alive.
struct Parsed {
  std::vector<uint8_t> image;
  std::unique_ptr<GgufFile> file;
};

Parsed BuildAndParse(const GgufWriter& w) {
  Parsed p;
  absl::StatusOr<std::vector<uint8_t>> image = w.Build();
  EXPECT_TRUE(image.ok()) << image.status();
  if (!image.ok()) return p;
  p.image = std::move(*image);
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBuffer(p.image, "written.gguf");
  EXPECT_TRUE(f.ok()) << f.status();
  if (f.ok()) p.file = std::move(*f);
  return p;
}

class GgufRoundTripTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufRoundTripTest, EveryScalarTypeKeepsItsTypeAndValue) {
  GgufWriter w(GetParam());
  const std::string with_nul("a\0b", 3);
  ASSERT_TRUE(w.AddMetadata("u8", GgufMetadataValue::Uint8(255)).ok());
  ASSERT_TRUE(w.AddMetadata("i8", GgufMetadataValue::Int8(-128)).ok());
  ASSERT_TRUE(w.AddMetadata("u16", GgufMetadataValue::Uint16(65535)).ok());
  ASSERT_TRUE(w.AddMetadata("i16", GgufMetadataValue::Int16(-32768)).ok());
  ASSERT_TRUE(w.AddMetadata("u32", GgufMetadataValue::Uint32(4294967295u)).ok());
  ASSERT_TRUE(w.AddMetadata("i32", GgufMetadataValue::Int32(-2147483647 - 1)).ok());
  ASSERT_TRUE(w.AddMetadata("f32", GgufMetadataValue::Float32(1e-6f)).ok());
  ASSERT_TRUE(w.AddMetadata("bool", GgufMetadataValue::Bool(true)).ok());
  ASSERT_TRUE(w.AddMetadata("str", GgufMetadataValue::String(with_nul)).ok());
  ASSERT_TRUE(w.AddMetadata("u64", GgufMetadataValue::Uint64(~uint64_t{0})).ok());
  ASSERT_TRUE(w.AddMetadata("i64", GgufMetadataValue::Int64(INT64_MIN)).ok());
  ASSERT_TRUE(w.AddMetadata("f64", GgufMetadataValue::Float64(std::numbers::pi)).ok());
  ASSERT_TRUE(w.AddMetadata("empty", GgufMetadataValue::String("")).ok());
  Parsed p = BuildAndParse(w);
  ASSERT_NE(p.file, nullptr);
  const GgufFile& f = *p.file;
  EXPECT_EQ(f.version(), GetParam());
  ASSERT_EQ(f.metadata().size(), 13u);
  const char* order[] = {"u8",   "i8",  "u16", "i16", "u32", "i32",  "f32",
                         "bool", "str", "u64", "i64", "f64", "empty"};
  for (size_t i = 0; i < 13; ++i) EXPECT_EQ(f.metadata()[i].key, order[i]);

  EXPECT_EQ(f.Find("u8")->type(), GgufValueType::kUint8);
  EXPECT_EQ(*f.GetInt("u8"), 255);
  EXPECT_EQ(f.Find("i8")->type(), GgufValueType::kInt8);
  EXPECT_EQ(*f.GetInt("i8"), -128);
  EXPECT_EQ(f.Find("u16")->type(), GgufValueType::kUint16);
  EXPECT_EQ(*f.GetInt("u16"), 65535);
  EXPECT_EQ(f.Find("i16")->type(), GgufValueType::kInt16);
  EXPECT_EQ(*f.GetInt("i16"), -32768);
  EXPECT_EQ(f.Find("u32")->type(), GgufValueType::kUint32);
  EXPECT_EQ(*f.GetInt("u32"), 4294967295);
  EXPECT_EQ(f.Find("i32")->type(), GgufValueType::kInt32);
  EXPECT_EQ(*f.GetInt("i32"), -2147483648);
  EXPECT_EQ(f.Find("f32")->type(), GgufValueType::kFloat32);
  EXPECT_EQ(*f.GetDouble("f32"), static_cast<double>(1e-6f));
  EXPECT_EQ(f.Find("bool")->type(), GgufValueType::kBool);
  EXPECT_EQ(*f.GetBool("bool"), true);
  EXPECT_EQ(f.Find("str")->type(), GgufValueType::kString);
  EXPECT_EQ(*f.GetString("str"), with_nul);
  EXPECT_EQ(f.Find("u64")->type(), GgufValueType::kUint64);
  EXPECT_FALSE(f.Find("u64")->AsInt().has_value());  // above INT64_MAX: refused, not wrapped
  EXPECT_EQ(*f.GetDouble("u64"), 18446744073709551615.0);
  EXPECT_EQ(f.Find("i64")->type(), GgufValueType::kInt64);
  EXPECT_EQ(*f.GetInt("i64"), INT64_MIN);
  EXPECT_EQ(f.Find("f64")->type(), GgufValueType::kFloat64);
  EXPECT_EQ(*f.GetDouble("f64"), std::numbers::pi);
  EXPECT_EQ(*f.GetString("empty"), "");

  // Strings are views into the image, not copies.
  const char* str = f.GetString("str")->data();
  EXPECT_GE(reinterpret_cast<const uint8_t*>(str), p.image.data());
  EXPECT_LT(reinterpret_cast<const uint8_t*>(str), p.image.data() + p.image.size());
}

TEST_P(GgufRoundTripTest, ScalarArraysKeepElementTypeAndValues) {
  GgufWriter w(GetParam());
  ASSERT_TRUE(w.AddMetadata("u8", GgufMetadataValue::Uint8Array({0, 1, 255})).ok());
  ASSERT_TRUE(w.AddMetadata("i8", GgufMetadataValue::Int8Array({-128, 0, 127})).ok());
  ASSERT_TRUE(w.AddMetadata("u16", GgufMetadataValue::Uint16Array({1, 65535})).ok());
  ASSERT_TRUE(w.AddMetadata("i16", GgufMetadataValue::Int16Array({-32768, 5})).ok());
  ASSERT_TRUE(w.AddMetadata("u32", GgufMetadataValue::Uint32Array({3, 3, 2, 0})).ok());
  ASSERT_TRUE(w.AddMetadata("i32", GgufMetadataValue::Int32Array({-7, 2147483647})).ok());
  ASSERT_TRUE(w.AddMetadata("f32", GgufMetadataValue::Float32Array({0.5f, -3.25f})).ok());
  ASSERT_TRUE(w.AddMetadata("bool", GgufMetadataValue::BoolArray({true, false, true})).ok());
  ASSERT_TRUE(w.AddMetadata("u64", GgufMetadataValue::Uint64Array({7, ~uint64_t{0}})).ok());
  ASSERT_TRUE(w.AddMetadata("i64", GgufMetadataValue::Int64Array({INT64_MIN, -1})).ok());
  ASSERT_TRUE(w.AddMetadata("f64", GgufMetadataValue::Float64Array({1e300, -0.0})).ok());
  ASSERT_TRUE(w.AddMetadata("none", GgufMetadataValue::Int32Array({})).ok());
  Parsed p = BuildAndParse(w);
  ASSERT_NE(p.file, nullptr);
  const GgufFile& f = *p.file;

  struct Expect {
    const char* key;
    GgufValueType type;
    std::vector<double> values;
  };
  const std::vector<Expect> expects = {
      {"u8", GgufValueType::kUint8, {0, 1, 255}},
      {"i8", GgufValueType::kInt8, {-128, 0, 127}},
      {"u16", GgufValueType::kUint16, {1, 65535}},
      {"i16", GgufValueType::kInt16, {-32768, 5}},
      {"u32", GgufValueType::kUint32, {3, 3, 2, 0}},
      {"i32", GgufValueType::kInt32, {-7, 2147483647}},
      {"f32", GgufValueType::kFloat32, {0.5, -3.25}},
      {"bool", GgufValueType::kBool, {1, 0, 1}},
      {"u64", GgufValueType::kUint64, {7, 18446744073709551615.0}},
      {"i64", GgufValueType::kInt64, {-9223372036854775808.0, -1}},
      {"f64", GgufValueType::kFloat64, {1e300, -0.0}},
      {"none", GgufValueType::kInt32, {}},
  };
  for (const Expect& e : expects) {
    SCOPED_TRACE(e.key);
    absl::StatusOr<const GgufValue*> v = f.GetArray(e.key);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ((*v)->array_type(), e.type);
    ASSERT_EQ((*v)->ArraySize(), e.values.size());
    for (size_t i = 0; i < e.values.size(); ++i) {
      EXPECT_EQ(*(*v)->ArrayDouble(i), e.values[i]) << i;
    }
    EXPECT_FALSE((*v)->ArrayDouble(e.values.size()).has_value());  // one past the end
  }
  EXPECT_EQ(*(*f.GetArray("i64"))->ArrayInt(0), INT64_MIN);
  EXPECT_EQ(*(*f.GetArray("u32"))->ArrayInt(2), 2);
  EXPECT_EQ(*(*f.GetArray("bool"))->ArrayInt(2), 1);
  EXPECT_FALSE((*f.GetArray("u64"))->ArrayInt(1).has_value());  // above INT64_MAX
  EXPECT_FALSE((*f.GetArray("f32"))->ArrayInt(0).has_value());  // not integral
  EXPECT_TRUE(std::signbit(*(*f.GetArray("f64"))->ArrayDouble(1)));
}

TEST_P(GgufRoundTripTest, StringArraysKeepEveryString) {
  GgufWriter w(GetParam());
  const std::vector<std::string> strings = {"", "Ġworld", std::string("nul\0in", 6),
                                            "\xE6\x97\xA5\xE6\x9C\xAC", std::string(1000, 'x')};
  ASSERT_TRUE(w.AddMetadata("tokenizer.ggml.tokens", GgufMetadataValue::StringArray(strings)).ok());
  ASSERT_TRUE(w.AddMetadata("none", GgufMetadataValue::StringArray({})).ok());
  Parsed p = BuildAndParse(w);
  ASSERT_NE(p.file, nullptr);
  absl::StatusOr<const GgufValue*> v = p.file->GetArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)->array_type(), GgufValueType::kString);
  ASSERT_EQ((*v)->ArraySize(), strings.size());
  for (size_t i = 0; i < strings.size(); ++i) EXPECT_EQ(*(*v)->ArrayString(i), strings[i]) << i;
  EXPECT_FALSE((*v)->ArrayString(strings.size()).has_value());
  EXPECT_EQ((*p.file->GetArray("none"))->ArraySize(), 0u);
}

TEST_P(GgufRoundTripTest, NestedArraysKeepTheirShape) {
  // [[1, 2, 3] (u32), ["x", "yz"], [[-1] (i64), [] (f32)], []]
  std::vector<GgufMetadataValue> inner;
  inner.push_back(GgufMetadataValue::Int64Array({-1}));
  inner.push_back(GgufMetadataValue::Float32Array({}));
  std::vector<GgufMetadataValue> items;
  items.push_back(GgufMetadataValue::Uint32Array({1, 2, 3}));
  items.push_back(GgufMetadataValue::StringArray({"x", "yz"}));
  items.push_back(GgufMetadataValue::ArrayOfArrays(std::move(inner)));
  items.push_back(GgufMetadataValue::ArrayOfArrays({}));
  GgufWriter w(GetParam());
  ASSERT_TRUE(w.AddMetadata("nested", GgufMetadataValue::ArrayOfArrays(std::move(items))).ok());
  ASSERT_TRUE(w.AddMetadata("after", GgufMetadataValue::Uint8(42)).ok());  // framing intact
  Parsed p = BuildAndParse(w);
  ASSERT_NE(p.file, nullptr);

  absl::StatusOr<const GgufValue*> v = p.file->GetArray("nested");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)->array_type(), GgufValueType::kArray);
  ASSERT_EQ((*v)->ArraySize(), 4u);
  const GgufValue* a0 = (*v)->ArrayItem(0);
  ASSERT_NE(a0, nullptr);
  EXPECT_EQ(a0->array_type(), GgufValueType::kUint32);
  EXPECT_EQ(a0->ArraySize(), 3u);
  EXPECT_EQ(*a0->ArrayInt(2), 3);
  const GgufValue* a1 = (*v)->ArrayItem(1);
  EXPECT_EQ(*a1->ArrayString(1), "yz");
  const GgufValue* a2 = (*v)->ArrayItem(2);
  ASSERT_EQ(a2->ArraySize(), 2u);
  EXPECT_EQ(*a2->ArrayItem(0)->ArrayInt(0), -1);
  EXPECT_EQ(a2->ArrayItem(0)->array_type(), GgufValueType::kInt64);
  EXPECT_EQ(a2->ArrayItem(1)->array_type(), GgufValueType::kFloat32);
  EXPECT_EQ(a2->ArrayItem(1)->ArraySize(), 0u);
  EXPECT_EQ((*v)->ArrayItem(3)->ArraySize(), 0u);
  EXPECT_EQ((*v)->ArrayItem(4), nullptr);
  EXPECT_EQ(*p.file->GetInt("after"), 42);
  EXPECT_EQ((*v)->DebugString(),
            "[array; 4] [u32; 3] 1, 2, 3, [string; 2] \"x\", \"yz\", "
            "[array; 2] [i64; 1] -1, [f32; 0], [array; 0]");
}

TEST_P(GgufRoundTripTest, TensorViewsAreZeroCopyAndExact) {
  GgufWriter w(GetParam());
  std::vector<float> embd(8 * 3);
  for (size_t i = 0; i < embd.size(); ++i) embd[i] = 0.25f * static_cast<float>(i) - 2.0f;
  std::vector<uint8_t> q8(2 * 34 * 2), q4k(144), f16(2 * 6);
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < q4k.size(); ++i) q4k[i] = static_cast<uint8_t>(255 - i);
  for (size_t i = 0; i < f16.size(); ++i) f16[i] = static_cast<uint8_t>(i + 100);
  ASSERT_TRUE(w.AddF32Tensor("token_embd.weight", {8, 3}, embd).ok());
  ASSERT_TRUE(w.AddTensor("blk.0.attn_q.weight", GgmlType::kQ8_0, {64, 2}, q8).ok());
  ASSERT_TRUE(w.AddTensor("blk.0.ffn_up_exps.weight", GgmlType::kQ4_K, {256, 1, 1}, q4k).ok());
  ASSERT_TRUE(w.AddTensor("t4", GgmlType::kF16, {1, 2, 3, 1}, f16).ok());
  Parsed p = BuildAndParse(w);
  ASSERT_NE(p.file, nullptr);
  const GgufFile& f = *p.file;
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensors()[1].name, "blk.0.attn_q.weight");  // file order

  struct Expect {
    const char* name;
    GgmlType type;
    int n_dims;
    std::string shape;
    int64_t n_elements;
    const std::vector<uint8_t> bytes;
  };
  std::vector<uint8_t> embd_bytes(embd.size() * 4);
  std::memcpy(embd_bytes.data(), embd.data(), embd_bytes.size());
  const Expect expects[] = {
      {"token_embd.weight", GgmlType::kF32, 2, "{8, 3}", 24, embd_bytes},
      {"blk.0.attn_q.weight", GgmlType::kQ8_0, 2, "{64, 2}", 128, q8},
      {"blk.0.ffn_up_exps.weight", GgmlType::kQ4_K, 3, "{256, 1, 1}", 256, q4k},
      {"t4", GgmlType::kF16, 4, "{1, 2, 3, 1}", 6, f16},
  };
  for (const Expect& e : expects) {
    SCOPED_TRACE(e.name);
    const GgufTensorInfo* t = f.FindTensor(e.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, e.type);
    EXPECT_EQ(t->n_dims, e.n_dims);
    EXPECT_EQ(t->ShapeString(), e.shape);
    EXPECT_EQ(t->n_elements, e.n_elements);
    EXPECT_EQ(t->n_bytes, e.bytes.size());
    EXPECT_EQ(t->offset % f.alignment(), 0u);
    absl::Span<const uint8_t> data = f.TensorData(*t);
    EXPECT_EQ(data.data(), p.image.data() + t->offset);  // a view into the buffer, no copy
    EXPECT_EQ(std::vector<uint8_t>(data.begin(), data.end()), e.bytes);
  }
  EXPECT_EQ(f.FindTensor("missing"), nullptr);
  float embd_5;
  std::memcpy(&embd_5, f.TensorData(*f.FindTensor("token_embd.weight")).data() + 5 * 4, 4);
  EXPECT_EQ(embd_5, -0.75f);  // 0.25 * 5 - 2
}

INSTANTIATE_TEST_SUITE_P(Versions, GgufRoundTripTest, ::testing::Values(2u, 3u),
                         [](const auto& info) { return absl::StrCat("V", info.param); });

TEST(GgufFileTest, AlignmentDefaultsTo32AndFollowsTheKey) {
  for (uint64_t alignment : {uint64_t{0}, uint64_t{1}, uint64_t{64}, uint64_t{256}}) {
    SCOPED_TRACE(alignment);
    GgufWriter w;
    if (alignment != 0) {
      ASSERT_TRUE(w.SetAlignment(alignment).ok());
    }
    ASSERT_TRUE(w.AddTensor("a", GgmlType::kF32, {3}, std::vector<uint8_t>(12, 1)).ok());
    ASSERT_TRUE(w.AddTensor("b", GgmlType::kF32, {1}, std::vector<uint8_t>(4, 2)).ok());
    Parsed p = BuildAndParse(w);
    ASSERT_NE(p.file, nullptr);
    const uint64_t want = alignment == 0 ? 32 : alignment;
    EXPECT_EQ(p.file->alignment(), want);
    EXPECT_EQ(p.file->data_offset() % want, 0u);
    // "b" follows "a" (12 bytes) at the next multiple of the alignment.
    EXPECT_EQ(p.file->FindTensor("b")->offset - p.file->FindTensor("a")->offset,
              (12 + want - 1) / want * want);
  }
}

TEST(GgufFileTest, AlignmentMustBeAPowerOfTwo) {
  for (uint32_t bad : {0u, 3u, 48u, 0x80000000u}) {
    RawGguf raw;
    raw.Header(3, 0, 1).Kv("general.alignment", GgufValueType::kUint32).U32(bad);
    EXPECT_THAT(
        ParseError(raw.bytes()),
        HasSubstr(absl::StrCat("key 'general.alignment' must be a power of two, got ", bad)));
  }
  RawGguf raw;
  raw.Header(3, 0, 1).Kv("general.alignment", GgufValueType::kString).Str("64");
  EXPECT_THAT(ParseError(raw.bytes()), HasSubstr("must be a power of two, got \"64\""));
}

TEST(GgufFileTest, TypedGettersNameTheKey) {
  GgufWriter w;
  ASSERT_TRUE(w.AddMetadata("s", GgufMetadataValue::String("text")).ok());
  ASSERT_TRUE(w.AddMetadata("b", GgufMetadataValue::Bool(false)).ok());
  Parsed p = BuildAndParse(w);
  ASSERT_NE(p.file, nullptr);
  EXPECT_EQ(p.file->GetInt("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(p.file->GetInt("nope").status().message()),
              HasSubstr("written.gguf: missing key 'nope'"));
  EXPECT_THAT(std::string(p.file->GetInt("s").status().message()),
              HasSubstr("key 's' should be an integer, is string \"text\""));
  EXPECT_THAT(std::string(p.file->GetInt("b").status().message()),
              HasSubstr("key 'b' should be an integer, is bool"));
  EXPECT_THAT(std::string(p.file->GetArray("s").status().message()),
              HasSubstr("key 's' should be an array"));
  EXPECT_THAT(std::string(p.file->GetString("b").status().message()),
              HasSubstr("key 'b' should be a string"));
}

// --- Malformed files: every error names what is wrong ---------------------------------------

TEST(GgufFileErrorTest, BadMagic) {
  RawGguf raw;
  raw.U32(0x4C4D4747).U32(3).U64(0).U64(0);  // "GGML"
  EXPECT_THAT(ParseError(raw.bytes()),
              HasSubstr("raw.gguf: GGUF offset 0: not a GGUF file (magic 0x4c4d4747)"));
}

TEST(GgufFileErrorTest, VersionsOtherThanTwoAndThree) {
  for (uint32_t version : {0u, 1u, 4u, 0xFFFFFFFFu}) {
    RawGguf raw;
    raw.Header(version, 0, 0);
    EXPECT_THAT(ParseError(raw.bytes()),
                HasSubstr(absl::StrCat("GGUF offset 4: unsupported GGUF version ", version)));
  }
}

TEST(GgufFileErrorTest, BigEndianFile) {
  RawGguf raw;
  raw.Header(0x03000000, 0, 0);  // version 3 stored big-endian
  EXPECT_THAT(ParseError(raw.bytes()), HasSubstr("big-endian GGUF files are not supported"));
}

TEST(GgufFileErrorTest, TruncatedHeader) {
  RawGguf raw;
  raw.Header(3, 0, 0);
  // Which field each prefix length cuts: magic [0,4), version [4,8), counts [8,16), [16,24).
  for (size_t n = 0; n < 24; ++n) {
    std::vector<uint8_t> cut(raw.bytes().begin(), raw.bytes().begin() + n);
    const char* field = n < 4    ? "magic"
                        : n < 8  ? "version"
                        : n < 16 ? "tensor count"
                                 : "metadata count";
    EXPECT_THAT(ParseError(cut), HasSubstr(absl::StrCat("truncated: ", field, " needs"))) << n;
  }
  EXPECT_EQ(ParseError(raw.bytes()), "OK");  // the empty file itself is valid
}

TEST(GgufFileErrorTest, TruncatedKey) {
  RawGguf raw;
  raw.Header(3, 0, 1).U64(100).Zeros(20);
  EXPECT_THAT(ParseError(raw.bytes()),
              HasSubstr("GGUF offset 24: key of metadata entry 0: string length 100 exceeds the "
                        "20 bytes left"));
}

TEST(GgufFileErrorTest, TruncatedStringValue) {
  RawGguf raw;
  raw.Header(3, 0, 1).Kv("k", GgufValueType::kString).U64(50).Zeros(5);
  EXPECT_THAT(ParseError(raw.bytes()), HasSubstr("key 'k': string length 50 exceeds the 5 bytes"));
}

TEST(GgufFileErrorTest, TruncatedScalarValue) {
  RawGguf raw;
  raw.Header(3, 0, 1).Kv("k", GgufValueType::kUint64).U32(7);
  EXPECT_THAT(ParseError(raw.bytes()), HasSubstr("truncated: key 'k' needs 8 bytes, 4 left"));
}

TEST(GgufFileErrorTest, TruncatedArrays) {
  RawGguf scalars;
  scalars.Header(3, 0, 1).Kv("arr", GgufValueType::kArray).U32(4).U64(10).Zeros(8);
  EXPECT_THAT(ParseError(scalars.bytes()),
              HasSubstr("key 'arr': array of 10 u32 cannot fit in the 8 bytes left"));
  RawGguf strings;  // two strings announced, the second cut short
  strings.Header(3, 0, 1).Kv("arr", GgufValueType::kArray).U32(8).U64(2).Str("ab").U64(9).Zeros(3);
  EXPECT_THAT(ParseError(strings.bytes()),
              HasSubstr("key 'arr': string length 9 exceeds the 3 bytes left"));
  RawGguf nested;  // [[u8 x 1], [u8 x 40 (only 2 present)]]
  nested.Header(3, 0, 1).Kv("arr", GgufValueType::kArray).U32(9).U64(2);
  nested.U32(0).U64(1).Zeros(1).U32(0).U64(40).Zeros(2);
  EXPECT_THAT(ParseError(nested.bytes()),
              HasSubstr("key 'arr'[1]: array of 40 u8 cannot fit in the 2 bytes left"));
}

TEST(GgufFileErrorTest, HostileCountsAreRefusedBeforeAllocating) {
  // Each count would need exabytes; the file has a few dozen bytes.
  RawGguf tensors;
  tensors.Header(3, uint64_t{1} << 60, 0).Zeros(64);
  EXPECT_THAT(ParseError(tensors.bytes()),
              HasSubstr("tensor count 1152921504606846976 cannot fit in the 64 bytes left"));
  RawGguf kvs;
  kvs.Header(3, 0, uint64_t{1} << 60).Zeros(64);
  EXPECT_THAT(ParseError(kvs.bytes()),
              HasSubstr("metadata count 1152921504606846976 cannot fit in the 64 bytes left"));
  const struct {
    GgufValueType element;
    uint64_t count;
    const char* what;
  } arrays[] = {
      {GgufValueType::kUint8, uint64_t{1} << 62, "array of 4611686018427387904 u8"},
      {GgufValueType::kFloat64, ~uint64_t{0}, "array of 18446744073709551615 f64"},
      {GgufValueType::kString, uint64_t{1} << 61, "array of 2305843009213693952 string"},
      {GgufValueType::kArray, uint64_t{1} << 59, "array of 576460752303423488 array"},
  };
  for (const auto& a : arrays) {
    RawGguf raw;
    raw.Header(3, 0, 1).Kv("big", GgufValueType::kArray);
    raw.U32(static_cast<uint32_t>(a.element)).U64(a.count).Zeros(64);
    EXPECT_THAT(ParseError(raw.bytes()), HasSubstr(absl::StrCat("key 'big': ", a.what)));
  }
  RawGguf str;
  str.Header(3, 0, 1).Kv("k", GgufValueType::kString).U64(uint64_t{1} << 63).Zeros(8);
  EXPECT_THAT(ParseError(str.bytes()), HasSubstr("string length 9223372036854775808 exceeds"));
}

TEST(GgufFileErrorTest, ArraysNestedTooDeep) {
  RawGguf raw;
  raw.Header(3, 0, 1).Kv("deep", GgufValueType::kArray);
  for (int i = 0; i < 9; ++i) raw.U32(9).U64(1);  // nine levels of [array; 1]
  raw.U32(0).U64(0).Zeros(16);
  EXPECT_THAT(ParseError(raw.bytes()), HasSubstr("arrays nested deeper than 8"));
}

TEST(GgufFileErrorTest, UnknownValueTypes) {
  RawGguf scalar;
  scalar.Header(3, 0, 1).Str("k").U32(13).Zeros(16);
  EXPECT_THAT(ParseError(scalar.bytes()), HasSubstr("key 'k': unknown value type 13"));
  RawGguf element;
  element.Header(3, 0, 1).Kv("a", GgufValueType::kArray).U32(99).U64(0).Zeros(16);
  EXPECT_THAT(ParseError(element.bytes()), HasSubstr("key 'a': unknown value type 99"));
}

TEST(GgufFileErrorTest, EmptyAndDuplicateNames) {
  RawGguf empty_key;
  empty_key.Header(3, 0, 1).Kv("", GgufValueType::kUint8).Zeros(8);
  EXPECT_THAT(ParseError(empty_key.bytes()), HasSubstr("metadata entry 0 has an empty key"));
  RawGguf dup_key;
  dup_key.Header(3, 0, 2).Kv("k", GgufValueType::kUint8).Zeros(1).Kv("k", GgufValueType::kUint8);
  dup_key.Zeros(1);
  EXPECT_THAT(ParseError(dup_key.bytes()), HasSubstr("GGUF offset 38: duplicate metadata key 'k'"));
  RawGguf empty_name;
  empty_name.Header(3, 1, 0).TensorInfo("", {1}, kF32Id, 0).PadTo(32).Zeros(32);
  EXPECT_THAT(ParseError(empty_name.bytes()), HasSubstr("tensor 0 has an empty name"));
  RawGguf dup_name;
  dup_name.Header(3, 2, 0).TensorInfo("t", {1}, kF32Id, 0).TensorInfo("t", {1}, kF32Id, 32);
  dup_name.PadTo(32).Zeros(64);
  EXPECT_THAT(ParseError(dup_name.bytes()), HasSubstr("duplicate tensor 't'"));
}

// One tensor info followed by enough data for any small tensor.
std::vector<uint8_t> OneTensor(std::vector<uint64_t> ne, uint32_t type, uint64_t offset = 0) {
  RawGguf raw;
  raw.Header(3, 1, 0).TensorInfo("t", std::move(ne), type, offset).PadTo(32).Zeros(256);
  return raw.bytes();
}

TEST(GgufFileErrorTest, TensorInfoFields) {
  EXPECT_EQ(ParseError(OneTensor({64}, kF32Id)), "OK");
  // Ids 4, 5 and 31 are types removed from ggml; 40 and up are not defined at all.
  for (uint32_t id : {4u, 5u, 31u, 36u, 40u, 0xFFFFFFFFu}) {
    EXPECT_THAT(ParseError(OneTensor({32}, id)),
                HasSubstr(absl::StrCat("tensor 't': unknown ggml type id ", id)));
  }
  EXPECT_THAT(ParseError(OneTensor({33}, kQ8_0Id)),
              HasSubstr("tensor 't': first dimension 33 is not a multiple of the q8_0 block "
                        "size 32"));
  EXPECT_THAT(ParseError(OneTensor({}, kF32Id)), HasSubstr("tensor 't': 0 dimensions (1..4"));
  EXPECT_THAT(ParseError(OneTensor({1, 1, 1, 1, 1}, kF32Id)),
              HasSubstr("tensor 't': 5 dimensions (1..4 allowed)"));
  EXPECT_THAT(ParseError(OneTensor({uint64_t{1} << 32, uint64_t{1} << 32}, kF32Id)),
              HasSubstr("tensor 't': dimension 1 = 4294967296 overflows the element count"));
  EXPECT_THAT(ParseError(OneTensor({uint64_t{1} << 63}, kF32Id)),
              HasSubstr("tensor 't': dimension 0 = 9223372036854775808 overflows"));
  // 2^62 f32 elements fit int64, but their 2^64 bytes do not fit uint64.
  EXPECT_THAT(ParseError(OneTensor({uint64_t{1} << 31, uint64_t{1} << 31}, kF32Id)),
              HasSubstr("tensor 't': byte size overflows"));
  EXPECT_THAT(ParseError(OneTensor({4}, kF32Id, 16)),
              HasSubstr("tensor 't': data offset 16 is not a multiple of the alignment 32"));
}

TEST(GgufFileErrorTest, TensorPastTheEndOfTheFile) {
  // 256 bytes of data follow the header; a {65} f32 tensor needs 260.
  EXPECT_THAT(ParseError(OneTensor({65}, kF32Id)),
              HasSubstr("tensor 't': data [64 + 0, +260 bytes) runs past the end of the file "
                        "(320 bytes)"));
  EXPECT_THAT(ParseError(OneTensor({1}, kF32Id, uint64_t{1} << 63)),
              HasSubstr("tensor 't': data [64 + 9223372036854775808, +4 bytes) runs past"));
  EXPECT_THAT(ParseError(OneTensor({1}, kF32Id, ~uint64_t{31})), HasSubstr("runs past the end"));
}

TEST(GgufFileErrorTest, OverlappingTensors) {
  RawGguf raw;  // "a" is 64 bytes at 0, "b" starts at 32
  raw.Header(3, 2, 0).TensorInfo("a", {16}, kF32Id, 0).TensorInfo("b", {16}, kF32Id, 32);
  raw.PadTo(32).Zeros(128);
  EXPECT_THAT(ParseError(raw.bytes()), HasSubstr("tensors 'a' and 'b' overlap at offset"));
}

}  // namespace
}  // namespace deltaserve::common
