#include "common/routing_trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/crc32c.h"

namespace deltaserve::common {
namespace {

RoutingTraceHeader SmallHeader() {
  RoutingTraceHeader h;
  h.n_layer = 3;
  h.n_expert = 16;
  h.k = 2;
  h.model_name = "synthetic-qwen3.5-35b-a3b";
  for (size_t i = 0; i < h.fingerprint.size(); ++i) h.fingerprint[i] = static_cast<uint8_t>(i + 1);
  return h;
}

// ids [n_layer][n_tokens][k]: a pattern where each value is distinct per (layer, token, j).
std::vector<int32_t> Ids(const RoutingTraceHeader& h, int64_t n_tokens, int salt) {
  std::vector<int32_t> ids;
  for (int64_t l = 0; l < h.n_layer; ++l) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t j = 0; j < h.k; ++j) {
        ids.push_back(static_cast<int32_t>((salt + 5 * l + 3 * t + j) % h.n_expert));
      }
    }
  }
  return ids;
}

class RoutingTraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("routing_trace_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void WriteAll(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }

  // A trace of three passes (1, 3 and 2 tokens), written by RoutingTraceWriter.
  std::string WriteThreePasses(const std::string& name) {
    const RoutingTraceHeader h = SmallHeader();
    auto w = RoutingTraceWriter::Create(Path(name), h);
    EXPECT_TRUE(w.ok()) << w.status();
    const int64_t tokens[] = {1, 3, 2};
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE((*w)->Append(Ids(h, tokens[i], i), tokens[i], h.k).ok());
    }
    EXPECT_EQ((*w)->steps_written(), 3u);
    EXPECT_TRUE((*w)->Close().ok());
    return Path(name);
  }

  std::filesystem::path dir_;
};

TEST_F(RoutingTraceTest, WriterAndReaderRoundTrip) {
  const std::string path = WriteThreePasses("t.trace");
  absl::StatusOr<RoutingTrace> t = ReadRoutingTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->header, SmallHeader());
  ASSERT_EQ(t->steps.size(), 3u);
  const int64_t tokens[] = {1, 3, 2};
  uint64_t last_time = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t->steps[i].index, static_cast<uint64_t>(i));
    EXPECT_EQ(t->steps[i].n_tokens, tokens[i]);
    EXPECT_EQ(t->steps[i].ids, Ids(SmallHeader(), tokens[i], i));
    EXPECT_GE(t->steps[i].time_us, last_time);
    last_time = t->steps[i].time_us;
  }
  // The size is the layout's: header, then per record 24 + 2 * ids + 4 bytes.
  const uint64_t ids = 3 * 2 * (1 + 3 + 2);
  EXPECT_EQ(std::filesystem::file_size(path), 128 + 3 * (24 + 4) + 2 * ids);
  EXPECT_EQ(t->truncated_tail_bytes, 0u);
}

TEST_F(RoutingTraceTest, HeaderBytesFollowTheLayout) {
  RoutingTraceHeader h = SmallHeader();
  absl::StatusOr<std::string> b = EncodeRoutingTraceHeader(h);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 128u);
  EXPECT_EQ(std::memcmp(b->data(), "DSROUTE\0", 8), 0);
  auto u32 = [&](size_t off) {
    uint32_t v;
    std::memcpy(&v, b->data() + off, 4);
    return v;
  };
  EXPECT_EQ(u32(8), 1u);
  EXPECT_EQ(u32(12), 128u);
  EXPECT_EQ(u32(16), 3u);
  EXPECT_EQ(u32(20), 16u);
  EXPECT_EQ(u32(24), 2u);
  EXPECT_EQ(u32(28), 2u);
  EXPECT_EQ(static_cast<uint8_t>((*b)[32]), 1);
  EXPECT_EQ(std::string(b->data() + 64), h.model_name);
  EXPECT_EQ(u32(124),
            Crc32c(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(b->data()), 124)));
}

TEST_F(RoutingTraceTest, LongModelNamesAreCutTo56Bytes) {
  RoutingTraceHeader h = SmallHeader();
  h.model_name = std::string(80, 'm');
  ASSERT_TRUE(RoutingTraceWriter::Create(Path("long.trace"), h).ok());
  absl::StatusOr<RoutingTrace> t = ReadRoutingTrace(Path("long.trace"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->header.model_name, std::string(56, 'm'));
  EXPECT_TRUE(t->steps.empty());
}

TEST_F(RoutingTraceTest, ReaderSeesOnlyWhatWasWrittenBeforeOpen) {
  const RoutingTraceHeader h = SmallHeader();
  auto w = RoutingTraceWriter::Create(Path("live.trace"), h);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append(Ids(h, 1, 0), 1, h.k).ok());
  // Each Append is flushed: a reader opened now sees the pass.
  auto r = RoutingTraceReader::Open(Path("live.trace"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*w)->Append(Ids(h, 1, 1), 1, h.k).ok());
  RoutingStep step;
  EXPECT_TRUE(*(*r)->Next(step));
  EXPECT_FALSE(*(*r)->Next(step));
}

