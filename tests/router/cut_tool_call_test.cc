// A tool call cut by the token limit (router/chat/cut_tool_call.h through ChatOutputShaper with
// SetCutByLength): the client gets the call with the arguments written so far and never the
// markup as content, streamed and whole alike. Expected arguments are written out by hand from
// the rules of ../shared/fixtures/toolcalls.md (rule 5 values, rule 6 types) and, for JSON calls,
// from OpenAI's behaviour (the arguments text as far as it was written). The property test cuts
// complete calls in both formats at every byte.
#include "router/chat/cut_tool_call.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/chat/chat_output_shaper.h"

namespace deltaserve::router {
namespace {

using nlohmann::ordered_json;

const ordered_json kTools = ordered_json::parse(R"([
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
   "properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}},
  {"type":"function","function":{"name":"ping","parameters":{"type":"object","properties":{}}}}
])");

struct Shaped {
  std::string content;
  std::string reasoning;
  // (name, arguments) per call index, the argument fragments joined.
  std::vector<std::pair<std::string, std::string>> calls;
  bool called_tools = false;
};

// The shaper's output for `text` fed in chunks of `chunk` bytes (0: whole output).
Shaped Shape(std::string_view text, size_t chunk, bool cut, bool parallel = true) {
  OutputParseOptions options{.tools = kTools, .prompt_opened_think = false,
                             .allow_orphan_think_close = false, .call_id_seed = 7};
  chat::ChatOutputShaper shaper(options, /*whole_output=*/chunk == 0, parallel);
  std::vector<api::GenerationDelta> out;
  if (chunk == 0) {
    shaper.Feed(text, out);
  } else {
    for (size_t i = 0; i < text.size(); i += chunk) shaper.Feed(text.substr(i, chunk), out);
  }
  if (cut) shaper.SetCutByLength();
  shaper.Finish(out);
  Shaped s;
  for (const api::GenerationDelta& d : out) {
    s.content += d.text;
    s.reasoning += d.reasoning_text;
    for (const api::ToolCallDelta& c : d.tool_calls) {
      if (c.index >= static_cast<int>(s.calls.size())) s.calls.resize(c.index + 1);
      if (!c.name.empty()) s.calls[c.index].first = c.name;
      s.calls[c.index].second += c.arguments;
    }
  }
  s.called_tools = shaper.called_tools();
  return s;
}

TEST(CutToolCallTest, FindsOnlyAnUnclosedOpener) {
  EXPECT_EQ(FindCutCallOpener("Sure. <tool_call>\n{\"name\""), 6u);
  EXPECT_FALSE(FindCutCallOpener("<tool_call>x</tool_call> done").has_value());
  EXPECT_EQ(FindCutCallOpener("<function=ping>\n<parameter=a>\n1"), 0u);
  EXPECT_FALSE(FindCutCallOpener("<function=ping>\n</function>").has_value());
  EXPECT_FALSE(FindCutCallOpener("plain text").has_value());
}

TEST(CutToolCallTest, XmlCallCutInAValueKeepsTheParametersWritten) {
  const std::string text =
      "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n"
      "<parameter=city>\nPar";
  for (size_t chunk : {0, 1, 3, 64}) {
    const Shaped s = Shape(text, chunk, /*cut=*/true);
    EXPECT_EQ(s.content, "Let me check.") << chunk;
    ASSERT_EQ(s.calls.size(), 1u) << chunk;
    EXPECT_EQ(s.calls[0].first, "get_weather");
    EXPECT_EQ(ordered_json::parse(s.calls[0].second),
              ordered_json::parse(R"({"days":3,"city":"Par"})"));
    EXPECT_TRUE(s.called_tools);
  }
}

TEST(CutToolCallTest, XmlCallCutInsideATagDropsTheUnfinishedTag) {
  const Shaped a = Shape("<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</para",
                         0, true);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(ordered_json::parse(a.calls[0].second), ordered_json::parse(R"({"city":"Oslo"})"));
  const Shaped b = Shape("<tool_call>\n<function=get_weather>\n<parameter=ci", 0, true);
  ASSERT_EQ(b.calls.size(), 1u);
  EXPECT_EQ(b.calls[0].second, "{}");
  EXPECT_EQ(b.content, "");
}

TEST(CutToolCallTest, JsonCallCutGivesTheArgumentsTextAsWritten) {
  const std::string text =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
  for (size_t chunk : {0, 1, 5}) {
    const Shaped s = Shape(text, chunk, true);
    EXPECT_EQ(s.content, "") << chunk;
    ASSERT_EQ(s.calls.size(), 1u) << chunk;
    EXPECT_EQ(s.calls[0].first, "get_weather");
    EXPECT_EQ(s.calls[0].second, "{\"city\": \"Par");
  }
  const Shaped begun = Shape("<tool_call>\n{\"name\": \"ping\", \"argu", 0, true);
  ASSERT_EQ(begun.calls.size(), 1u);
  EXPECT_EQ(begun.calls[0].first, "ping");
  EXPECT_EQ(begun.calls[0].second, "");
}

TEST(CutToolCallTest, CutBeforeTheNameLeavesNoMarkupAndNoCall) {
  for (const char* text : {"Hi <tool_call>", "Hi <tool_call>\n{\"na", "Hi <tool_call>\n<func",
                           "Hi <tool_call>\n<function=get_wea"}) {
    for (size_t chunk : {0, 1}) {
      const Shaped s = Shape(text, chunk, true);
      EXPECT_EQ(s.content, "Hi") << text << " chunk " << chunk;
      EXPECT_TRUE(s.calls.empty()) << text;
      EXPECT_FALSE(s.called_tools) << text;
    }
  }
}

TEST(CutToolCallTest, UndeclaredFunctionStaysText) {
  const std::string text = "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {\"p";
  const Shaped s = Shape(text, 0, true);
  EXPECT_EQ(s.content, text);  // rule 7: a call naming no declared tool is text
  EXPECT_TRUE(s.calls.empty());
}

TEST(CutToolCallTest, NotCutByTheLimitKeepsRuleFour) {
  // Without the limit, an unclosed call is text (rule 4), as the fixtures say.
  const std::string text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar";
  const Shaped s = Shape(text, 0, /*cut=*/false);
  EXPECT_EQ(s.content, text);
  EXPECT_TRUE(s.calls.empty());
}

TEST(CutToolCallTest, AfterACompleteCallTheCutOneIsTheNextIndex) {
  const std::string text =
      "<tool_call>\n<function=ping>\n</function>\n</tool_call>\n<tool_call>\n"
      "<function=get_weather>\n<parameter=city>\nRome";
  for (size_t chunk : {0, 2}) {
    const Shaped s = Shape(text, chunk, true);
    ASSERT_EQ(s.calls.size(), 2u) << chunk;
    EXPECT_EQ(s.calls[0].first, "ping");
    EXPECT_EQ(s.calls[1].first, "get_weather");
    EXPECT_EQ(ordered_json::parse(s.calls[1].second), ordered_json::parse(R"({"city":"Rome"})"));
    EXPECT_EQ(s.content, "");
    // parallel_tool_calls false: only the first call.
    const Shaped one = Shape(text, chunk, true, /*parallel=*/false);
    ASSERT_EQ(one.calls.size(), 1u);
    EXPECT_EQ(one.calls[0].first, "ping");
  }
}

// Every cut of a complete call: never markup in content; once the name is complete, the call
// with that name; the streamed and whole results agree.
TEST(CutToolCallTest, EveryCutOfACompleteCallInBothFormats) {
  const std::string xml =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose\n</parameter>\n"
      "<parameter=days>\n4\n</parameter>\n</function>\n</tool_call>";
  const std::string json =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"San Jose\", "
      "\"days\": 4}}\n</tool_call>";
  for (const std::string& full : {xml, json}) {
    const size_t name_end = full.find("get_weather") + std::string("get_weather").size() + 1;
    for (size_t n = 1; n < full.size(); ++n) {
      const std::string cut = full.substr(0, n);
      const Shaped whole = Shape(cut, 0, true);
      const Shaped streamed = Shape(cut, 1, true);
      EXPECT_EQ(whole.content.find('<'), std::string::npos) << cut;
      EXPECT_EQ(streamed.content, whole.content) << cut;
      ASSERT_EQ(streamed.calls.size(), whole.calls.size()) << cut;
      if (n > name_end) {
        ASSERT_EQ(whole.calls.size(), 1u) << cut;
        EXPECT_EQ(whole.calls[0].first, "get_weather") << cut;
        EXPECT_EQ(streamed.calls[0], whole.calls[0]) << cut;
      }
    }
  }
}

}  // namespace
}  // namespace deltaserve::router
