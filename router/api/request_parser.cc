#include "router/api/request_parser.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/str_util.h"
#include "router/api/api_error.h"
#include "router/api/internal/chat_tools_validation.h"
#include "router/api/internal/json_fields.h"
#include "router/api/internal/reasoning_fields.h"
#include "router/api/internal/response_format.h"
#include "router/api/internal/unserved_fields.h"

namespace deltaserve::router::api {
namespace {

using common::Sv;
using internal::LimitError;
using internal::Member;
using internal::ReadBool;
using internal::ReadInt;
using internal::ReadNumber;
using internal::ReadString;
using internal::TypeError;
using internal::Unsupported;
// Ordered: tools and tool_calls are re-serialized for the chat template, which must see the
// client's key order (as Hugging Face renders it), not nlohmann::json's sorted one.
using json = nlohmann::ordered_json;

constexpr int kMaxTopLogprobs = 20;
constexpr int64_t kMaxTokensLimit = 1 << 30;
constexpr size_t kMaxPromptTokens = 1 << 24;

// "content": a string, or an array of parts of which only {"type":"text","text":...} is
// accepted; text parts are joined without a separator (as OpenAI's tokenization does).
absl::Status ParseContent(const json& content, const std::string& path, ChatMessage* m) {
  if (content.is_string()) {
    m->content = content.get<std::string>();
    return absl::OkStatus();
  }
  if (!content.is_array()) return TypeError(path, "a string or an array of content parts", content);
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    std::string ppath = absl::StrCat(path, "[", i, "]");
    if (!part.is_object()) return TypeError(ppath, "an object", part);
    const json* type = Member(part, "type");
    if (type == nullptr) {
      return InvalidRequestError(absl::StrCat(ppath, ".type"), "missing_required_parameter",
                                 absl::StrCat("'", ppath, ".type' is required"));
    }
    if (!type->is_string()) return TypeError(absl::StrCat(ppath, ".type"), "a string", *type);
    if (type->get<std::string>() != "text") {
      return Unsupported(absl::StrCat(ppath, ".type"),
                         absl::StrCat("content part type '", type->get<std::string>(),
                                      "' is not supported; only 'text' parts are"));
    }
    const json* text = Member(part, "text");
    if (text == nullptr || !text->is_string()) {
      return text == nullptr
                 ? InvalidRequestError(absl::StrCat(ppath, ".text"), "missing_required_parameter",
                                       absl::StrCat("'", ppath, ".text' is required"))
                 : TypeError(absl::StrCat(ppath, ".text"), "a string", *text);
    }
    m->content += text->get<std::string>();
  }
  return absl::OkStatus();
}

absl::Status ParseMessage(const json& msg, size_t index, ChatMessage* m) {
  std::string path = absl::StrCat("messages[", index, "]");
  if (!msg.is_object()) return TypeError(path, "an object", msg);
  std::optional<std::string> role;
  DS_RETURN_IF_ERROR(ReadString(msg, "role", path + ".role", &role));
  if (!role) {
    return InvalidRequestError(path + ".role", "missing_required_parameter",
                               absl::StrCat("'", path, ".role' is required"));
  }
  if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant" &&
      *role != "tool") {
    return InvalidRequestError(path + ".role", "invalid_value",
                               absl::StrCat("'", path,
                                            ".role' must be one of system, developer, "
                                            "user, assistant, tool; got '",
                                            *role, "'"));
  }
  m->role = *role;
  std::optional<std::string> s;
  DS_RETURN_IF_ERROR(ReadString(msg, "name", path + ".name", &s));
  if (s) m->name = *s;
  s.reset();
  DS_RETURN_IF_ERROR(ReadString(msg, "reasoning_content", path + ".reasoning_content", &s));
  // `reasoning` is type-checked even when `reasoning_content` wins (a wrong type was once
  // ignored there; found by the schemathesis run, docs/testing.md).
  std::optional<std::string> reasoning;
  DS_RETURN_IF_ERROR(ReadString(msg, "reasoning", path + ".reasoning", &reasoning));
  if (!s) s = std::move(reasoning);
  if (s) m->reasoning_content = *s;
  s.reset();
  DS_RETURN_IF_ERROR(ReadString(msg, "tool_call_id", path + ".tool_call_id", &s));
  if (s) m->tool_call_id = *s;

