// The Jinja engine (common/jinja) against Python jinja2 as transformers runs it: every case of
// ../shared/fixtures/chat/*.json byte for byte (expected strings made with jinja2 3.1.6, see
// ../shared/fixtures/templates/README.md), and targeted constructs whose expected strings were
// printed by jinja2 3.1.6 under the same environment (trim_blocks, lstrip_blocks, loopcontrols).
#include "common/jinja/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/chat_fixture_context.h"
#include "tests/support/test_paths.h"

namespace deltaserve::common {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Json = nlohmann::ordered_json;
using testing::FixtureContext;
using testing::ReadFile;

// Renders `source` with `context` (a JSON object text); failures come back as "ERROR: <message>".
std::string Render(std::string_view source, const std::string& context = "{}") {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  absl::StatusOr<std::string> out = t->Render(Json::parse(context));
  if (!out.ok()) return "ERROR: " + std::string(out.status().message());
  return *out;
}

// Every case of every fixture file; the template of chat/<name>.json is templates/<name>.jinja.
TEST(ChatTemplateFixtures, EveryCaseMatchesJinja2) {
  const std::string dir = testing::FixturesPath("chat");
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int files = 0;
  int cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    const std::string name = entry.path().stem().string();
    const std::string source = ReadFile(testing::FixturesPath("templates/" + name + ".jinja"));
    absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source);
    ASSERT_TRUE(tmpl.ok()) << name << ": " << tmpl.status();
    const Json fixture = Json::parse(ReadFile(entry.path().string()));
    for (const Json& c : fixture) {
      ++cases;
      const std::string label = name + "/" + c.at("name").get<std::string>();
      absl::StatusOr<std::string> out = tmpl->Render(FixtureContext(c));
      if (c.contains("expected")) {
        ASSERT_TRUE(out.ok()) << label << ": " << out.status();
        EXPECT_EQ(*out, c.at("expected").get<std::string>()) << label;
      } else {
        ASSERT_FALSE(out.ok()) << label << " rendered:\n" << *out;
        if (c.at("error_type") == "TemplateError") {
          EXPECT_TRUE(IsRaisedByTemplate(out.status())) << label << ": " << out.status();
          EXPECT_EQ(out.status().message(), c.at("expected_error").get<std::string>()) << label;
        } else {
          EXPECT_FALSE(IsRaisedByTemplate(out.status())) << label;
        }
      }
    }
  }
  // Six templates, 128 cases (../shared/fixtures/templates/README.md).
  EXPECT_EQ(files, 6);
  EXPECT_EQ(cases, 128);
}

TEST(ChatTemplate, TrimBlocksAndLstripBlocks) {
  EXPECT_EQ(Render("  {% if true %}\n  x\n  {% endif %}\n"), "  x\n");
  EXPECT_EQ(Render("a\n  {# c #}\nb"), "a\nb");
  EXPECT_EQ(Render("a {% if true %}b{% endif %}"), "a b");
  EXPECT_EQ(Render("  {{ 1 }}\n"), "  1");  // variables are not lstripped; one trailing \n dropped
  EXPECT_EQ(Render("x\n\n"), "x\n");
  EXPECT_EQ(Render("a\r\nb"), "a\nb");
}

