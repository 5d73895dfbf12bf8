// Anthropic Messages bodies translated into CompletionRequest (router/api/anthropic_request.h):
// each field of docs/anthropic_api.md's request table, the OpenAI shapes the translation
// produces for the chat renderer (tool_calls, role "tool" messages, function tools, tool_choice
// in OpenAI's words), and the 400s with the Anthropic JSON path as param. Expected shapes are
// those of OpenAI's chat API reference (what ParseChatCompletionRequest accepts for the same
// conversation), checked by parsing that equivalent chat body.

#include "router/api/anthropic_request.h"

#include <gtest/gtest.h>

#include <string>

#include "router/api/api_error.h"
#include "router/api/internal/reasoning_fields.h"
#include "router/api/request_parser.h"
#include "router/api/responses_request.h"

namespace deltaserve::router::api {
namespace {

absl::StatusOr<CompletionRequest> Parse(const std::string& body) {
  return ParseAnthropicMessagesRequest(body);
}

// The error's param and code, for a failed parse.
std::string Fault(const std::string& body) {
  absl::StatusOr<CompletionRequest> r = Parse(body);
  if (r.ok()) return "ok";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  return ErrorParam(r.status()) + " " + ErrorCode(r.status());
}

TEST(AnthropicRequestTest, PlainMessageWithSystemBlocksAndSampling) {
  absl::StatusOr<CompletionRequest> r = Parse(R"({
    "model": "claude-sonnet-4-5", "max_tokens": 100,
    "system": [{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}},
               {"type": "text", "text": "Use English."}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"},
                                              {"type": "text", "text": "there"}]}],
    "temperature": 0.5, "top_p": 0.9, "top_k": 40, "stop_sequences": ["END", "STOP"],
    "stream": true, "metadata": {"user_id": "u-1"}, "service_tier": "auto",
    "some_future_field": {"x": 1}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->endpoint, Endpoint::kChatCompletions);
  EXPECT_EQ(r->model, "claude-sonnet-4-5");
  EXPECT_EQ(r->max_tokens, 100);
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].content, "Be terse.\nUse English.");
  EXPECT_EQ(r->messages[1].role, "user");
  EXPECT_EQ(r->messages[1].content, "Hi\nthere");
  EXPECT_EQ(r->sampling.temperature, 0.5);
  EXPECT_EQ(r->sampling.top_p, 0.9);
  EXPECT_EQ(r->sampling.top_k, 40);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"END", "STOP"}));
  EXPECT_TRUE(r->stream);
  EXPECT_EQ(r->user, "u-1");
  EXPECT_FALSE(r->enable_thinking.has_value());  // the model's default
  EXPECT_TRUE(r->tools_json.empty());
}

TEST(AnthropicRequestTest, ToolRoundTripBecomesOpenAiToolCallsAndToolMessages) {
  const std::string body = R"({
    "model": "m", "max_tokens": 50,
    "tools": [{"name": "get_weather", "description": "Weather.",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
              {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Call the tool.", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
         "input": {"city": "Paris", "days": 2}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1",
         "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": "22 C"}]},
        {"type": "text", "text": "Thanks"}]}]})";
  absl::StatusOr<CompletionRequest> r = Parse(body);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 4u);
  const ChatMessage& a = r->messages[1];
  EXPECT_EQ(a.role, "assistant");
  EXPECT_EQ(a.reasoning_content, "Call the tool.");
  EXPECT_EQ(a.content, "Let me check.");
  EXPECT_FALSE(a.content_null);
  EXPECT_EQ(a.tool_calls_json,
            R"([{"id":"toolu_1","type":"function","function":{"name":"get_weather",)"
            R"("arguments":"{\"city\":\"Paris\",\"days\":2}"}}])");
  EXPECT_EQ(r->messages[2].role, "tool");
  EXPECT_EQ(r->messages[2].tool_call_id, "toolu_1");
  EXPECT_EQ(r->messages[2].content, "sunny\n22 C");
  EXPECT_EQ(r->messages[3].role, "user");
  EXPECT_EQ(r->messages[3].content, "Thanks");
  // Server tools run on Anthropic's side: only the custom tool reaches the template.
  EXPECT_EQ(r->tools_json,
            R"([{"type":"function","function":{"name":"get_weather","description":"Weather.",)"
            R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");

  // The same conversation in OpenAI's chat shape parses into the same messages and tools.
  absl::StatusOr<CompletionRequest> chat = ParseChatCompletionRequest(
      R"({"model": "m", "tools": )" + r->tools_json + R"(, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "Call the tool.",
         "tool_calls": )" + a.tool_calls_json + R"(},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny\n22 C"},
        {"role": "user", "content": "Thanks"}]})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->tools_json, r->tools_json);
  ASSERT_EQ(chat->messages.size(), r->messages.size());
  for (size_t i = 0; i < chat->messages.size(); ++i) {
    EXPECT_EQ(chat->messages[i].role, r->messages[i].role) << i;
    EXPECT_EQ(chat->messages[i].content, r->messages[i].content) << i;
    EXPECT_EQ(chat->messages[i].tool_calls_json, r->messages[i].tool_calls_json) << i;
    EXPECT_EQ(chat->messages[i].tool_call_id, r->messages[i].tool_call_id) << i;
  }
}

