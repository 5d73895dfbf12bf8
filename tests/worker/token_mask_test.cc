// Token masks (worker/sampling/token_mask.h) on the real 151K Qwen3 vocabulary
// (../shared/golden/qwen3-vocab-qwen35pre.gguf): the trie spells every text token exactly as
// Tokenizer::Piece does, and the mask of every state met along sample documents equals the brute
// force — a copy of the matcher fed each token's bytes (AcceptBytes), for all 151K tokens — with
// the end-of-generation tokens allowed exactly in accepting states. The cache returns the same
// masks, counts hits, and stays correct under eviction.
#include "worker/sampling/token_mask.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/gguf_file.h"
#include "common/grammar/grammar.h"
#include "common/grammar/grammar_matcher.h"
#include "common/grammar/json_schema_compiler.h"
#include "common/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace deltaserve::worker {
namespace {

using common::Tokenizer;
using common::TokenType;
using namespace common::grammar;  // NOLINT: the grammar builder's vocabulary

class TokenMaskTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto file = common::GgufFile::Open(testing::GoldenPath("qwen3-vocab-qwen35pre.gguf"));
    ASSERT_TRUE(file.ok()) << file.status();
    auto tok = Tokenizer::FromGguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok).release();
    trie_ = new std::shared_ptr<const TokenTrie>(TokenTrie::Build(*tokenizer_));
  }
  static const Tokenizer& tok() { return *tokenizer_; }
  static const std::shared_ptr<const TokenTrie>& trie() { return *trie_; }

  static bool IsText(int32_t t) {
    const TokenType type = tok().Type(t);
    return !tok().IsEndOfGeneration(t) && type != TokenType::kControl &&
           type != TokenType::kUnused && type != TokenType::kUnknown && !tok().Piece(t).empty();
  }

  // The brute force: every token tried on a copy of the matcher.
  static void ExpectMaskIsBruteForce(const GrammarMatcher& m, const TokenMask& mask,
                                     const std::string& where) {
    ASSERT_EQ(mask.n_vocab(), tok().vocab_size());
    int mismatches = 0;
    for (int32_t t = 0; t < tok().vocab_size() && mismatches < 5; ++t) {
      bool expected;
      if (tok().IsEndOfGeneration(t)) {
        expected = m.IsAccepting();
      } else if (!IsText(t)) {
        expected = false;
      } else {
        GrammarMatcher copy = m;
        expected = copy.AcceptBytes(tok().Piece(t));
      }
      if (mask.Has(t) != expected) {
        ++mismatches;
        ADD_FAILURE() << where << ": token " << t << " \"" << tok().Piece(t) << "\" expected "
                      << expected;
      }
    }
  }

  static inline Tokenizer* tokenizer_ = nullptr;
  static inline std::shared_ptr<const TokenTrie>* trie_ = nullptr;
};

