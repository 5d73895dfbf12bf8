// Session-snapshot blobs (common/snapshot_format.h): round trips raw and with zstd, and each
// SnapshotRejectReason produced by a crafted blob (edited by the documented byte offsets,
// tests/common/snapshot_blob_edit.h), every truncation and every single-bit flip refused
// without a crash, and hostile size claims refused before anything large is allocated.
#include "common/snapshot_format.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/snapshot_blob_edit.h"

// The largest single allocation while `g_track_allocations` is set: proves that a hostile blob
// is refused before the decoder allocates what it claims. Replacing the global operator new is
// per program, and this test binary is the only user.
namespace {
std::atomic<bool> g_track_allocations{false};
std::atomic<size_t> g_largest_allocation{0};

void* TrackedAlloc(size_t n) {
  if (g_track_allocations.load(std::memory_order_relaxed)) {
    size_t prev = g_largest_allocation.load(std::memory_order_relaxed);
    while (n > prev && !g_largest_allocation.compare_exchange_weak(prev, n)) {
    }
  }
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(size_t n) { return TrackedAlloc(n); }
void* operator new[](size_t n) { return TrackedAlloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace deltaserve::common {
namespace {

using ::deltaserve::testing::GetLe;
using ::deltaserve::testing::kSnapOffFingerprint;
using ::deltaserve::testing::kSnapOffHeaderCrc;
using ::deltaserve::testing::kSnapOffKey;
using ::deltaserve::testing::kSnapOffKType;
using ::deltaserve::testing::kSnapOffNPages;
using ::deltaserve::testing::kSnapOffNTokens;
using ::deltaserve::testing::kSnapOffPageTokens;
using ::deltaserve::testing::kSnapOffStateBytes;
using ::deltaserve::testing::kSnapOffVersion;
using ::deltaserve::testing::PutLe;
using ::deltaserve::testing::Reseal;
using ::deltaserve::testing::SnapSectionField;

SnapshotDomain TestDomain() {
  SnapshotDomain d;
  for (int i = 0; i < 32; ++i) d.model_fingerprint[i] = static_cast<uint8_t>(100 + i);
  d.k_type = "q8_0";
  d.v_type = "f16";
  d.state_type = "f32";
  d.page_tokens = 4;
  return d;
}

// Two DeltaNet layers of 16 conv + 32 matrix bytes, two attention layers with 24-byte K pages
// and 16-byte V pages.
SnapshotLayout TestLayout() { return {2, 2, 96, 24, 16}; }

enum class Fill { kPattern, kZeros, kNoise };

// Owns the buffers that a SnapshotContents views, cut into parts the way a worker would: per
// layer conv then matrix; per attention layer and page, K then V.
struct TestSnapshot {
  SnapshotDomain domain = TestDomain();
  SnapshotLayout layout = TestLayout();
  std::vector<int32_t> tokens;
  std::vector<uint8_t> state;
  std::vector<uint8_t> kv;

  TestSnapshot(int n_tokens, Fill fill, SnapshotDomain d = TestDomain(),
               SnapshotLayout l = TestLayout())
      : domain(std::move(d)), layout(l) {
    for (int i = 0; i < n_tokens; ++i) tokens.push_back((i * 7919 + 3) % 151936);
    const uint64_t pages = SnapshotPages(layout, domain.page_tokens, n_tokens);
    state.resize(layout.state_bytes);
    kv.resize(*SnapshotKvBytes(layout, pages));
    uint32_t x = 777;
    for (std::vector<uint8_t>* v : {&state, &kv}) {
      for (size_t i = 0; i < v->size(); ++i) {
        x = x * 1664525 + 1013904223;
        (*v)[i] = fill == Fill::kZeros     ? 0
                  : fill == Fill::kPattern ? static_cast<uint8_t>(i % 7)
                                           : static_cast<uint8_t>(x >> 24);
      }
    }
  }

  SnapshotContents Contents() const {
    SnapshotContents c;
    c.domain = domain;
    c.key = KeyOf(domain, tokens);
    c.tokens = tokens;
    c.layout = layout;
    // Alternating 16- and 32-byte pieces (conv window, delta matrix), then K and V pages.
    AppendParts(state, 16, 32, c.state_parts);
    AppendParts(kv, layout.k_page_bytes, layout.v_page_bytes, c.kv_parts);
    return c;
  }

  SnapshotExpectation Expectation() const {
    SnapshotExpectation e;
    e.domain = domain;
    e.layout = layout;
    e.key = KeyOf(domain, tokens);
    return e;
  }

  static void AppendParts(const std::vector<uint8_t>& bytes, size_t a, size_t b,
                          std::vector<absl::Span<const uint8_t>>& parts) {
    bool first = true;
    for (size_t off = 0; off < bytes.size(); first = !first) {
      const size_t take = std::min(std::max<size_t>(first ? a : b, 1), bytes.size() - off);
      parts.push_back(absl::MakeConstSpan(bytes).subspan(off, take));
      off += take;
    }
  }

  static SnapshotKey KeyOf(const SnapshotDomain& d, const std::vector<int32_t>& t) {
    return SnapshotKeysAt(SnapshotRootKey(d), t, {static_cast<int64_t>(t.size())}).value()[0];
  }
};

std::string Encode(const TestSnapshot& s, SnapshotCompression c, int level = 1) {
  absl::StatusOr<std::string> blob = EncodeSnapshot(s.Contents(), c, level);
  EXPECT_TRUE(blob.ok()) << blob.status();
  return blob.ok() ? *blob : std::string();
}

SnapshotRejectReason ReasonOf(std::string_view blob, const SnapshotExpectation& e) {
  SnapshotRejectReason reason = SnapshotRejectReason::kNone;
  absl::StatusOr<DecodedSnapshot> d = DecodeSnapshot(blob, e, &reason);
  EXPECT_EQ(d.ok(), reason == SnapshotRejectReason::kNone) << d.status();
  if (!d.ok()) {
    EXPECT_FALSE(d.status().message().empty());
  }
  return reason;
}

void ExpectSameContents(const DecodedSnapshot& d, const TestSnapshot& s) {
  EXPECT_EQ(d.header.domain, s.domain);
  EXPECT_EQ(d.header.layout, s.layout);
  EXPECT_EQ(d.header.key, TestSnapshot::KeyOf(s.domain, s.tokens));
  EXPECT_EQ(d.header.n_tokens, static_cast<int64_t>(s.tokens.size()));
  EXPECT_EQ(d.tokens, s.tokens);
  EXPECT_EQ(std::vector<uint8_t>(d.state.begin(), d.state.end()), s.state);
  EXPECT_EQ(std::vector<uint8_t>(d.kv.begin(), d.kv.end()), s.kv);
}

TEST(SnapshotFormatTest, RoundTripRawHasTheDocumentedSize) {
  TestSnapshot s(10, Fill::kNoise);  // 3 pages of 4 tokens
  const std::string blob = Encode(s, SnapshotCompression::kNone);
  EXPECT_EQ(blob.size(), 256u + 10 * 4 + 96 + 2 * 3 * (24 + 16));
  EXPECT_EQ(blob.substr(0, 8), std::string("DSSNAP\0\0", 8));
  EXPECT_EQ(GetLe(blob, kSnapOffVersion, 4), 1u);
  EXPECT_EQ(GetLe(blob, kSnapOffNTokens, 8), 10u);
  EXPECT_EQ(GetLe(blob, kSnapOffNPages, 4), 3u);
  EXPECT_EQ(blob.substr(kSnapOffKType, 16), std::string("q8_0\0\0\0\0\0\0\0\0\0\0\0\0", 16));
  SnapshotRejectReason reason = SnapshotRejectReason::kFormat;
  absl::StatusOr<DecodedSnapshot> d = DecodeSnapshot(blob, s.Expectation(), &reason);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(reason, SnapshotRejectReason::kNone);
  ExpectSameContents(*d, s);
  EXPECT_EQ(d->header.stored_bytes, blob.size());
  EXPECT_EQ(d->header.raw_bytes, 40u + 96 + 240);
}

TEST(SnapshotFormatTest, RoundTripZstdCompressesWhatCompressesAndKeepsNoiseRaw) {
  for (Fill fill : {Fill::kPattern, Fill::kZeros, Fill::kNoise}) {
    TestSnapshot s(70, fill);  // crosses a 64-token key span; 18 pages
    const std::string raw = Encode(s, SnapshotCompression::kNone);
    const std::string blob = Encode(s, SnapshotCompression::kZstd);
    absl::StatusOr<DecodedSnapshot> d = DecodeSnapshot(blob, s.Expectation(), nullptr);
    ASSERT_TRUE(d.ok()) << d.status();
    ExpectSameContents(*d, s);
    const uint64_t kv_encoding = GetLe(blob, SnapSectionField(2, 16), 4);
    if (fill == Fill::kNoise) {
      EXPECT_EQ(kv_encoding, 0u) << "noise is stored raw";
    } else {
      EXPECT_EQ(kv_encoding, 1u);
      EXPECT_LT(blob.size(), raw.size());
    }
  }
}

// Zeros are zstd's best case (about 32,000x); the decoder's ratio bound must still accept them.
TEST(SnapshotFormatTest, LargeAllZeroSnapshotRoundTripsWithZstd) {
  SnapshotLayout layout{6, 2, 18u << 20, 64 << 10, 64 << 10};  // 18 MiB state, 128 KiB/page
  TestSnapshot s(1000, Fill::kZeros, TestDomain(), layout);
  SnapshotDomain d = TestDomain();
  d.page_tokens = 256;
  TestSnapshot t(1000, Fill::kZeros, d, layout);  // 4 pages a layer: 1 MiB of KV
  for (const TestSnapshot* x : {&s, &t}) {
    for (int level : {1, 3, 19}) {
      const std::string blob = Encode(*x, SnapshotCompression::kZstd, level);
      EXPECT_LT(blob.size(), 8192u);
      absl::StatusOr<DecodedSnapshot> dec = DecodeSnapshot(blob, x->Expectation(), nullptr);
      ASSERT_TRUE(dec.ok()) << dec.status();
      EXPECT_EQ(dec->state.size(), 18u << 20);
      ExpectSameContents(*dec, *x);
    }
  }
}

TEST(SnapshotFormatTest, PureAttentionAndPureRecurrentLayouts) {
  TestSnapshot attention(9, Fill::kNoise, TestDomain(), {0, 3, 0, 24, 16});
  TestSnapshot recurrent(9, Fill::kNoise, TestDomain(), {4, 0, 192, 0, 0});
  EXPECT_EQ(recurrent.kv.size(), 0u);
  for (const TestSnapshot* s : {&attention, &recurrent}) {
    for (SnapshotCompression c : {SnapshotCompression::kNone, SnapshotCompression::kZstd}) {
      absl::StatusOr<DecodedSnapshot> d = DecodeSnapshot(Encode(*s, c), s->Expectation(), nullptr);
      ASSERT_TRUE(d.ok()) << d.status();
      ExpectSameContents(*d, *s);
    }
  }
}

TEST(SnapshotFormatTest, ParseSnapshotHeaderReadsTheFields) {
  TestSnapshot s(10, Fill::kPattern);
  SnapshotRejectReason reason;
  absl::StatusOr<SnapshotHeader> h =
      ParseSnapshotHeader(Encode(s, SnapshotCompression::kZstd), &reason);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->domain, s.domain);
  EXPECT_EQ(h->layout, s.layout);
  EXPECT_EQ(h->n_tokens, 10);
  EXPECT_EQ(h->n_pages, 3u);
  EXPECT_EQ(h->key, TestSnapshot::KeyOf(s.domain, s.tokens));
}

TEST(SnapshotFormatTest, EncoderRefusesInconsistentContents) {
  TestSnapshot s(10, Fill::kPattern);
  SnapshotContents c = s.Contents();
  c.key.bytes[0] ^= 1;
  EXPECT_FALSE(EncodeSnapshot(c, SnapshotCompression::kNone).ok());
  c = s.Contents();
  c.state_parts.pop_back();
  EXPECT_FALSE(EncodeSnapshot(c, SnapshotCompression::kNone).ok());
  c = s.Contents();
  c.kv_parts.pop_back();
  EXPECT_FALSE(EncodeSnapshot(c, SnapshotCompression::kZstd).ok());
  c = s.Contents();
  c.domain.k_type = "a-type-name-of-17";
  EXPECT_FALSE(EncodeSnapshot(c, SnapshotCompression::kNone).ok());
  c = s.Contents();
  c.tokens = {};
  EXPECT_FALSE(EncodeSnapshot(c, SnapshotCompression::kNone).ok());
}

TEST(SnapshotFormatTest, ReasonNamesAreTheMetricLabels) {
  EXPECT_EQ(SnapshotRejectReasonName(SnapshotRejectReason::kNone), "none");
  EXPECT_EQ(SnapshotRejectReasonName(SnapshotRejectReason::kFormat), "format");
  EXPECT_EQ(SnapshotRejectReasonName(SnapshotRejectReason::kVersion), "version");
  EXPECT_EQ(SnapshotRejectReasonName(SnapshotRejectReason::kChecksum), "checksum");
  EXPECT_EQ(SnapshotRejectReasonName(SnapshotRejectReason::kModel), "model");
  EXPECT_EQ(SnapshotRejectReasonName(SnapshotRejectReason::kCacheTypes), "cache_types");
  EXPECT_EQ(SnapshotRejectReasonName(SnapshotRejectReason::kKey), "key");
  EXPECT_EQ(SnapshotRejectReasonName(SnapshotRejectReason::kLayout), "layout");
  EXPECT_EQ(SnapshotRejectReasonName(SnapshotRejectReason::kTooLarge), "too_large");
}

// Every single-bit flip anywhere is refused: in the magic as format, in the version as version,
// anywhere else (header fields, the header CRC, each section) as checksum.
TEST(SnapshotFormatTest, EveryBitFlipIsRefused) {
  for (SnapshotCompression c : {SnapshotCompression::kNone, SnapshotCompression::kZstd}) {
    TestSnapshot s(10, Fill::kPattern);
    const std::string blob = Encode(s, c);
    for (size_t i = 0; i < blob.size(); ++i) {
      for (int bit : {0, 3, 7}) {
        std::string bad = blob;
        bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
        const SnapshotRejectReason want = i < 8    ? SnapshotRejectReason::kFormat
                                          : i < 12 ? SnapshotRejectReason::kVersion
                                                   : SnapshotRejectReason::kChecksum;
        ASSERT_EQ(ReasonOf(bad, s.Expectation()), want) << "byte " << i << " bit " << bit;
      }
    }
  }
}

TEST(SnapshotFormatTest, EveryTruncationAndTrailingBytesAreFormat) {
  for (SnapshotCompression c : {SnapshotCompression::kNone, SnapshotCompression::kZstd}) {
    TestSnapshot s(10, Fill::kPattern);
    const std::string blob = Encode(s, c);
    for (size_t n = 0; n < blob.size(); ++n) {
      // A copy of exactly n bytes, so that ASan sees any read past it.
      const std::string cut = blob.substr(0, n);
      ASSERT_EQ(ReasonOf(cut, s.Expectation()), SnapshotRejectReason::kFormat) << n;
    }
    EXPECT_EQ(ReasonOf(blob + '\0', s.Expectation()), SnapshotRejectReason::kFormat);
  }
}

TEST(SnapshotFormatTest, OtherModelIsModel) {
  SnapshotDomain other = TestDomain();
  other.model_fingerprint[5] ^= 0x40;
  TestSnapshot foreign(10, Fill::kPattern, other);
  TestSnapshot mine(10, Fill::kPattern);
  SnapshotExpectation e = mine.Expectation();
  e.key.reset();
  EXPECT_EQ(ReasonOf(Encode(foreign, SnapshotCompression::kNone), e), SnapshotRejectReason::kModel);
}

TEST(SnapshotFormatTest, OtherCacheTypesOrPageSizeIsCacheTypes) {
  TestSnapshot mine(10, Fill::kPattern);
  SnapshotExpectation e = mine.Expectation();
  e.key.reset();
  std::vector<SnapshotDomain> others(4, TestDomain());
  others[0].k_type = "q4_0";
  others[1].v_type = "q8_0";
  others[2].state_type = "bf16";
  others[3].page_tokens = 8;
  for (const SnapshotDomain& d : others) {
    TestSnapshot foreign(10, Fill::kPattern, d);
    EXPECT_EQ(ReasonOf(Encode(foreign, SnapshotCompression::kZstd), e),
              SnapshotRejectReason::kCacheTypes)
        << d.k_type << " " << d.v_type << " " << d.state_type << " " << d.page_tokens;
  }
}

TEST(SnapshotFormatTest, OtherVersionIsVersionWhateverFollows) {
  TestSnapshot s(10, Fill::kPattern);
  const std::string blob = Encode(s, SnapshotCompression::kNone);
  for (uint32_t version : {0u, 2u, 0xFFFFFFFFu}) {
    std::string v = blob;
    PutLe(v, kSnapOffVersion, version, 4);
    EXPECT_EQ(ReasonOf(v, s.Expectation()), SnapshotRejectReason::kVersion);
    Reseal(v);
    EXPECT_EQ(ReasonOf(v, s.Expectation()), SnapshotRejectReason::kVersion);
    // A future version may have a shorter header: only the first 12 bytes are read.
    EXPECT_EQ(ReasonOf(v.substr(0, 12), s.Expectation()), SnapshotRejectReason::kVersion);
  }
}

TEST(SnapshotFormatTest, KeyNotOfTheTokensIsKey) {
  TestSnapshot s(10, Fill::kPattern);
  SnapshotExpectation any = s.Expectation();
  any.key.reset();
  // The header claims another prefix's key.
  std::string blob = Encode(s, SnapshotCompression::kNone);
  std::string claimed = blob;
  claimed[kSnapOffKey] ^= 1;
  Reseal(claimed);
  EXPECT_EQ(ReasonOf(claimed, any), SnapshotRejectReason::kKey);
  // The tokens were changed under the header's key.
  std::string changed = blob;
  changed[256 + 4 * 3] ^= 1;
  Reseal(changed);
  EXPECT_EQ(ReasonOf(changed, any), SnapshotRejectReason::kKey);
  EXPECT_EQ(ReasonOf(changed, s.Expectation()), SnapshotRejectReason::kKey);
}

TEST(SnapshotFormatTest, NotTheKeyAskedForIsKey) {
  TestSnapshot s(10, Fill::kPattern);
  TestSnapshot longer(11, Fill::kPattern);
  const std::string blob = Encode(s, SnapshotCompression::kZstd);
  SnapshotExpectation e = s.Expectation();
  e.key = TestSnapshot::KeyOf(longer.domain, longer.tokens);
  EXPECT_EQ(ReasonOf(blob, e), SnapshotRejectReason::kKey);
  e.key.reset();
  EXPECT_EQ(ReasonOf(blob, e), SnapshotRejectReason::kNone);
}

TEST(SnapshotFormatTest, OtherLayoutIsLayout) {
  TestSnapshot s(10, Fill::kPattern);
  const std::string blob = Encode(s, SnapshotCompression::kNone);
  for (int field = 0; field < 5; ++field) {
    SnapshotExpectation e = s.Expectation();
    switch (field) {
      case 0:
        e.layout.n_deltanet_layers += 1;
        break;
      case 1:
        e.layout.n_attention_layers -= 1;
        break;
      case 2:
        e.layout.state_bytes += 4;
        break;
      case 3:
        e.layout.k_page_bytes = 48;
        break;
      case 4:
        e.layout.v_page_bytes = 0;
        break;
    }
    EXPECT_EQ(ReasonOf(blob, e), SnapshotRejectReason::kLayout) << "field " << field;
  }
}

TEST(SnapshotFormatTest, OverTheCapIsTooLarge) {
  TestSnapshot s(10, Fill::kZeros);
  const std::string blob = Encode(s, SnapshotCompression::kZstd);
  SnapshotExpectation e = s.Expectation();
  e.max_decoded_bytes = 40 + 96 + 240;
  EXPECT_EQ(ReasonOf(blob, e), SnapshotRejectReason::kNone);
  e.max_decoded_bytes -= 1;
  EXPECT_EQ(ReasonOf(blob, e), SnapshotRejectReason::kTooLarge);
}

// A header that disagrees with itself (page count, token section size) is format, even resealed.
TEST(SnapshotFormatTest, InconsistentHeaderIsFormat) {
  TestSnapshot s(10, Fill::kPattern);
  const std::string blob = Encode(s, SnapshotCompression::kNone);
  const struct {
    size_t offset;
    uint64_t value;
    int bytes;
  } edits[] = {
      {kSnapOffNPages, 4, 4},           // 10 tokens of 4 a page are 3 pages
      {kSnapOffNTokens, 11, 8},         // the tokens section holds 10
      {kSnapOffNTokens, 0, 8},          // no tokens
      {kSnapOffPageTokens, 0, 8},       // division by zero if trusted
      {SnapSectionField(0, 16), 7, 4},  // unknown encoding
      {SnapSectionField(1, 8), 95, 8},  // raw section storing less than it holds
      {12, 128, 4},                     // header size
      {16, 1, 4},                       // flags
      {kSnapOffKType + 15, 'x', 1},     // bytes after a type name's NUL
  };
  for (const auto& edit : edits) {
    std::string bad = blob;
    PutLe(bad, edit.offset, edit.value, edit.bytes);
    Reseal(bad);
    EXPECT_EQ(ReasonOf(bad, s.Expectation()), SnapshotRejectReason::kFormat)
        << "offset " << edit.offset;
  }
}

// A few hundred bytes claiming gigabytes: refused by the length arithmetic, zstd's ratio bound,
// or the frame's own declared size, before any large allocation; the cap is set far above.
TEST(SnapshotFormatTest, HostileSizeClaimsDoNotAllocate) {
  TestSnapshot s(10, Fill::kZeros);
  const std::string zstd = Encode(s, SnapshotCompression::kZstd);
  ASSERT_EQ(GetLe(zstd, SnapSectionField(1, 16), 4), 1u) << "zero state compresses";
  const uint64_t kHuge = uint64_t{4} << 30;
  SnapshotExpectation e = s.Expectation();
  e.layout.state_bytes = kHuge;
  e.max_decoded_bytes = uint64_t{1} << 40;

  std::vector<std::string> hostile;
  // Raw state claiming 4 GiB: the blob is nowhere near that long.
  std::string raw = Encode(s, SnapshotCompression::kNone);
  PutLe(raw, kSnapOffStateBytes, kHuge, 8);
  PutLe(raw, SnapSectionField(1, 0), kHuge, 8);
  PutLe(raw, SnapSectionField(1, 8), kHuge, 8);
  hostile.push_back(raw);
  // A zstd state of a few bytes claiming 4 GiB: beyond any zstd frame's ratio.
  std::string ratio = zstd;
  PutLe(ratio, kSnapOffStateBytes, kHuge, 8);
  PutLe(ratio, SnapSectionField(1, 0), kHuge, 8);
  hostile.push_back(ratio);
  // Enough stored bytes for the ratio, but the frame declares 96 bytes, not 4 GiB.
  const uint64_t stored = GetLe(zstd, SnapSectionField(1, 8), 8);
  const size_t state_at = 256 + GetLe(zstd, SnapSectionField(0, 8), 8);
  std::string padded = zstd;
  const std::string filler(kHuge / 32768 + 1, '\0');
  padded.insert(state_at + stored, filler);
  PutLe(padded, kSnapOffStateBytes, kHuge, 8);
  PutLe(padded, SnapSectionField(1, 0), kHuge, 8);
  PutLe(padded, SnapSectionField(1, 8), stored + filler.size(), 8);
  hostile.push_back(padded);

  for (size_t i = 0; i < hostile.size(); ++i) {
    Reseal(hostile[i]);
    g_largest_allocation = 0;
    g_track_allocations = true;
    SnapshotRejectReason reason = SnapshotRejectReason::kNone;
    const bool ok = DecodeSnapshot(hostile[i], e, &reason).ok();
    g_track_allocations = false;
    EXPECT_FALSE(ok) << "case " << i;
    EXPECT_EQ(reason, SnapshotRejectReason::kFormat) << "case " << i;
    EXPECT_LT(g_largest_allocation.load(), size_t{1} << 20) << "case " << i;
  }

  // With the cap below the claim it is too_large, whatever else is wrong.
  e.max_decoded_bytes = uint64_t{1} << 30;
  EXPECT_EQ(ReasonOf(hostile[2], e), SnapshotRejectReason::kTooLarge);
}

TEST(SnapshotFormatTest, DecodedViewsSurviveAMove) {
  TestSnapshot s(10, Fill::kNoise);
  absl::StatusOr<DecodedSnapshot> d =
      DecodeSnapshot(Encode(s, SnapshotCompression::kNone), s.Expectation(), nullptr);
  ASSERT_TRUE(d.ok());
  DecodedSnapshot moved = std::move(*d);
  ExpectSameContents(moved, s);
}

}  // namespace
}  // namespace deltaserve::common