// Found by anthropic_request_fuzz: a server tool's type was kept as the client wrote it, and it is
// named in a header and a log line. Kept: [A-Za-z0-9_.-] only, each type once.
TEST(AnthropicRequestTest, SkippedServerToolTypesAreHeaderSafeAndDistinct) {
  AnthropicParseNotes notes;
  absl::StatusOr<CompletionRequest> r = ParseAnthropicMessagesRequest(
      R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
          "tools": [{"type": "web_search\r\nX-Injected: 1"}, {"type": "bash_20250124"},
                    {"type": "\u00e9\n"}, {"type": "bash_20250124"}]})",
      &notes);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(notes.ignored_tool_types,
            (std::vector<std::string>{"web_searchX-Injected1", "bash_20250124", "unnamed"}));
  EXPECT_TRUE(r->tools_json.empty());
}

TEST(AnthropicRequestTest, AssistantWithOnlyToolUseHasNullContent) {
  absl::StatusOr<CompletionRequest> r = Parse(R"({"model": "m", "max_tokens": 5, "messages": [
    {"role": "user", "content": "x"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "ok",
                                  "is_error": true}]}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->messages[1].content_null);
  EXPECT_EQ(r->messages[1].tool_calls_json,
            R"([{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}])");
}

TEST(AnthropicRequestTest, ToolChoiceMapsOntoForcedCalls) {
  const std::string head = R"({"model": "m", "max_tokens": 5,
    "messages": [{"role": "user", "content": "x"}],
    "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": )";
  absl::StatusOr<CompletionRequest> r = Parse(head + R"({"type": "auto"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tool_choice, ToolChoice::kAuto);
  EXPECT_TRUE(r->parallel_tool_calls);
  EXPECT_EQ(r->tool_choice_json, R"("auto")");
  r = Parse(head + R"({"type": "any", "disable_parallel_tool_use": true}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tool_choice, ToolChoice::kRequired);
  EXPECT_FALSE(r->parallel_tool_calls);
  EXPECT_EQ(r->tool_choice_json, R"("required")");
  r = Parse(head + R"({"type": "tool", "name": "f"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tool_choice, ToolChoice::kFunction);
  EXPECT_EQ(r->tool_choice_function, "f");
  EXPECT_EQ(r->tool_choice_json, R"({"type":"function","function":{"name":"f"}})");
  r = Parse(head + R"({"type": "none"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tool_choice, ToolChoice::kNone);

  EXPECT_EQ(Fault(head + R"({"type": "tool", "name": "g"}})"), "tool_choice.name invalid_value");
  EXPECT_EQ(Fault(head + R"({"type": "sometimes"}})"), "tool_choice.type invalid_value");
  EXPECT_EQ(Fault(head + R"("auto"})"), "tool_choice invalid_type");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user",
    "content": "x"}], "tool_choice": {"type": "any"}})"),
            "tool_choice invalid_value");
}

