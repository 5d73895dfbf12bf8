// Unit tests of the tokenizer's parts on hand-built inputs: the GPT-2 byte alphabet, UTF-8
// handling, the qwen2/qwen35 pre-tokenizer split, BPE merge order, special-token cutting, and
// the streaming detokenizer. Expected values are derived by hand from the regexes in
// pre_tokenizer.h and from BPE's definition; the golden tests check the real vocabularies.
#include <string>
#include <vector>

#include "common/byte_level.h"
#include "common/pre_tokenizer.h"
#include "common/streaming_detokenizer.h"
#include "common/tokenizer.h"
#include "common/unicode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::common {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Split(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> pieces;
  PreTokenize(kind, text, pieces);
  return {pieces.begin(), pieces.end()};
}

TEST(ByteLevel, AlphabetIsABijectionOverAllBytes) {
  std::vector<bool> seen(0x200, false);
  for (int b = 0; b < 256; ++b) {
    const uint32_t c = ByteToCodepoint(static_cast<uint8_t>(b));
    ASSERT_LT(c, 0x200u);
    EXPECT_FALSE(seen[c]) << "byte " << b;
    seen[c] = true;
    const std::string one(1, static_cast<char>(b));
    EXPECT_EQ(ByteLevelDecode(ByteLevelEncode(one)), one);
  }
  // GPT-2's well-known spellings: space is U+0120 'Ġ', newline U+010A 'Ċ', 'a' itself.
  EXPECT_EQ(ByteToCodepoint(' '), 0x120u);
  EXPECT_EQ(ByteToCodepoint('\n'), 0x10Au);
  EXPECT_EQ(ByteToCodepoint('a'), static_cast<uint32_t>('a'));
  EXPECT_EQ(ByteLevelEncode(" world"), "\xC4\xA0world");
}

TEST(Unicode, ClassesComeFromUnicodeData) {
  EXPECT_EQ(CodepointClass('a'), kClassLetter);
  EXPECT_EQ(CodepointClass(0x4E16), kClassLetter);  // 世, Lo
  EXPECT_EQ(CodepointClass('7'), kClassNumber);
  EXPECT_EQ(CodepointClass(0x00BD), kClassNumber);  // ½, No
  EXPECT_EQ(CodepointClass(0x0301), kClassMark);    // combining acute, Mn
  EXPECT_EQ(CodepointClass(0x093E), kClassMark);    // Devanagari sign AA, Mc
  EXPECT_EQ(CodepointClass(' '), kClassWhitespace);
  EXPECT_EQ(CodepointClass(0x00A0), kClassWhitespace);  // no-break space
  EXPECT_EQ(CodepointClass(0x3000), kClassWhitespace);  // ideographic space
  EXPECT_EQ(CodepointClass(0x200B), 0);  // zero-width space is Cf, not White_Space
  EXPECT_EQ(CodepointClass('!'), 0);
  EXPECT_EQ(CodepointClass(0x110000), 0);
}

TEST(Unicode, MalformedBytesDecodeToReplacementOneByteAtATime) {
  const std::string bad = "a\x80\xE4\xB8z\xF5";
  size_t pos = 0;
  std::vector<uint32_t> cpts;
  while (pos < bad.size()) cpts.push_back(DecodeUtf8(bad, pos));
  EXPECT_THAT(cpts, ElementsAre('a', kReplacementChar, kReplacementChar, kReplacementChar, 'z',
                                kReplacementChar));
  EXPECT_FALSE(IsValidUtf8(bad));
  EXPECT_TRUE(IsValidUtf8("ok \xE4\xB8\x96"));
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate D800
  EXPECT_EQ(SanitizeUtf8("a\xFFz"), "a\xEF\xBF\xBDz");
  EXPECT_EQ(Utf8SequenceLength("\xF0\x9F\xA6", 0), -1);  // incomplete 4-byte prefix
  EXPECT_EQ(Utf8SequenceLength("\xF0\x9F\xA6\x99", 0), 4);
  EXPECT_EQ(Utf8SequenceLength("\xF0\x41", 0), 0);
}

TEST(PreTokenizer, WordsTakeOneLeadingNonLetter) {
  EXPECT_THAT(Split(PreTokenizerKind::kQwen35, "Hello, my world"),
              ElementsAre("Hello", ",", " my", " world"));
  EXPECT_THAT(Split(PreTokenizerKind::kQwen35, "(x)"), ElementsAre("(x", ")"));
}

TEST(PreTokenizer, ContractionsAreCaseInsensitivePieces) {
  EXPECT_THAT(Split(PreTokenizerKind::kQwen35, "don't WE'LL I'Ve"),
              ElementsAre("don", "'t", " WE", "'LL", " I", "'Ve"));
}

TEST(PreTokenizer, DigitsAreSinglePieces) {
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "a 123"), ElementsAre("a", " ", "1", "2", "3"));
}

