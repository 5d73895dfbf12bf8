// A corpus of malformed requests against the real deltaserve-router process (in front of a real
// worker on the tiny golden model), label integration. Every request is sent as raw bytes on its
// own connection; each must get the 4xx that docs/router_http.md documents ("Errors" and "Limits
// and timeouts" tables: 400 for JSON, types, values and bad HTTP, 404 / 405 for paths and
// methods, 408 for a too-slow header or body, 413 for a too-large body, 431 for a too-large
// header) with the `{"error":{message,type,param,code}}` body and, where the parser names one,
// the `param` of the offending field; /v1/messages answers in Anthropic's shape
// (docs/anthropic_api.md, "Errors") with the error type of its status. After each request the router must still answer /health
// and a valid one-token chat completion: no client mistake takes it down or leaves it stuck.
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/router_service.h"

namespace deltaserve {
namespace {

using ::deltaserve::testing::ClientSocket;
using ::deltaserve::testing::Http;
using ::deltaserve::testing::RawHttpReply;
using ::deltaserve::testing::RouterService;
using ::deltaserve::testing::SendRaw;
using json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

// One malformed request and what the router must answer.
struct MalformedCase {
  std::string name;
  std::string request;               // the complete bytes sent
  int status;                        // expected HTTP status
  std::optional<std::string> param;  // expected error.param; "" = null; nullopt = not checked
  // Anthropic's error shape {"type":"error","error":{"type","message"}} (the /v1/messages
  // endpoints), whose error.type must match the status; it has no param.
  bool anthropic = false;
};

std::string Post(const std::string& path, const std::string& body,
                 const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n" +
         "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + extra_headers + "\r\n" + body;
}

const json& ValidChat() {
  static const json j = {{"model", "tiny"},
                         {"max_tokens", 1},
                         {"temperature", 0},
                         {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  return j;
}

// A valid chat body with `patch` merged in (RFC 7386: a null member removes the field).
std::string ChatWith(const json& patch) {
  json j = ValidChat();
  j.merge_patch(patch);
  return j.dump();
}

std::string CompletionWith(const json& patch) {
  json j = {{"model", "tiny"}, {"max_tokens", 1}, {"prompt", "Hi"}};
  j.merge_patch(patch);
  return j.dump();
}

// A valid chat body whose user message text is spliced in as raw bytes (for bytes that
// nlohmann would refuse to serialize: invalid UTF-8, bad escapes).
std::string ChatWithRawContent(const std::string& raw_json_string_body) {
  return R"({"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":")" +
         raw_json_string_body + R"("}]})";
}

// A valid /v1/responses body with `patch` merged in (a null member removes the field).
std::string ResponsesWith(const json& patch) {
  json j = {{"model", "tiny"}, {"max_output_tokens", 1}, {"input", "Hi"}};
  j.merge_patch(patch);
  return j.dump();
}

