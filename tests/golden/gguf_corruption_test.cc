// GgufFile against damaged copies of the golden GGUF files: every file truncated at each 4 KiB
// boundary, and seeded random byte flips, most of them on the bytes the parser interprets (header,
// key/value framing, tensor infos), some anywhere. Each variant must either be refused with a
// message naming the file or parse into a consistent file: every tensor's bytes inside the
// buffer, every name and key findable, every metadata value readable. Run under ASan (the asan
// preset), a read past the end of a truncated image is caught: the bytes after the cut are
// poisoned.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gguf_file.h"
#include "common/gguf_writer.h"
#include "common/str_util.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DELTASERVE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define DELTASERVE_ASAN 1
#endif
#ifdef DELTASERVE_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace deltaserve::common {
namespace {

// Marks [p, p + n) unreadable under ASan (a no-op otherwise).
void Poison(const uint8_t* p, size_t n) {
#ifdef DELTASERVE_ASAN
  ASAN_POISON_MEMORY_REGION(p, n);
#else
  (void)p;
  (void)n;
#endif
}
void Unpoison(const uint8_t* p, size_t n) {
#ifdef DELTASERVE_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, n);
#else
  (void)p;
  (void)n;
#endif
}

std::vector<uint8_t> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<uint8_t> bytes(in ? static_cast<size_t>(in.tellg()) : 0);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

// Reads every element of `v` (recursively) and returns a checksum so the reads are not elided.
uint64_t TouchValue(const GgufValue& v) {
  uint64_t sum = v.DebugString(4).size();
  if (!v.is_array()) return sum;
  for (uint64_t i = 0; i < v.ArraySize(); ++i) {
    switch (v.array_type()) {
      case GgufValueType::kString:
        sum += v.ArrayString(i).value().size();
        break;
      case GgufValueType::kArray:
        sum += TouchValue(*v.ArrayItem(i));
        break;
      default:
        sum += static_cast<uint64_t>(v.ArrayDouble(i).value() != 0);
        break;
    }
  }
  return sum;
}

// The first inconsistency of a parsed file against the buffer it was parsed from, or "".
std::string Inconsistency(const GgufFile& f, absl::Span<const uint8_t> buf) {
  if (f.file_size() != buf.size()) return "file_size differs from the buffer";
  // A file without tensors may end before its (aligned) data section would start.
  if ((!f.tensors().empty() && f.data_offset() > buf.size()) || f.data_offset() % f.alignment()) {
    return absl::StrCat("data offset ", f.data_offset());
  }
  for (const GgufKeyValue& kv : f.metadata()) {
    if (f.Find(kv.key) != &kv.value) return absl::StrCat("key '", Sv(kv.key), "' not findable");
    TouchValue(kv.value);
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::string what = absl::StrCat("tensor '", Sv(t.name), "'");
    if (f.FindTensor(t.name) != &t) return what + " not findable";
    if (t.n_dims < 1 || t.n_dims > kGgufMaxDims) return what + " has a bad rank";
    absl::StatusOr<uint64_t> n_bytes =
        GgufTensorByteSize(t.type, absl::MakeConstSpan(t.ne.data(), t.n_dims));
    if (!n_bytes.ok() || *n_bytes != t.n_bytes) return what + " has an inconsistent byte size";
    if (t.offset < f.data_offset() || t.offset % f.alignment() != 0 || t.offset > buf.size() ||
        t.n_bytes > buf.size() - t.offset) {
      return absl::StrCat(what, " spans [", t.offset, ", +", t.n_bytes, ") of ", buf.size());
    }
    absl::Span<const uint8_t> data = f.TensorData(t);
    if (data.data() != buf.data() + t.offset || data.size() != t.n_bytes) {
      return what + " view is not at its offset";
    }
    if (!data.empty()) {
      volatile uint8_t edge = data.front() ^ data.back();  // ASan checks both ends
      (void)edge;
    }
  }
  return "";
}

// Parses `buf`; an error must name the file, a success must be consistent. Returns true when
// the variant parsed.
bool CheckVariant(absl::Span<const uint8_t> buf, const std::string& name,
                  const std::string& variant) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBuffer(buf, name);
  if (!f.ok()) {
    EXPECT_NE(std::string(f.status().message()).find(name), std::string::npos)
        << variant << ": " << f.status();
    return false;
  }
  EXPECT_EQ(Inconsistency(**f, buf), "") << variant;
  return true;
}

struct Golden {
  const char* file;
  int parse_region_flips;  // variants with flips before the tensor data
  int anywhere_flips;      // variants with flips anywhere in the file
};

// 3,040 flip variants in all. The vocabulary file gets fewer because each parse walks its
// 300k strings (about 7 ms under ASan, against 1 ms for a tiny model's metadata).
constexpr Golden kGoldens[] = {
    {"tiny-dense-f32.gguf", 600, 100},       {"tiny-moe-f32.gguf", 600, 100},
    {"tiny-dense-q8_0.gguf", 600, 100},      {"tiny-dense-q4_k_m.gguf", 600, 100},
    {"qwen3-vocab-qwen35pre.gguf", 200, 40},
};