// {"name": "<string>", "age": <int>, "tags": [<string>, ...]} with optional single spaces, strings
// of any UTF-8 text (multi-byte sequences as byte classes) or \" \\ \n escapes.
std::shared_ptr<CompiledGrammar> PersonGrammar() {
  GrammarBuilder b;
  const RuleId ws = b.Repeat("ws", {b.Bytes(ByteClass::Of(' '))}, 0, 1);
  ByteClass plain = ByteClass::Range(0x20, 0x7f);
  plain.Remove('"');
  plain.Remove('\\');
  ByteClass cont = ByteClass::Range(0x80, 0xbf);
  const RuleId ch = b.Choice(
      "char", {{b.Bytes(plain)},
               {b.Bytes(ByteClass::Range(0xc2, 0xdf)), b.Bytes(cont)},
               {b.Bytes(ByteClass::Range(0xe1, 0xef)), b.Bytes(cont), b.Bytes(cont)},
               {b.Bytes(ByteClass::Of('\\')), b.Bytes([] {
                  ByteClass e = ByteClass::Of('"');
                  e.Add('\\');
                  e.Add('n');
                  return e;
                }())}});
  const RuleId chars = b.Star("chars", {Symbol::Rule(ch)});
  const RuleId str = b.AddRule("string");
  b.AddAlternative(str, {b.Bytes(ByteClass::Of('"')), Symbol::Rule(chars),
                         b.Bytes(ByteClass::Of('"'))});
  const RuleId digits = b.Repeat("digits", {b.Bytes(ByteClass::Range('0', '9'))}, 0, 3);
  const RuleId integer = b.Choice(
      "int", {b.Literal("0"), {b.Bytes(ByteClass::Range('1', '9')), Symbol::Rule(digits)}});
  const RuleId more = b.Star("more", [&] {
    Alternative a = b.Literal(",");
    a.push_back(Symbol::Rule(ws));
    a.push_back(Symbol::Rule(str));
    return a;
  }());
  const RuleId tags = b.Choice("tags", {b.Literal("[]"), [&] {
                                          Alternative a = b.Literal("[");
                                          a.push_back(Symbol::Rule(str));
                                          a.push_back(Symbol::Rule(more));
                                          a.push_back(b.Bytes(ByteClass::Of(']')));
                                          return a;
                                        }()});
  const RuleId root = b.AddRule("root");
  Alternative alt = b.Literal("{\"name\":");
  for (Symbol s : {Symbol::Rule(ws), Symbol::Rule(str)}) alt.push_back(s);
  for (Symbol s : b.Literal(", \"age\":")) alt.push_back(s);
  for (Symbol s : {Symbol::Rule(ws), Symbol::Rule(integer)}) alt.push_back(s);
  for (Symbol s : b.Literal(", \"tags\":")) alt.push_back(s);
  for (Symbol s : {Symbol::Rule(ws), Symbol::Rule(tags), b.Bytes(ByteClass::Of('}'))}) {
    alt.push_back(s);
  }
  b.AddAlternative(root, alt);
  auto g = std::move(b).Build(root);
  EXPECT_TRUE(g.ok()) << g.status();
  return std::make_shared<CompiledGrammar>(*std::move(g));
}

// yes|no|maybe, then optionally "!" — small masks, accepting states with continuations.
std::shared_ptr<CompiledGrammar> AnswerGrammar() {
  GrammarBuilder b;
  const RuleId word = b.Choice("word", {b.Literal("yes"), b.Literal("no"), b.Literal("maybe")});
  const RuleId bang = b.Optional("bang", b.Literal("!"));
  const RuleId root = b.AddRule("root");
  b.AddAlternative(root, {Symbol::Rule(word), Symbol::Rule(bang)});
  auto g = std::move(b).Build(root);
  EXPECT_TRUE(g.ok()) << g.status();
  return std::make_shared<CompiledGrammar>(*std::move(g));
}

TEST_F(TokenMaskTest, TrieSpellsEveryTextTokenOnce) {
  const TokenTrie& t = *trie();
  EXPECT_EQ(t.n_vocab(), tok().vocab_size());
  std::vector<int> seen(tok().vocab_size(), 0);
  std::string path;
  for (size_t i = 0; i < t.nodes().size(); ++i) {
    const TokenTrie::Node& n = t.nodes()[i];
    ASSERT_GE(n.depth, 1);
    ASSERT_LE(n.depth, path.size() + 1) << "node " << i;
    ASSERT_GT(n.subtree_end, i);
    path.resize(n.depth - 1);
    path += static_cast<char>(n.byte);
    if (n.token >= 0) {
      ASSERT_EQ(path, tok().Piece(n.token)) << "token " << n.token;
      ++seen[n.token];
    }
  }
  for (const auto& [token, same] : t.duplicates()) {
    EXPECT_EQ(tok().Piece(token), tok().Piece(same));
    ++seen[token];
  }
  int text_tokens = 0;
  for (int32_t id = 0; id < tok().vocab_size(); ++id) {
    EXPECT_EQ(seen[id], IsText(id) ? 1 : 0) << "token " << id;
    text_tokens += IsText(id);
  }
  EXPECT_GT(text_tokens, 150000);
  EXPECT_EQ(t.end_tokens().size(), 5u);  // <|endoftext|> <|im_end|> <|fim_pad|> ...
  EXPECT_NE(std::find(t.end_tokens().begin(), t.end_tokens().end(), tok().Find("<|im_end|>")),
            t.end_tokens().end());
}

