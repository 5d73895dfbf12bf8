// GrammarMatcher (common/grammar/grammar_matcher.h): hand-written grammars whose languages are
// known (literals, alternatives, balanced brackets, nullable rules, repetition bounds), the
// all-or-nothing AcceptBytes, rollback, the limits; and an independent check: a memoised
// recursive-descent recognizer over the same Grammar, written here from the grammar's definition,
// agrees with the matcher on every string up to length 6 over {a,b,c} for random grammars.
#include "common/grammar/grammar_matcher.h"

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace deltaserve::common::grammar {
namespace {

std::shared_ptr<CompiledGrammar> Compile(GrammarBuilder b, RuleId root,
                                         const CompiledGrammarLimits& limits = {}) {
  auto g = std::move(b).Build(root);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  return std::make_shared<CompiledGrammar>(*std::move(g), limits);
}

// Whether the matcher accepts all of `text`, and whether it is then complete.
struct Outcome {
  bool alive;
  bool complete;
  bool operator==(const Outcome&) const = default;
};
Outcome Walk(const std::shared_ptr<CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  const bool alive = m.AcceptBytes(text);
  return {alive, alive && m.IsAccepting()};
}

TEST(GrammarMatcher, Literal) {
  GrammarBuilder b;
  const RuleId r = b.AddRule("root");
  b.AddAlternative(r, b.Literal("abc"));
  auto g = Compile(std::move(b), r);
  EXPECT_EQ(Walk(g, "abc"), (Outcome{true, true}));
  EXPECT_EQ(Walk(g, "ab"), (Outcome{true, false}));
  EXPECT_EQ(Walk(g, ""), (Outcome{true, false}));
  EXPECT_EQ(Walk(g, "abd"), (Outcome{false, false}));
  EXPECT_EQ(Walk(g, "abcc"), (Outcome{false, false}));
  GrammarMatcher m(g);
  ASSERT_TRUE(m.AcceptBytes("abc"));
  EXPECT_FALSE(m.CanContinue());  // only the end is left
  EXPECT_TRUE(m.IsAccepting());
}

TEST(GrammarMatcher, AlternativesSharingPrefixes) {
  GrammarBuilder b;
  const RuleId r = b.Choice("animal", {b.Literal("cat"), b.Literal("car"), b.Literal("cart"),
                                       b.Literal("dog")});
  auto g = Compile(std::move(b), r);
  for (const char* yes : {"cat", "car", "cart", "dog"}) EXPECT_TRUE(Walk(g, yes).complete) << yes;
  for (const char* no : {"ca", "cars", "do", "cog", "catt"}) {
    EXPECT_FALSE(Walk(g, no).complete) << no;
  }
  GrammarMatcher m(g);
  ASSERT_TRUE(m.AcceptBytes("car"));
  EXPECT_TRUE(m.IsAccepting());
  EXPECT_TRUE(m.CanContinue());  // "cart"
}

TEST(GrammarMatcher, BalancedBrackets) {
  // s ::= "(" s ")" s | ""
  GrammarBuilder b;
  const RuleId s = b.AddRule("s");
  b.AddAlternative(s, {b.Bytes(ByteClass::Of('(')), Symbol::Rule(s), b.Bytes(ByteClass::Of(')')),
                       Symbol::Rule(s)});
  b.AddAlternative(s, {});
  auto g = Compile(std::move(b), s);
  for (const char* yes : {"", "()", "(())", "()()", "(()())((()))"}) {
    EXPECT_EQ(Walk(g, yes), (Outcome{true, true})) << yes;
  }
  for (const char* prefix : {"(", "((", "(()", "()(()"}) {
    EXPECT_EQ(Walk(g, prefix), (Outcome{true, false})) << prefix;
  }
  for (const char* no : {")", "())", "(()))", "()x"}) {
    EXPECT_FALSE(Walk(g, no).alive) << no;
  }
  // Depth 200 and back: the stack tree grows with the nesting, never fails.
  const std::string deep = std::string(200, '(') + std::string(200, ')');
  EXPECT_EQ(Walk(g, deep), (Outcome{true, true}));
}

TEST(GrammarMatcher, NullableRules) {
  // root ::= b c "x" c ; b ::= "b" | "" ; c ::= "" | "c" | e ; e ::= ""
  GrammarBuilder bl;
  const RuleId root = bl.AddRule("root");
  const RuleId b = bl.Optional("b", bl.Literal("b"));
  const RuleId e = bl.AddRule("e");
  bl.AddAlternative(e, {});
  const RuleId c = bl.Choice("c", {{}, bl.Literal("c"), {Symbol::Rule(e)}});
  bl.AddAlternative(root, {Symbol::Rule(b), Symbol::Rule(c), bl.Bytes(ByteClass::Of('x')),
                           Symbol::Rule(c)});
  auto g = Compile(std::move(bl), root);
  for (const char* yes : {"x", "bx", "cx", "bcx", "xc", "bcxc"}) {
    EXPECT_TRUE(Walk(g, yes).complete) << yes;
  }
  for (const char* no : {"", "b", "cbx", "xcc", "bbx"}) EXPECT_FALSE(Walk(g, no).complete) << no;
}

TEST(GrammarMatcher, RepetitionBounds) {
  GrammarBuilder b;
  const Alternative a = b.Literal("a");
  const RuleId r24 = b.Repeat("r24", a, 2, 4);
  const RuleId r1 = b.Repeat("r1", a, 1, -1);
  const RuleId r00 = b.Repeat("r00", a, 0, 0);
  const RuleId r33 = b.Repeat("r33", b.Literal("ab"), 3, 3);
  const RuleId plus = b.Plus("plus", a);
  const RuleId star = b.Star("star", a);
  const RuleId opt = b.Optional("opt", a);
  // root ::= "1" r24 | "2" r1 | "3" r00 | "4" r33 | "5" plus | "6" star | "7" opt
  const RuleId root = b.AddRule("root");
  int tag = 1;
  for (RuleId r : {r24, r1, r00, r33, plus, star, opt}) {
    Alternative alt = b.Literal(std::to_string(tag++));
    alt.push_back(Symbol::Rule(r));
    b.AddAlternative(root, alt);
  }
  auto g = Compile(std::move(b), root);
  auto count_ok = [&](char tag, int n) { return Walk(g, tag + std::string(n, 'a')).complete; };
  for (int n = 0; n <= 6; ++n) {
    EXPECT_EQ(count_ok('1', n), n >= 2 && n <= 4) << n;
    EXPECT_EQ(count_ok('2', n), n >= 1) << n;
    EXPECT_EQ(count_ok('3', n), n == 0) << n;
    EXPECT_EQ(count_ok('5', n), n >= 1) << n;
    EXPECT_EQ(count_ok('6', n), true) << n;
    EXPECT_EQ(count_ok('7', n), n <= 1) << n;
  }
  EXPECT_TRUE(Walk(g, "4ababab").complete);
  EXPECT_FALSE(Walk(g, "4abab").complete);
  EXPECT_FALSE(Walk(g, "4abababa").alive);
  EXPECT_FALSE(Walk(g, "1aaaaa").alive);  // the fifth 'a' is rejected, not merely incomplete
}

TEST(GrammarMatcher, LoopsKeepTheirStateSoTheTableStaysSmall) {
  // digits ::= [0-9]+ : every digit after the first leads back to the same state.
  GrammarBuilder b;
  const RuleId d = b.Plus("digits", {b.Bytes(ByteClass::Range('0', '9'))});
  auto g = Compile(std::move(b), d);
  GrammarMatcher m(g);
  ASSERT_TRUE(m.AcceptByte('1'));
  const StateId after_one = m.state();
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(m.AcceptByte('0' + i % 10));
  EXPECT_EQ(m.state(), after_one);
  EXPECT_EQ(g->state_count(), 3u);  // dead, initial, in the loop
}

TEST(GrammarMatcher, AcceptBytesIsAllOrNothingAndStatesRollBack) {
  GrammarBuilder b;
  const RuleId r = b.Choice("r", {b.Literal("hello world"), b.Literal("help")});
  auto g = Compile(std::move(b), r);
  GrammarMatcher m(g);
  ASSERT_TRUE(m.AcceptBytes("hel"));
  const StateId at_hel = m.state();
  EXPECT_FALSE(m.AcceptBytes("lo wXrld"));
  EXPECT_EQ(m.state(), at_hel);  // nothing of the rejected run was consumed
  EXPECT_FALSE(m.AcceptByte('x'));
  EXPECT_EQ(m.state(), at_hel);
  ASSERT_TRUE(m.AcceptBytes("lo world"));
  EXPECT_TRUE(m.IsAccepting());
  m.set_state(at_hel);  // roll back, as speculation does on a rejected draft
  ASSERT_TRUE(m.AcceptBytes("p"));
  EXPECT_TRUE(m.IsAccepting());
  GrammarMatcher copy = m;  // copies share the compiled grammar
  EXPECT_EQ(copy.state(), m.state());
  EXPECT_EQ(&copy.grammar(), &m.grammar());
}

TEST(GrammarMatcher, StateLimitFailsTheStepAndSaysSo) {
  // [a-z]{0,50}: each count is its own state.
  GrammarBuilder b;
  const RuleId r = b.Repeat("r", {b.Bytes(ByteClass::Range('a', 'z'))}, 0, 50);
  CompiledGrammarLimits limits;
  limits.max_states = 10;
  auto g = Compile(std::move(b), r, limits);
  GrammarMatcher m(g);
  int accepted = 0;
  while (accepted < 50 && m.AcceptByte('q')) ++accepted;
  EXPECT_EQ(accepted, 8);  // dead + initial + 8 more states
  EXPECT_TRUE(g->exhausted());
  EXPECT_EQ(g->state_count(), 10u);
}

TEST(GrammarMatcher, AmbiguityLimitFailsTheStep) {
  // root ::= "a" t ; t ::= "a" | "b" | ... (20 letters): after "a", 20 stacks are alive.
  auto build = [](size_t max_stacks) {
    GrammarBuilder b;
    std::vector<Alternative> alts;
    for (int i = 0; i < 20; ++i) alts.push_back(b.Literal(std::string(1, 'a' + i)));
    const RuleId t = b.Choice("t", alts);
    const RuleId root = b.AddRule("root");
    b.AddAlternative(root, {b.Bytes(ByteClass::Of('a')), Symbol::Rule(t)});
    CompiledGrammarLimits limits;
    limits.max_stacks_per_state = max_stacks;
    return Compile(std::move(b), root, limits);
  };
  auto tight = build(19);
  GrammarMatcher m(tight);
  EXPECT_FALSE(tight->exhausted());
  EXPECT_FALSE(m.AcceptByte('a'));
  EXPECT_TRUE(tight->exhausted());
  auto enough = build(20);
  GrammarMatcher m2(enough);
  EXPECT_TRUE(m2.AcceptBytes("at"));
  EXPECT_TRUE(m2.IsAccepting());
  EXPECT_FALSE(enough->exhausted());
}

// ---- The independent reference -----------------------------------------------------------

// Memoised recursive descent over a Grammar: Ends(rule, i) = every j such that the rule derives
// text[i, j). In prefix mode the end of the text absorbs whatever is left to match (Build keeps
// only rules that derive some string, so anything left can be completed): then "text is a prefix
// of a sentence" is "text.size() is in Ends(root, 0)". Build refused left recursion, so the
// recursion always consumes a byte before reaching the same (rule, i) again.
class Reference {
 public:
  Reference(const Grammar& g, std::string text, bool prefix_mode)
      : g_(g), text_(std::move(text)), prefix_(prefix_mode) {}
  bool Matches() { return Ends(g_.root(), 0).contains(text_.size()); }

 private:
  const std::set<size_t>& Ends(RuleId rule, size_t i) {
    auto key = std::make_pair(rule, i);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::set<size_t> out;
    for (const Alternative& alt : g_.rules()[rule].alternatives) {
      std::set<size_t> at{i};
      for (const Symbol& s : alt) {
        std::set<size_t> next;
        for (size_t p : at) {
          if (prefix_ && p == text_.size()) {
            next.insert(p);
          } else if (s.kind == Symbol::Kind::kBytes) {
            if (p < text_.size() &&
                g_.byte_classes()[s.index].Has(static_cast<uint8_t>(text_[p]))) {
              next.insert(p + 1);
            }
          } else {
            const std::set<size_t>& sub = Ends(s.index, p);
            next.insert(sub.begin(), sub.end());
          }
        }
        at = std::move(next);
      }
      out.insert(at.begin(), at.end());
    }
    return memo_[key] = std::move(out);
  }

  const Grammar& g_;
  std::string text_;
  bool prefix_;
  std::map<std::pair<RuleId, size_t>, std::set<size_t>> memo_;
};

// A random grammar over {a,b,c}: a few rules with random alternatives of byte classes and rule
// references, plus the builder's shapes (Optional/Star/Plus/Repeat) over random bodies.
std::optional<Grammar> RandomGrammar(std::mt19937& rng) {
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  GrammarBuilder b;
  const int n_rules = 2 + pick(4);
  std::vector<RuleId> rules;
  for (int i = 0; i < n_rules; ++i) rules.push_back(b.AddRule("r"));
  auto random_class = [&] {
    ByteClass c;
    do {
      for (char ch : {'a', 'b', 'c'}) {
        if (pick(2)) c.Add(ch);
      }
    } while (c.Empty());
    return b.Bytes(c);
  };
  auto random_body = [&](bool allow_rules) {
    Alternative alt;
    const int len = pick(4);
    for (int k = 0; k < len; ++k) {
      alt.push_back(allow_rules && pick(3) == 0 ? Symbol::Rule(rules[pick(rules.size())])
                                                : random_class());
    }
    return alt;
  };
  for (int i = 0; i < n_rules; ++i) {
    const int n_alts = 1 + pick(3);
    for (int k = 0; k < n_alts; ++k) {
      Alternative alt = random_body(true);
      if (pick(3) == 0) {  // one of the builder's shapes, over a body that consumes a byte
        Alternative body = random_body(false);
        body.push_back(random_class());
        const int min = pick(3);
        RuleId shape;
        switch (pick(4)) {
          case 0: shape = b.Optional("opt", body); break;
          case 1: shape = b.Star("star", body); break;
          case 2: shape = b.Plus("plus", body); break;
          default: shape = b.Repeat("rep", body, min, pick(2) ? -1 : min + pick(3)); break;
        }
        alt.insert(alt.begin() + pick(alt.size() + 1), Symbol::Rule(shape));
      }
      b.AddAlternative(rules[i], std::move(alt));
    }
  }
  auto g = std::move(b).Build(rules[0]);
  if (!g.ok()) return std::nullopt;  // left recursion or an empty language: draw again
  return *std::move(g);
}

TEST(GrammarMatcherReference, AgreesWithRecursiveDescentOnAllShortStrings) {
  std::mt19937 rng(20261125);
  std::vector<std::string> texts{""};
  for (size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].size() == 6) continue;
    for (char ch : {'a', 'b', 'c'}) texts.push_back(texts[i] + ch);
  }
  int grammars = 0, sentences = 0, prefixes = 0;
  while (grammars < 60) {
    std::optional<Grammar> g = RandomGrammar(rng);
    if (!g) continue;
    ++grammars;
    const std::string printed = g->ToString();
    auto compiled = std::make_shared<CompiledGrammar>(*g);
    for (const std::string& text : texts) {
      const bool viable = Reference(*g, text, /*prefix_mode=*/true).Matches();
      const bool sentence = Reference(*g, text, /*prefix_mode=*/false).Matches();
      GrammarMatcher m(compiled);
      const bool alive = m.AcceptBytes(text);
      ASSERT_EQ(alive, viable) << "text \"" << text << "\" in\n" << printed;
      ASSERT_EQ(alive && m.IsAccepting(), sentence) << "text \"" << text << "\" in\n" << printed;
      if (alive) {
        // CanContinue: some byte of the alphabet (the only bytes the grammar uses) continues it.
        bool some = false;
        for (char ch : {'a', 'b', 'c'}) {
          some = some || Reference(*g, text + ch, true).Matches();
        }
        ASSERT_EQ(m.CanContinue(), some) << "text \"" << text << "\" in\n" << printed;
      }
      sentences += sentence;
      prefixes += viable;
    }
    EXPECT_FALSE(compiled->exhausted());
  }
  // The draw is fixed; make sure it exercised both outcomes (not a vacuous agreement).
  EXPECT_GT(sentences, 1000);
  EXPECT_GT(prefixes, 5000);
}

}  // namespace
}  // namespace deltaserve::common::grammar
