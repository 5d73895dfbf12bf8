// The model-output parser (router/chat/tool_call_parser.h, output_stream_parser.h) against the
// shared tool-call fixtures (../shared/fixtures/toolcalls.json: every case equal to `expected`;
// the test fails, never skips, without them), the rules of ../shared/fixtures/toolcalls.md row
// by row, and the streaming property: for every fixture and many chunkings of its raw output
// (every 1-byte split, every 2-piece split, hundreds of seeded random ones) the concatenated
// deltas equal the non-streamed parse.
#include "router/chat/tool_call_parser.h"

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/chat/internal/segment_joiner.h"
#include "router/chat/internal/tool_call_markup.h"
#include "router/chat/output_stream_parser.h"
#include "router/chat/tool_call_types.h"
#include "tests/support/test_paths.h"

namespace deltaserve::router {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

struct FixtureCase {
  std::string name;
  ordered_json tools;
  std::string raw_output;
  ordered_json expected;
};

std::vector<FixtureCase> LoadFixtures() {
  std::vector<FixtureCase> cases;
  std::ifstream in(testing::FixturesPath("toolcalls.json"));
  if (!in) return cases;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const ordered_json all = ordered_json::parse(buffer.str(), nullptr, false);
  if (!all.is_array()) {
    ADD_FAILURE() << "toolcalls.json is not a JSON array";
    return cases;
  }
  for (const ordered_json& c : all) {
    cases.push_back({c.at("name").get<std::string>(), c.value("tools", ordered_json::array()),
                     c.at("raw_output").get<std::string>(), c.at("expected")});
  }
  return cases;
}

OutputParseOptions Options(const ordered_json& tools) {
  OutputParseOptions options;
  options.tools = tools;
  options.call_id_seed = 7;
  return options;
}

// A one-tool catalog: {"type":"function","function":{"name":..., "parameters":{...}}}.
ordered_json Tool(const std::string& name,
                  const ordered_json& properties = ordered_json::object()) {
  return {{"type", "function"},
          {"function",
           {{"name", name}, {"parameters", {{"type", "object"}, {"properties", properties}}}}}};
}

ordered_json Tools(std::initializer_list<ordered_json> tools) {
  ordered_json out = ordered_json::array();
  for (const ordered_json& t : tools) out.push_back(t);
  return out;
}

ParsedOutput Parse(std::string_view raw, const ordered_json& tools) {
  return ParseModelOutput(raw, Options(tools));
}

json Nullable(const std::optional<std::string>& s) { return s.has_value() ? json(*s) : json(); }

// The parse as the fixture's `expected` object (arguments as JSON values, ids left out).
json AsExpected(const ParsedOutput& parsed) {
  json calls = json::array();
  for (const ToolCallOut& call : parsed.tool_calls) {
    calls.push_back({{"name", call.name}, {"arguments", json::parse(call.arguments.dump())}});
  }
  return {{"content", Nullable(parsed.content)},
          {"reasoning_content", Nullable(parsed.reasoning_content)},
          {"tool_calls", calls},
          {"finish", parsed.finish}};
}

// What a client assembles from the stream, plus checks of the streaming contract on the way.
struct Streamed {
  ParsedOutput parsed;
  std::vector<std::string> argument_texts;
};

Streamed StreamChunks(const std::vector<std::string>& chunks, const OutputParseOptions& options) {
  OutputStreamParser parser(options);
  std::vector<OutputDelta> deltas;
  for (const std::string& chunk : chunks) {
    for (OutputDelta& d : parser.Feed(chunk)) deltas.push_back(std::move(d));
  }
  for (OutputDelta& d : parser.Finish()) deltas.push_back(std::move(d));
  Streamed s;
  std::string content, reasoning;
  bool after_reasoning = false;
  for (const OutputDelta& d : deltas) {
    switch (d.kind) {
      case OutputDelta::Kind::kReasoning:
        EXPECT_FALSE(after_reasoning) << "reasoning delta after content or a call";
        EXPECT_NE(d.text.find_first_not_of(" \t\n\r\f\v"), std::string::npos);
        reasoning += d.text;
        break;
      case OutputDelta::Kind::kContent:
        after_reasoning = true;
        EXPECT_NE(d.text.find_first_not_of(" \t\n\r\f\v"), std::string::npos)
            << "whitespace-only content delta";
        content += d.text;
        break;
      case OutputDelta::Kind::kToolCallStart:
        after_reasoning = true;
        EXPECT_EQ(d.index, static_cast<int>(s.parsed.tool_calls.size()));
        EXPECT_THAT(d.id, ::testing::MatchesRegex("call_[A-Za-z0-9]{24}"));
        s.parsed.tool_calls.push_back({d.id, d.name, {}});
        s.argument_texts.emplace_back();
        break;
      case OutputDelta::Kind::kToolCallArguments:
        EXPECT_EQ(d.index + 1, static_cast<int>(s.argument_texts.size()));
        if (!s.argument_texts.empty()) s.argument_texts.back() += d.text;
        break;
    }
  }
  for (size_t i = 0; i < s.argument_texts.size(); ++i) {
    s.parsed.tool_calls[i].arguments = ordered_json::parse(s.argument_texts[i], nullptr, false);
  }
  if (!content.empty()) s.parsed.content = content;
  if (!reasoning.empty()) s.parsed.reasoning_content = reasoning;
  s.parsed.finish = parser.finish();
  return s;
}

// Streamed == non-streamed: strings equal, names and order equal, argument fragments
// concatenated equal the serialized arguments (so they parse to the same JSON).
void ExpectStreamEqualsParse(const std::vector<std::string>& chunks, std::string_view raw,
                             const OutputParseOptions& options, const std::string& label) {
  const ParsedOutput whole = ParseModelOutput(raw, options);
  const Streamed streamed = StreamChunks(chunks, options);
  EXPECT_EQ(streamed.parsed.content, whole.content) << label;
  EXPECT_EQ(streamed.parsed.reasoning_content, whole.reasoning_content) << label;
  EXPECT_EQ(streamed.parsed.finish, whole.finish) << label;
  ASSERT_EQ(streamed.parsed.tool_calls.size(), whole.tool_calls.size()) << label;
  for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
    EXPECT_EQ(streamed.parsed.tool_calls[i].name, whole.tool_calls[i].name) << label;
    EXPECT_EQ(streamed.argument_texts[i], SerializeArguments(whole.tool_calls[i].arguments))
        << label;
    EXPECT_EQ(streamed.parsed.tool_calls[i].arguments, whole.tool_calls[i].arguments) << label;
  }
}

