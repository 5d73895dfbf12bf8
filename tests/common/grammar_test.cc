// The byte grammar IR (common/grammar/grammar.h): byte classes, the builder's rule shapes, Build's
// validation (dangling references, left recursion incl. through nullable prefixes, limits,
// alternatives that can never match) and the GBNF-like printing. What the shapes *match* is
// checked by grammar_matcher_test against a brute-force recognizer.
#include "common/grammar/grammar.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::common::grammar {
namespace {

using ::testing::HasSubstr;

TEST(ByteClass, SetOperationsAndCounts) {
  ByteClass c = ByteClass::Range('a', 'f');
  EXPECT_EQ(c.Count(), 6);
  EXPECT_TRUE(c.Has('a'));
  EXPECT_TRUE(c.Has('f'));
  EXPECT_FALSE(c.Has('g'));
  c.Remove('c');
  EXPECT_EQ(c.Count(), 5);
  c.AddClass(ByteClass::Of(0xff));
  EXPECT_TRUE(c.Has(0xff));
  EXPECT_EQ(c.Complement().Count(), 256 - 6);
  EXPECT_EQ(ByteClass::Any().Count(), 256);
  EXPECT_TRUE(ByteClass().Empty());
  EXPECT_FALSE(ByteClass::Of(0).Empty());
  EXPECT_EQ(ByteClass::Range('0', '9'), ByteClass::Range('0', '9'));
}

TEST(ByteClass, PrintsAsGbnf) {
  EXPECT_EQ(ByteClass::Of('a').ToString(), "\"a\"");
  EXPECT_EQ(ByteClass::Of('"').ToString(), "\"\\\"\"");
  EXPECT_EQ(ByteClass::Of('\n').ToString(), "\"\\n\"");
  ByteClass alnum = ByteClass::Range('a', 'z');
  alnum.AddRange('0', '9');
  alnum.Add('_');
  EXPECT_EQ(alnum.ToString(), "[0-9_a-z]");
  // A JSON string character: everything but '"', '\\' and the controls.
  ByteClass str = ByteClass::Range(0, 0x1f);
  str.Add('"');
  str.Add('\\');
  EXPECT_EQ(str.Complement().ToString(), "[^\\x00-\\x1f\"\\\\]");
  EXPECT_EQ(ByteClass::Any().ToString(), "[\\x00-\\xff]");
  ByteClass two = ByteClass::Of('-');
  two.Add(']');
  EXPECT_EQ(two.ToString(), "[\\-\\]]");
}

TEST(GrammarBuilder, RuleNamesAreMadeUnique) {
  GrammarBuilder b;
  const RuleId a = b.AddRule("value");
  const RuleId a2 = b.AddRule("value");
  const RuleId a3 = b.AddRule("value");
  const RuleId taken = b.AddRule("value_4");
  const RuleId a4 = b.AddRule("value");
  for (RuleId r : {a, a2, a3, taken, a4}) b.AddAlternative(r, b.Literal("x"));
  auto g = std::move(b).Build(a);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->rules()[a].name, "value");
  EXPECT_EQ(g->rules()[a2].name, "value_2");
  EXPECT_EQ(g->rules()[a3].name, "value_3");
  EXPECT_EQ(g->rules()[taken].name, "value_4");
  EXPECT_EQ(g->rules()[a4].name, "value_5");
}

TEST(GrammarBuilder, ByteClassesAreInterned) {
  GrammarBuilder b;
  const Symbol x = b.Bytes(ByteClass::Range('0', '9'));
  const Symbol y = b.Bytes(ByteClass::Of('a'));
  EXPECT_EQ(b.Bytes(ByteClass::Range('0', '9')), x);
  EXPECT_NE(x, y);
  const Alternative lit = b.Literal("aab");
  ASSERT_EQ(lit.size(), 3u);
  EXPECT_EQ(lit[0], y);
  EXPECT_EQ(lit[1], y);
  const RuleId r = b.AddRule("r");
  b.AddAlternative(r, lit);
  auto g = std::move(b).Build(r);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->byte_classes().size(), 3u);  // [0-9], a, b
  EXPECT_EQ(g->symbol_count(), 3u);
}

TEST(GrammarBuild, RefusesDanglingReferencesAndMissingRoot) {
  {
    GrammarBuilder b;
    const RuleId r = b.AddRule("r");
    b.AddAlternative(r, {Symbol::Rule(7)});
    auto g = std::move(b).Build(r);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(g.status().message(), HasSubstr("rule r refers to a missing rule 7"));
  }
  {
    GrammarBuilder b;
    const RuleId r = b.AddRule("r");
    b.AddAlternative(r, {Symbol{Symbol::Kind::kBytes, 3}});
    EXPECT_THAT(std::move(b).Build(r).status().message(), HasSubstr("missing byte class 3"));
  }
  {
    GrammarBuilder b;
    b.AddAlternative(b.AddRule("r"), b.Literal("x"));
    EXPECT_THAT(std::move(b).Build(5).status().message(), HasSubstr("root rule 5"));
  }
  {
    GrammarBuilder b;
    const RuleId r = b.AddRule("r");
    b.AddAlternative(r, b.Literal("x"));
    b.AddAlternative(9, b.Literal("y"));
    EXPECT_THAT(std::move(b).Build(r).status().message(), HasSubstr("rule 9"));
  }
}

TEST(GrammarBuild, RefusesDirectLeftRecursion) {
  GrammarBuilder b;
  const RuleId e = b.AddRule("expr");
  b.AddAlternative(e, {Symbol::Rule(e), b.Bytes(ByteClass::Of('+'))});
  b.AddAlternative(e, b.Literal("1"));
  auto g = std::move(b).Build(e);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("left recursion"));
  EXPECT_THAT(g.status().message(), HasSubstr("expr -> expr"));
}

