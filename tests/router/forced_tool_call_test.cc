// Forced tool calls end to end inside the router's two halves: the call grammar the worker is
// sent (router/chat/output_constraint_request.h -> common/grammar/output_constraint.h) and the
// tool-call parser that reads the model's text back (router/chat/tool_call_parser.h, the rules
// of ../shared/fixtures/toolcalls.md). Every text the grammar accepts must come back as the
// declared call with arguments valid for the schema: outputs are drawn by random walks through
// the grammar (random bytes among those the matcher allows, until it is complete) and checked
// against the schema's rules written out here (enum membership, integer bounds, lengths), not
// against the grammar. Also: the request -> OutputConstraint translation, the 400s naming the
// tool's parameters and the keyword, and hand-written accepted / rejected texts.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/grammar/grammar_matcher.h"
#include "common/grammar/output_constraint.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/api_error.h"
#include "router/api/request_parser.h"
#include "router/chat/output_constraint_request.h"
#include "router/chat/tool_call_parser.h"

namespace deltaserve::router {
namespace {

using common::grammar::CompiledGrammar;
using common::grammar::GrammarMatcher;
using common::grammar::OutputConstraintSpec;
using common::grammar::ToolCallFormat;
using nlohmann::ordered_json;

// city: string, maxLength 12; unit: enum; days: integer 1..7; flag: boolean. city and days
// required.
constexpr char kWeatherTool[] = R"({"type":"function","function":{"name":"get_weather",
  "parameters":{"type":"object","properties":{
    "city":{"type":"string","maxLength":12},
    "unit":{"type":"string","enum":["celsius","fahrenheit"]},
    "days":{"type":"integer","minimum":1,"maximum":7},
    "flag":{"type":"boolean"}},
  "required":["city","days"]}}})";
constexpr char kPingTool[] = R"({"type":"function","function":{"name":"ping",
  "parameters":{"type":"object","properties":{}}}})";

api::CompletionRequest Parse(const std::string& extra) {
  absl::StatusOr<api::CompletionRequest> r = api::ParseChatCompletionRequest(
      R"({"model":"m","messages":[{"role":"user","content":"q"}],)" + extra + "}");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : api::CompletionRequest();
}

std::shared_ptr<CompiledGrammar> Compile(const OutputConstraintSpec& spec) {
  absl::StatusOr<common::grammar::Grammar> g = common::grammar::CompileOutputConstraint(spec);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  return std::make_shared<CompiledGrammar>(*std::move(g));
}

// Whether the matcher takes all of `text` and is then complete.
bool AcceptsWhole(const std::shared_ptr<CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.AcceptBytes(text) && m.IsAccepting();
}

// A random text the grammar accepts: random allowed bytes, stopping at a complete state with
// probability 1/4 (always once nothing can follow); empty when `max_bytes` ran out first.
std::string RandomWalk(const std::shared_ptr<CompiledGrammar>& g, std::mt19937_64& rng,
                       size_t max_bytes) {
  GrammarMatcher m(g);
  std::string out;
  while (out.size() < max_bytes) {
    if (m.IsAccepting() && (!m.CanContinue() || rng() % 4 == 0)) return out;
    std::vector<uint8_t> allowed;
    for (int b = 0; b < 256; ++b) {
      GrammarMatcher probe = m;
      if (probe.AcceptByte(static_cast<uint8_t>(b))) allowed.push_back(static_cast<uint8_t>(b));
    }
    if (allowed.empty()) return "";
    const uint8_t b = allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.AcceptByte(b));
    out.push_back(static_cast<char>(b));
  }
  return "";
}

// The schema rules of kWeatherTool, checked on parsed arguments.
void ExpectValidWeatherArguments(const ordered_json& args, const std::string& text) {
  ASSERT_TRUE(args.is_object()) << text;
  ASSERT_TRUE(args.contains("city")) << text;
  ASSERT_TRUE(args.contains("days")) << text;
  for (auto it = args.begin(); it != args.end(); ++it) {
    const std::string& k = it.key();
    if (k == "city") {
      ASSERT_TRUE(it->is_string()) << text;
      // maxLength counts code points.
      const std::string& s = it->get_ref<const std::string&>();
      size_t code_points = 0;
      for (char c : s) code_points += (static_cast<uint8_t>(c) & 0xc0) != 0x80;
      EXPECT_LE(code_points, 12u) << text;
    } else if (k == "unit") {
      EXPECT_TRUE(*it == "celsius" || *it == "fahrenheit") << text;
    } else if (k == "days") {
      ASSERT_TRUE(it->is_number_integer()) << text;
      EXPECT_GE(it->get<int64_t>(), 1) << text;
      EXPECT_LE(it->get<int64_t>(), 7) << text;
    } else if (k == "flag") {
      EXPECT_TRUE(it->is_boolean()) << text;
    } else {
      ADD_FAILURE() << "undeclared argument " << k << " in " << text;
    }
  }
}