TEST_F(TokenMaskTest, MaskEqualsBruteForceAlongADocument) {
  auto g = PersonGrammar();
  const std::string doc = "{\"name\": \"Zo\xc3\xab \\\"Z\\\" \xe4\xb8\x96\", \"age\":42, "
                          "\"tags\": [\"a\", \"bc\",\"\"]}";
  GrammarMatcher m(g);
  TokenMask mask;
  for (size_t i = 0; i <= doc.size(); ++i) {
    ComputeTokenMask(*trie(), m, mask);
    ExpectMaskIsBruteForce(m, mask, "after " + doc.substr(0, i));
    if (i < doc.size()) {
      ASSERT_TRUE(m.AcceptByte(doc[i])) << doc.substr(0, i + 1);
    }
  }
  EXPECT_TRUE(m.IsAccepting());
  EXPECT_TRUE(mask.Has(tok().Find("<|im_end|>")));
  EXPECT_FALSE(g->exhausted());
}

TEST_F(TokenMaskTest, SmallMasksAndEndTokens) {
  auto g = AnswerGrammar();
  GrammarMatcher m(g);
  TokenMask mask;
  for (const char* prefix : {"", "y", "ye", "yes", "yes!", "m", "mayb", "no"}) {
    GrammarMatcher at = m;
    ASSERT_TRUE(at.AcceptBytes(prefix));
    ComputeTokenMask(*trie(), at, mask);
    ExpectMaskIsBruteForce(at, mask, prefix);
    EXPECT_EQ(mask.Has(tok().eos_id()), at.IsAccepting()) << prefix;
  }
  ComputeTokenMask(*trie(), m, mask);
  EXPECT_TRUE(mask.Has(tok().Encode("yes", false)[0]));
  EXPECT_FALSE(mask.Has(tok().Encode(" yes", false)[0]));
  // A dead matcher allows nothing at all.
  GrammarMatcher dead = m;
  dead.set_state(kDeadState);
  ComputeTokenMask(*trie(), dead, mask);
  EXPECT_EQ(mask.Count(), 0);
}

TEST_F(TokenMaskTest, CacheReturnsTheSameMasksAndCountsHits) {
  auto g = PersonGrammar();
  TokenMaskCache cache(trie(), 64 << 20);
  // A long string value: every position inside it is the same state.
  const std::string doc = "{\"name\":\"" + std::string(40, 'x') + "\"";
  GrammarMatcher m(g);
  TokenMask expected;
  for (char ch : doc) {
    const TokenMask& got = cache.Get(m);
    ComputeTokenMask(*trie(), m, expected);
    ASSERT_TRUE(std::equal(got.words().begin(), got.words().end(), expected.words().begin()));
    ASSERT_TRUE(m.AcceptByte(ch));
  }
  EXPECT_GE(cache.hits(), 38u);
  EXPECT_EQ(cache.hits() + cache.misses(), doc.size());
}

TEST_F(TokenMaskTest, CacheStaysCorrectUnderEvictionAndAcrossGrammars) {
  TokenMaskCache tiny(trie(), 1);  // room for one mask
  auto person = PersonGrammar();
  auto answer = AnswerGrammar();
  GrammarMatcher p(person), a(answer);
  ASSERT_TRUE(a.AcceptBytes("no"));
  TokenMask expected;
  for (int round = 0; round < 3; ++round) {
    for (GrammarMatcher* m : {&p, &a}) {
      const TokenMask& got = tiny.Get(*m);
      ComputeTokenMask(*trie(), *m, expected);
      ASSERT_TRUE(std::equal(got.words().begin(), got.words().end(), expected.words().begin()));
    }
  }
  EXPECT_EQ(tiny.hits(), 0u);  // each Get evicted the other grammar's mask
  // A grammar freed while its masks are cached: a new grammar never sees them.
  TokenMaskCache cache(trie(), 64 << 20);
  {
    auto g = AnswerGrammar();
    cache.Get(GrammarMatcher(g));
  }
  for (int i = 0; i < 4; ++i) {
    auto g = PersonGrammar();
    GrammarMatcher m(g);
    const TokenMask& got = cache.Get(m);
    ComputeTokenMask(*trie(), m, expected);
    ASSERT_TRUE(std::equal(got.words().begin(), got.words().end(), expected.words().begin()));
  }
}