  if (const json* calls = Member(msg, "tool_calls")) {
    if (m->role != "assistant") {
      return InvalidRequestError(path + ".tool_calls", "invalid_value",
                                 "only assistant messages may carry 'tool_calls'");
    }
    if (!calls->is_array()) return TypeError(path + ".tool_calls", "an array", *calls);
    m->tool_calls_json = calls->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  if (m->role == "tool" && m->tool_call_id.empty()) {
    return InvalidRequestError(path + ".tool_call_id", "missing_required_parameter",
                               "a tool message needs 'tool_call_id'");
  }
  const json* content = Member(msg, "content");
  if (content == nullptr) {
    if (m->role == "assistant" && !m->tool_calls_json.empty()) {
      m->content_null = true;
      return absl::OkStatus();
    }
    return InvalidRequestError(path + ".content", "missing_required_parameter",
                               absl::StrCat("'", path, ".content' is required"));
  }
  return ParseContent(*content, path + ".content", m);
}

absl::Status ParseStop(const json& doc, CompletionRequest* r) {
  const json* stop = Member(doc, "stop");
  if (stop == nullptr) return absl::OkStatus();
  auto add = [r](const json& v, const std::string& path) -> absl::Status {
    if (!v.is_string()) return TypeError(path, "a string", v);
    if (v.get_ref<const std::string&>().empty()) {
      return InvalidRequestError(path, "invalid_value", "stop strings must not be empty");
    }
    if (v.get_ref<const std::string&>().size() > kMaxStopBytes) {
      return LimitError(path, "max_stop_bytes",
                        absl::StrCat("'", path, "' is longer than ", kMaxStopBytes, " bytes"));
    }
    r->stop.push_back(v.get<std::string>());
    return absl::OkStatus();
  };
  if (stop->is_string()) return add(*stop, "stop");
  if (!stop->is_array()) return TypeError("stop", "a string or an array of strings", *stop);
  if (stop->size() > kMaxStop) {
    return LimitError(
        "stop", "max_stop",
        absl::StrCat("'stop' may hold at most ", kMaxStop, " strings, got ", stop->size()));
  }
  for (size_t i = 0; i < stop->size(); ++i) {
    DS_RETURN_IF_ERROR(add((*stop)[i], absl::StrCat("stop[", i, "]")));
  }
  return absl::OkStatus();
}

absl::Status ParseLogitBias(const json& doc, SamplingParams* p) {
  const json* bias = Member(doc, "logit_bias");
  if (bias == nullptr) return absl::OkStatus();
  if (!bias->is_object()) return TypeError("logit_bias", "an object", *bias);
  if (bias->size() > kMaxLogitBias) {
    return LimitError("logit_bias", "max_logit_bias",
                      absl::StrCat("'logit_bias' may hold at most ", kMaxLogitBias,
                                   " entries, got ", bias->size()));
  }
  for (auto it = bias->begin(); it != bias->end(); ++it) {
    std::string path = absl::StrCat("logit_bias.", it.key());
    const std::string& key = it.key();
    int64_t id = -1;
    bool digits = !key.empty() && key.size() <= 10;
    for (char c : key) digits = digits && c >= '0' && c <= '9';
    if (digits) id = std::stoll(key);
    if (!digits || id > INT32_MAX) {
      return InvalidRequestError(path, "invalid_value",
                                 absl::StrCat("'logit_bias' keys must be token ids (non-negative "
                                              "integers), got '",
                                              key, "'"));
    }
    // The entry's own value: looking `key` up again would search the object per entry.
    std::optional<double> v;
    DS_RETURN_IF_ERROR(internal::CheckNumber(it.value(), path, -100, 100, false, &v));
    if (!v) return TypeError(path, "a number", it.value());
    p->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(*v));
  }
  return absl::OkStatus();
}