TEST(AnthropicRequestTest, ThinkingMapsOntoEnableThinkingAndBudget) {
  const std::string head =
      R"({"model": "m", "max_tokens": 2000, "messages": [{"role": "user", "content": "x"}],
          "thinking": )";
  absl::StatusOr<CompletionRequest> r = Parse(head + R"({"type": "enabled", "budget_tokens": 1024}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->enable_thinking, true);
  EXPECT_EQ(r->thinking_budget, 1024);
  r = Parse(head + R"({"type": "disabled"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->enable_thinking, false);
  EXPECT_FALSE(r->thinking_budget.has_value());
  r = Parse(head + R"({"type": "adaptive", "display": "summarized"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->enable_thinking, true);
  EXPECT_FALSE(r->thinking_budget.has_value());
  EXPECT_EQ(Fault(head + R"({"type": "enabled"}})"),
            "thinking.budget_tokens missing_required_parameter");
  EXPECT_EQ(Fault(head + R"({"type": "enabled", "budget_tokens": 2000}})"),
            "thinking.budget_tokens invalid_value");
  EXPECT_EQ(Fault(head + R"({"type": "deep"}})"), "thinking.type invalid_value");
}

TEST(AnthropicRequestTest, EffortSetsTheBudgetsOfResponsesEffort) {
  const std::string head = R"({"model": "m", "max_tokens": 32000,
    "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "adaptive"},
    "output_config": {"effort": ")";
  for (const char* level : {"low", "medium", "high"}) {
    SCOPED_TRACE(level);
    absl::StatusOr<CompletionRequest> r = Parse(head + level + R"("}})");
    ASSERT_TRUE(r.ok()) << r.status();
    auto responses = ParseResponsesRequest(
        std::string(R"({"model":"m","input":"x","reasoning":{"effort":")") + level + R"("}})");
    ASSERT_TRUE(responses.ok());
    EXPECT_EQ(r->thinking_budget, responses->completion.thinking_budget);
    EXPECT_EQ(r->enable_thinking, true);  // from `thinking`
  }
  EXPECT_EQ(Parse(head + R"(low"}})")->thinking_budget, kReasoningBudgetLow);
  // max: no budget of its own.
  absl::StatusOr<CompletionRequest> r = Parse(head + R"(max"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->thinking_budget.has_value());
  EXPECT_EQ(Fault(head + R"(xhigh"}})"), "output_config.effort unsupported_value");
  EXPECT_EQ(Fault(head + R"(extreme"}})"), "output_config.effort invalid_value");
  // With budget_tokens both limits hold; the max_tokens check is budget_tokens' own.
  const std::string enabled = R"({"model": "m", "max_tokens": 3000,
    "messages": [{"role": "user", "content": "x"}],
    "thinking": {"type": "enabled", "budget_tokens": 2000}, "output_config": {"effort": ")";
  EXPECT_EQ(Parse(enabled + R"(low"}})")->thinking_budget, kReasoningBudgetLow);
  EXPECT_EQ(Parse(enabled + R"(high"}})")->thinking_budget, 2000);
  r = Parse(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
    "output_config": {"effort": "high"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->enable_thinking.has_value());  // effort does not switch thinking on
  EXPECT_EQ(r->thinking_budget, kReasoningBudgetHigh);
  r = Parse(R"({"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "x"}],
    "thinking": {"type": "disabled"}, "output_config": {"effort": "low"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->enable_thinking, false);
  EXPECT_EQ(ParseAnthropicCountTokensRequest(R"({"model": "m", "messages": [{"role": "user",
    "content": "x"}], "output_config": {"effort": "xhigh"}})").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AnthropicRequestTest, ThinkingDisplay) {
  const std::string head = R"({"model": "m", "max_tokens": 2000,
    "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "adaptive", "display": )";
  AnthropicParseNotes notes;
  ASSERT_TRUE(ParseAnthropicMessagesRequest(head + R"("omitted"}})", &notes).ok());
  EXPECT_TRUE(notes.thinking_omitted);
  notes = {};
  ASSERT_TRUE(ParseAnthropicMessagesRequest(head + R"("summarized"}})", &notes).ok());
  EXPECT_FALSE(notes.thinking_omitted);
  EXPECT_EQ(Fault(head + R"("hidden"}})"), "thinking.display invalid_value");
  EXPECT_EQ(Fault(head + R"(1}})"), "thinking.display invalid_type");
}