// A valid /v1/messages body (Anthropic) with `patch` merged in (a null member removes the field).
std::string MessagesWith(const json& patch) {
  json j = {{"model", "tiny"}, {"max_tokens", 1}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  j.merge_patch(patch);
  return j.dump();
}

std::vector<MalformedCase> Corpus() {
  const std::string chat = "/v1/chat/completions";
  const std::string comp = "/v1/completions";
  std::vector<MalformedCase> c;
  auto body = [&](std::string name, const std::string& b, std::optional<std::string> param,
                  int status = 400, const std::string& path = "/v1/chat/completions") {
    c.push_back({std::move(name), Post(path, b), status, std::move(param)});
  };

  // Broken JSON: the whole body is at fault, param null.
  body("not_json", "{not json", "");
  body("empty_body", "", "");
  body("truncated_object", R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}])", "");
  body("trailing_garbage", ValidChat().dump() + " x", "");
  body("two_documents", ValidChat().dump() + ValidChat().dump(), "");
  body("single_quotes", R"({'model':'tiny'})", "");
  body("trailing_comma", R"({"model":"tiny","max_tokens":1,})", "");
  body("nan_literal", R"({"model":"tiny","temperature":NaN,"messages":[]})", "");
  body("infinity_literal", R"({"model":"tiny","temperature":Infinity,"messages":[]})", "");
  body("comment", "{\"model\":\"tiny\" // who\n}", "");
  body("unterminated_string", R"({"model":"tiny)", "");
  body("raw_newline_in_string", ChatWithRawContent("line\nbreak"), "");
  body("bad_escape", ChatWithRawContent(R"(\q)"), "");
  body("lone_high_surrogate_escape", ChatWithRawContent(R"(\ud800)"), "");
  body("lone_low_surrogate_escape", ChatWithRawContent(R"(\udc00x)"), "");
  body("number_overflow", ChatWith({{"max_tokens", 1}}).replace(0, 1, R"({"seed":1e400,)"), "");
  // Too deep: refused while reading, at the path where the 65th level opens (max_json_depth 64,
  // the body itself being level 1).
  auto zeros = [](std::string path, int n) {
    for (int i = 0; i < n; ++i) path.append("[0]");
    return path;
  };
  body("nesting_100_deep",
       R"({"model":"tiny","x":)" + std::string(100, '[') + std::string(100, ']') + "}",
       zeros("x", 63));
  body("nesting_100000_deep", std::string(100000, '['), zeros("", 64));
  body("body_is_null", "null", "");
  body("body_is_array", "[]", "");
  body("body_is_string", R"("hello")", "");
  body("body_is_number", "42", "");

  // Invalid UTF-8 (raw bytes inside JSON strings).
  body("utf8_invalid_bytes", ChatWithRawContent("\xff\xfe"), "");
  body("utf8_overlong_slash", ChatWithRawContent("\xc0\xaf"), "");
  body("utf8_truncated_sequence", ChatWithRawContent("ab\xe2\x82"), "");
  body("utf8_encoded_surrogate", ChatWithRawContent("\xed\xa0\x80"), "");
  body("utf8_beyond_u10ffff", ChatWithRawContent("\xf4\x90\x80\x80"), "");
  body("utf8_in_model_name", R"({"model":"ti)" + std::string("\x80") + R"(ny","messages":[]})", "");
  body("utf8_in_unknown_key", R"({"x)" + std::string("\xc3") + R"(":1,"model":"tiny"})", "");

  // The request's structure.
  body("model_number", ChatWith({{"model", 5}}), "model");
  body("model_empty", ChatWith({{"model", ""}}), "model");
  body("model_missing", ChatWith({{"model", nullptr}}), "model");
  body("messages_string", ChatWith({{"messages", "hi"}}), "messages");
  body("messages_object", ChatWith({{"messages", json::object()}}), "messages");
  body("messages_empty", ChatWith({{"messages", json::array()}}), "messages");
  body("messages_missing", ChatWith({{"messages", nullptr}}), "messages");
  body("message_number", ChatWith({{"messages", {42}}}), "messages[0]");
  body("role_missing", ChatWith({{"messages", {{{"content", "Hi"}}}}}), "messages[0].role");
  body("role_unknown", ChatWith({{"messages", {{{"role", "wizard"}, {"content", "Hi"}}}}}),
       "messages[0].role");
  body("role_number", ChatWith({{"messages", {{{"role", 7}, {"content", "Hi"}}}}}),
       "messages[0].role");
  body("content_number", ChatWith({{"messages", {{{"role", "user"}, {"content", 42}}}}}),
       "messages[0].content");
  body("content_missing", ChatWith({{"messages", {{{"role", "user"}}}}}), "messages[0].content");
  body("content_part_image",
       ChatWith({{"messages",
                  {{{"role", "user"},
                    {"content", {{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}}}}}}),
       "messages[0].content[0].type");
  body("content_part_without_text",
       ChatWith({{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}}}}}}}}),
       "messages[0].content[0].text");
  body("second_message_bad",
       ChatWith({{"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "robot"}}}}}),
       "messages[1].role");
  body("tool_without_call_id", ChatWith({{"messages", {{{"role", "tool"}, {"content", "4"}}}}}),
       "messages[0].tool_call_id");
  body("user_with_tool_calls",
       ChatWith(
           {{"messages", {{{"role", "user"}, {"content", "Hi"}, {"tool_calls", json::array()}}}}}),
       "messages[0].tool_calls");

  // Sampling fields: wrong types, out of range, huge and negative numbers.
  body("temperature_string", ChatWith({{"temperature", "hot"}}), "temperature");
  body("temperature_3", ChatWith({{"temperature", 3}}), "temperature");
  body("temperature_negative", ChatWith({{"temperature", -1}}), "temperature");
  body("top_p_zero", ChatWith({{"top_p", 0}}), "top_p");
  body("top_p_1_5", ChatWith({{"top_p", 1.5}}), "top_p");
  body("top_k_minus_2", ChatWith({{"top_k", -2}}), "top_k");
  body("top_k_fraction", ChatWith({{"top_k", 2.5}}), "top_k");
  body("min_p_2", ChatWith({{"min_p", 2}}), "min_p");
  body("presence_penalty_5", ChatWith({{"presence_penalty", 5}}), "presence_penalty");
  body("frequency_penalty_minus_3", ChatWith({{"frequency_penalty", -3}}), "frequency_penalty");
  body("repetition_penalty_zero", ChatWith({{"repetition_penalty", 0}}), "repetition_penalty");
  body("max_tokens_zero", ChatWith({{"max_tokens", 0}}), "max_tokens");
  body("max_tokens_negative", ChatWith({{"max_tokens", -5}}), "max_tokens");
  body("max_tokens_fraction", ChatWith({{"max_tokens", 1.5}}), "max_tokens");
  body("max_tokens_string", ChatWith({{"max_tokens", "16"}}), "max_tokens");
  body("max_tokens_1e20", ChatWith({{"max_tokens", 1e20}}), "max_tokens");
  body("max_tokens_beyond_int64",
       R"({"model":"tiny","max_tokens":9223372036854775808,)"
       R"("messages":[{"role":"user","content":"Hi"}]})",
       "max_tokens");
  // Within the parser's range but more than the context (256) holds: 400 naming the numbers.
  body("max_tokens_beyond_context", ChatWith({{"max_tokens", 100000}}), std::nullopt);
  body("max_completion_tokens_negative", ChatWith({{"max_completion_tokens", -1}}),
       "max_completion_tokens");
  body("seed_1e30", ChatWith({{"seed", 1e30}}), "seed");
  body("seed_string", ChatWith({{"seed", "x"}}), "seed");
  body("seed_below_int64",
       R"({"model":"tiny","seed":-99999999999999999999,)"
       R"("messages":[{"role":"user","content":"Hi"}]})",
       "seed");
  body("n_17", ChatWith({{"n", 17}}), "n");
  body("n_0", ChatWith({{"n", 0}}), "n");
  body("stop_five", ChatWith({{"stop", {"a", "b", "c", "d", "e"}}}), "stop");
  body("stop_empty_string", ChatWith({{"stop", {""}}}), "stop[0]");
  body("stop_number", ChatWith({{"stop", 42}}), "stop");
  body("stream_string", ChatWith({{"stream", "yes"}}), "stream");
  body("stream_options_without_stream", ChatWith({{"stream_options", {{"include_usage", true}}}}),
       "stream_options");
  body("include_usage_string",
       ChatWith({{"stream", true}, {"stream_options", {{"include_usage", "x"}}}}),
       "stream_options.include_usage");
  body("logprobs_string", ChatWith({{"logprobs", "x"}}), "logprobs");
  body("top_logprobs_21", ChatWith({{"logprobs", true}, {"top_logprobs", 21}}), "top_logprobs");
  body("top_logprobs_without_logprobs", ChatWith({{"top_logprobs", 3}}), "top_logprobs");
  body("logit_bias_array", ChatWith({{"logit_bias", json::array()}}), "logit_bias");
  body("logit_bias_word_key", ChatWith({{"logit_bias", {{"abc", 1}}}}), "logit_bias.abc");
  body("logit_bias_negative_key", ChatWith({{"logit_bias", {{"-1", 1}}}}), "logit_bias.-1");
  body("logit_bias_500", ChatWith({{"logit_bias", {{"5", 500}}}}), "logit_bias.5");
  body("user_number", ChatWith({{"user", 5}}), "user");
  body("tools_string", ChatWith({{"tools", "x"}}), "tools");
  body("enable_thinking_string",
       ChatWith({{"chat_template_kwargs", {{"enable_thinking", "maybe"}}}}),
       "chat_template_kwargs.enable_thinking");

  // Completions.
  body("prompt_missing", CompletionWith({{"prompt", nullptr}}), "prompt", 400, comp);
  body("prompt_object", CompletionWith({{"prompt", json::object()}}), "prompt", 400, comp);
  body("prompt_empty_array", CompletionWith({{"prompt", json::array()}}), "prompt", 400, comp);
  body("prompt_negative_token", CompletionWith({{"prompt", {-1}}}), "prompt[0]", 400, comp);
  body("prompt_token_2_pow_31", CompletionWith({{"prompt", {5, 2147483648LL}}}), "prompt[1]", 400,
       comp);
  body("prompt_two_prompts", CompletionWith({{"prompt", json::array({"a", "b"})}}), "prompt", 400,
       comp);
  body("echo_true", CompletionWith({{"echo", true}}), "echo", 400, comp);
  body("best_of_2", CompletionWith({{"best_of", 2}}), "best_of", 400, comp);
  body("suffix", CompletionWith({{"suffix", "x"}}), "suffix", 400, comp);
  body("completion_logprobs_21", CompletionWith({{"logprobs", 21}}), "logprobs", 400, comp);
  body("completion_broken_json", "{\"prompt\":", "", 400, comp);

  // Responses API (docs/responses_api.md): errors in OpenAI's shape, param a path in its body.
  const std::string resp = "/v1/responses";
  auto responses = [&](std::string name, const json& patch, std::string param) {
    body("responses_" + std::move(name), ResponsesWith(patch), std::move(param), 400, resp);
  };
  body("responses_broken_json", "{\"input\":", "", 400, resp);
  body("responses_body_is_array", "[]", "", 400, resp);
  body("responses_utf8_invalid", R"({"model":"tiny","input":")" + std::string("\xff") + R"("})",
       "", 400, resp);
  responses("model_missing", {{"model", nullptr}}, "model");
  responses("input_missing", {{"input", nullptr}}, "input");
  responses("input_number", {{"input", 5}}, "input");
  responses("input_empty", {{"input", json::array()}}, "input");
  responses("item_number", {{"input", {5}}}, "input[0]");
  responses("item_without_type_or_role", {{"input", {{{"content", "x"}}}}}, "input[0].type");
  responses("item_type_unknown", {{"input", {{{"type", "teleport"}}}}}, "input[0].type");
  responses("item_reference", {{"input", {{{"type", "item_reference"}, {"id", "msg_1"}}}}},
            "input[0].type");
  responses("role_tool", {{"input", {{{"role", "tool"}, {"content", "x"}}}}}, "input[0].role");
  responses("content_missing", {{"input", {{{"role", "user"}}}}}, "input[0].content");
  responses("content_object", {{"input", {{{"role", "user"}, {"content", json::object()}}}}},
            "input[0].content");
  responses("input_image",
            {{"input", {{{"role", "user"},
                         {"content", {{{"type", "input_image"}, {"image_url", "u"}}}}}}}},
            "input[0].content[0].type");
  responses("function_call_without_arguments",
            {{"input", {{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}}}}},
            "input[0].arguments");
  responses("output_for_unknown_call",
            {{"input", {{{"type", "function_call_output"}, {"call_id", "c"}, {"output", "x"}}}}},
            "input[0].call_id");
  responses("reasoning_summary_string", {{"input", {{{"type", "reasoning"}, {"summary", "x"}}}}},
            "input[0].summary");
  responses("previous_response_id", {{"previous_response_id", "resp_1"}}, "previous_response_id");
  responses("conversation", {{"conversation", "conv_1"}}, "conversation");
  responses("background", {{"background", true}}, "background");
  responses("instructions_number", {{"instructions", 5}}, "instructions");
  responses("max_output_tokens_zero", {{"max_output_tokens", 0}}, "max_output_tokens");
  responses("temperature_3", {{"temperature", 3}}, "temperature");
  responses("top_p_zero", {{"top_p", 0}}, "top_p");
  responses("stream_string", {{"stream", "yes"}}, "stream");
  responses("tools_object", {{"tools", json::object()}}, "tools");
  responses("tool_without_type", {{"tools", {{{"name", "f"}}}}}, "tools[0].type");
  responses("function_tool_without_name", {{"tools", {{{"type", "function"}}}}}, "tools[0].name");
  responses("function_tool_bad_name", {{"tools", {{{"type", "function"}, {"name", "a b"}}}}},
            "tools[0].name");
  responses("function_tool_parameters_array",
            {{"tools", {{{"type", "function"}, {"name", "f"}, {"parameters", json::array()}}}}},
            "tools[0].parameters");
  responses("tool_choice_required_without_function_tools",
            {{"tools", {{{"type", "web_search"}}}}, {"tool_choice", "required"}}, "tool_choice");
  responses("tool_choice_undeclared",
            {{"tools", {{{"type", "function"}, {"name", "f"}}}},
             {"tool_choice", {{"type", "function"}, {"name", "g"}}}},
            "tool_choice.name");
  responses("tool_choice_hosted", {{"tool_choice", {{"type", "web_search_preview"}}}},
            "tool_choice.type");
  responses("text_format_unknown", {{"text", {{"format", {{"type", "yaml"}}}}}},
            "text.format.type");
  responses("json_schema_without_name",
            {{"text", {{"format", {{"type", "json_schema"}, {"schema", json::object()}}}}}},
            "text.format.name");
  responses("reasoning_effort_max", {{"reasoning", {{"effort", "max"}}}}, "reasoning.effort");
  responses("metadata_number_value", {{"metadata", {{"k", 1}}}}, "metadata.k");
  responses("include_number", {{"include", {1}}}, "include[0]");
  body("responses_unknown_model", ResponsesWith({{"model", "no-such-model"}}), std::nullopt, 404,
       resp);
  c.push_back({"responses_get",
               "GET " + resp + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n", 405,
               std::nullopt});

  // Anthropic Messages API (docs/anthropic_api.md): errors in Anthropic's shape.
  const std::string msgs = "/v1/messages";
  auto anthropic = [&](std::string name, const std::string& b, int status = 400,
                       const std::string& path = "/v1/messages") {
    c.push_back({"messages_" + std::move(name), Post(path, b), status, std::nullopt, true});
  };
  auto messages = [&](std::string name, const json& patch) {
    anthropic(std::move(name), MessagesWith(patch));
  };
  const json tool = {{"name", "f"}, {"input_schema", {{"type", "object"}}}};
  anthropic("broken_json", "{\"messages\":");
  anthropic("body_is_array", "[]");
  anthropic("utf8_invalid", R"({"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":")" +
                                std::string("\xff") + R"("}]})");
  anthropic("nesting_100000_deep", std::string(100000, '['));
  messages("model_missing", {{"model", nullptr}});
  messages("max_tokens_missing", {{"max_tokens", nullptr}});
  messages("max_tokens_zero", {{"max_tokens", 0}});
  messages("max_tokens_string", {{"max_tokens", "1"}});
  messages("messages_missing", {{"messages", nullptr}});
  messages("messages_empty", {{"messages", json::array()}});
  messages("messages_object", {{"messages", json::object()}});
  messages("role_system", {{"messages", {{{"role", "system"}, {"content", "x"}}}}});
  messages("content_missing", {{"messages", {{{"role", "user"}}}}});
  messages("content_number", {{"messages", {{{"role", "user"}, {"content", 5}}}}});
  messages("block_without_type", {{"messages", {{{"role", "user"}, {"content", {{{"text", "x"}}}}}}}});
  messages("block_image", {{"messages", {{{"role", "user"}, {"content", {{{"type", "image"},
           {"source", {{"type", "url"}, {"url", "http://x"}}}}}}}}}});
  messages("text_block_without_text",
           {{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}}}}}}}});
  messages("tool_result_for_unknown_tool_use",
           {{"messages", {{{"role", "user"}, {"content", {{{"type", "tool_result"},
            {"tool_use_id", "toolu_x"}, {"content", "ok"}}}}}}}});
  messages("tool_use_in_user_message",
           {{"messages", {{{"role", "user"}, {"content", {{{"type", "tool_use"}, {"id", "a"},
            {"name", "f"}, {"input", json::object()}}}}}}}});
  messages("tool_use_input_array",
           {{"messages", {{{"role", "user"}, {"content", "x"}},
                          {{"role", "assistant"}, {"content", {{{"type", "tool_use"}, {"id", "a"},
                            {"name", "f"}, {"input", json::array()}}}}},
                          {{"role", "user"}, {"content", "y"}}}}});
  messages("final_assistant_prefill",
           {{"messages", {{{"role", "user"}, {"content", "x"}},
                          {{"role", "assistant"}, {"content", "Sure"}}}}});
  messages("system_number", {{"system", 5}});
  messages("system_image_block", {{"system", {{{"type", "image"}}}}});
  messages("tools_object", {{"tools", json::object()}});
  messages("tool_without_input_schema", {{"tools", {{{"name", "f"}}}}});
  messages("tool_bad_name", {{"tools", {{{"name", "a b"}, {"input_schema", json::object()}}}}});
  messages("tool_schema_array", {{"tools", {{{"name", "f"}, {"input_schema", json::array()}}}}});
  messages("tool_choice_string", {{"tools", {tool}}, {"tool_choice", "auto"}});
  messages("tool_choice_unknown_type", {{"tools", {tool}}, {"tool_choice", {{"type", "maybe"}}}});
  messages("tool_choice_any_without_tools", {{"tool_choice", {{"type", "any"}}}});
  messages("tool_choice_undeclared",
           {{"tools", {tool}}, {"tool_choice", {{"type", "tool"}, {"name", "g"}}}});
  messages("thinking_string", {{"thinking", "on"}});
  messages("thinking_enabled_without_budget", {{"thinking", {{"type", "enabled"}}}});
  messages("thinking_budget_over_max_tokens",
           {{"thinking", {{"type", "enabled"}, {"budget_tokens", 5}}}});
  messages("temperature_2", {{"temperature", 2}});
  messages("top_k_negative", {{"top_k", -1}});
  messages("top_p_zero", {{"top_p", 0}});
  messages("stop_sequences_string", {{"stop_sequences", "END"}});
  messages("stop_sequences_empty_string", {{"stop_sequences", {""}}});
  messages("stop_sequences_65", {{"stop_sequences", std::vector<std::string>(65, "s")}});
  messages("metadata_string", {{"metadata", "x"}});
  messages("stream_string", {{"stream", "yes"}});
  messages("output_config_format_yaml", {{"output_config", {{"format", {{"type", "yaml"}}}}}});
  anthropic("unknown_model", MessagesWith({{"model", "no-such-model"}}), 404);
  anthropic("count_tokens_broken_json", "{", 400, msgs + "/count_tokens");
  anthropic("count_tokens_messages_missing", MessagesWith({{"messages", nullptr}}), 400,
            msgs + "/count_tokens");
  anthropic("count_tokens_unknown_model", MessagesWith({{"model", "no-such-model"}}), 404,
            msgs + "/count_tokens");
  c.push_back({"messages_get",
               "GET " + msgs + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n", 405,
               std::nullopt, true});
  c.push_back({"messages_body_10_mb",
               Post(msgs, MessagesWith({{"system", std::string(10'000'000, 'a')}})), 413,
               std::nullopt, true});

  // /tokenize, /detokenize (docs/router.md), GET /v1/models/{id}: OpenAI's shape.
  body("tokenize_broken_json", "{", "", 400, "/tokenize");
  body("tokenize_prompt_missing", R"({"model":"tiny"})", "prompt", 400, "/tokenize");
  body("tokenize_prompt_number", R"({"model":"tiny","prompt":5})", "prompt", 400, "/tokenize");
  body("tokenize_with_pieces_string", R"({"prompt":"x","with_pieces":"yes"})", "with_pieces", 400,
       "/tokenize");
  body("tokenize_messages_bad_role", R"({"model":"tiny","messages":[{"role":"x","content":"y"}]})",
       "messages[0].role", 400, "/tokenize");
  body("tokenize_no_generation_prompt",
       R"({"model":"tiny","messages":[{"role":"user","content":"y"}],"add_generation_prompt":false})",
       "add_generation_prompt", 400, "/tokenize");
  body("tokenize_unknown_model", R"({"model":"no-such-model","prompt":"x"})", std::nullopt, 404,
       "/tokenize");
  body("detokenize_tokens_missing", R"({"model":"tiny"})", "tokens", 400, "/detokenize");
  body("detokenize_tokens_string", R"({"tokens":"1 2"})", "tokens", 400, "/detokenize");
  body("detokenize_negative_id", R"({"tokens":[1,-1]})", "tokens[1]", 400, "/detokenize");
  body("detokenize_id_outside_vocab", R"({"tokens":[99999]})", "tokens[0]", 400, "/detokenize");
  body("detokenize_float_id", R"({"tokens":[1.5]})", "tokens[0]", 400, "/detokenize");
  c.push_back({"get_tokenize",
               "GET /tokenize HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n", 405,
               std::nullopt});
  c.push_back({"model_by_unknown_id",
               "GET /v1/models/no-such-model HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
               404, "model"});

  // Unknown model, path, method.
  body("unknown_model", ChatWith({{"model", "no-such-model"}}), std::nullopt, 404);
  body("unknown_path", ValidChat().dump(), std::nullopt, 404, "/v1/nope");
  c.push_back({"get_on_post_route",
               "GET " + chat + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n", 405,
               std::nullopt});
  c.push_back({"delete_models",
               "DELETE /v1/models HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n", 405,
               std::nullopt});

  // Bad HTTP.
  c.push_back({"garbage_request_line", "HELLO THERE\r\n\r\n", 400, std::nullopt});
  c.push_back({"content_length_word",
               "POST " + chat + " HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n{}", 400,
               std::nullopt});
  c.push_back({"content_length_negative",
               "POST " + chat + " HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n{}", 400,
               std::nullopt});
  c.push_back(
      {"content_length_twice",
       "POST " + chat + " HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
       400, std::nullopt});
  c.push_back(
      {"bad_chunk_size",
       "POST " + chat +
           " HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
       400, std::nullopt});

  // Limits: 10 MB body (Content-Length, > the 8 MiB default), a declared terabyte, a chunked body
  // over the limit, a 20 KiB header (> 16 KiB).
  const std::string ten_mb = R"({"model":"tiny","messages":[{"role":"user","content":")" +
                             std::string(10'000'000, 'a') + R"("}]})";
  c.push_back({"body_10_mb", Post(chat, ten_mb), 413, std::nullopt});
  c.push_back({"content_length_1_tb",
               "POST " + chat + " HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000000000\r\n\r\n{",
               413, std::nullopt});
  {
    std::string chunked =
        "POST " + chat + " HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
    const std::string piece(1 << 20, 'a');
    for (int i = 0; i < 9; ++i) chunked += "100000\r\n" + piece + "\r\n";
    chunked += "0\r\n\r\n";
    c.push_back({"chunked_9_mib", chunked, 413, std::nullopt});
  }
  c.push_back(
      {"header_20_kib",
       "GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(20 << 10, 'h') + "\r\n\r\n", 431,
       std::nullopt});
  return c;
}