// Fields both endpoints share. `chat` selects chat's logprobs (boolean + top_logprobs) over
// completions' (an integer).
absl::Status ParseCommon(const json& doc, bool chat, CompletionRequest* r) {
  std::optional<std::string> model;
  DS_RETURN_IF_ERROR(ReadString(doc, "model", "model", &model));
  if (!model || model->empty()) {
    return InvalidRequestError("model", "missing_required_parameter", "'model' is required");
  }
  r->model = std::move(*model);

  std::optional<int64_t> i;
  DS_RETURN_IF_ERROR(ReadInt(doc, "max_tokens", "max_tokens", 1, kMaxTokensLimit, &i));
  if (i) r->max_tokens = static_cast<int32_t>(*i);
  i.reset();
  DS_RETURN_IF_ERROR(
      ReadInt(doc, "max_completion_tokens", "max_completion_tokens", 1, kMaxTokensLimit, &i));
  if (i) r->max_tokens = static_cast<int32_t>(*i);

  SamplingParams& p = r->sampling;
  DS_RETURN_IF_ERROR(ReadNumber(doc, "temperature", "temperature", 0, 2, false, &p.temperature));
  DS_RETURN_IF_ERROR(ReadNumber(doc, "top_p", "top_p", 0, 1, true, &p.top_p));
  DS_RETURN_IF_ERROR(ReadNumber(doc, "min_p", "min_p", 0, 1, false, &p.min_p));
  i.reset();
  DS_RETURN_IF_ERROR(ReadInt(doc, "top_k", "top_k", -1, INT32_MAX, &i));
  if (i) p.top_k = static_cast<int32_t>(*i);
  std::optional<double> d;
  DS_RETURN_IF_ERROR(ReadNumber(doc, "presence_penalty", "presence_penalty", -2, 2, false, &d));
  if (d) p.presence_penalty = *d;
  d.reset();
  DS_RETURN_IF_ERROR(ReadNumber(doc, "frequency_penalty", "frequency_penalty", -2, 2, false, &d));
  if (d) p.frequency_penalty = *d;
  DS_RETURN_IF_ERROR(ReadNumber(doc, "repetition_penalty", "repetition_penalty", 0, 2, true,
                                &p.repetition_penalty));
  DS_RETURN_IF_ERROR(ReadInt(doc, "seed", "seed", INT64_MIN, INT64_MAX, &p.seed));
  DS_RETURN_IF_ERROR(ParseLogitBias(doc, &p));
  DS_RETURN_IF_ERROR(ParseStop(doc, r));

  i.reset();
  DS_RETURN_IF_ERROR(ReadInt(doc, "n", "n", 1, INT32_MAX, &i));
  if (i && *i > kMaxChoices) {
    return InvalidRequestError("n", "invalid_value",
                               absl::StrCat("n must be at most ", kMaxChoices, ", got ", *i));
  }
  r->n = i ? static_cast<int32_t>(*i) : 1;

  std::optional<bool> b;
  DS_RETURN_IF_ERROR(ReadBool(doc, "stream", "stream", &b));
  r->stream = b.value_or(false);
  if (const json* so = Member(doc, "stream_options")) {
    if (!so->is_object()) return TypeError("stream_options", "an object", *so);
    if (!r->stream) {
      return InvalidRequestError("stream_options", "invalid_value",
                                 "'stream_options' is only allowed when 'stream' is true");
    }
    b.reset();
    DS_RETURN_IF_ERROR(ReadBool(*so, "include_usage", "stream_options.include_usage", &b));
    r->include_usage = b.value_or(false);
    // No obfuscation padding is sent either way (docs/api_fields.md): only its type matters.
    std::optional<bool> obfuscation;
    DS_RETURN_IF_ERROR(ReadBool(*so, "include_obfuscation", "stream_options.include_obfuscation",
                                &obfuscation));
  }

  if (chat) {
    b.reset();
    DS_RETURN_IF_ERROR(ReadBool(doc, "logprobs", "logprobs", &b));
    r->logprobs = b.value_or(false);
    i.reset();
    DS_RETURN_IF_ERROR(ReadInt(doc, "top_logprobs", "top_logprobs", 0, kMaxTopLogprobs, &i));
    if (i) {
      if (!r->logprobs) {
        return InvalidRequestError("top_logprobs", "invalid_value",
                                   "'top_logprobs' requires 'logprobs' to be true");
      }
      r->top_logprobs = static_cast<int32_t>(*i);
    }
  } else {
    i.reset();
    DS_RETURN_IF_ERROR(ReadInt(doc, "logprobs", "logprobs", 0, kMaxTopLogprobs, &i));
    if (i) {
      r->logprobs = true;
      r->top_logprobs = static_cast<int32_t>(*i);
    }
  }

  DS_RETURN_IF_ERROR(internal::ParseResponseFormat(doc, &r->response_format));
  DS_RETURN_IF_ERROR(internal::ParseGuidedDecoding(doc, &r->response_format));

  std::optional<std::string> user;
  DS_RETURN_IF_ERROR(ReadString(doc, "user", "user", &user));
  if (user) r->user = std::move(*user);
  return absl::OkStatus();
}

