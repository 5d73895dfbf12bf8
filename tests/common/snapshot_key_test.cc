// Snapshot keys (common/snapshot_key.h): determinism, independence from the other positions
// asked, sensitivity to tokens and domain, snapshot positions, the model fingerprint, and known
// answers from an independent reference (tests/common/snapshot_key_reference.py, hashlib only).
#include "common/snapshot_key.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/gguf_file.h"
#include "common/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::common {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

SnapshotDomain TestDomain() {
  SnapshotDomain d;
  for (int i = 0; i < 32; ++i) d.model_fingerprint[i] = static_cast<uint8_t>(i);
  d.k_type = "q8_0";
  d.v_type = "f16";
  d.state_type = "f32";
  d.page_tokens = 256;
  return d;
}

// The token list of snapshot_key_reference.py.
std::vector<int32_t> ReferenceTokens() {
  std::vector<int32_t> t(150);
  for (int i = 0; i < 150; ++i) t[i] = static_cast<int32_t>((i * 7919 + 13) % 151936);
  return t;
}

std::vector<SnapshotKey> KeysAt(const SnapshotKey& root, const std::vector<int32_t>& tokens,
                                const std::vector<int64_t>& positions) {
  absl::StatusOr<std::vector<SnapshotKey>> k = SnapshotKeysAt(root, tokens, positions);
  EXPECT_TRUE(k.ok()) << k.status();
  return k.ok() ? *k : std::vector<SnapshotKey>(positions.size());
}

// Expected values printed by `python3 tests/common/snapshot_key_reference.py`.
TEST(SnapshotKeyTest, KnownAnswersMatchIndependentReference) {
  const SnapshotKey root = SnapshotRootKey(TestDomain());
  EXPECT_EQ(root.Hex(), "e11437da6bf0ecfb308c82a8fa8e7755");
  const std::vector<int64_t> positions = {1, 62, 63, 64, 65, 128, 130, 150};
  const std::vector<SnapshotKey> keys = KeysAt(root, ReferenceTokens(), positions);
  ASSERT_EQ(keys.size(), positions.size());
  EXPECT_EQ(keys[0].Hex(), "ce8b70ffe54219f1229cb02e4f0662f7");
  EXPECT_EQ(keys[1].Hex(), "2e8a324f41e9e7f702556d4a7d634597");
  EXPECT_EQ(keys[2].Hex(), "d6d9d27a0c8c5b2c25ad63aa52354d4c");
  EXPECT_EQ(keys[3].Hex(), "383c525fe1e0926d392a3f9927bca20a");
  EXPECT_EQ(keys[4].Hex(), "4c61dc7704f8a7cac1af340814bbd012");
  EXPECT_EQ(keys[5].Hex(), "d7c5e15a5f54e9626defaa6fee070633");
  EXPECT_EQ(keys[6].Hex(), "18bdd024738b59c2c79cd49ed9b8f693");
  EXPECT_EQ(keys[7].Hex(), "1d52779239545a113ac808878ca564df");
}

// The GGUF that snapshot_key_reference.py assembles by hand from the spec.
absl::StatusOr<std::vector<uint8_t>> SmallGguf(uint32_t value) {
  GgufWriter w;
  if (absl::Status s = w.AddMetadata("general.architecture", GgufMetadataValue::String("qwen35"));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = w.AddMetadata("test.value", GgufMetadataValue::Uint32(value)); !s.ok()) {
    return s;
  }
  const float data[2] = {1.0f, 2.0f};
  if (absl::Status s = w.AddF32Tensor("t", {2}, data); !s.ok()) return s;
  return w.Build();
}

std::string HexOf(const std::array<uint8_t, 32>& a) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : a) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