TEST(ForcedToolCallTest, RequestBecomesTheWorkersConstraint) {
  const std::string tools = std::string(R"("tools":[)") + kWeatherTool + "," + kPingTool + "]";
  const api::CompletionRequest required = Parse(tools + R"(,"tool_choice":"required")");
  auto c = chat::RequestOutputConstraint(required, ToolCallFormat::kQwenXml);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->has_value());
  EXPECT_TRUE((*c)->after_reasoning());
  ASSERT_TRUE((*c)->has_tool_call());
  EXPECT_EQ((*c)->tool_call().format(), deltaserve::v1::TOOL_CALL_FORMAT_QWEN_XML);
  EXPECT_TRUE((*c)->tool_call().parallel());
  ASSERT_EQ((*c)->tool_call().functions_size(), 2);
  EXPECT_EQ((*c)->tool_call().functions(0).name(), "get_weather");
  EXPECT_EQ((*c)->tool_call().functions(1).name(), "ping");

  const api::CompletionRequest named =
      Parse(tools + R"(,"tool_choice":{"type":"function","function":{"name":"ping"}})");
  auto n = chat::RequestOutputConstraint(named, ToolCallFormat::kJson);
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_TRUE(n->has_value());
  EXPECT_EQ((*n)->tool_call().format(), deltaserve::v1::TOOL_CALL_FORMAT_JSON);
  EXPECT_FALSE((*n)->tool_call().parallel());
  ASSERT_EQ((*n)->tool_call().functions_size(), 1);
  EXPECT_EQ((*n)->tool_call().functions(0).name(), "ping");

  const api::CompletionRequest single =
      Parse(tools + R"(,"tool_choice":"required","parallel_tool_calls":false)");
  auto s = chat::RequestOutputConstraint(single, ToolCallFormat::kQwenXml);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE((*s)->tool_call().parallel());

  auto none = chat::RequestOutputConstraint(Parse(tools + R"(,"tool_choice":"auto")"),
                                            ToolCallFormat::kQwenXml);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());

  auto json = chat::RequestOutputConstraint(Parse(R"("response_format":{"type":"json_object"})"),
                                            ToolCallFormat::kQwenXml);
  ASSERT_TRUE(json.ok()) << json.status();
  ASSERT_TRUE(json->has_value());
  EXPECT_TRUE((*json)->has_json_object());
  EXPECT_FALSE((*json)->has_or_tool_call());

  auto regex = chat::RequestOutputConstraint(Parse(R"("guided_choice":["yes","no"])"),
                                             ToolCallFormat::kQwenXml);
  ASSERT_TRUE(regex.ok()) << regex.status();
  ASSERT_TRUE(regex->has_value());
  EXPECT_EQ((*regex)->regex(), "(yes|no)");
  EXPECT_TRUE((*regex)->after_reasoning());

  // Structured output with tools under "auto": the document or, instead, calls.
  auto either = chat::RequestOutputConstraint(
      Parse(tools + R"(,"response_format":{"type":"json_object"})"), ToolCallFormat::kJson);
  ASSERT_TRUE(either.ok()) << either.status();
  ASSERT_TRUE((*either)->has_or_tool_call());
  EXPECT_EQ((*either)->or_tool_call().functions_size(), 2);
  EXPECT_TRUE((*either)->or_tool_call().parallel());
  auto no_calls = chat::RequestOutputConstraint(
      Parse(tools + R"(,"tool_choice":"none","response_format":{"type":"json_object"})"),
      ToolCallFormat::kJson);
  ASSERT_TRUE(no_calls.ok()) << no_calls.status();
  EXPECT_FALSE((*no_calls)->has_or_tool_call());
}

TEST(ForcedToolCallTest, TemplateDecidesTheCallFormat) {
  EXPECT_EQ(chat::ToolCallFormatOf("...<tool_call>\n<function=example_function_name>\n..."),
            ToolCallFormat::kQwenXml);
  EXPECT_EQ(chat::ToolCallFormatOf("<tool_call>\n{\"name\": <function-name>, ...}"),
            ToolCallFormat::kJson);
  EXPECT_EQ(chat::ToolCallFormatOf(""), ToolCallFormat::kJson);
}