TEST(ChatTemplate, ExplicitWhitespaceControl) {
  EXPECT_EQ(Render("a  \n {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(Render("a\n  {%- if true -%}\n  b\n{%- endif %}"), "ab");
  EXPECT_EQ(Render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(Render("{% if true +%}\nx{% endif %}"), "\nx");
  EXPECT_EQ(Render("a {#- c -#} b"), "ab");
  // U+00A0 is whitespace to Python's str.rstrip, which {%- uses.
  EXPECT_EQ(Render("a\xc2\xa0{%- if true %}b{% endif %}"), "ab");
}

TEST(ChatTemplate, LoopVariables) {
  EXPECT_EQ(Render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
            "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
  EXPECT_EQ(Render("{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}"),
            "-2,1-3,2-,");
  EXPECT_EQ(Render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for x in range(10) if x is odd %}{{ x }}{% if x > 4 %}{% break %}{% endif %}"
                   "{% endfor %}"),
            "135");
  EXPECT_EQ(
      Render("{% for x in range(5) %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
      "0134");
  EXPECT_EQ(Render("{% for k, v in {'a': 1, 'b': [2]}|items %}{{ k }}={{ v }} {% endfor %}"),
            "a=1 b=[2] ");
  EXPECT_EQ(Render("{% for x in [1] %}{% set y = 5 %}{% endfor %}[{{ y }}]"), "[]");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for x in [1,2,3] %}{% set ns.n = ns.n + x %}"
                   "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(Render("{% for x in [1,2,3] %}{{ loop.cycle('a', 'b') }}{% endfor %}"), "aba");
}

// jinja2's scoping rules (jinja2/idtracking.py); each expected string printed by jinja2 3.1.6 with
// the context {"x": 5}.
TEST(ChatTemplate, ScopingFollowsJinja2) {
  const std::string ctx = R"({"x": 5})";
  EXPECT_EQ(
      Render("{% set x = 1 %}{% for i in [1,2] %}[{{ x }}]{% set x = 2 %}{% endfor %}{{ x }}", ctx),
      "[1][1]1");  // each iteration starts afresh
  EXPECT_EQ(Render("{% for m in [1] %}[{{ x }}]{% endfor %}{% set x = 1 %}", ctx), "[]");
  EXPECT_EQ(Render("{% for m in [1] %}[{{ x }}]{% endfor %}{% if false %}{{ x }}{% endif %}"
                   "{% set x = 1 %}",
                   ctx),
            "[5]");
  EXPECT_EQ(Render("{% macro f() %}[{{ x }}]{% endmacro %}{{ f() }}{% set x = 1 %}{{ f() }}", ctx),
            "[][1]");
  EXPECT_EQ(Render("{% for i in [1,2] %}{% for j in [1] %}[{{ x }}]{% endfor %}{% set x = i %}"
                   "{% endfor %}",
                   ctx),
            "[][]");
  EXPECT_EQ(Render("{% set x = 7 %}{% for i in [1,2] %}{% for j in [1] %}[{{ x }}]{% endfor %}"
                   "{% set x = i %}{% endfor %}",
                   ctx),
            "[7][7]");
  EXPECT_EQ(Render("{% filter upper %}{{ x }}{% set x = 2 %}{{ x }}{% endfilter %}{{ x }}", ctx),
            "525");
  EXPECT_EQ(Render("{% set x %}[{{ x }}]{% endset %}{{ x }}", ctx), "[]");
  EXPECT_EQ(Render("{{ x }}{% set x = 2 %}{{ x }}", ctx), "52");
}

TEST(ChatTemplate, ForElseAndLazyFilterResults) {
  EXPECT_EQ(Render("{% for i in [1,2] %}{{ i }}{% continue %}{% else %}E{% endfor %}"), "12E");
  EXPECT_EQ(Render("{% for i in [1,2] %}{{ i }}{% break %}{% else %}E{% endfor %}"), "1E");
  EXPECT_EQ(Render("{% for i in [1,2] %}{{ i }}{% if i == 2 %}{% continue %}{% endif %}"
                   "{% else %}E{% endfor %}"),
            "12");
  // select/map/items return generators in jinja2: always true, even when empty.
  EXPECT_EQ(Render("{% if [1]|select('even') %}yes{% endif %}|{{ [1]|select('even')|list }}"),
            "yes|[]");
  EXPECT_THAT(Render("{{ [1]|select('odd')|length }}"), HasSubstr("has no len()"));
}

TEST(ChatTemplate, PythonReprOfValues) {
  EXPECT_EQ(Render("{{ x }}|{{ y }}|{{ z }}|{{ w }}|{{ v }}",
                   R"({"x": -3.0, "y": 0.75, "z": 6.02e23, "w": 1.5e-05, "v": 1e16})"),
            "-3.0|0.75|6.02e+23|1.5e-05|1e+16");
  EXPECT_EQ(
      Render("{{ 0.1 + 0.2 }} {{ 1e15 }} {{ 0.0001 }} {{ 123456789.125 }} {{ 7 / 2 }} {{ 4 / 2 }}"),
      "0.30000000000000004 1000000000000000.0 0.0001 123456789.125 3.5 2.0");
  EXPECT_EQ(Render("{{ [1.0, 'a', none, true, (1,), {'k': \"it's\"}] }}"),
            "[1.0, 'a', None, True, (1,), {'k': \"it's\"}]");
  EXPECT_EQ(Render("{{ x }}", R"({"x": {"b": 1, "a": [false, null]}})"),
            "{'b': 1, 'a': [False, None]}");
}

TEST(ChatTemplate, ToJsonMatchesPythonJsonDumps) {
  const std::string ctx = R"({"x": {"b": 1.0, "a": ["é<>&'", true, null, {}, []], "c": "q\"\n"}})";
  EXPECT_EQ(Render("{{ x|tojson }}", ctx),
            R"({"b": 1.0, "a": ["é<>&'", true, null, {}, []], "c": "q\"\n"})");
  EXPECT_EQ(Render("{{ x|tojson(indent=2) }}", ctx),
            "{\n  \"b\": 1.0,\n  \"a\": [\n    \"é<>&'\",\n    true,\n    null,\n    {},\n    []\n"
            "  ],\n  \"c\": \"q\\\"\\n\"\n}");
  EXPECT_EQ(Render("{{ x|tojson(separators=(',', ':'), sort_keys=true) }}", ctx),
            R"({"a":["é<>&'",true,null,{},[]],"b":1.0,"c":"q\"\n"})");
  EXPECT_EQ(Render("{{ 'é'|tojson(ensure_ascii=true) }}"), R"("\u00e9")");
  EXPECT_THAT(Render("{{ undefined_thing|tojson }}"), HasSubstr("not JSON serializable"));
}

TEST(ChatTemplate, UnicodeStripAndStringMethods) {
  EXPECT_EQ(
      Render("[{{ x|trim }}][{{ x.strip() }}][{{ x.lstrip() }}]", R"({"x": "\u00a0 hi\u3000\n"})"),
      "[hi][hi][hi\u3000\n]");
  EXPECT_EQ(Render("{{ 'a<think>b</think>c'.split('</think>')[-1] }}|{{ '  a  b '.split() }}|"
                   "{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}"),
            "c|['a', 'b']|['a', 'b,c']|['a,b', 'c']");
  EXPECT_EQ(
      Render(
          "{{ 'xxhixx'.strip('x') }} {{ 'Hello'.startswith(('a', 'He')) }} "
          "{{ 'héllo'.find('l') }} {{ 'hello world'.title() }} {{ 'aaa'.replace('a', 'b', 2) }}"),
      "hi True 2 Hello World bba");
  EXPECT_EQ(
      Render("{{ '{} and {name}'.format(1, name='x') }} {{ 'hello'|capitalize }} {{ 'ab'|upper }}"),
      "1 and x Hello AB");
}

TEST(ChatTemplate, SlicingAndIndexing) {
  EXPECT_EQ(Render("{{ [1,2,3,4][::-1] }} {{ [1,2,3,4][1:] }} {{ [1,2,3,4][-2:] }} "
                   "{{ [1,2,3,4][::2] }} {{ 'héllo'[1:3] }} {{ 'abc'[-1] }} {{ [1][5] }}|"),
            "[4, 3, 2, 1] [2, 3, 4] [3, 4] [1, 3] él c |");
  EXPECT_EQ(Render("{{ [1,2,3][5:1:-1] }} {{ 'abcdef'[-1:-4:-1] }}"), "[3] fed");
}

TEST(ChatTemplate, MacrosWithDefaultsAndCaller) {
  EXPECT_EQ(Render("{% macro m(a, b=2) %}{{ a }}{{ b }}{{ varargs }}{% endmacro %}"
                   "{{ m(1) }}|{{ m(1, 3, 4) }}|{{ m(1, b=5) }}"),
            "12()|13(4,)|15()");
  EXPECT_EQ(Render("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}"),
            "<in>");
  EXPECT_EQ(
      Render(
          "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"),
      "321");
}

TEST(ChatTemplate, FiltersAndTests) {
  EXPECT_EQ(
      Render(
          "{{ ['a', 'code_interpreter', 'b']|reject('equalto', 'code_interpreter')|join(', ') }}"),
      "a, b");
  EXPECT_EQ(
      Render("{{ x|default('d') }} {{ ''|default('d', true) }} {{ [3,1,2]|sort }} "
             "{{ [1,1,2]|unique|list }} {{ [{'a': 1}, {'a': 2}]|map(attribute='a')|list }} "
             "{{ 2.5|round }} {{ 2.675|round(2) }} {{ '3.7'|int }} {{ '2'|float }} {{ -3|abs }}"),
      "d d [1, 2, 3] [1, 2] [1, 2] 2.0 2.67 3 2.0 3");
  EXPECT_EQ(Render("{{ 'x' is string }}{{ 1 is number }}{{ true is number }}{{ true is integer }}"
                   "{{ {} is mapping }}{{ 'a' is iterable }}{{ none is none }}{{ x is defined }}"
                   "{{ 4 is divisibleby 2 }}{{ 3 is odd }}{{ 1 is in [1] }}{{ false is false }}"),
            "TrueTrueTrueFalseTrueTrueTrueFalseTrueTrueTrueTrue");
  EXPECT_EQ(
      Render("{{ 'a\nb'|indent(2) }}|{{ {'b': 1, 'a': 2}|dictsort }}|{{ 'a b c'|wordcount }}"),
      "a\n  b|[('a', 2), ('b', 1)]|3");
  EXPECT_EQ(Render("{% set x %} hi {% endset %}[{{ x }}]{% filter upper %}abc{% endfilter %}"),
            "[ hi ]ABC");
}

TEST(ChatTemplate, UndefinedBehavesLikeJinja2Default) {
  EXPECT_EQ(
      Render(
          "[{{ missing }}][{{ missing|length }}][{{ 'a' ~ missing }}][{{ missing is iterable }}]"),
      "[][0][a][True]");
  EXPECT_EQ(Render("{{ d.nope is defined }}{{ none.attr is defined }}", R"({"d": {}})"),
            "FalseFalse");
  EXPECT_THAT(Render("{{ missing.attr }}"), HasSubstr("'missing' is undefined"));
  EXPECT_THAT(Render("{{ x.startswith('a') }}", R"({"x": null})"),
              HasSubstr("'None' has no attribute 'startswith'"));
  EXPECT_THAT(Render("{{ x + 1 }}"), HasSubstr("UndefinedError"));
}

TEST(ChatTemplate, RuntimeErrorsNameTheLine) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse("a\n\n{{ 'x' + 1 }}");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::string> out = t->Render(Json::object());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), StartsWith("chat template line 3: TypeError: "));
  EXPECT_FALSE(IsRaisedByTemplate(out.status()));
  EXPECT_THAT(Render("{{ 'a' in none }}"),
              HasSubstr("argument of type 'NoneType' is not iterable"));
  EXPECT_THAT(Render("{{ 'x'|items }}"), HasSubstr("Can only get item pairs from a mapping."));
}

TEST(ChatTemplate, RaiseExceptionCarriesExactlyTheMessage) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::Parse("x{{ raise_exception('No user query found.') }}");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::string> out = t->Render(Json::object());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "No user query found.");
  EXPECT_TRUE(IsRaisedByTemplate(out.status()));
}

