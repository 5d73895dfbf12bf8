// GPT-2 byte-level alphabet: the reversible map from each of the 256 byte values to a printable
// code point, in which byte-level BPE vocabularies store their tokens (" world" is "Ġworld").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deltaserve::common {

// The code point byte `b` is written as: printable Latin-1 bytes (0x21-0x7E, 0xA1-0xAC,
// 0xAE-0xFF) map to themselves, the other 68 bytes to U+0100 + n in increasing byte order.
uint32_t ByteToCodepoint(uint8_t b);

// UTF-8 text of `bytes` in the byte-level alphabet.
std::string ByteLevelEncode(std::string_view bytes);

// Raw bytes of byte-level text `text`. A code point outside the alphabet (possible only in a
// malformed vocabulary) is kept as its own UTF-8.
std::string ByteLevelDecode(std::string_view text);

}  // namespace deltaserve::common