class GgufCorruptionTest : public ::testing::TestWithParam<Golden> {
 protected:
  void SetUp() override {
    bytes_ = ReadWholeFile(deltaserve::testing::GoldenPath(GetParam().file));
    ASSERT_GT(bytes_.size(), 0u);
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBuffer(bytes_, "clean");
    ASSERT_TRUE(f.ok()) << f.status();
    data_offset_ = (*f)->data_offset();
    for (const GgufTensorInfo& t : (*f)->tensors()) {
      data_end_ = std::max(data_end_, t.offset + t.n_bytes);
    }
    data_end_ = std::max(data_end_, data_offset_);
    // The bytes the parser decides on: the header, each key/value's framing (key length, key,
    // type and an array's element type and count) and the tensor infos.
    hot_.push_back({0, 24});
    for (const GgufKeyValue& kv : (*f)->metadata()) {
      const uint64_t key_at = Offset(kv.key.data()) - 8;
      hot_.push_back(
          {key_at, std::min<uint64_t>(key_at + 8 + kv.key.size() + 4 + 12, data_offset_)});
    }
    if (!(*f)->tensors().empty()) {
      hot_.push_back({Offset((*f)->tensors().front().name.data()) - 8, data_offset_});
    }
  }

  uint64_t Offset(const char* p) const {
    return static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(p) - bytes_.data());
  }

  // A position the parser reads: half the time in a hot range, else anywhere before the data.
  uint64_t ParsePosition(std::mt19937_64& rng) const {
    if (rng() % 2 == 0) {
      const auto& [begin, end] = hot_[rng() % hot_.size()];
      return begin + rng() % (end - begin);
    }
    return rng() % data_offset_;
  }

  std::vector<uint8_t> bytes_;
  uint64_t data_offset_ = 0;
  uint64_t data_end_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> hot_;
};

TEST_P(GgufCorruptionTest, EveryFourKibTruncationIsRefusedOrConsistent) {
  const std::string name = absl::StrCat("cut-", GetParam().file);
  int refused = 0;
  for (uint64_t cut = 0; cut < bytes_.size(); cut += 4096) {
    // Poison what follows the cut (64 KiB is far beyond any single field read).
    const uint64_t poisoned = std::min<uint64_t>(bytes_.size() - cut, 64 * 1024);
    Poison(bytes_.data() + cut, poisoned);
    const bool parsed =
        CheckVariant(absl::MakeConstSpan(bytes_.data(), cut), name, absl::StrCat("cut at ", cut));
    Unpoison(bytes_.data() + cut, poisoned);
    // A prefix that lacks any byte of metadata, tensor infos or tensor data must be refused.
    if (cut < data_end_) {
      EXPECT_FALSE(parsed) << "cut at " << cut;
    }
    refused += parsed ? 0 : 1;
  }
  EXPECT_EQ(refused,
            static_cast<int>((std::min<uint64_t>(data_end_, bytes_.size()) + 4095) / 4096));
}

TEST_P(GgufCorruptionTest, RandomByteFlipsAreRefusedOrConsistent) {
  const Golden& g = GetParam();
  const std::string name = absl::StrCat("flipped-", g.file);
  std::mt19937_64 rng(0x5EED0000u + bytes_.size());  // fixed seed per file: reproducible
  int parsed = 0, refused = 0;
  for (int v = 0; v < g.parse_region_flips + g.anywhere_flips; ++v) {
    const bool anywhere = v >= g.parse_region_flips;
    std::vector<std::pair<uint64_t, uint8_t>> flips(1 + rng() % 3);
    bool touches_parse_region = false;
    for (auto& [pos, mask] : flips) {
      pos = anywhere ? rng() % bytes_.size() : ParsePosition(rng);
      mask = static_cast<uint8_t>(1 + rng() % 255);
      touches_parse_region |= pos < data_offset_;
    }
    std::string variant = absl::StrCat(g.file, " variant ", v, ":");
    for (const auto& [pos, mask] : flips) {
      absl::StrAppend(&variant, " byte ", pos, " ^= ", mask);
      bytes_[pos] ^= mask;
    }
    const bool ok = CheckVariant(bytes_, name, variant);
    // Tensor data is never interpreted by the parser: damage there cannot make a file fail.
    if (!touches_parse_region) {
      EXPECT_TRUE(ok) << variant;
    }
    (ok ? parsed : refused) += 1;
    for (auto it = flips.rbegin(); it != flips.rend(); ++it) bytes_[it->first] ^= it->second;
  }
  // Both outcomes must occur, or the flips are not reaching the parser's decisions.
  EXPECT_GT(refused, g.parse_region_flips / 10) << "parsed " << parsed;
  EXPECT_GT(parsed, 0) << "refused " << refused;
  RecordProperty("parsed", parsed);
  RecordProperty("refused", refused);
}

INSTANTIATE_TEST_SUITE_P(Golden, GgufCorruptionTest, ::testing::ValuesIn(kGoldens),
                         [](const ::testing::TestParamInfo<Golden>& info) {
                           std::string n = info.param.file;
                           n = n.substr(0, n.find(".gguf"));
                           std::replace_if(
                               n.begin(), n.end(),
                               [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); },
                               '_');
                           return n;
                         });

}  // namespace
}  // namespace deltaserve::common