// The cache computes masks through loop indexes (string content, keys, pattern loops) and chains
// (maxLength counters); the plain walk (ComputeTokenMask, checked against the brute force above)
// must agree at every step of documents and of random allowed-token walks, and the brute force
// itself at a sample of steps.
TEST_F(TokenMaskTest, CachedMasksThroughLoopsAndChainsEqualThePlainWalk) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {R"({"type":"object","properties":{"name":{"type":"string"},"note":{"type":"string",
          "maxLength":5},"long":{"type":"string","minLength":2,"maxLength":30},"code":{"type":
          "string","pattern":"^[a-z]+-[0-9]{2,4}$"},"kind":{"enum":["alpha","beta"]},"mail":
          {"type":"string","format":"email"},"when":{"type":"string","format":"date-time"}},
          "required":["name"]})",
       {R"({"name": "Zoë \"q\" 世界 ok", "note": "abcde", "long": "0123456789 héllo wörld 12345", "code": "abc-123", "kind": "beta", "mail": "a.b@example.org", "when": "2026-11-25T08:00:00Z"})",
        R"({"name":"","note":"","long":"ab","extra":[1,{"x":null}]})"}},
      {R"({"type":"array","items":{"type":"string","maxLength":20},"maxItems":3})",
       {R"(["short", "a bit longer text", "世界世界世界"])"}},
  };
  std::mt19937 rng(7);
  TokenMaskCache cache(trie(), 256 << 20);
  TokenMask plain;
  int steps = 0;
  for (const auto& [schema, docs] : cases) {
    auto grammar = CompileJsonSchema(schema);
    ASSERT_TRUE(grammar.ok()) << grammar.status();
    auto g = std::make_shared<CompiledGrammar>(*std::move(grammar));
    auto check = [&](const GrammarMatcher& m, const std::string& where) {
      const TokenMask& got = cache.Get(m);
      ComputeTokenMask(*trie(), m, plain);
      ASSERT_TRUE(std::equal(got.words().begin(), got.words().end(), plain.words().begin()))
          << where << ": " << got.Count() << " tokens, plain walk " << plain.Count();
      if (steps++ % 16 == 0) ExpectMaskIsBruteForce(m, got, where);
    };
    for (const std::string& doc : docs) {
      GrammarMatcher m(g);
      for (common::TokenId t : tok().Encode(doc, false)) {
        check(m, doc.substr(0, 40));
        ASSERT_TRUE(m.AcceptBytes(tok().Piece(t))) << doc;
      }
      EXPECT_TRUE(m.IsAccepting()) << doc;
    }
    for (int walk = 0; walk < 6; ++walk) {  // random allowed tokens
      GrammarMatcher m(g);
      for (int k = 0; k < 40; ++k) {
        check(m, "random walk");
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < plain.n_vocab(); ++t) {
          if (plain.Has(t) && !tok().IsEndOfGeneration(t)) allowed.push_back(t);
        }
        if (allowed.empty()) break;
        ASSERT_TRUE(m.AcceptBytes(tok().Piece(allowed[rng() % allowed.size()])));
      }
    }
    EXPECT_FALSE(g->exhausted());
  }
  // All three ways were taken (strings loop, maxLength counts, structure by first byte).
  EXPECT_GT(cache.miss_kinds().loop, 0u);
  EXPECT_GT(cache.miss_kinds().chain, 0u);
  EXPECT_GT(cache.miss_kinds().by_first_byte, 0u);
}

}  // namespace
}  // namespace deltaserve::worker
