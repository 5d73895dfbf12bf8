// libFuzzer target for the byte-level BPE tokenizer and the streaming detokenizer, on the tiny
// golden vocabulary (2,048 tokens of tiny-dense-f32.gguf, loaded once from
// $DELTASERVE_GOLDEN_DIR). For each input:
//  - as text, with parse_special on and off: every id is in the vocabulary, and when the input
//    is valid UTF-8, Decode(Encode(x)) == x (byte-level BPE loses nothing) and streaming the ids
//    through StreamingDetokenizer yields x again, in chunks that are each valid UTF-8;
//  - as a sequence of 16-bit ids (some out of range): every streamed chunk is valid UTF-8.
// UTF-8 validity is judged by an independent validator here and compared with IsValidUtf8.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/gguf_file.h"
#include "common/streaming_detokenizer.h"
#include "common/tokenizer.h"
#include "common/unicode.h"

namespace deltaserve::common {
namespace {

[[noreturn]] void Fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "tokenizer_fuzz: %s (input of %zu bytes)\n", what, input.size());
  std::abort();
}

// Well-formed UTF-8 per Unicode 15 table 3-7: shortest form, no surrogates, <= U+10FFFF.
bool WellFormedUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
    const uint8_t c = b(0);
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    if (len > 1 && (b(1) < lo || b(1) > hi)) return false;
    for (size_t k = 2; k < len; ++k) {
      if (b(k) < 0x80 || b(k) > 0xBF) return false;
    }
    i += len;
  }
  return true;
}

const Tokenizer& GoldenTokenizer() {
  static const Tokenizer* tokenizer = [] {
    const char* env = std::getenv("DELTASERVE_GOLDEN_DIR");
    const std::string dir = env != nullptr && *env != '\0' ? env : DELTASERVE_DEFAULT_GOLDEN_DIR;
    const std::string path = dir + "/tiny-dense-f32.gguf";
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
    if (!file.ok()) {
      std::fprintf(stderr, "tokenizer_fuzz: %s\n", std::string(file.status().message()).c_str());
      std::abort();
    }
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
    if (!tok.ok()) {
      std::fprintf(stderr, "tokenizer_fuzz: %s\n", std::string(tok.status().message()).c_str());
      std::abort();
    }
    return tok->release();  // lives for the whole run; the GGUF mapping is no longer needed
  }();
  return *tokenizer;
}

// Streams `ids` and returns the concatenated output; every chunk must be valid UTF-8.
std::string Stream(const Tokenizer& tok, const std::vector<TokenId>& ids, std::string_view input) {
  StreamingDetokenizer detok(tok);
  std::string all;
  for (TokenId id : ids) {
    const std::string chunk = detok.Push(id);
    if (!WellFormedUtf8(chunk)) Fail("streamed chunk is not valid UTF-8", input);
    if (detok.pending_bytes() > 3) Fail("more than 3 bytes held back", input);
    all += chunk;
  }
  const std::string tail = detok.Flush();
  if (!WellFormedUtf8(tail)) Fail("flushed tail is not valid UTF-8", input);
  return all + tail;
}

}  // namespace
}  // namespace deltaserve::common

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deltaserve::common;
  const Tokenizer& tok = GoldenTokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = WellFormedUtf8(text);
  if (valid != IsValidUtf8(text)) Fail("IsValidUtf8 disagrees with the reference validator", text);

  for (bool parse_special : {true, false}) {
    const std::vector<TokenId> ids = tok.Encode(text, parse_special);
    for (TokenId id : ids) {
      if (id < 0 || id >= tok.vocab_size()) Fail("Encode produced an id out of range", text);
    }
    const std::string decoded = tok.Decode(ids);
    if (valid && decoded != text) Fail("Decode(Encode(x)) != x for valid UTF-8 x", text);
    const std::string streamed = Stream(tok, ids, text);
    if (valid && streamed != text) Fail("streamed text != x for valid UTF-8 x", text);
    // EncodeMarked with nothing marked parses, with everything marked does not (issue 17).
    const std::vector<ByteRange> all = {{0, text.size()}};
    const std::vector<TokenId> marked =
        tok.EncodeMarked(text, parse_special ? std::vector<ByteRange>() : all);
    if (marked != ids) Fail("EncodeMarked differs from Encode with the same parsing", text);
  }
  // The second half as request text: ids stay in range, and valid text decodes back.
  const std::vector<ByteRange> half = {{size / 2, size}};
  const std::vector<TokenId> marked = tok.EncodeMarked(text, half);
  for (TokenId id : marked) {
    if (id < 0 || id >= tok.vocab_size()) Fail("EncodeMarked produced an id out of range", text);
  }
  if (valid && tok.Decode(marked) != text) Fail("Decode(EncodeMarked(x)) != x", text);

  // The same bytes as little-endian 16-bit ids, a few past the vocabulary.
  std::vector<TokenId> ids;
  for (size_t i = 0; i + 1 < size; i += 2) {
    ids.push_back(static_cast<TokenId>((data[i] | data[i + 1] << 8) % (tok.vocab_size() + 16)));
  }
  Stream(tok, ids, text);
  return 0;
}