TEST(AnthropicRequestTest, OmittedThinkingComesBackFromItsSignature) {
  const std::string signature = internal::ThinkingSignature("Check the \"docs\" first.");
  absl::StatusOr<CompletionRequest> r = Parse(R"({"model": "m", "max_tokens": 5, "messages": [
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": [
      {"type": "thinking", "thinking": "", "signature": ")" + signature + R"("},
      {"type": "text", "text": "a"}]},
    {"role": "user", "content": "again"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages[1].reasoning_content, "Check the \"docs\" first.");
  // Another provider's signature carries nothing we can read; text beats a signature.
  r = Parse(R"({"model": "m", "max_tokens": 5, "messages": [
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": [
      {"type": "thinking", "thinking": "", "signature": "EqQBCkYIBxgCKkB"},
      {"type": "thinking", "thinking": "seen", "signature": ")" + signature + R"("},
      {"type": "text", "text": "a"}]},
    {"role": "user", "content": "again"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages[1].reasoning_content, "seen");
}

TEST(AnthropicRequestTest, AnthropicSideServicesAreRefusedUnlessTheyAskForNothing) {
  const std::string head = R"({"model": "m", "max_tokens": 5,
    "messages": [{"role": "user", "content": "x"}], )";
  EXPECT_EQ(Fault(head + R"("service_tier": "auto"})"), "ok");
  EXPECT_EQ(Fault(head + R"("service_tier": "standard_only"})"), "ok");
  EXPECT_EQ(Fault(head + R"("service_tier": "priority"})"), "service_tier invalid_value");
  EXPECT_EQ(Fault(head + R"("speed": "standard"})"), "ok");
  EXPECT_EQ(Fault(head + R"("speed": "fast"})"), "speed unsupported_value");
  EXPECT_EQ(Fault(head + R"("context_management": {"edits": [
    {"type": "clear_thinking_20251015", "keep": "all"}]}})"), "ok");
  EXPECT_EQ(Fault(head + R"("context_management": {"edits": [
    {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 1000}}]}})"),
            "context_management.edits[0] unsupported_value");
  EXPECT_EQ(Fault(head + R"("context_management": {"edits": [{"type": "clear_thinking_20251015",
    "keep": {"type": "thinking_turns", "value": 1}}]}})"),
            "context_management.edits[0] unsupported_value");
  EXPECT_EQ(Fault(head + R"("container": "container_1"})"), "container unsupported_value");
  EXPECT_EQ(Fault(head + R"("mcp_servers": []})"), "ok");
  EXPECT_EQ(Fault(head + R"("mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]})"),
            "mcp_servers unsupported_value");
  EXPECT_EQ(Fault(head + R"("inference_geo": "us"})"), "inference_geo unsupported_value");
  EXPECT_EQ(Fault(head + R"("container": null, "inference_geo": null, "speed": null})"), "ok");
}

// What Claude Code sends on every turn (captured request bodies of Claude Code 2.1: adaptive
// thinking with an effort, context_management keeping all thinking, metadata.user_id,
// cache_control on system and tool blocks, max_tokens 32000, stream; older versions: thinking
// enabled with budget_tokens 31999 and temperature 1).
TEST(AnthropicRequestTest, ClaudeCodeRequestShapesAreAccepted) {
  const std::string shared = R"("messages": [
      {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"},
                                   {"type": "text", "text": "fix the bug",
                                    "cache_control": {"type": "ephemeral"}}]}],
    "system": [{"type": "text", "text": "You are Claude Code.",
                "cache_control": {"type": "ephemeral"}}],
    "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object",
               "properties": {"command": {"type": "string"}}, "required": ["command"]}}],
    "metadata": {"user_id": "user_abc_account_1_session_2"},
    "max_tokens": 32000, "stream": true)";
  AnthropicParseNotes notes;
  absl::StatusOr<CompletionRequest> r = ParseAnthropicMessagesRequest(
      R"({"model": "claude-opus-4-6", )" + shared + R"(, "thinking": {"type": "adaptive"},
      "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
      "output_config": {"effort": "medium"}})",
      &notes);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->enable_thinking, true);
  EXPECT_EQ(r->thinking_budget, kReasoningBudgetMedium);
  EXPECT_EQ(r->user, "user_abc_account_1_session_2");
  EXPECT_TRUE(r->stream);
  EXPECT_FALSE(notes.thinking_omitted);
  r = Parse(R"({"model": "claude-sonnet-4-5", )" + shared +
            R"(, "thinking": {"type": "enabled", "budget_tokens": 31999}, "temperature": 1})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->thinking_budget, 31999);
  EXPECT_EQ(r->sampling.temperature, 1.0);
}

