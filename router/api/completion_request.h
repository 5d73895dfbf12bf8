#pragma once
// The validated form of an OpenAI POST /v1/chat/completions or /v1/completions body, as plain
// C++ values. Produced by request_parser.h; consumed by routing, chat rendering and the
// worker client. Optional sampling fields stay unset when the client did not send them, so
// per-model defaults (config) can fill them in later.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace deltaserve::router::api {

enum class Endpoint { kChatCompletions, kCompletions };

// The API a request came in through, for the settings that differ per API (the router config's
// clamp_max_tokens). Responses and Anthropic requests become chat requests (Endpoint).
enum class Api { kChatCompletions, kCompletions, kResponses, kAnthropic };

// Most choices one request may ask for (`n`); the worker's own limit is the same
// (worker/sched/scheduler.h kMaxChoices) and its --parallel.
inline constexpr int32_t kMaxChoices = 16;

// One chat message. Content-part arrays are joined into `content` (text parts only).
struct ChatMessage {
  std::string role;  // "system", "developer", "user", "assistant" or "tool"
  std::string content;
  bool content_null = false;      // an assistant message with tool_calls and no content
  std::string name;               // optional participant name
  std::string tool_call_id;       // role "tool": the call this answers
  std::string tool_calls_json;    // role "assistant": its tool_calls array as JSON, or empty
  // role "assistant": earlier reasoning, if the client sent it (`reasoning_content`, or
  // `reasoning` as some clients name it).
  std::string reasoning_content;
};

struct SamplingParams {
  std::optional<double> temperature;         // [0, 2]
  std::optional<double> top_p;               // (0, 1]
  std::optional<int32_t> top_k;              // -1 or 0: off; else >= 1
  std::optional<double> min_p;               // [0, 1]
  double presence_penalty = 0;               // [-2, 2]
  double frequency_penalty = 0;              // [-2, 2]
  std::optional<double> repetition_penalty;  // (0, 2]
  std::optional<int64_t> seed;
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id, bias in [-100, 100]
};

enum class ToolChoice { kAuto, kNone, kRequired, kFunction };

// `response_format` (chat and completions): "text" (default), "json_object" or "json_schema".
struct ResponseFormat {
  enum class Type { kText, kJsonObject, kJsonSchema, kRegex };
  Type type = Type::kText;
  std::string name;         // json_schema.name
  std::string schema_json;  // json_schema.schema as compact JSON ("{}" when absent)
  bool strict = false;      // json_schema.strict
  std::string regex;        // kRegex: the whole output matches it (vLLM's guided decoding)
  std::string param = "response_format";  // the request field it came from, for errors
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  Api api = Api::kChatCompletions;  // set by each API's parser
  std::string model;

  // Chat: the conversation (at least one message).
  std::vector<ChatMessage> messages;
  std::string tools_json;               // "tools" as JSON, or empty
  std::string tool_choice_json;         // "tool_choice" as JSON, or empty
  // "tool_choice" read: "required" and a named function force a call (constrained decoding in
  // the model's call format, docs/structured_outputs.md); "auto" is the default.
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_function;     // kFunction: the function's name (declared in tools)
  std::optional<bool> enable_thinking;  // chat_template_kwargs.enable_thinking
  // chat_template_kwargs as sent (a JSON object, client's key order), or empty; every key
  // reaches the chat template as a top-level variable.
  std::string chat_template_kwargs_json;
  // parallel_tool_calls: false keeps only the first call the model made.
  bool parallel_tool_calls = true;
  // thinking_budget (body, or chat_template_kwargs.thinking_budget): most reasoning tokens,
  // GenerateRequest.reasoning_budget. Unset: the worker's --reasoning-budget.
  std::optional<int32_t> thinking_budget;
  // Jinja text that replaces the model file's chat template (the model's `chat_template` in the
  // router config, or --chat-template); filled by routing from the candidate's defaults.
  std::string chat_template_override;
  // The model's `allow_special_tokens_in_content` in the router config, filled by routing (never
  // from the body): true tokenizes the messages' text with special-token parsing, so typed
  // "<|im_start|>" becomes the control token again (docs/chat.md, "Special tokens in content").
  bool allow_special_tokens_in_content = false;

  // Completions: one prompt, as text or as token ids.
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  // Completions: `parse_special_tokens` in the body (default true). A raw text prompt is the
  // caller's own markup, so its control-token text ("<|im_start|>") is parsed, as vLLM and
  // llama.cpp's server do; false makes it ordinary text (docs/chat.md).
  bool parse_special_tokens = true;

  std::optional<int32_t> max_tokens;  // max_completion_tokens, else max_tokens; >= 1
  // Validated: a json_schema's schema compiles (common/grammar/output_constraint.h).
  ResponseFormat response_format;
  SamplingParams sampling;
  std::vector<std::string> stop;  // at most 4, none empty

  // `n`: independent choices, in [1, kMaxChoices]. The worker prefills the prompt once and forks
  // it; choice i samples with seed + i (docs/chat.md, "n > 1").
  int32_t n = 1;

  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  int32_t top_logprobs = 0;  // [0, 20]; completions' integer `logprobs` lands here too
  std::string user;

  std::string request_id;  // the HTTP request's id (X-Request-Id), for logs and the worker
  std::string authorization;  // the Authorization header as sent (API keys); never logged
  // The body as the client sent it (chat completions, completions, Messages), shared by the
  // copies routing makes: an upstream that speaks the client's API gets it passed through
  // (router/upstream/upstream_request.h). Null for requests made otherwise (Responses).
  std::shared_ptr<const std::string> raw_body;
};

}  // namespace deltaserve::router::api
