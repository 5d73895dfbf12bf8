// common/sha256 against the FIPS 180-4 example digests (NIST's "SHA256.pdf" examples: "abc" and
// the 448-bit two-block message; the empty string's well-known digest) and against OpenSSL's
// SHA256() as an independent implementation, on every length 0..300 and on split updates.
#include "common/sha256.h"

#include <openssl/sha.h>

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace deltaserve::common {
namespace {

std::string Hex(const std::array<uint8_t, 32>& d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

std::array<uint8_t, 32> Of(std::string_view s) {
  return Sha256(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

TEST(Sha256Test, FipsExamples) {
  EXPECT_EQ(Hex(Of("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex(Of("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, EqualsOpenSslOnEveryLengthAndSplit) {
  std::mt19937 rng(42);
  std::vector<uint8_t> data(300);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  for (size_t n = 0; n <= data.size(); ++n) {
    std::array<uint8_t, 32> want;
    SHA256(data.data(), n, want.data());
    EXPECT_EQ(Sha256(absl::MakeConstSpan(data.data(), n)), want) << "length " << n;
    // The same bytes fed in two pieces split at every 7th position.
    for (size_t cut = 0; cut <= n; cut += 7) {
      Sha256Hasher h;
      h.Update(data.data(), cut);
      h.Update(data.data() + cut, n - cut);
      EXPECT_EQ(h.Finish(), want) << "length " << n << " cut " << cut;
    }
  }
}

}  // namespace
}  // namespace deltaserve::common