// The router answers /health and a valid request (it is alive and not stuck).
void ExpectServing(int port, const std::string& after) {
  EXPECT_EQ(Http(port, "GET", "/health").status, 200) << "after " << after;
  const RawHttpReply ok = Http(port, "POST", "/v1/chat/completions", ValidChat().dump());
  EXPECT_EQ(ok.status, 200) << "after " << after << ": " << ok.body;
}

// Checks the error body shape and, when asked, its param.
void ExpectErrorBody(const MalformedCase& c, const RawHttpReply& r) {
  const json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (c.anthropic) {
    ASSERT_TRUE(j.is_object() && j.size() == 2 && j.value("type", "") == "error" &&
                j.contains("error") && j["error"].is_object())
        << c.name << ": " << r.body;
    const std::string want = r.status == 400 || r.status == 405 ? "invalid_request_error"
                             : r.status == 404                  ? "not_found_error"
                             : r.status == 413                  ? "request_too_large"
                                                                : "?";
    EXPECT_EQ(j["error"].value("type", ""), want) << c.name << ": " << r.body;
    EXPECT_FALSE(j["error"].value("message", "").empty()) << c.name << ": " << r.body;
    return;
  }
  ASSERT_TRUE(j.is_object() && j.contains("error")) << c.name << ": " << r.body;
  const json& e = j["error"];
  for (const char* key : {"message", "type", "param", "code"}) {
    ASSERT_TRUE(e.contains(key)) << c.name << ": no error." << key << " in " << r.body;
  }
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << c.name;
  if (!c.param) return;
  if (c.param->empty()) {
    EXPECT_TRUE(e["param"].is_null()) << c.name << ": " << r.body;
  } else {
    EXPECT_EQ(e["param"], *c.param) << c.name << ": " << r.body;
  }
}