TEST_F(RoutingTraceTest, WriterRefusesBadPassesAndWritesNothing) {
  const RoutingTraceHeader h = SmallHeader();
  auto w = RoutingTraceWriter::Create(Path("bad.trace"), h);
  ASSERT_TRUE(w.ok());
  const uint64_t bytes = (*w)->bytes_written();

  std::vector<int32_t> ids = Ids(h, 2, 0);
  ids[2 * 2 * 1 + 1 * 2 + 1] = 16;  // layer 1, token 1, j 1
  absl::Status s = (*w)->Append(ids, 2, h.k);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "layer 1 token 1: expert id 16 is not in [0, 16)"))
      << s;
  ids[2 * 2 * 1 + 1 * 2 + 1] = -1;
  EXPECT_FALSE((*w)->Append(ids, 2, h.k).ok());

  EXPECT_TRUE(absl::StrContains((*w)->Append(Ids(h, 2, 0), 3, h.k).message(), "expected"));
  EXPECT_TRUE(absl::StrContains((*w)->Append(Ids(h, 2, 0), 2, 4).message(), "k 4"));
  // A pass of no tokens (nothing to record) is not an error.
  EXPECT_TRUE((*w)->Append({}, 0, h.k).ok());
  EXPECT_EQ((*w)->bytes_written(), bytes);
  EXPECT_EQ((*w)->steps_written(), 0u);

  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->Append(Ids(h, 1, 0), 1, h.k).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::filesystem::file_size(Path("bad.trace")), bytes);
}

TEST_F(RoutingTraceTest, WriterRefusesShapesBeyondTheLimits) {
  RoutingTraceHeader h = SmallHeader();
  h.n_expert = 40000;
  EXPECT_EQ(RoutingTraceWriter::Create(Path("x.trace"), h).status().code(),
            absl::StatusCode::kInvalidArgument);
  h = SmallHeader();
  h.k = 17;
  EXPECT_TRUE(absl::StrContains(RoutingTraceWriter::Create(Path("x.trace"), h).status().message(),
                                "k 17 is not in [1, 16]"));
  EXPECT_FALSE(RoutingTraceWriter::Create(Path("no/such/dir/x.trace"), SmallHeader()).ok());
}

TEST_F(RoutingTraceTest, MissingFileIsNotFound) {
  absl::StatusOr<RoutingTrace> t = ReadRoutingTrace(Path("absent.trace"));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "absent.trace"));
}

// Every cut of a valid trace: inside the header it is not a trace; on a record boundary it is
// a shorter valid trace; inside a record it is DataLoss, or the complete records when a cut tail
// is allowed.
TEST_F(RoutingTraceTest, EveryTruncationIsRefusedOrIsARecordBoundary) {
  const std::string full = ReadAll(WriteThreePasses("full.trace"));
  const size_t record_ends[] = {128, 128 + 28 + 12, 128 + 2 * 28 + 12 + 36, full.size()};
  for (size_t cut = 0; cut < full.size(); ++cut) {
    SCOPED_TRACE(cut);
    WriteAll(Path("cut.trace"), full.substr(0, cut));
    absl::StatusOr<RoutingTrace> t = ReadRoutingTrace(Path("cut.trace"));
    size_t complete = 0;
    while (complete + 1 < std::size(record_ends) && record_ends[complete + 1] <= cut) ++complete;
    if (cut < 128) {
      EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_TRUE(absl::StrContains(t.status().message(), "not a routing trace"));
      continue;
    }
    if (cut == record_ends[complete]) {
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->steps.size(), complete);
      continue;
    }
    EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(absl::StrContains(
        t.status().message(),
        "record " + std::to_string(complete) + " at byte " + std::to_string(record_ends[complete])))
        << t.status();
    absl::StatusOr<RoutingTrace> tolerant =
        ReadRoutingTrace(Path("cut.trace"), {.allow_truncated_tail = true});
    ASSERT_TRUE(tolerant.ok()) << tolerant.status();
    EXPECT_EQ(tolerant->steps.size(), complete);
    EXPECT_EQ(tolerant->truncated_tail_bytes, cut - record_ends[complete]);
  }
}

// Corrupt bytes: recomputing the CRCs lets the edit reach the field checks behind them.
class RoutingTraceCorruptionTest : public RoutingTraceTest {
 protected:
  void SetUp() override {
    RoutingTraceTest::SetUp();
    bytes_ = ReadAll(WriteThreePasses("ok.trace"));
  }
  static void PutU32(std::string& b, size_t off, uint32_t v) { std::memcpy(b.data() + off, &v, 4); }
  static uint32_t Crc(const std::string& b, size_t off, size_t n) {
    return Crc32c(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(b.data()) + off, n));
  }
  static void FixHeaderCrc(std::string& b) { PutU32(b, 124, Crc(b, 0, 124)); }
  // The first record: 1 token, 3 layers x k 2 ids: 24 + 12 bytes, then its CRC.
  static void FixFirstRecordCrc(std::string& b) { PutU32(b, 128 + 36, Crc(b, 128, 36)); }

  absl::Status Read(const std::string& b) {
    WriteAll(Path("corrupt.trace"), b);
    return ReadRoutingTrace(Path("corrupt.trace")).status();
  }
  std::string bytes_;
};