TEST(SnapshotKeyTest, KnownAnswerModelFingerprintIsSha256OfHeaderBytes) {
  absl::StatusOr<std::vector<uint8_t>> image = SmallGguf(7);
  ASSERT_TRUE(image.ok()) << image.status();
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBuffer(*image, "small.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->header_bytes().size(), 160u);  // reference: gguf_header_bytes
  EXPECT_EQ(HexOf(ModelFingerprint(**f)),
            "3fca53b843461e2575cbe2bb27a46dd78a3160fb730cae81ba900b8ea8d2cc49");
}

TEST(SnapshotKeyTest, FingerprintChangesWithAMetadataValueNotWithTensorData) {
  absl::StatusOr<std::vector<uint8_t>> a = SmallGguf(7);
  absl::StatusOr<std::vector<uint8_t>> b = SmallGguf(8);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<uint8_t> c = *a;
  ASSERT_GT(c.size(), 160u);
  c[160] ^= 0xFF;  // the first tensor data byte: outside [0, data_offset)
  absl::StatusOr<std::unique_ptr<GgufFile>> fa = GgufFile::FromBuffer(*a, "a.gguf");
  absl::StatusOr<std::unique_ptr<GgufFile>> fb = GgufFile::FromBuffer(*b, "b.gguf");
  absl::StatusOr<std::unique_ptr<GgufFile>> fc = GgufFile::FromBuffer(c, "c.gguf");
  ASSERT_TRUE(fa.ok() && fb.ok() && fc.ok());
  EXPECT_NE(ModelFingerprint(**fa), ModelFingerprint(**fb));
  EXPECT_EQ(ModelFingerprint(**fa), ModelFingerprint(**fc));
}

TEST(SnapshotKeyTest, KeysAreDeterministic) {
  const std::vector<int32_t> tokens = ReferenceTokens();
  const SnapshotKey root = SnapshotRootKey(TestDomain());
  EXPECT_EQ(root, SnapshotRootKey(TestDomain()));
  EXPECT_EQ(KeysAt(root, tokens, {5, 64, 150}), KeysAt(root, tokens, {5, 64, 150}));
}

TEST(SnapshotKeyTest, KeyOfAPositionDoesNotDependOnTheOtherPositionsAsked) {
  const std::vector<int32_t> tokens = ReferenceTokens();
  const SnapshotKey root = SnapshotRootKey(TestDomain());
  const std::vector<int64_t> all = {1, 30, 63, 64, 65, 100, 128, 129, 150};
  const std::vector<SnapshotKey> together = KeysAt(root, tokens, all);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(KeysAt(root, tokens, {all[i]})[0], together[i]) << "p=" << all[i];
    // Also with one earlier position and one later one asked with it.
    if (i > 0 && i + 1 < all.size()) {
      EXPECT_EQ(KeysAt(root, tokens, {all[0], all[i], all.back()})[1], together[i]);
    }
  }
  // Tokens past the position do not matter.
  std::vector<int32_t> shorter(tokens.begin(), tokens.begin() + 100);
  EXPECT_EQ(KeysAt(root, shorter, {100})[0], together[5]);
}

TEST(SnapshotKeyTest, AllPositionsOfOnePromptHaveDistinctKeys) {
  const std::vector<int32_t> tokens = ReferenceTokens();
  std::vector<int64_t> all;
  for (int64_t p = 1; p <= 150; ++p) all.push_back(p);
  const std::vector<SnapshotKey> keys = KeysAt(SnapshotRootKey(TestDomain()), tokens, all);
  absl::flat_hash_set<SnapshotKey> unique(keys.begin(), keys.end());
  EXPECT_EQ(unique.size(), keys.size());
}

TEST(SnapshotKeyTest, DifferentTokensGiveDifferentKeys) {
  const std::vector<int32_t> tokens = ReferenceTokens();
  const SnapshotKey root = SnapshotRootKey(TestDomain());
  for (size_t changed : {size_t{0}, size_t{63}, size_t{64}, size_t{129}}) {
    std::vector<int32_t> other = tokens;
    other[changed] += 1;
    const std::vector<SnapshotKey> a = KeysAt(root, tokens, {130, 150});
    const std::vector<SnapshotKey> b = KeysAt(root, other, {130, 150});
    EXPECT_NE(a[0], b[0]) << "token " << changed;
    EXPECT_NE(a[1], b[1]) << "token " << changed;
  }
}

// A 62-token tail is hashed with its u64 position; without a tag separating tail and block
// inputs it had the byte length of a full block (16 + 248 + 8 = 16 + 256), so a prefix of 64k+62
// tokens and one of 64(k+1) tokens ending in {p, 0} shared a key (fixed in snapshot_key.cc).
TEST(SnapshotKeyTest, TailKeyDoesNotCollideWithABlockKey) {
  const std::vector<int32_t> tokens = ReferenceTokens();
  const SnapshotKey root = SnapshotRootKey(TestDomain());
  for (int64_t p : {62, 126}) {
    std::vector<int32_t> other(tokens.begin(), tokens.begin() + p);
    other.push_back(static_cast<int32_t>(p));
    other.push_back(0);
    EXPECT_NE(KeysAt(root, tokens, {p})[0], KeysAt(root, other, {p + 2})[0]) << "p=" << p;
  }
}

