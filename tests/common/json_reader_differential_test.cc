// common/json_reader.h's own lexer against nlohmann::json::parse, the independent reference:
// on hundreds of thousands of generated inputs — random sequences of JSON fragments (structural
// characters, literals and their prefixes, number pieces, escapes, surrogates, well- and
// ill-formed UTF-8, control bytes, a BOM) and single-byte mutations of valid documents — both
// accept the same inputs and build the same document. The libFuzzer target
// tests/fuzz/json_reader_fuzz.cc checks the same property on inputs it evolves.

#include "tests/common/json_reader_differential.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace deltaserve::common {
namespace {

const std::vector<std::string>& Fragments() {
  // clang-format off
  static const std::vector<std::string> f = {
      "{", "}", "[", "]", ",", ":", "\"", "\"a\"", "\"k\":", "\\", "\\\"", "\\n", "\\/", "\\u",
      "\\u00e9", "\\ud83d", "\\ude00", "\\uD800\\uDC00", "\\x", "0", "1", "9", "-", ".", "e",
      "E", "+", "12345678901234567890", "-9223372036854775809", "1e400", "1e-400", "true",
      "tru", "false", "null", "nul", " ", "\n", "\t", "\r", "\x01", "\x7f", "\xC3\xA9",
      "\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xEF\xBF\xBF", "\xF0\x9F\x98\x80",
      "\xF4\x90\x80\x80", "\xF8", "\x80", "\xC3", "\xEF\xBB\xBF", "'", "/*", "#"};
  // clang-format on
  return f;
}

const std::vector<std::string>& ValidDocuments() {
  static const std::vector<std::string> d = {
      R"({"model":"m","messages":[{"role":"user","content":"h\u00e9\n"}],"n":1,"t":0.5})",
      R"([1,-1,0,-0,0.0,-0.0,1e3,1E-3,18446744073709551615,18446744073709551616,-9223372036854775808])",
      R"({"a":{"b":[true,false,null,{}],"c":"\ud83d\ude00"},"a":[[]],"":"\"\\\/\b\f\r\t"})",
      "\xEF\xBB\xBF{\"bom\":1}",
      " \t\n\r[ \"x\" , { \"y\" : 2 } ] \n",
      "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"",
  };
  return d;
}

TEST(JsonReaderDifferentialTest, FragmentSequencesAgreeWithNlohmann) {
  std::mt19937_64 rng(20261125);
  const auto& f = Fragments();
  int accepted = 0;
  constexpr int kCases = 200'000;
  for (int i = 0; i < kCases; ++i) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) text += f[rng() % f.size()];
    const std::string why = testing::JsonReaderDisagreement(text);
    ASSERT_EQ(why, "") << "input: "
                       << nlohmann::json(text).dump(-1, ' ', true,
                                                    nlohmann::json::error_handler_t::replace);
    accepted += nlohmann::json::accept(text);
  }
  // Both sides of the grammar are exercised, not only refusals.
  EXPECT_GT(accepted, kCases / 100);
}

TEST(JsonReaderDifferentialTest, MutatedDocumentsAgreeWithNlohmann) {
  std::mt19937_64 rng(7);
  int accepted = 0, cases = 0;
  for (const std::string& doc : ValidDocuments()) {
    ASSERT_EQ(testing::JsonReaderDisagreement(doc), "") << doc;
    for (int i = 0; i < 20'000; ++i, ++cases) {
      std::string text = doc;
      const size_t at = rng() % (text.size() + 1);
      switch (rng() % 3) {
        case 0:  // replace a byte
          if (at < text.size()) text[at] = static_cast<char>(rng() % 256);
          break;
        case 1:  // delete a byte
          if (at < text.size()) text.erase(at, 1);
          break;
        default:  // insert a fragment
          text.insert(at, Fragments()[rng() % Fragments().size()]);
      }
      const std::string why = testing::JsonReaderDisagreement(text);
      ASSERT_EQ(why, "") << "input: "
                         << nlohmann::json(text).dump(-1, ' ', true,
                                                      nlohmann::json::error_handler_t::replace);
      accepted += nlohmann::json::accept(text);
    }
  }
  EXPECT_GT(accepted, cases / 20);
}

TEST(JsonReaderDifferentialTest, SyntaxErrorsNameLineColumnAndByte) {
  absl::StatusOr<nlohmann::ordered_json> got =
      ReadOrderedJson("{\n  \"a\": tru\n}", kNoJsonReadLimits);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("line 2, column 8 (byte 9)"), std::string::npos)
      << got.status();
}

}  // namespace
}  // namespace deltaserve::common