// A parameters schema the raw-text XML form cannot enforce: 400 with the tool's parameters path
// and the keyword in the message.
TEST(ForcedToolCallTest, UnenforceableParametersAreA400NamingToolAndKeyword) {
  struct Case {
    std::string parameters;
    std::string keyword;
  };
  const std::vector<Case> cases = {
      {R"({"type":"object","properties":{"d":{"type":"string","format":"date"}}})", "format"},
      {R"({"type":"object","properties":{"d":{"type":["integer","string"]}}})", "type"},
      {R"({"type":"object","anyOf":[{"required":["a"]}],"properties":{"a":{}}})", "anyOf"},
      {R"({"type":"object","properties":{"d":{"anyOf":[{"type":"string"},{"enum":[1,2]}]}}})",
       "anyOf"},
  };
  for (const Case& c : cases) {
    const api::CompletionRequest r =
        Parse(std::string(R"("tools":[)") + kPingTool +
              R"(,{"type":"function","function":{"name":"f","parameters":)" + c.parameters +
              R"(}}],"tool_choice":"required")");
    auto out = chat::RequestOutputConstraint(r, ToolCallFormat::kQwenXml);
    ASSERT_FALSE(out.ok()) << c.parameters;
    EXPECT_EQ(api::ErrorParam(out.status()), "tools[1].function.parameters") << c.parameters;
    EXPECT_EQ(api::ApiErrorFromStatus(out.status()).http_status, 400);
    EXPECT_NE(out.status().message().find("\"" + c.keyword + "\""), std::string_view::npos)
        << out.status();
  }
}

