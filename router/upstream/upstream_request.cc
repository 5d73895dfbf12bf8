#include "router/upstream/upstream_request.h"

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"
#include "router/api/api_error.h"

namespace deltaserve::router::upstream {
namespace {

using json = nlohmann::ordered_json;
using api::CompletionRequest;

json Parse(const std::string& text) {
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

absl::Status Untranslatable(std::string_view param, std::string_view what,
                            const UpstreamConfig& u) {
  return api::InvalidRequestError(
      param, "unsupported_value",
      absl::StrCat(common::Sv(what), " cannot be translated for the ",
                   common::Sv(UpstreamKindName(u.kind)),
                   " upstream '", u.name, "' (", u.kind == UpstreamKind::kAnthropic
                                                    ? "Anthropic Messages API"
                                                    : "OpenAI chat completions API",
                   ")"));
}

// The client's own body with the upstream's model and a stream with usage.
absl::StatusOr<std::string> PassThrough(const CompletionRequest& r, const UpstreamConfig& u) {
  json body = Parse(*r.raw_body);
  if (!body.is_object()) return absl::InternalError("the request body no longer parses");
  body["model"] = u.model;
  body["stream"] = true;
  if (u.kind == UpstreamKind::kOpenAi) {
    json options = body.contains("stream_options") && body["stream_options"].is_object()
                       ? body["stream_options"]
                       : json::object();
    options["include_usage"] = true;
    body["stream_options"] = std::move(options);
  }
  return Dump(body);
}

void Sampling(const CompletionRequest& r, json& body) {
  const api::SamplingParams& s = r.sampling;
  if (s.temperature) body["temperature"] = *s.temperature;
  if (s.top_p) body["top_p"] = *s.top_p;
}

absl::StatusOr<std::string> ToChatCompletions(const CompletionRequest& r, const UpstreamConfig& u) {
  json body = json::object();
  body["model"] = u.model;
  json messages = json::array();
  for (const api::ChatMessage& m : r.messages) {
    json msg = json::object();
    msg["role"] = m.role;
    if (m.content_null) {
      msg["content"] = nullptr;
    } else {
      msg["content"] = m.content;
    }
    if (!m.name.empty()) msg["name"] = m.name;
    if (!m.tool_call_id.empty()) msg["tool_call_id"] = m.tool_call_id;
    if (!m.tool_calls_json.empty()) msg["tool_calls"] = Parse(m.tool_calls_json);
    messages.push_back(std::move(msg));
  }
  body["messages"] = std::move(messages);
  if (r.max_tokens) body["max_tokens"] = *r.max_tokens;
  Sampling(r, body);
  if (r.sampling.top_k && *r.sampling.top_k > 0) {
    return Untranslatable("top_k", "top_k", u);
  }
  if (r.sampling.seed) body["seed"] = *r.sampling.seed;
  if (r.sampling.presence_penalty != 0) body["presence_penalty"] = r.sampling.presence_penalty;
  if (r.sampling.frequency_penalty != 0) body["frequency_penalty"] = r.sampling.frequency_penalty;
  if (!r.stop.empty()) body["stop"] = r.stop;
  if (!r.tools_json.empty()) body["tools"] = Parse(r.tools_json);
  switch (r.tool_choice) {
    case api::ToolChoice::kAuto:
      break;
    case api::ToolChoice::kNone:
      body["tool_choice"] = "none";
      break;
    case api::ToolChoice::kRequired:
      body["tool_choice"] = "required";
      break;
    case api::ToolChoice::kFunction:
      body["tool_choice"] = {{"type", "function"}, {"function", {{"name", r.tool_choice_function}}}};
      break;
  }
  if (!r.parallel_tool_calls && !r.tools_json.empty()) body["parallel_tool_calls"] = false;
  const api::ResponseFormat& f = r.response_format;
  if (f.type == api::ResponseFormat::Type::kJsonObject) {
    body["response_format"] = {{"type", "json_object"}};
  } else if (f.type == api::ResponseFormat::Type::kJsonSchema) {
    json schema = {{"name", f.name.empty() ? "output" : f.name}, {"schema", Parse(f.schema_json)}};
    if (f.strict) schema["strict"] = true;
    body["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else if (f.type == api::ResponseFormat::Type::kRegex) {
    return Untranslatable(f.param, "A regular-expression output format", u);
  }
  if (r.n > 1) body["n"] = r.n;
  if (r.logprobs) {
    body["logprobs"] = true;
    if (r.top_logprobs > 0) body["top_logprobs"] = r.top_logprobs;
  }
  if (!r.user.empty()) body["user"] = r.user;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  return Dump(body);
}

// Appends `block` to the last message when it has `role`, else starts a message.
void AddBlock(json& messages, std::string_view role, json block) {
  if (!messages.empty() && messages.back()["role"] == role) {
    messages.back()["content"].push_back(std::move(block));
    return;
  }
  messages.push_back({{"role", role}, {"content", json::array({std::move(block)})}});
}

absl::StatusOr<std::string> ToMessages(const CompletionRequest& r, const UpstreamConfig& u) {
  if (r.endpoint == api::Endpoint::kCompletions) {
    return Untranslatable("prompt", "A completions (raw prompt) request", u);
  }
  if (r.n > 1) return Untranslatable("n", "n > 1", u);
  if (r.logprobs) return Untranslatable("logprobs", "logprobs", u);
  if (!r.sampling.logit_bias.empty()) return Untranslatable("logit_bias", "logit_bias", u);
  if (r.sampling.presence_penalty != 0) {
    return Untranslatable("presence_penalty", "presence_penalty", u);
  }
  if (r.sampling.frequency_penalty != 0) {
    return Untranslatable("frequency_penalty", "frequency_penalty", u);
  }
  if (r.sampling.temperature && *r.sampling.temperature > 1) {
    return Untranslatable("temperature", "A temperature above 1", u);
  }
  if (r.response_format.type != api::ResponseFormat::Type::kText) {
    return Untranslatable(r.response_format.param, "A structured output format", u);
  }
  json body = json::object();
  body["model"] = u.model;
  std::string system;
  json messages = json::array();
  for (size_t i = 0; i < r.messages.size(); ++i) {
    const api::ChatMessage& m = r.messages[i];
    if (m.role == "system" || m.role == "developer") {
      if (!system.empty()) system += "\n\n";
      system += m.content;
    } else if (m.role == "user") {
      AddBlock(messages, "user", {{"type", "text"}, {"text", m.content}});
    } else if (m.role == "assistant") {
      if (!m.content.empty()) {
        AddBlock(messages, "assistant", {{"type", "text"}, {"text", m.content}});
      }
      if (!m.tool_calls_json.empty()) {
        const json calls = Parse(m.tool_calls_json);
        for (const json& call : calls.is_array() ? calls : json::array()) {
          const json fn = call.value("function", json::object());
          json input = Parse(fn.value("arguments", std::string("{}")));
          if (!input.is_object()) {
            return Untranslatable(absl::StrCat("messages[", i, "].tool_calls"),
                                  "Tool-call arguments that are not a JSON object", u);
          }
          AddBlock(messages, "assistant",
                   {{"type", "tool_use"}, {"id", call.value("id", std::string())},
                    {"name", fn.value("name", std::string())}, {"input", std::move(input)}});
        }
      }
      if (m.content.empty() && m.tool_calls_json.empty()) {
        AddBlock(messages, "assistant", {{"type", "text"}, {"text", ""}});
      }
    } else if (m.role == "tool") {
      AddBlock(messages, "user",
               {{"type", "tool_result"}, {"tool_use_id", m.tool_call_id}, {"content", m.content}});
    } else {
      return Untranslatable(absl::StrCat("messages[", i, "].role"),
                            absl::StrCat("A message of role '", m.role, "'"), u);
    }
  }
  if (!system.empty()) body["system"] = system;
  body["messages"] = std::move(messages);
  const int32_t max_tokens = r.max_tokens.value_or(kDefaultAnthropicMaxTokens);
  body["max_tokens"] = max_tokens;
  Sampling(r, body);
  if (r.sampling.top_k && *r.sampling.top_k > 0) body["top_k"] = *r.sampling.top_k;
  if (!r.stop.empty()) body["stop_sequences"] = r.stop;
  if (!r.tools_json.empty()) {
    json tools = json::array();
    const json chat_tools = Parse(r.tools_json);
    for (const json& t : chat_tools.is_array() ? chat_tools : json::array()) {
      const json fn = t.value("function", json::object());
      json tool = {{"name", fn.value("name", std::string())}};
      if (fn.contains("description")) tool["description"] = fn["description"];
      tool["input_schema"] = fn.contains("parameters") && fn["parameters"].is_object()
                                 ? fn["parameters"]
                                 : json{{"type", "object"}};
      tools.push_back(std::move(tool));
    }
    body["tools"] = std::move(tools);
    json choice;
    switch (r.tool_choice) {
      case api::ToolChoice::kAuto:
        choice = {{"type", "auto"}};
        break;
      case api::ToolChoice::kNone:
        choice = {{"type", "none"}};
        break;
      case api::ToolChoice::kRequired:
        choice = {{"type", "any"}};
        break;
      case api::ToolChoice::kFunction:
        choice = {{"type", "tool"}, {"name", r.tool_choice_function}};
        break;
    }
    if (!r.parallel_tool_calls) choice["disable_parallel_tool_use"] = true;
    body["tool_choice"] = std::move(choice);
  }
  // Thinking only when asked for; Anthropic's budget is at least 1,024 and below max_tokens.
  if (r.enable_thinking.value_or(false) || r.thinking_budget) {
    const int32_t budget = std::max(1024, r.thinking_budget.value_or(max_tokens / 2));
    if (budget < max_tokens) body["thinking"] = {{"type", "enabled"}, {"budget_tokens", budget}};
  }
  if (!r.user.empty()) body["metadata"] = {{"user_id", r.user}};
  body["stream"] = true;
  return Dump(body);
}

}  // namespace

absl::StatusOr<UpstreamHttpRequest> BuildUpstreamRequest(const CompletionRequest& request,
                                                         const UpstreamConfig& upstream,
                                                         const UpstreamUrl& url) {
  UpstreamHttpRequest out;
  const bool openai = upstream.kind == UpstreamKind::kOpenAi;
  out.path = url.path + (!openai ? "/messages"
                         : request.endpoint == api::Endpoint::kCompletions ? "/completions"
                                                                           : "/chat/completions");
  const bool same_api =
      request.raw_body != nullptr &&
      (openai ? request.api == api::Api::kChatCompletions || request.api == api::Api::kCompletions
              : request.api == api::Api::kAnthropic);
  absl::StatusOr<std::string> body;
  try {
    body = same_api ? PassThrough(request, upstream)
           : openai ? ToChatCompletions(request, upstream)
                    : ToMessages(request, upstream);
  } catch (const nlohmann::json::exception& e) {  // not expected: the parsers checked the JSON
    body = absl::InternalError(absl::StrCat("building the upstream request: ", e.what()));
  }
  if (!body.ok()) return body.status();
  out.body = std::move(*body);
  out.passed_through = same_api;
  return out;
}

std::string UpstreamHttpRequestBytes(const UpstreamHttpRequest& request,
                                     const UpstreamConfig& upstream, const UpstreamUrl& url,
                                     const std::string& request_id) {
  const bool default_port = url.port == (url.tls ? 443 : 80);
  const bool v6 = url.host.find(':') != std::string::npos;
  std::string host = v6 ? absl::StrCat("[", url.host, "]") : url.host;
  if (!default_port) absl::StrAppend(&host, ":", url.port);
  std::string out = absl::StrCat("POST ", request.path.empty() ? "/" : request.path,
                                 " HTTP/1.1\r\nHost: ", host,
                                 "\r\nUser-Agent: deltaserve-router\r\n"
                                 "Content-Type: application/json\r\n"
                                 "Accept: text/event-stream\r\nAccept-Encoding: identity\r\n"
                                 "Connection: keep-alive\r\nContent-Length: ",
                                 request.body.size(), "\r\n");
  if (!request_id.empty()) absl::StrAppend(&out, "X-Request-Id: ", request_id, "\r\n");
  if (upstream.kind == UpstreamKind::kAnthropic) {
    absl::StrAppend(&out, "anthropic-version: ", kAnthropicVersion, "\r\n");
    if (!upstream.api_key.empty()) absl::StrAppend(&out, "x-api-key: ", upstream.api_key, "\r\n");
  } else if (!upstream.api_key.empty()) {
    absl::StrAppend(&out, "Authorization: Bearer ", upstream.api_key, "\r\n");
  }
  out += "\r\n";
  out += request.body;
  return out;
}

}  // namespace deltaserve::router::upstream