std::vector<std::string> Split(std::string_view raw, const std::vector<size_t>& cuts) {
  std::vector<std::string> chunks;
  size_t prev = 0;
  for (size_t cut : cuts) {
    chunks.emplace_back(raw.substr(prev, cut - prev));
    prev = cut;
  }
  chunks.emplace_back(raw.substr(prev));
  return chunks;
}

// ---- The shared fixtures -----------------------------------------------------------------

TEST(ToolCallFixtures, EveryCaseEqualsExpected) {
  const std::vector<FixtureCase> cases = LoadFixtures();
  ASSERT_FALSE(cases.empty()) << "no tool-call fixtures loaded";
  for (const FixtureCase& c : cases) {
    const ParsedOutput parsed = Parse(c.raw_output, c.tools);
    EXPECT_EQ(AsExpected(parsed), json::parse(c.expected.dump())) << c.name;
  }
}

TEST(ToolCallFixtures, StreamingEqualsParseForEverySplit) {
  const std::vector<FixtureCase> cases = LoadFixtures();
  ASSERT_FALSE(cases.empty()) << "no tool-call fixtures loaded";
  for (const FixtureCase& c : cases) {
    const OutputParseOptions options = Options(c.tools);
    const std::string& raw = c.raw_output;
    // Every 1-byte chunk.
    std::vector<size_t> every;
    for (size_t i = 1; i < raw.size(); ++i) every.push_back(i);
    ExpectStreamEqualsParse(Split(raw, every), raw, options, c.name + " 1-byte");
    // Every two-piece split: a boundary inside every tag.
    for (size_t cut = 0; cut <= raw.size(); ++cut) {
      ExpectStreamEqualsParse(Split(raw, {cut}), raw, options,
                              c.name + " cut " + std::to_string(cut));
    }
  }
}