TEST(PreTokenizer, WhitespaceRunsLeaveLastBlankToNextWord) {
  // \s+(?!\S) stops one short of a non-space; at the end of text it takes the whole run.
  EXPECT_THAT(Split(PreTokenizerKind::kQwen35, "a   b  "), ElementsAre("a", "  ", " b", "  "));
  // \s*[\r\n]+ ends at the last newline of the run.
  EXPECT_THAT(Split(PreTokenizerKind::kQwen35, "a \n\n b"), ElementsAre("a", " \n\n", " b"));
}

TEST(PreTokenizer, PunctuationRunsTakeOneLeadingSpaceAndTrailingNewlines) {
  EXPECT_THAT(Split(PreTokenizerKind::kQwen35, "x ...!!\n\ny"),
              ElementsAre("x", " ...!!\n\n", "y"));
}

TEST(PreTokenizer, Qwen35KeepsCombiningMarksInWords) {
  const std::string decomposed = "cafe\xCC\x81 ok";  // e + U+0301
  EXPECT_THAT(Split(PreTokenizerKind::kQwen35, decomposed), ElementsAre("cafe\xCC\x81", " ok"));
  // qwen2 has no \p{M} in words: the mark becomes a piece of its own.
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, decomposed),
              ElementsAre("cafe", "\xCC\x81", " ok"));
}

TEST(PreTokenizer, PiecesConcatenateToInput) {
  const std::string text = "  日本語のテキスト 🦙🦙 x=1;\r\n\tdef f(): return 'a'  \n";
  for (auto kind : {PreTokenizerKind::kQwen2, PreTokenizerKind::kQwen35}) {
    std::string joined;
    for (const std::string& p : Split(kind, text)) {
      EXPECT_FALSE(p.empty());
      joined += p;
    }
    EXPECT_EQ(joined, text);
  }
}

// A vocabulary of the 256 byte tokens plus a few merges, to check BPE's order.
TokenizerVocab SmallVocab() {
  TokenizerVocab v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(ByteLevelEncode(std::string(1, char(b))));
  // Merges by rank: "a a" first, then "b c", then "aa b", then "Ġ a".
  v.merges = {"a a", "b c", "aa b", "\xC4\xA0 a"};
  for (const char* t : {"aa", "bc", "aab", "\xC4\xA0" "a"}) v.tokens.push_back(t);
  v.tokens.push_back("<|ctl|>");
  v.tokens.push_back("<user>");
  v.tokens.push_back("<|ctl|>x");  // a longer control token that overlaps <|ctl|>
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  v.types[260] = TokenType::kControl;
  v.types[261] = TokenType::kUserDefined;
  v.types[262] = TokenType::kControl;
  v.pre = "qwen35";
  return v;
}

TEST(TokenizerBpe, LowestRankMergesFirstAndTiesGoLeft) {
  auto tok = Tokenizer::Create(SmallVocab());
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "aaa": "a a" at positions 0 and 1 tie in rank; the left one merges -> [aa][a].
  EXPECT_THAT((*tok)->Encode("aaa", true), ElementsAre(256, 'a'));
  // "aab": "a a" (rank 0), then "aa b" (rank 2) -> [aab].
  EXPECT_THAT((*tok)->Encode("aab", true), ElementsAre(258));
  // "aabc": after [aa], "b c" (rank 1) beats "aa b" (rank 2) -> [aa][bc].
  EXPECT_THAT((*tok)->Encode("aabc", true), ElementsAre(256, 257));
  // "abc": only "b c" applies.
  EXPECT_THAT((*tok)->Encode("abc", true), ElementsAre('a', 257));
  EXPECT_EQ((*tok)->Decode((*tok)->Encode("aabc abc", true)), "aabc abc");
}

