#include "common/byte_level.h"

#include <array>

#include "common/unicode.h"

namespace deltaserve::common {
namespace {

constexpr bool IsPrintableByte(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<uint32_t, 256> kByteToCodepoint = [] {
  std::array<uint32_t, 256> map{};
  uint32_t next = 0x100;
  for (int b = 0; b < 256; ++b) map[b] = IsPrintableByte(b) ? b : next++;
  return map;
}();

// Inverse for code points below U+0144 (the largest one the map produces); -1 elsewhere.
constexpr std::array<int16_t, 0x144> kCodepointToByte = [] {
  std::array<int16_t, 0x144> inv{};
  for (auto& v : inv) v = -1;
  for (int b = 0; b < 256; ++b) inv[kByteToCodepoint[b]] = static_cast<int16_t>(b);
  return inv;
}();

}  // namespace

uint32_t ByteToCodepoint(uint8_t b) { return kByteToCodepoint[b]; }

std::string ByteLevelEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(kByteToCodepoint[static_cast<uint8_t>(c)], out);
  return out;
}

std::string ByteLevelDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const uint32_t cpt = DecodeUtf8(text, pos);
    if (cpt < kCodepointToByte.size() && kCodepointToByte[cpt] >= 0) {
      out += static_cast<char>(kCodepointToByte[cpt]);
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
  return out;
}

}  // namespace deltaserve::common