TEST(ToolCallFixtures, StreamingEqualsParseForRandomChunkings) {
  const std::vector<FixtureCase> cases = LoadFixtures();
  ASSERT_FALSE(cases.empty()) << "no tool-call fixtures loaded";
  std::mt19937 rng(20261125);
  for (const FixtureCase& c : cases) {
    for (bool opened : {false, true}) {
      OutputParseOptions options = Options(c.tools);
      options.prompt_opened_think = opened;
      for (int round = 0; round < 300; ++round) {
        std::vector<size_t> cuts;
        const size_t max_chunk = 1 + rng() % 12;
        for (size_t p = 0; p < c.raw_output.size();) {
          p += 1 + rng() % max_chunk;
          if (p < c.raw_output.size()) cuts.push_back(p);
        }
        ExpectStreamEqualsParse(Split(c.raw_output, cuts), c.raw_output, options,
                                c.name + " round " + std::to_string(round));
      }
    }
  }
}

// ---- Rules of ../shared/fixtures/toolcalls.md, row by row --------------------------------

const ordered_json kWeather =
    Tools({Tool("get_weather", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}})});

std::string XmlCall(const std::string& name, const std::string& params) {
  return "<tool_call>\n<function=" + name + ">\n" + params + "</function>\n</tool_call>";
}

// Rule 1.
TEST(ToolCallRules, ThinkBlockIsReasoningAndEmptyBlockIsNull) {
  ParsedOutput p = Parse("<think>\nplan\n</think>\n\nanswer", kWeather);
  EXPECT_EQ(p.reasoning_content, "plan");
  EXPECT_EQ(p.content, "answer");
  p = Parse("<think>\n\n</think>\n\nanswer", kWeather);
  EXPECT_EQ(p.reasoning_content, std::nullopt);
  EXPECT_EQ(p.finish, "stop");
}

TEST(ToolCallRules, OrphanCloseMakesThePrefixReasoning) {
  ParsedOutput p = Parse("plan</think>answer", kWeather);
  EXPECT_EQ(p.reasoning_content, "plan");
  EXPECT_EQ(p.content, "answer");
}

TEST(ToolCallRules, OrphanCloseIsTextWhenTheCallerSaysSo) {
  OutputParseOptions options = Options(kWeather);
  options.allow_orphan_think_close = false;
  ParsedOutput p = ParseModelOutput("plan</think>answer", options);
  EXPECT_EQ(p.reasoning_content, std::nullopt);
  EXPECT_EQ(p.content, "plan</think>answer");
}

TEST(ToolCallRules, PromptOpenedThinkMakesUnclosedOutputReasoning) {
  OutputParseOptions options = Options(kWeather);
  options.prompt_opened_think = true;
  ParsedOutput p = ParseModelOutput("still thinking", options);
  EXPECT_EQ(p.reasoning_content, "still thinking");
  EXPECT_EQ(p.content, std::nullopt);
  // A <think> the model writes again at the start is the same opener.
  p = ParseModelOutput("<think>\nx\n</think>\ny", options);
  EXPECT_EQ(p.reasoning_content, "x");
  EXPECT_EQ(p.content, "y");
}

TEST(ToolCallRules, UnclosedThinkEndsAtTheFirstCompleteDeclaredCall) {
  const std::string call = XmlCall("get_weather", "<parameter=city>\nParis\n</parameter>\n");
  ParsedOutput p = Parse("<think>\nneed weather\n" + call + "\nafter", kWeather);
  EXPECT_EQ(p.reasoning_content, "need weather");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, ordered_json({{"city", "Paris"}}));
  EXPECT_EQ(p.content, "after");
  // An undeclared one does not end it.
  p = Parse("<think>\nx\n" + XmlCall("other", ""), kWeather);
  EXPECT_EQ(p.reasoning_content, "x\n" + XmlCall("other", ""));
  EXPECT_TRUE(p.tool_calls.empty());
}