TEST(AnthropicRequestTest, OutputConfigFormatBecomesAJsonSchemaResponseFormat) {
  absl::StatusOr<CompletionRequest> r = Parse(R"({"model": "m", "max_tokens": 5,
    "messages": [{"role": "user", "content": "x"}], "output_config": {"effort": "low",
    "format": {"type": "json_schema", "schema": {"type": "object",
      "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->response_format.type, ResponseFormat::Type::kJsonSchema);
  EXPECT_EQ(r->response_format.schema_json,
            R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user",
    "content": "x"}], "output_config": {"format": {"type": "xml"}}})"),
            "output_config.format.type invalid_value");
}

TEST(AnthropicRequestTest, CountTokensNeedsNoMaxTokens) {
  const std::string body = R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})";
  EXPECT_TRUE(ParseAnthropicCountTokensRequest(body).ok());
  EXPECT_EQ(Fault(body), "max_tokens missing_required_parameter");
}

TEST(AnthropicRequestTest, FaultsNameTheAnthropicPath) {
  const std::string ok_messages = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(Fault("not json"), " invalid_json");
  EXPECT_EQ(Fault("[1]"), " invalid_type");
  EXPECT_EQ(Fault(R"({"max_tokens": 5, )" + ok_messages + "}"),
            "model missing_required_parameter");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 0, )" + ok_messages + "}"),
            "max_tokens invalid_value");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": "5", )" + ok_messages + "}"),
            "max_tokens invalid_type");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "temperature": 1.5, )" + ok_messages + "}"),
            "temperature invalid_value");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "top_k": -1, )" + ok_messages + "}"),
            "top_k invalid_value");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "messages": []})"),
            "messages invalid_value");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "messages": {}})"), "messages invalid_type");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "system",
    "content": "x"}]})"),
            "messages[0].role invalid_value");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user"}]})"),
            "messages[0].content missing_required_parameter");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content":
    [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]})"),
            "messages[0].content[0].type unsupported_value");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content":
    [{"type": "text"}]}]})"),
            "messages[0].content[0].text missing_required_parameter");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content":
    [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}]})"),
            "messages[0].content invalid_value");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content":
    "x"}, {"role": "assistant", "content": "Sure, "}]})"),
            "messages[1] unsupported_value");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "system": 3, )" + ok_messages + "}"),
            "system invalid_type");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "tools": [{"name": "a b",
    "input_schema": {}}], )" + ok_messages + "}"),
            "tools[0].name invalid_value");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "tools": [{"name": "f"}], )" +
                  ok_messages + "}"),
            "tools[0].input_schema missing_required_parameter");
  EXPECT_EQ(Fault(R"({"model": "m", "max_tokens": 5, "stop_sequences": [""], )" + ok_messages +
                  "}"),
            "stop_sequences[0] invalid_value");
  std::string many = R"({"model": "m", "max_tokens": 5, "stop_sequences": [)";
  for (size_t i = 0; i <= kMaxStopSequences; ++i) many += (i ? ",\"s\"" : "\"s\"");
  EXPECT_EQ(Fault(many + "], " + ok_messages + "}"), "stop_sequences request_limit_exceeded");
}

}  // namespace
}  // namespace deltaserve::router::api