TEST(GrammarBuild, RefusesLeftRecursionThroughNullablePrefixAndOtherRules) {
  // a ::= opt b "x" ; opt ::= "o" | "" ; b ::= a "y" | "z"  — a reaches a through nullable opt.
  GrammarBuilder b;
  const RuleId a = b.AddRule("a");
  const RuleId opt = b.Optional("opt", b.Literal("o"));
  const RuleId br = b.AddRule("b");
  b.AddAlternative(a, {Symbol::Rule(opt), Symbol::Rule(br), b.Bytes(ByteClass::Of('x'))});
  b.AddAlternative(br, {Symbol::Rule(a), b.Bytes(ByteClass::Of('y'))});
  b.AddAlternative(br, b.Literal("z"));
  auto g = std::move(b).Build(a);
  EXPECT_THAT(g.status().message(), HasSubstr("a -> b -> a"));
}

TEST(GrammarBuild, RefusesStarOfNullableBody) {
  GrammarBuilder b;
  const RuleId opt = b.Optional("opt", b.Literal("a"));
  const RuleId star = b.Star("loop", {Symbol::Rule(opt)});
  EXPECT_THAT(std::move(b).Build(star).status().message(), HasSubstr("left recursion"));
}

TEST(GrammarBuild, AcceptsRightRecursionAndRecursionAfterAByte) {
  // list ::= "[" items "]" ; items ::= list items | "" — nested brackets, recursion after "[".
  GrammarBuilder b;
  const RuleId list = b.AddRule("list");
  const RuleId items = b.AddRule("items");
  Alternative alt = b.Literal("[");
  alt.push_back(Symbol::Rule(items));
  alt.push_back(b.Bytes(ByteClass::Of(']')));
  b.AddAlternative(list, alt);
  b.AddAlternative(items, {Symbol::Rule(list), Symbol::Rule(items)});
  b.AddAlternative(items, {});
  auto g = std::move(b).Build(list);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->ToString(), "list ::= \"[\" items \"]\"\nitems ::= list items | \"\"\n");
}

TEST(GrammarBuild, EnforcesLimits) {
  {
    GrammarBuilder b;
    RuleId r = 0;
    for (int i = 0; i < 10; ++i) {
      r = b.AddRule("r");
      b.AddAlternative(r, b.Literal("x"));
    }
    GrammarLimits limits;
    limits.max_rules = 9;
    EXPECT_THAT(std::move(b).Build(r, limits).status().message(), HasSubstr("10 rules (limit 9)"));
  }
  {
    GrammarBuilder b;
    const RuleId r = b.AddRule("r");
    b.AddAlternative(r, b.Literal(std::string(100, 'x')));
    GrammarLimits limits;
    limits.max_symbols = 99;
    EXPECT_THAT(std::move(b).Build(r, limits).status().message(),
                HasSubstr("100 symbols (limit 99)"));
  }
}

TEST(GrammarBuild, DropsAlternativesThatNeverMatchAndRefusesAnEmptyLanguage) {
  {
    // r ::= "a" | dead "b" | [] ; dead ::= "x" dead  (derives no finite string)
    GrammarBuilder b;
    const RuleId r = b.AddRule("r");
    const RuleId dead = b.AddRule("dead");
    b.AddAlternative(dead, {b.Bytes(ByteClass::Of('x')), Symbol::Rule(dead)});
    b.AddAlternative(r, b.Literal("a"));
    b.AddAlternative(r, {Symbol::Rule(dead), b.Bytes(ByteClass::Of('b'))});
    b.AddAlternative(r, {b.Bytes(ByteClass())});
    auto g = std::move(b).Build(r);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->rules()[r].alternatives.size(), 1u);
    EXPECT_TRUE(g->rules()[dead].alternatives.empty());
  }
  {
    GrammarBuilder b;
    const RuleId r = b.AddRule("root");
    b.AddAlternative(r, {b.Bytes(ByteClass::Of('x')), Symbol::Rule(r)});
    EXPECT_THAT(std::move(b).Build(r).status().message(),
                HasSubstr("the root rule root matches no string"));
  }
  {
    // {3,2} has no alternatives at all.
    GrammarBuilder b;
    const RuleId r = b.Repeat("rep", b.Literal("a"), 3, 2);
    EXPECT_FALSE(std::move(b).Build(r).ok());
  }
}

TEST(GrammarToString, PrintsRulesFromTheRootWithLiteralRuns) {
  GrammarBuilder b;
  const RuleId root = b.AddRule("root");
  const RuleId digits = b.Plus("digits", {b.Bytes(ByteClass::Range('0', '9'))});
  const RuleId ws = b.Repeat("ws", {b.Bytes(ByteClass::Of(' '))}, 0, 2);
  Alternative alt = b.Literal("{\"n\":");
  alt.push_back(Symbol::Rule(ws));
  alt.push_back(Symbol::Rule(digits));
  alt.push_back(b.Bytes(ByteClass::Of('}')));
  b.AddAlternative(root, alt);
  auto g = std::move(b).Build(root);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->ToString(),
            "root ::= \"{\\\"n\\\":\" ws digits \"}\"\n"
            "ws ::= ws_upto2\n"
            "digits ::= [0-9] digits_rest\n"
            "ws_upto2 ::= \" \" ws_upto1 | \"\"\n"
            "digits_rest ::= [0-9] digits_rest | \"\"\n"
            "ws_upto1 ::= \" \" | \"\"\n");
}

}  // namespace
}  // namespace deltaserve::common::grammar