TEST(SnapshotKeyTest, EveryDomainFieldChangesTheRoot) {
  const SnapshotDomain base = TestDomain();
  std::vector<SnapshotDomain> others(5, base);
  others[0].model_fingerprint[31] ^= 1;
  others[1].k_type = "f16";
  others[2].v_type = "q8_0";
  others[3].state_type = "bf16";
  others[4].page_tokens = 128;
  const std::vector<int32_t> tokens = ReferenceTokens();
  const SnapshotKey root = SnapshotRootKey(base);
  for (size_t i = 0; i < others.size(); ++i) {
    const SnapshotKey r = SnapshotRootKey(others[i]);
    EXPECT_NE(r, root) << "field " << i;
    EXPECT_NE(KeysAt(r, tokens, {64})[0], KeysAt(root, tokens, {64})[0]) << "field " << i;
  }
  // Strings are length-prefixed: moving a character between K and V types changes the root.
  SnapshotDomain a = base, b = base;
  a.k_type = "q8_0f";
  a.v_type = "16";
  EXPECT_NE(SnapshotRootKey(a), SnapshotRootKey(b));
}

TEST(SnapshotKeyTest, KeysAtRefusesBadPositions) {
  const std::vector<int32_t> tokens = ReferenceTokens();
  const SnapshotKey root = SnapshotRootKey(TestDomain());
  for (std::vector<int64_t> bad :
       std::vector<std::vector<int64_t>>{{0}, {151}, {-1}, {10, 10}, {20, 10}}) {
    EXPECT_FALSE(SnapshotKeysAt(root, tokens, bad).ok());
  }
  absl::StatusOr<std::vector<SnapshotKey>> none = SnapshotKeysAt(root, tokens, {});
  ASSERT_TRUE(none.ok());
  EXPECT_THAT(*none, IsEmpty());
}

TEST(SnapshotKeyTest, HexPrefixAndBytesRoundTrip) {
  SnapshotKey k;
  for (int i = 0; i < 16; ++i) k.bytes[i] = static_cast<uint8_t>(0xF0 + i);
  EXPECT_EQ(k.Hex(), "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff");
  EXPECT_EQ(k.Prefix64(), 0xF7F6F5F4F3F2F1F0ull);
  absl::StatusOr<SnapshotKey> back =
      SnapshotKeyFromBytes(std::string(reinterpret_cast<const char*>(k.bytes.data()), 16));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, k);
  EXPECT_FALSE(SnapshotKeyFromBytes("short").ok());
}

// SnapshotPositions, row by row against the rule in snapshot_key.h.
TEST(SnapshotPositionsTest, BoundariesOnly) {
  EXPECT_THAT(SnapshotPositions({5, 9}, 12, 0), ElementsAre(5, 9));
  // A boundary at the end of the prompt is kept; the prompt's end is not a boundary by itself.
  EXPECT_THAT(SnapshotPositions({5, 12}, 12, 0), ElementsAre(5, 12));
  EXPECT_THAT(SnapshotPositions({}, 12, 0), IsEmpty());
}

TEST(SnapshotPositionsTest, IntervalCountsFromEachSpanStart) {
  EXPECT_THAT(SnapshotPositions({}, 10, 4), ElementsAre(4, 8));
  // Span [0, 10) then [10, 30): 4, 8, 10, then 14, 18, 22, 26 (30 is the end, not a boundary).
  EXPECT_THAT(SnapshotPositions({10}, 30, 4), ElementsAre(4, 8, 10, 14, 18, 22, 26));
  // An interval point on a boundary appears once.
  EXPECT_THAT(SnapshotPositions({8}, 12, 4), ElementsAre(4, 8));
  // Short messages get no interval points.
  EXPECT_THAT(SnapshotPositions({3, 5, 7}, 8, 1024), ElementsAre(3, 5, 7));
  // Negative interval: none.
  EXPECT_THAT(SnapshotPositions({3}, 8, -1), ElementsAre(3));
}

TEST(SnapshotPositionsTest, BadBoundariesAreSkipped) {
  // 0, negative, past the end, repeated and going backwards.
  EXPECT_THAT(SnapshotPositions({0, -4, 5, 5, 3, 12, 7, 40}, 10, 0), ElementsAre(5, 7));
  EXPECT_THAT(SnapshotPositions({0, 3, 2}, 10, 4), ElementsAre(3, 7));
  EXPECT_THAT(SnapshotPositions({1, 2}, 0, 4), IsEmpty());
}

TEST(SnapshotPositionsTest, HugeIntervalDoesNotOverflow) {
  EXPECT_THAT(SnapshotPositions({5}, 10, INT64_MAX), ElementsAre(5));
  EXPECT_THAT(SnapshotPositions({INT32_MAX}, INT64_MAX, INT64_MAX - 1), ElementsAre(INT32_MAX));
}

}  // namespace
}  // namespace deltaserve::common
