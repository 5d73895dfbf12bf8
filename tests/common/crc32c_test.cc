// CRC-32C (common/crc32c.h): the standard check value, known answers from RFC 3720 (iSCSI)
// appendix B.4, and the hardware path (three interleaved chains) agreeing with the table path
// at many lengths and alignments.
#include "common/crc32c.h"

#include <cstdint>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace deltaserve::common {
namespace {

absl::Span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Crc32cTest, CheckValue) {
  EXPECT_EQ(Crc32c(Bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(internal::Crc32cExtendPortable(0, Bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc32c({}), 0u);
}

// RFC 3720 B.4: 32 bytes of zeros, of 0xFF, ascending 0..31 and descending 31..0.
TEST(Crc32cTest, Rfc3720Vectors) {
  std::vector<uint8_t> v(32, 0);
  EXPECT_EQ(Crc32c(v), 0x8A9136AAu);
  std::fill(v.begin(), v.end(), 0xFF);
  EXPECT_EQ(Crc32c(v), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) v[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(v), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) v[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(v), 0x113FDB5Cu);
}

TEST(Crc32cTest, PathsAgreeAndExtendConcatenates) {
  std::vector<uint8_t> data(100000);  // past three 4 KiB stripes of the hardware path
  uint32_t x = 12345;
  for (uint8_t& b : data) {
    x = x * 1103515245 + 12345;
    b = static_cast<uint8_t>(x >> 16);
  }
  for (size_t start : {0, 1, 3, 7}) {
    for (size_t len = 0; start + len <= data.size(); len += (len < 40 ? 1 : 997)) {
      absl::Span<const uint8_t> s = absl::MakeConstSpan(data).subspan(start, len);
      const uint32_t whole = Crc32c(s);
      ASSERT_EQ(internal::Crc32cExtendPortable(0, s), whole) << start << "+" << len;
      const size_t cut = len / 3;
      ASSERT_EQ(Crc32cExtend(Crc32c(s.subspan(0, cut)), s.subspan(cut)), whole);
    }
  }
  for (size_t len : {12287, 12288, 12289, 24576 + 5, 36864}) {
    absl::Span<const uint8_t> s = absl::MakeConstSpan(data).subspan(1, len);
    ASSERT_EQ(Crc32c(s), internal::Crc32cExtendPortable(0, s)) << len;
  }
}

}  // namespace
}  // namespace deltaserve::common