TEST(ToolCallRules, ThinkOpenerLaterInTheAnswerIsText) {
  OutputParseOptions options = Options(kWeather);
  options.allow_orphan_think_close = false;
  ParsedOutput p = ParseModelOutput("Hi <think>x", options);
  EXPECT_EQ(p.content, "Hi <think>x");
  EXPECT_EQ(p.reasoning_content, std::nullopt);
}

// Rule 2.
TEST(ToolCallRules, CallInsideReasoningIsPromotedWhenTheAnswerHasNone) {
  const std::string call = XmlCall("get_weather", "<parameter=days>\n3\n</parameter>\n");
  ParsedOutput p = Parse("<think>\nA\n" + call + "\nB\n</think>\n\ndone", kWeather);
  EXPECT_EQ(p.reasoning_content, "A\n\nB");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, ordered_json({{"days", 3}}));
  EXPECT_EQ(p.content, "done");
}

TEST(ToolCallRules, DraftInsideReasoningStaysWhenTheAnswerHasACall) {
  const std::string draft = XmlCall("get_weather", "<parameter=city>\nRome\n</parameter>\n");
  const std::string call = XmlCall("get_weather", "<parameter=city>\nParis\n</parameter>\n");
  ParsedOutput p = Parse("<think>\nA\n" + draft + "\n</think>\n" + call, kWeather);
  EXPECT_EQ(p.reasoning_content, "A\n" + draft);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, ordered_json({{"city", "Paris"}}));
}

TEST(ToolCallRules, UndeclaredCallInsideReasoningIsNeverPromoted) {
  const std::string placeholder = XmlCall("example_function_name", "");
  ParsedOutput p = Parse("<think>\n" + placeholder + "\n</think>\nok", kWeather);
  EXPECT_EQ(p.reasoning_content, placeholder);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.finish, "stop");
}

// Rule 3.
TEST(ToolCallRules, JsonBodyAcceptsParametersStringArgumentsAndNoArguments) {
  const struct {
    std::string body;
    ordered_json arguments;
  } rows[] = {
      {R"({"name": "get_weather", "arguments": {"city": "Oslo"}})", {{"city", "Oslo"}}},
      {R"({"name": "get_weather", "parameters": {"city": "Oslo"}})", {{"city", "Oslo"}}},
      {R"({"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"})", {{"city", "Oslo"}}},
      {R"({"name": "get_weather"})", ordered_json::object()},
      {R"({"name": "get_weather", "arguments": {"days": "4"}})", {{"days", 4}}},  // rule 6
  };
  for (const auto& row : rows) {
    ParsedOutput p = Parse("<tool_call>\n" + row.body + "\n</tool_call>", kWeather);
    ASSERT_EQ(p.tool_calls.size(), 1u) << row.body;
    EXPECT_EQ(p.tool_calls[0].arguments, row.arguments) << row.body;
    EXPECT_EQ(p.content, std::nullopt) << row.body;
  }
}

TEST(ToolCallRules, BareFunctionOnlyWhenDeclared) {
  ParsedOutput p =
      Parse("<function=get_weather>\n<parameter=city>\nX\n</parameter>\n</function>", kWeather);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  p = Parse("<function=nope>\n<parameter=city>\nX\n</parameter>\n</function>", kWeather);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, "<function=nope>\n<parameter=city>\nX\n</parameter>\n</function>");
}

TEST(ToolCallRules, AnswerThatIsExactlyOneJsonCallObject) {
  ParsedOutput p = Parse(R"(  {"name": "get_weather", "arguments": {"city": "Oslo"}} )", kWeather);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.content, std::nullopt);
  p = Parse(R"({"name": "get_weather", "arguments": {}} and more)", kWeather);
  EXPECT_TRUE(p.tool_calls.empty());
  p = Parse(R"({"name": "unknown", "arguments": {}})", kWeather);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, R"({"name": "unknown", "arguments": {}})");
}