TEST_F(RoutingTraceCorruptionTest, HeaderFields) {
  std::string b = bytes_;
  b[0] = 'X';
  EXPECT_TRUE(absl::StrContains(Read(b).message(), "no DSROUTE magic"));
  b = bytes_;
  b[70] ^= 1;  // model name
  EXPECT_TRUE(absl::StrContains(Read(b).message(), "header's checksum"));
  b = bytes_;
  PutU32(b, 8, 2);
  EXPECT_TRUE(absl::StrContains(Read(b).message(), "format version 2"));
  struct Case {
    size_t offset;
    uint32_t value;
    const char* message;
  };
  const Case cases[] = {
      {16, 0, "n_layer 0 is not in [1, 4096]"},
      {16, 0xFFFFFFFF, "n_layer 4294967295 is not in [1, 4096]"},
      {20, 32769, "n_expert 32769 is not in [1, 32768]"},
      {24, 0, "k 0 is not in [1, 16]"},
      {28, 4, "ids of 4 bytes"},
      {12, 64, "header size 64"},
      {120, 1, "reserved"},
  };
  for (const Case& c : cases) {
    b = bytes_;
    PutU32(b, c.offset, c.value);
    FixHeaderCrc(b);
    absl::Status s = Read(b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(s.message(), c.message)) << s;
  }
}

TEST_F(RoutingTraceCorruptionTest, RecordFields) {
  std::string b = bytes_;
  b[128 + 24] ^= 1;  // an id byte: the CRC catches it
  EXPECT_TRUE(absl::StrContains(Read(b).message(), "record 0 at byte 128: checksum"));

  b = bytes_;
  b[128] = 'X';
  EXPECT_TRUE(absl::StrContains(Read(b).message(), "no STEP tag"));

  // An absurd token count is refused before anything is allocated for it.
  for (uint32_t n : {0u, (1u << 20) + 1, 0xFFFFFFFFu}) {
    b = bytes_;
    PutU32(b, 128 + 4, n);
    EXPECT_TRUE(absl::StrContains(Read(b).message(), " tokens is not in [1, 1048576]"));
  }
  // A plausible one that the file cannot hold is a cut record.
  b = bytes_;
  PutU32(b, 128 + 4, 1u << 20);
  EXPECT_EQ(Read(b).code(), absl::StatusCode::kDataLoss);

  // An id out of range behind a valid CRC: layer 2 (ids 8..11 of the record), token 0, j 1.
  b = bytes_;
  const int16_t bad = 16;
  std::memcpy(b.data() + 128 + 24 + 2 * (2 * 2 + 1), &bad, 2);
  FixFirstRecordCrc(b);
  absl::Status s = Read(b);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "layer 2 token 0: expert id 16 is not in [0, 16)"))
      << s;
  const int16_t negative = -3;
  std::memcpy(b.data() + 128 + 24, &negative, 2);
  FixFirstRecordCrc(b);
  EXPECT_TRUE(absl::StrContains(Read(b).message(), "expert id -3"));
}

TEST_F(RoutingTraceCorruptionTest, AnErrorIsStickyAndTheReaderFromBytesAgrees) {
  std::string b = bytes_;
  b[128 + 24] ^= 1;
  auto r = RoutingTraceReader::FromBytes(b);
  ASSERT_TRUE(r.ok());
  RoutingStep step;
  EXPECT_FALSE((*r)->Next(step).ok());
  EXPECT_FALSE((*r)->Next(step).ok());
  EXPECT_EQ((*r)->offset(), 128u);

  auto good = RoutingTraceReader::FromBytes(bytes_);
  ASSERT_TRUE(good.ok());
  int n = 0;
  while (*(*good)->Next(step)) ++n;
  EXPECT_EQ(n, 3);
  EXPECT_EQ(RoutingTraceReader::FromBytes("DSROUTE").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ZipfExpertRanksTest, PermutationsThatDifferByLayerAndTopicAndRepeatBySeed) {
  const std::vector<int32_t> a = ZipfExpertRanks(1, 0, 0, 256);
  std::vector<int32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int32_t i = 0; i < 256; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_NE(a, ZipfExpertRanks(1, 1, 0, 256));
  EXPECT_NE(a, ZipfExpertRanks(1, 0, 1, 256));
  EXPECT_EQ(a, ZipfExpertRanks(1, 0, 0, 256));
}

}  // namespace
}  // namespace deltaserve::common