// A client that sends its request's start and then one byte every `gap`, forever (until the
// server answers or `give_up` passes). Returns the reply and when it arrived.
struct SlowResult {
  RawHttpReply reply;
  double seconds = 0;
};

SlowResult SendSlowly(int port, const std::string& start, const std::string& drip, milliseconds gap,
                      seconds give_up) {
  SlowResult out;
  const auto t0 = steady_clock::now();
  ClientSocket s(port);
  if (!s.valid() || !s.Send(start)) return out;
  while (steady_clock::now() - t0 < give_up) {
    if (s.Readable(gap)) break;
    if (!s.Send(drip)) break;
  }
  out.reply = s.ReadReply(seconds(10));
  out.seconds = std::chrono::duration<double>(steady_clock::now() - t0).count();
  return out;
}

// The corpus's size, exactly: a case lost (a loop that stops early, a block deleted in an edit)
// fails here instead of shrinking the check unnoticed. A case added changes it on purpose, with
// the count in docs/testing.md.
constexpr size_t kCorpusSize = 215;

TEST(RouterMalformedRequestsTest, EachGetsItsDocumented4xxAndTheRouterKeepsServing) {
  // Checked before anything starts: a failed ASSERT must not leave the slow clients' threads.
  const std::vector<MalformedCase> corpus = Corpus();
  ASSERT_EQ(corpus.size(), kCorpusSize);
  std::set<std::string> names;
  for (const MalformedCase& c : corpus) {
    EXPECT_TRUE(names.insert(c.name).second) << "two cases named " << c.name;
  }
  RouterService s;
  ASSERT_GT(s.port(), 0);
  const int port = s.port();

  // The slow clients run beside the corpus (they take the header / body timeouts: 10 s, 30 s).
  SlowResult slow_body, slow_chunked_body, slow_header;
  std::thread slow_body_thread([&] {
    slow_body = SendSlowly(port,
                           "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
                           "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
                           " ", milliseconds(500), seconds(60));
  });
  std::thread slow_chunked_thread([&] {
    slow_chunked_body = SendSlowly(port,
                                   "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\n",
                                   "1\r\n \r\n", milliseconds(500), seconds(60));
  });
  std::thread slow_header_thread([&] {
    slow_header = SendSlowly(port, "GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: ", "a",
                             milliseconds(500), seconds(60));
  });

  for (const MalformedCase& c : corpus) {
    SCOPED_TRACE(c.name);
    const RawHttpReply r = SendRaw(port, c.request, seconds(30));
    EXPECT_FALSE(r.timed_out) << c.name << ": no answer within 30 s";
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.headers << "\n" << r.body;
    if (r.status >= 400) ExpectErrorBody(c, r);
    ExpectServing(port, c.name);
  }

  slow_body_thread.join();
  slow_chunked_thread.join();
  slow_header_thread.join();
  // docs/router_http.md: body_timeout 30 s from the end of the header, header_timeout 10 s.
  EXPECT_EQ(slow_body.reply.status, 408) << slow_body.reply.headers;
  EXPECT_GT(slow_body.seconds, 25);
  EXPECT_LT(slow_body.seconds, 45);
  EXPECT_EQ(slow_chunked_body.reply.status, 408) << slow_chunked_body.reply.headers;
  EXPECT_GT(slow_chunked_body.seconds, 25);
  EXPECT_LT(slow_chunked_body.seconds, 45);
  EXPECT_EQ(slow_header.reply.status, 408) << slow_header.reply.headers;
  EXPECT_GT(slow_header.seconds, 7);
  EXPECT_LT(slow_header.seconds, 25);
  for (const SlowResult* r : {&slow_body, &slow_chunked_body, &slow_header}) {
    ExpectErrorBody({"slow", "", 408, std::nullopt}, r->reply);
  }
  ExpectServing(port, "the slow clients");
}

}  // namespace
}  // namespace deltaserve