TEST(ToolCallRules, SeveralFunctionsInOneBlock) {
  ParsedOutput p = Parse(
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n</function>\n"
      "<function=get_weather>\n<parameter=city>\nB\n</parameter>\n</function>\n</tool_call>",
      kWeather);
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[1].arguments, ordered_json({{"city", "B"}}));
  EXPECT_EQ(p.content, std::nullopt);
}

// Rule 4.
TEST(ToolCallRules, MissingParameterCloseEndsAtTheNextParameterLine) {
  ParsedOutput p =
      Parse(XmlCall("get_weather", "<parameter=city>\nParis\n<parameter=days>\n2\n</parameter>\n"),
            kWeather);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, ordered_json({{"city", "Paris"}, {"days", 2}}));
}

TEST(ToolCallRules, IncompleteCallsStayContentVerbatim) {
  const std::string rows[] = {
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>",
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa",
      "<tool_call>\n<function=get_weather",
  };
  for (const std::string& raw : rows) {
    ParsedOutput p = Parse(raw, kWeather);
    EXPECT_TRUE(p.tool_calls.empty()) << raw;
    EXPECT_EQ(p.content, raw) << raw;
    EXPECT_EQ(p.finish, "stop") << raw;
  }
}

// Rule 5.
TEST(ToolCallRules, CloseTagFollowedByProseIsPartOfTheValue) {
  ParsedOutput p =
      Parse(XmlCall("get_weather", "<parameter=city>\na</parameter> b\n</parameter>\n"), kWeather);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, ordered_json({{"city", "a</parameter> b"}}));
}

TEST(ToolCallRules, ValuesLoseExactlyOneNewlineEachSide) {
  EXPECT_EQ(internal::StripValueNewlines("\n\n  x \n\n"), "\n  x \n");
  EXPECT_EQ(internal::StripValueNewlines("x"), "x");
  EXPECT_EQ(internal::StripValueNewlines("\n"), "");
  ParsedOutput p =
      Parse(XmlCall("get_weather", "<parameter=city>&amp; <b>\n</parameter>\n"), kWeather);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, ordered_json({{"city", "&amp; <b>"}}));
}

TEST(ToolCallRules, MalformedParameterHeaderIsSkipped) {
  ParsedOutput p = Parse(
      XmlCall("get_weather", "<parameter=a=b</parameter>\n<parameter=city>\nX\n</parameter>\n"),
      kWeather);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, ordered_json({{"city", "X"}}));
}

TEST(ToolCallRules, ParametersInAnyOrderKeepTheirOrder) {
  ParsedOutput p = Parse(XmlCall("get_weather",
                                 "<parameter=days>\n1\n</parameter>\n"
                                 "<parameter=city>\nX\n</parameter>\n"),
                         kWeather);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments.dump(), R"({"days":1,"city":"X"})");
}

// Rule 6.
TEST(ToolCallRules, ConvertTextValueByDeclaredType) {
  using T = DeclaredValueType;
  const struct {
    const char* raw;
    T type;
    ordered_json expected;
  } rows[] = {
      {"02134", T::kString, "02134"},
      {"null", T::kString, "null"},
      {"45", T::kInteger, 45},
      {" 45 ", T::kInteger, 45},
      {"03106", T::kInteger, "03106"},
      {"4x", T::kInteger, "4x"},
      {"2.5", T::kNumber, 2.5},
      {"-1e3", T::kNumber, -1000.0},
      {"NaN", T::kNumber, "NaN"},
      {"false", T::kBoolean, false},
      {"False", T::kBoolean, false},
      {"TRUE", T::kBoolean, true},
      {"yes", T::kBoolean, "yes"},
      {"null", T::kBoolean, nullptr},
      {"null", T::kInteger, nullptr},
      {"[1, 2]", T::kArray, ordered_json::array({1, 2})},
      {"{\"a\": 1}", T::kObject, {{"a", 1}}},
      {"[1, 2]", T::kObject, "[1, 2]"},
      {"{not json}", T::kObject, "{not json}"},
  };
  for (const auto& row : rows) {
    EXPECT_EQ(ConvertTextValue(row.raw, row.type), row.expected) << row.raw;
  }
}