TEST(TokenizerSpecials, ControlTokensOnlyWithParseSpecialUserDefinedAlways) {
  auto tok = Tokenizer::Create(SmallVocab());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT((*tok)->Encode("<|ctl|>", true), ElementsAre(260));
  const std::vector<TokenId> plain = (*tok)->Encode("<|ctl|>", false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ((*tok)->Decode(plain), "<|ctl|>");
  EXPECT_THAT((*tok)->Encode("<user>", false), ElementsAre(261));
  // Longest special first: "<|ctl|>x" wins over "<|ctl|>".
  EXPECT_THAT((*tok)->Encode("<|ctl|>x<|ctl|>", true), ElementsAre(262, 260));
  EXPECT_EQ((*tok)->Piece(260), "<|ctl|>");
}

// EncodeMarked: a control token is matched only where its text lies wholly outside the
// untrusted ranges; inside them the bytes tokenize as Encode(..., false) does (user-defined
// tokens included). Expected ids are built from Encode of each piece: SmallVocab's pieces
// between specials tokenize independently, as the special-token partition does.
TEST(TokenizerSpecials, EncodeMarkedParsesControlTokensOnlyOutsideUntrustedRanges) {
  auto tok = Tokenizer::Create(SmallVocab());
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Tokenizer& t = **tok;
  auto concat = [](std::vector<std::vector<TokenId>> parts) {
    std::vector<TokenId> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  // "<|ctl|>ab<|ctl|>": the second control text is request text ([9, 16)).
  const std::string text = "<|ctl|>ab<|ctl|>";
  EXPECT_EQ(t.EncodeMarked(text, {{9, 16}}),
            concat({{260}, t.Encode("ab", false), t.Encode("<|ctl|>", false)}));
  // No ranges: exactly Encode(text, true); the whole text: exactly Encode(text, false).
  EXPECT_EQ(t.EncodeMarked(text, {}), t.Encode(text, true));
  EXPECT_EQ(t.EncodeMarked(text, {{0, text.size()}}), t.Encode(text, false));
  // A range that covers only part of a control text ("|>" of the first) still blocks it.
  EXPECT_EQ(t.EncodeMarked(text, {{5, 7}}), concat({t.Encode("<|ctl|>ab", false), {260}}));
  // The longer "<|ctl|>x" overlaps request text "x"; the template's "<|ctl|>" inside it is
  // still the control token.
  EXPECT_EQ(t.EncodeMarked("<|ctl|>x", {{7, 8}}), concat({{260}, t.Encode("x", false)}));
  // User-defined tokens match in request text too, as Encode(..., false) matches them.
  EXPECT_THAT(t.EncodeMarked("<user>", {{0, 6}}), ElementsAre(261));
  // Invalid UTF-8 before the range shifts offsets (U+FFFD is 3 bytes): the marks move with it.
  EXPECT_EQ(t.EncodeMarked("\xFF<|ctl|>", {{1, 8}}), t.Encode("\xFF<|ctl|>", false));
  EXPECT_EQ(t.EncodeMarked("\xFF<|ctl|>", {{0, 1}}), concat({t.Encode("\xFF", false), {260}}));
}

TEST(TokenizerRobustness, InvalidUtf8IsReadAsReplacementCharacters) {
  auto tok = Tokenizer::Create(SmallVocab());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Decode((*tok)->Encode("a\xFF" "b", true)), "a\xEF\xBF\xBD" "b");
  EXPECT_TRUE((*tok)->Encode("", true).empty());
  EXPECT_EQ((*tok)->Piece(-1), "");
  EXPECT_EQ((*tok)->Piece(1 << 20), "");
}

TEST(TokenizerCreate, RejectsUnknownPreTokenizerAndBadMerges) {
  TokenizerVocab v = SmallVocab();
  v.pre = "llama3";
  EXPECT_THAT(Tokenizer::Create(v).status().message(), ::testing::HasSubstr("llama3"));
  v = SmallVocab();
  v.merges.push_back("nospace");
  EXPECT_THAT(Tokenizer::Create(v).status().message(),
              ::testing::HasSubstr("tokenizer.ggml.merges"));
  v = SmallVocab();
  v.eos_id = 100000;
  EXPECT_FALSE(Tokenizer::Create(v).ok());
}

TEST(StreamingDetokenizer, HoldsBackSplitCharactersUntilComplete) {
  auto tok = Tokenizer::Create(SmallVocab());
  ASSERT_TRUE(tok.ok()) << tok.status();
  StreamingDetokenizer detok(**tok);
  // U+1F999 (llama) is F0 9F A6 99: four byte tokens.
  EXPECT_EQ(detok.Push('a'), "a");
  EXPECT_EQ(detok.Push(0xF0), "");
  EXPECT_EQ(detok.Push(0x9F), "");
  EXPECT_EQ(detok.Push(0xA6), "");
  EXPECT_EQ(detok.pending_bytes(), 3u);
  EXPECT_EQ(detok.Push(0x99), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(detok.pending_bytes(), 0u);
  // A byte that can never start a character is replaced at once.
  EXPECT_EQ(detok.Push(0xFF), "\xEF\xBF\xBD");
  // An unfinished character at the end becomes one U+FFFD.
  EXPECT_EQ(detok.Push(0xE4), "");
  EXPECT_EQ(detok.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(detok.Flush(), "");
}

TEST(StreamingDetokenizer, BrokenSequenceIsReplacedAndNextCharacterKept) {
  auto tok = Tokenizer::Create(SmallVocab());
  ASSERT_TRUE(tok.ok()) << tok.status();
  StreamingDetokenizer detok(**tok);
  EXPECT_EQ(detok.Push(0xE4), "");
  EXPECT_EQ(detok.Push('z'), "\xEF\xBF\xBDz");
}

}  // namespace
}  // namespace deltaserve::common