absl::Status ParsePrompt(const json& doc, CompletionRequest* r) {
  const json* prompt = Member(doc, "prompt");
  if (prompt == nullptr) {
    return InvalidRequestError("prompt", "missing_required_parameter", "'prompt' is required");
  }
  if (prompt->is_string()) {
    r->prompt = prompt->get<std::string>();
    return absl::OkStatus();
  }
  if (!prompt->is_array()) {
    return TypeError("prompt", "a string, an array of strings or an array of token ids", *prompt);
  }
  if (prompt->empty()) {
    return InvalidRequestError("prompt", "invalid_value", "'prompt' must not be empty");
  }
  const json& first = (*prompt)[0];
  if (first.is_string() || first.is_array()) {
    // A batch of prompts: one prompt per request here (n=1 semantics).
    if (prompt->size() != 1) {
      return Unsupported(
          "prompt", absl::StrCat("only one prompt per request is supported, got ", prompt->size()));
    }
    if (first.is_string()) {
      r->prompt = first.get<std::string>();
      return absl::OkStatus();
    }
  }
  const json& ids = first.is_array() ? first : *prompt;
  std::string base = first.is_array() ? "prompt[0]" : "prompt";
  if (ids.empty()) return InvalidRequestError(base, "invalid_value", "the prompt is empty");
  if (ids.size() > kMaxPromptTokens) {
    return InvalidRequestError(base, "invalid_value", "the prompt has too many tokens");
  }
  r->prompt_is_tokens = true;
  r->prompt_tokens.reserve(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    std::optional<int64_t> id = internal::AsInt(ids[k]);
    if (!id || *id < 0 || *id > INT32_MAX) {
      return InvalidRequestError(
          absl::StrCat(base, "[", k, "]"), "invalid_value",
          absl::StrCat("token ids must be integers in [0, 2^31), got ",
                       ids[k].dump(-1, ' ', false, json::error_handler_t::replace)));
    }
    r->prompt_tokens.push_back(static_cast<int32_t>(*id));
  }
  return absl::OkStatus();
}

}  // namespace

common::JsonReadLimits RequestJsonLimits(size_t body_bytes) {
  return {.max_depth = kMaxJsonDepth,
          .max_object_keys = kMaxObjectKeys,
          .max_array_elements = kMaxArrayElements,
          .max_containers = std::min(kMaxJsonContainers,
                                     kFreeJsonContainers + body_bytes / kJsonBytesPerContainer)};
}