TEST(ToolCallRules, DeclaredTypeOfSchemas) {
  using T = DeclaredValueType;
  EXPECT_EQ(DeclaredTypeOf({{"type", "integer"}}), T::kInteger);
  EXPECT_EQ(DeclaredTypeOf({{"type", {"boolean", "null"}}}), T::kBoolean);
  EXPECT_EQ(DeclaredTypeOf({{"type", {"null", "number"}}}), T::kNumber);
  EXPECT_EQ(DeclaredTypeOf({{"type", {"null"}}}), T::kNull);
  EXPECT_EQ(DeclaredTypeOf({{"description", "no type"}}), T::kString);
  EXPECT_EQ(DeclaredTypeOf({{"anyOf", {{{"type", "integer"}}, {{"type", "null"}}}}}), T::kInteger);
  EXPECT_EQ(DeclaredTypeOf("not an object"), T::kString);
}

// Rule 7.
TEST(ToolCallRules, UndeclaredNameStaysContent) {
  const std::string raw = XmlCall("delete_everything", "<parameter=x>\n1\n</parameter>\n");
  ParsedOutput p = Parse(raw, kWeather);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, raw);
}

TEST(ToolCallRules, NoToolsOrToolChoiceNoneParsesNothing) {
  const std::string raw = XmlCall("get_weather", "<parameter=city>\nX\n</parameter>\n");
  EXPECT_EQ(Parse(raw, ordered_json()).content, raw);
  EXPECT_EQ(Parse(raw, ordered_json::array()).content, raw);
  OutputParseOptions options = Options(kWeather);
  options.parse_tool_calls = false;
  EXPECT_EQ(ParseModelOutput(raw, options).content, raw);
  // Rule 2 is off too.
  ParsedOutput p = ParseModelOutput("<think>\n" + raw + "\n</think>\nok", options);
  EXPECT_EQ(p.reasoning_content, raw);
  EXPECT_TRUE(p.tool_calls.empty());
}

TEST(ToolCallRules, ParameterNotInSchemaIsKeptAsText) {
  ParsedOutput p =
      Parse(XmlCall("get_weather", "<parameter=extra>\n120\n</parameter>\n"), kWeather);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, ordered_json({{"extra", "120"}}));
}

TEST(ToolCallRules, MalformedToolsAreIgnored) {
  const ordered_json tools = ordered_json::parse(
      R"([1, "x", {"type": "function"}, {"function": {"name": 3}}, {"name": "flat"}])");
  ToolCatalog catalog(tools);
  EXPECT_TRUE(catalog.Declares("flat"));
  EXPECT_FALSE(catalog.empty());
  EXPECT_TRUE(ToolCatalog(ordered_json("nope")).empty());
}

// Rule 8.
TEST(ToolCallRules, ToolResponseAfterACallIsDropped) {
  const std::string call = XmlCall("get_weather", "<parameter=city>\nX\n</parameter>\n");
  ParsedOutput p = Parse(
      "Checking.\n" + call + "\n<tool_response>\nsunny\n</tool_response>\nIt is sunny.", kWeather);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.content, "Checking.");
  p = Parse("<tool_response>x</tool_response> before any call", kWeather);
  EXPECT_EQ(p.content, "<tool_response>x</tool_response> before any call");
}

// Rule 9.
TEST(ToolCallRules, SegmentsAreTrimmedAndJoinedWithABlankLine) {
  internal::SegmentJoiner joiner;
  std::string out = joiner.Append("  a  ");
  out += joiner.Append(" b \n");
  joiner.EndSegment();
  out += joiner.Append(" \n ");
  joiner.EndSegment();
  out += joiner.Append("\nc\n");
  joiner.EndSegment();
  EXPECT_EQ(out, "a   b\n\nc");
  const std::string call = XmlCall("get_weather", "");
  ParsedOutput p = Parse("  one \n" + call + "\n \n" + call + "\n two\n", kWeather);
  EXPECT_EQ(p.content, "one\n\ntwo");
  EXPECT_EQ(p.tool_calls.size(), 2u);
}