TEST(ChatTemplate, ParseErrorsNameLineAndColumn) {
  struct Case {
    const char* source;
    const char* message;
  };
  const Case cases[] = {
      {"a\n{% foo %}", "chat template line 2, column 4: Encountered unknown tag 'foo'."},
      {"a\n\n  {{ x|nosuchfilter }}",
       "chat template line 3, column 8: No filter named 'nosuchfilter'."},
      {"{{ x is nosuchtest }}", "chat template line 1, column 9: No test named 'nosuchtest'."},
      {"{% if x %}a",
       "chat template line 1, column 12: unexpected end of template, expected 'elif' or "
       "'else' or 'endif'"},
      {"{{ 'abc }}", "chat template line 1, column 4: unterminated string"},
      {"{# never closed", "chat template line 1, column 1: Missing end of comment tag"},
      {"{{ (1 + }}", "chat template line 1, column 9: unexpected '}', expected ')'"},
      {"{{ 1 + }}",
       "chat template line 1, column 8: expected an expression, got end of print statement"},
      {"{% break %}", "chat template line 1, column 4: 'break' outside of a loop"},
      {"{% include 'x' %}", "chat template line 1, column 4: Encountered unknown tag 'include'."},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(c.source);
    ASSERT_FALSE(t.ok()) << c.source;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(t.status().message(), c.message) << c.source;
  }
}

TEST(ChatTemplate, LimitsStopRunawayTemplates) {
  EXPECT_THAT(Render("{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(10) %}"
                     "{% endfor %}{% endfor %}{% endfor %}"),
              HasSubstr("loop iterations"));
  EXPECT_THAT(Render("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}"),
              HasSubstr("exceed"));
  EXPECT_THAT(Render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), HasSubstr("deeper than"));
  EXPECT_THAT(Render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"),
              HasSubstr("PARSE ERROR"));
  EXPECT_THAT(Render("{{ 'x' * 100000000 }}"), HasSubstr("exceed"));
  EXPECT_THAT(Render("{{ range(100000000) }}"), HasSubstr("range() longer than"));
}

TEST(ChatTemplate, GenerationTagRendersItsBody) {
  EXPECT_EQ(Render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
}

}  // namespace
}  // namespace deltaserve::common