absl::StatusOr<CompletionRequest> ParseChatCompletionRequest(std::string_view body) {
  absl::StatusOr<json> doc = internal::ParseJsonObject(body, RequestJsonLimits(body.size()));
  if (!doc.ok()) return doc.status();
  CompletionRequest r;
  r.endpoint = Endpoint::kChatCompletions;
  DS_RETURN_IF_ERROR(ParseCommon(*doc, /*chat=*/true, &r));

  const json* messages = Member(*doc, "messages");
  if (messages == nullptr) {
    return InvalidRequestError("messages", "missing_required_parameter", "'messages' is required");
  }
  if (!messages->is_array()) return TypeError("messages", "an array", *messages);
  if (messages->empty()) {
    return InvalidRequestError("messages", "invalid_value", "'messages' must not be empty");
  }
  if (messages->size() > kMaxMessages) {
    return LimitError("messages", "max_messages",
                      absl::StrCat("'messages' may hold at most ", kMaxMessages, " messages, got ",
                                   messages->size()));
  }
  r.messages.resize(messages->size());
  for (size_t k = 0; k < messages->size(); ++k) {
    DS_RETURN_IF_ERROR(ParseMessage((*messages)[k], k, &r.messages[k]));
  }
  DS_RETURN_IF_ERROR(internal::ValidateToolMessages(*messages, r));
  const json* tools = Member(*doc, "tools");
  DS_RETURN_IF_ERROR(internal::ValidateTools(tools));
  if (tools != nullptr) r.tools_json = tools->dump(-1, ' ', false, json::error_handler_t::replace);
  if (const json* choice = Member(*doc, "tool_choice")) {
    DS_RETURN_IF_ERROR(internal::ValidateToolChoice(choice, tools, &r));
    r.tool_choice_json = choice->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  std::optional<bool> parallel;
  DS_RETURN_IF_ERROR(ReadBool(*doc, "parallel_tool_calls", "parallel_tool_calls", &parallel));
  r.parallel_tool_calls = parallel.value_or(true);
  if ((r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kFunction) &&
      r.response_format.type != ResponseFormat::Type::kText) {
    // Both would constrain the same output: a call's markup is not a JSON document.
    const std::string& param = r.response_format.param;
    return InvalidRequestError(param, "invalid_value",
                               absl::StrCat("'", param,
                                            "' cannot be combined with a 'tool_choice' that "
                                            "forces a tool call"));
  }
  std::optional<int64_t> budget;
  if (const json* kwargs = Member(*doc, "chat_template_kwargs")) {
    if (!kwargs->is_object()) return TypeError("chat_template_kwargs", "an object", *kwargs);
    std::optional<bool> think;
    DS_RETURN_IF_ERROR(
        ReadBool(*kwargs, "enable_thinking", "chat_template_kwargs.enable_thinking", &think));
    r.enable_thinking = think;
    DS_RETURN_IF_ERROR(ReadInt(*kwargs, "thinking_budget", "chat_template_kwargs.thinking_budget",
                               0, INT32_MAX, &budget));
    r.chat_template_kwargs_json = kwargs->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  // The body's thinking_budget wins over the one inside chat_template_kwargs.
  DS_RETURN_IF_ERROR(ReadInt(*doc, "thinking_budget", "thinking_budget", 0, INT32_MAX, &budget));
  if (budget) r.thinking_budget = static_cast<int32_t>(*budget);
  // OpenAI's reasoning_effort: thinking on / off and a budget, as Responses' reasoning.effort.
  std::optional<std::string> s;
  DS_RETURN_IF_ERROR(ReadString(*doc, "reasoning_effort", "reasoning_effort", &s));
  if (s) DS_RETURN_IF_ERROR(internal::ApplyOpenAiEffort(*s, "reasoning_effort", &r));
  s.reset();
  DS_RETURN_IF_ERROR(ReadString(*doc, "verbosity", "verbosity", &s));
  if (s) DS_RETURN_IF_ERROR(internal::CheckVerbosity(*s, "verbosity"));
  DS_RETURN_IF_ERROR(internal::ReadSafetyIdentifier(*doc, &r));
  DS_RETURN_IF_ERROR(internal::CheckOpenAiServiceTier(*doc));
  DS_RETURN_IF_ERROR(internal::CheckChatUnservedFields(*doc));
  return r;
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body) {
  absl::StatusOr<json> doc = internal::ParseJsonObject(body, RequestJsonLimits(body.size()));
  if (!doc.ok()) return doc.status();
  CompletionRequest r;
  r.endpoint = Endpoint::kCompletions;
  r.api = Api::kCompletions;
  DS_RETURN_IF_ERROR(ParseCommon(*doc, /*chat=*/false, &r));
  DS_RETURN_IF_ERROR(ParsePrompt(*doc, &r));

  std::optional<bool> echo;
  DS_RETURN_IF_ERROR(ReadBool(*doc, "echo", "echo", &echo));
  if (echo.value_or(false)) return Unsupported("echo", "'echo' is not supported");
  std::optional<bool> parse_special;
  DS_RETURN_IF_ERROR(
      ReadBool(*doc, "parse_special_tokens", "parse_special_tokens", &parse_special));
  r.parse_special_tokens = parse_special.value_or(true);
  std::optional<int64_t> best_of;
  DS_RETURN_IF_ERROR(ReadInt(*doc, "best_of", "best_of", 1, INT32_MAX, &best_of));
  if (best_of && *best_of != 1) return Unsupported("best_of", "only best_of=1 is supported");
  std::optional<std::string> suffix;
  DS_RETURN_IF_ERROR(ReadString(*doc, "suffix", "suffix", &suffix));
  if (suffix && !suffix->empty()) return Unsupported("suffix", "'suffix' is not supported");
  return r;
}

}  // namespace deltaserve::router::api