// ---- Ids and the stream ------------------------------------------------------------------

TEST(ToolCallIds, OpenAiShapeAndDeterministicFromASeed) {
  ToolCallIdSource a(42), b(42), random(0);
  const std::string id = a.Next();
  EXPECT_THAT(id, ::testing::MatchesRegex("call_[A-Za-z0-9]{24}"));
  EXPECT_EQ(id, b.Next());
  EXPECT_THAT(random.Next(), ::testing::MatchesRegex("call_[A-Za-z0-9]{24}"));
}

TEST(OutputStream, ContentStreamsBeforeTheEndWhenNoOrphanCloseIsExpected) {
  OutputParseOptions options = Options(kWeather);
  options.allow_orphan_think_close = false;
  OutputStreamParser parser(options);
  std::vector<OutputDelta> d = parser.Feed("Hello world, ");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, OutputDelta::Kind::kContent);
  EXPECT_EQ(d[0].text, "Hello world,");  // the trailing space waits
  d = parser.Feed("<tool_");
  EXPECT_TRUE(d.empty());
}

TEST(OutputStream, ReasoningStreamsWhileTheBlockIsOpen) {
  OutputParseOptions options = Options(kWeather);
  options.prompt_opened_think = true;
  OutputStreamParser parser(options);
  std::vector<OutputDelta> d = parser.Feed("Let me think. ");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, OutputDelta::Kind::kReasoning);
  EXPECT_EQ(d[0].text, "Let me think.");
  d = parser.Feed("More.</th");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, " More.");
}

TEST(OutputStream, CallIsSentOnceCompleteWithIdNameThenArguments) {
  OutputStreamParser parser(Options(kWeather));
  std::vector<OutputDelta> all;
  for (std::string_view piece :
       {"<think>\nx\n</think>\n\n<tool_call>\n<function=get_weather>\n",
        "<parameter=city>\nParis\n</parameter>\n</function>", "\n</tool_call>"}) {
    for (OutputDelta& d : parser.Feed(piece)) all.push_back(std::move(d));
  }
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].kind, OutputDelta::Kind::kReasoning);
  EXPECT_EQ(all[1].kind, OutputDelta::Kind::kToolCallStart);
  EXPECT_EQ(all[1].name, "get_weather");
  EXPECT_EQ(all[1].index, 0);
  EXPECT_EQ(all[2].kind, OutputDelta::Kind::kToolCallArguments);
  EXPECT_EQ(all[2].text, R"({"city":"Paris"})");
  EXPECT_TRUE(parser.Finish().empty());
  EXPECT_EQ(parser.finish(), "tool_calls");
}

TEST(OutputStream, SplitUtf8CharacterWaitsForItsLastByte) {
  OutputParseOptions options = Options(kWeather);
  options.allow_orphan_think_close = false;
  OutputStreamParser parser(options);
  const std::string text = "北京";
  std::vector<OutputDelta> d = parser.Feed(text.substr(0, 4));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, "北");
  d = parser.Feed(text.substr(4));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, "京");
}

// Constructed outputs beyond the fixtures, each streamed in every 2-piece split and byte by byte.
TEST(OutputStream, ConstructedOutputsStreamLikeTheyParse) {
  const std::string call = XmlCall("get_weather", "<parameter=city>\nX\n</parameter>\n");
  const std::string rows[] = {
      "<think>\nA\n" + call + "\nB\n</think>\n\ndone",
      "<think>\nA\n" + call + "\n</think>\nprose\n" + call,
      "<think>\nA " + call + " tail",
      "plan</think>answer <tool_call>\n{\"name\": \"get_weather\"}\n</tool_call> x",
      " {\"name\": \"get_weather\", \"arguments\": {\"days\": \"2\"}} ",
      "a\n" + call + "\n<tool_response>\nr\n</tool_response>\nrest",
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nP\n</parameter> x\n</parameter>\n"
      "</function>\n</tool_call>",
      "<function=get_weather>\n<parameter=city>\nQ\n</function>\n</tool_call>\nthen",
      "x <tool_call> y </tool_call> z",
      "<think>\nI will use <tool_call> tags\n</think>\n" + call,
  };
  for (bool opened : {false, true}) {
    for (const std::string& raw : rows) {
      OutputParseOptions options = Options(kWeather);
      options.prompt_opened_think = opened;
      std::vector<size_t> every;
      for (size_t i = 1; i < raw.size(); ++i) every.push_back(i);
      ExpectStreamEqualsParse(Split(raw, every), raw, options, raw);
      for (size_t cut = 0; cut <= raw.size(); ++cut) {
        ExpectStreamEqualsParse(Split(raw, {cut}), raw, options, raw);
      }
    }
  }
}