TEST(ForcedToolCallTest, QwenXmlGrammarAcceptsTheTemplatesFormAndNothingElse) {
  OutputConstraintSpec spec;
  spec.kind = OutputConstraintSpec::Kind::kToolCall;
  spec.format = ToolCallFormat::kQwenXml;
  spec.functions.push_back(
      {"get_weather", ordered_json::parse(kWeatherTool)["function"]["parameters"].dump()});
  auto g = Compile(spec);
  ASSERT_NE(g, nullptr);
  const std::string call =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
  EXPECT_TRUE(AcceptsWhole(g, call));
  EXPECT_TRUE(AcceptsWhole(g, "\n\n" + call));  // after "</think>"
  GrammarMatcher done(g);
  ASSERT_TRUE(done.AcceptBytes(call));
  EXPECT_FALSE(done.CanContinue()) << "one call only";
  // Missing required "days"; an undeclared function; a value over maxLength; a value
  // containing "</"; an enum value not listed.
  EXPECT_FALSE(AcceptsWhole(g,
                            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                            "</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(AcceptsWhole(g, "<tool_call>\n<function=other>\n</function>\n</tool_call>"));
  EXPECT_FALSE(AcceptsWhole(g,
                            "<tool_call>\n<function=get_weather>\n<parameter=city>\n"
                            "Thirteen chars\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
                            "</function>\n</tool_call>"));
  EXPECT_FALSE(AcceptsWhole(g,
                            "<tool_call>\n<function=get_weather>\n<parameter=city>\na</b\n"
                            "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
                            "</tool_call>"));
  EXPECT_FALSE(AcceptsWhole(g,
                            "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n"
                            "</parameter>\n<parameter=unit>\nkelvin\n</parameter>\n"
                            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"));
  // Text before the call is not allowed: the call is forced.
  EXPECT_FALSE(AcceptsWhole(g, "Sure! " + call));
}

TEST(ForcedToolCallTest, QwenXmlPatternValuesNeverHoldTheirClosingTag) {
  // A string parameter with a pattern is raw text too: whatever the pattern, the value cannot
  // write "</" (the parser would end the value there), so '<' is taken out of the pattern's
  // character sets; a pattern that needs one is refused.
  OutputConstraintSpec spec;
  spec.kind = OutputConstraintSpec::Kind::kToolCall;
  spec.format = ToolCallFormat::kQwenXml;
  spec.functions.push_back(
      {"note", R"({"type":"object","properties":{"text":{"type":"string","pattern":"^.+$"}},)"
               R"("required":["text"]})"});
  auto g = Compile(spec);
  ASSERT_NE(g, nullptr);
  auto call = [](const std::string& value) {
    return "<tool_call>\n<function=note>\n<parameter=text>\n" + value +
           "\n</parameter>\n</function>\n</tool_call>";
  };
  EXPECT_TRUE(AcceptsWhole(g, call("any text, even > and /")));
  EXPECT_FALSE(AcceptsWhole(g, call("a</b")));
  EXPECT_FALSE(AcceptsWhole(g, call("x</parameter>")));
  GrammarMatcher m(g);
  ASSERT_TRUE(m.AcceptBytes("<tool_call>\n<function=note>\n<parameter=text>\nab"));
  EXPECT_FALSE(m.AcceptByte('<')) << "no '<' at all inside a pattern value";

  OutputConstraintSpec needs = spec;
  needs.functions[0].parameters_json =
      R"({"type":"object","properties":{"tag":{"type":"string","pattern":"^<b>$"}}})";
  auto refused = common::grammar::CompileOutputConstraint(needs);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'<'"), std::string_view::npos) << refused.status();
}

TEST(ForcedToolCallTest, JsonBodyGrammarAcceptsTheTemplatesForm) {
  OutputConstraintSpec spec;
  spec.kind = OutputConstraintSpec::Kind::kToolCall;
  spec.format = ToolCallFormat::kJson;
  spec.parallel = true;
  spec.functions.push_back(
      {"get_weather", ordered_json::parse(kWeatherTool)["function"]["parameters"].dump()});
  spec.functions.push_back({"ping", ""});
  auto g = Compile(spec);
  ASSERT_NE(g, nullptr);
  const std::string weather =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", "
      "\"days\": 2}}\n</tool_call>";
  const std::string ping = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(AcceptsWhole(g, weather));
  EXPECT_TRUE(AcceptsWhole(g, ping + "\n" + weather));  // parallel: more calls after "\n"
  EXPECT_FALSE(AcceptsWhole(g,
                            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                            "{\"city\": \"Oslo\"}}\n</tool_call>"));  // days required
  EXPECT_FALSE(AcceptsWhole(g,
                            "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n"
                            "</tool_call>"));
}

// json_schema (or json_object) with or_calls: the document, or instead calls, nothing else.
TEST(ForcedToolCallTest, DocumentOrCallsGrammar) {
  OutputConstraintSpec spec;
  spec.kind = OutputConstraintSpec::Kind::kJsonSchema;
  spec.schema_json =
      R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]})";
  spec.strict = true;
  spec.or_calls = true;
  spec.format = ToolCallFormat::kQwenXml;
  spec.functions.push_back({"ping", ""});
  auto g = Compile(spec);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(AcceptsWhole(g, R"({"ok": true})"));
  EXPECT_TRUE(AcceptsWhole(g, "<tool_call>\n<function=ping>\n</function>\n</tool_call>"));
  EXPECT_FALSE(AcceptsWhole(g, R"({"ok": true}<tool_call>)"));
  EXPECT_FALSE(AcceptsWhole(g, "Sure: {\"ok\": true}"));
  OutputConstraintSpec plain = spec;
  plain.or_calls = false;
  EXPECT_NE(spec.CacheKey(), plain.CacheKey());
}

// Soundness through the parser: every random text the grammar accepts parses into calls of the
// declared functions whose arguments satisfy the schema; "required" gives one or more calls, a
// named function exactly one.
TEST(ForcedToolCallTest, EveryAcceptedTextParsesIntoValidCalls) {
  const ordered_json tools =
      ordered_json::array({ordered_json::parse(kWeatherTool), ordered_json::parse(kPingTool)});
  for (ToolCallFormat format : {ToolCallFormat::kQwenXml, ToolCallFormat::kJson}) {
    for (bool parallel : {false, true}) {
      OutputConstraintSpec spec;
      spec.kind = OutputConstraintSpec::Kind::kToolCall;
      spec.format = format;
      spec.parallel = parallel;
      spec.functions.push_back({"get_weather", tools[0]["function"]["parameters"].dump()});
      spec.functions.push_back({"ping", tools[1]["function"]["parameters"].dump()});
      auto g = Compile(spec);
      ASSERT_NE(g, nullptr);
      std::mt19937_64 rng(parallel ? 7 : 11);
      int parsed = 0;
      for (int i = 0; i < 300; ++i) {
        const std::string text = RandomWalk(g, rng, 4096);
        if (text.empty()) continue;
        OutputParseOptions options;
        options.tools = tools;
        options.call_id_seed = 1;
        const ParsedOutput out = ParseModelOutput(text, options);
        ASSERT_FALSE(out.tool_calls.empty()) << text;
        EXPECT_EQ(out.finish, "tool_calls") << text;
        EXPECT_FALSE(out.content.has_value()) << text << " -> " << *out.content;
        if (!parallel) {
          EXPECT_EQ(out.tool_calls.size(), 1u) << text;
        }
        for (const ToolCallOut& call : out.tool_calls) {
          if (call.name == "ping") {
            EXPECT_TRUE(call.arguments.is_object() && call.arguments.empty()) << text;
          } else {
            ASSERT_EQ(call.name, "get_weather") << text;
            ExpectValidWeatherArguments(call.arguments, text);
          }
        }
        ++parsed;
      }
      EXPECT_GE(parsed, 250) << "most walks should complete";
    }
  }
}

// Parameters as pydantic writes them (Optional[...] as anyOf with null, enum classes as $ref to
// $defs): in the XML format each is written the way the parser reads it back (a string member
// as raw text, an integer member as JSON), so random walks parse into arguments the schema's
// rules accept. A member mix the parser would misread is refused, naming the keyword.
TEST(ForcedToolCallTest, PydanticShapedParametersParseBackValid) {
  const ordered_json parameters = ordered_json::parse(R"({
    "$defs": {"Color": {"enum": ["red", "green"], "title": "Color", "type": "string"}},
    "type": "object",
    "properties": {
      "note": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}], "default": null},
      "color": {"$ref": "#/$defs/Color"},
      "maybe_color": {"anyOf": [{"$ref": "#/$defs/Color"}, {"type": "null"}]},
      "count": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 5}, {"type": "null"}]}},
    "required": ["note", "color", "maybe_color", "count"]})");
  OutputConstraintSpec spec;
  spec.kind = OutputConstraintSpec::Kind::kToolCall;
  spec.format = ToolCallFormat::kQwenXml;
  spec.functions.push_back({"paint", parameters.dump()});
  auto g = Compile(spec);
  ASSERT_NE(g, nullptr);
  const ordered_json tools = ordered_json::array(
      {{{"type", "function"}, {"function", {{"name", "paint"}, {"parameters", parameters}}}}});
  std::mt19937_64 rng(3);
  int checked = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string text = RandomWalk(g, rng, 4096);
    if (text.empty()) continue;
    OutputParseOptions options;
    options.tools = tools;
    options.call_id_seed = 1;
    const ParsedOutput out = ParseModelOutput(text, options);
    ASSERT_EQ(out.tool_calls.size(), 1u) << text;
    const ordered_json& a = out.tool_calls[0].arguments;
    ASSERT_TRUE(a["note"].is_string()) << text;
    size_t code_points = 0;
    for (char c : a["note"].get<std::string>())
      code_points += (static_cast<uint8_t>(c) & 0xc0) != 0x80;
    EXPECT_LE(code_points, 5u) << text;
    EXPECT_TRUE(a["color"] == "red" || a["color"] == "green") << text;
    EXPECT_TRUE(a["maybe_color"] == "red" || a["maybe_color"] == "green") << text;
    const ordered_json& count = a["count"];
    EXPECT_TRUE(count.is_null() ||
                (count.is_number_integer() && count.get<int>() >= 0 && count.get<int>() <= 5))
        << text;
    ++checked;
  }
  EXPECT_GE(checked, 150);

  struct Refusal {
    std::string property;
    std::string keyword;
  };
  for (const Refusal& r : std::vector<Refusal>{
           {R"({"anyOf": [{"type": "integer"}, {"type": "string"}]})", "anyOf"},
           {R"({"$ref": "#/$defs/Number"})", "$ref"},
           {R"({"$ref": "#/$defs/Missing"})", "$ref"},
           {R"({"$ref": "#/$defs/Loop"})", "$ref"},
       }) {
    OutputConstraintSpec bad = spec;
    bad.functions[0].parameters_json =
        R"({"$defs": {"Number": {"type": "integer"}, "Loop": {"anyOf": [{"$ref": "#/$defs/Loop"},)"
        R"( {"type": "null"}]}}, "type": "object", "properties": {"p": )" +
        r.property + "}}";
    absl::StatusOr<common::grammar::Grammar> out = common::grammar::CompileOutputConstraint(bad);
    ASSERT_FALSE(out.ok()) << r.property;
    EXPECT_NE(out.status().message().find("\"" + r.keyword + "\""), std::string_view::npos)
        << out.status();
  }
}

}  // namespace
}  // namespace deltaserve::router