// Random markup soup: outputs glued from tags, partial tags, JSON and prose pieces, each streamed
// in random chunks and byte by byte, must equal the whole-text parse (a stronger search for
// a scanner decision that depends on where a delta ended than the fixtures alone).
TEST(OutputStream, RandomMarkupStreamsLikeItParses) {
  const std::vector<std::string> pieces = {
      "<think>",
      "</think>",
      "<tool_call>",
      "</tool_call>",
      "<function=get_weather>",
      "<function=nope>",
      "</function>",
      "<parameter=city>",
      "<parameter=days>",
      "</parameter>",
      "<parameter=a=b",
      "<tool_response>",
      R"({"name": "get_weather", "arguments": {"days": "2"}})",
      R"({"name": "get_weather")",
      "{",
      "}",
      "\"",
      "<",
      ">",
      "</",
      "\n",
      "\n\n",
      " ",
      "Paris",
      "prose.",
      "北京",
      "3",
      "<tool_",
      "</think",
      "<parameter=",
      "=",
  };
  std::mt19937 rng(1125);
  for (int round = 0; round < 3000; ++round) {
    std::string raw;
    const int n = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) raw += pieces[rng() % pieces.size()];
    OutputParseOptions options = Options(kWeather);
    options.prompt_opened_think = rng() % 3 == 0;
    options.allow_orphan_think_close = rng() % 3 != 0;
    std::vector<size_t> cuts;
    for (size_t p = 0; p < raw.size();) {
      p += 1 + rng() % 9;
      if (p < raw.size()) cuts.push_back(p);
    }
    ExpectStreamEqualsParse(Split(raw, cuts), raw, options, raw);
    std::vector<size_t> every;
    for (size_t i = 1; i < raw.size(); ++i) every.push_back(i);
    ExpectStreamEqualsParse(Split(raw, every), raw, options, raw);
    if (::testing::Test::HasFailure()) break;  // one counterexample is enough to read
  }
}

// A held call is not rescanned from its start on every delta (ScanMemo): a 100 KB value fed 4
// bytes at a time costs milliseconds (measured 0.02 s XML / 0.09 s JSON with -O2; 5 s before
// the memo), far under this bound even with sanitizers.
TEST(OutputStream, LongCallFedInSmallDeltasIsNotQuadratic) {
  std::string content;
  while (content.size() < 100000) content += "<div class=\"row\"><span>cell</span></div>\n";
  const ordered_json tools = Tools({Tool("write_file")});
  const std::string rows[] = {
      XmlCall("write_file", "<parameter=content>\n" + content + "\n</parameter>\n"),
      "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"content\": " +
          json(content).dump() + "}}\n</tool_call>",
  };
  for (const std::string& raw : rows) {
    const auto start = std::chrono::steady_clock::now();
    OutputStreamParser parser(Options(tools));
    size_t deltas = 0;
    for (size_t i = 0; i < raw.size(); i += 4) deltas += parser.Feed(raw.substr(i, 4)).size();
    deltas += parser.Finish().size();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(deltas, 2u);
    EXPECT_LT(seconds, 3.0);
    EXPECT_EQ(ParseModelOutput(raw, Options(tools)).tool_calls.at(0).arguments.at("content"),
              content);
  }
}

}  // namespace
}  // namespace deltaserve::router
