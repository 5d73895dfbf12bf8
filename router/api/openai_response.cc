#include "router/api/openai_response.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/str_cat.h"

namespace deltaserve::router::api {
namespace {

using json = nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// `s` with every byte that does not start a well-formed UTF-8 sequence replaced by U+FFFD
// (object keys cannot go through nlohmann's replacing dump).
std::string ValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    }
    if (ok && len > 1) {
      uint32_t cp = c & (0xFF >> (len + 1));
      for (size_t k = 1; k < len; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

json Bytes(std::string_view s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

// Chat shape: {"content":[{"token","logprob","bytes","top_logprobs":[...]}],"refusal":null}
json ChatLogprobs(const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const auto& t : lps) {
    json top = json::array();
    for (const auto& a : t.top) {
      top.push_back({{"token", a.token}, {"logprob", a.logprob}, {"bytes", Bytes(a.token)}});
    }
    content.push_back({{"token", t.token},
                       {"logprob", t.logprob},
                       {"bytes", Bytes(t.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

// Completions shape: parallel arrays; top_logprobs as {token: logprob} maps.
json TextLogprobs(const std::vector<TokenLogprob>& lps, int64_t* offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  for (const auto& t : lps) {
    tokens.push_back(t.token);
    token_lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& a : t.top) top[ValidUtf8(a.token)] = a.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(*offset);
    *offset += static_cast<int64_t>(t.token.size());
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

json UsageObject(const Usage& u) {
  json usage = {{"prompt_tokens", u.prompt_tokens},
                {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.prompt_tokens + u.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
                {"completion_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}}};
  if (u.max_tokens_clamped) {
    usage["max_tokens_clamped"] = {{"from", u.max_tokens_clamped->from},
                                   {"to", u.max_tokens_clamped->to}};
  }
  return usage;
}

json Envelope(const ResponseMeta& meta, std::string_view object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

// A streamed chunk with one choice; "usage": null on every chunk when the stream ends with a
// usage chunk (OpenAI's shape with include_usage).
std::string ChunkJson(const ResponseMeta& meta, std::string_view object, json choice,
                      bool include_usage) {
  json body = Envelope(meta, object);
  body["choices"] = json::array({std::move(choice)});
  if (include_usage) body["usage"] = nullptr;
  return Dump(body);
}

}  // namespace

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kToolCalls:
      return "tool_calls";
    case FinishReason::kContentFilter:
      return "content_filter";
  }
  return "stop";
}

std::string NewResponseId(std::string_view prefix) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(prefix);
  std::uniform_int_distribution<int> pick(0, sizeof(kAlphabet) - 2);
  for (int i = 0; i < 24; ++i) id.push_back(kAlphabet[pick(rng)]);
  return id;
}

int64_t UnixSecondsNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string UsageJson(const Usage& usage) { return Dump(UsageObject(usage)); }

std::string MaxTokensClampedHeaderValue(const MaxTokensClamped& clamped) {
  return absl::StrCat(clamped.from, "->", clamped.to);
}

std::string ChatCompletionJson(const ResponseMeta& meta, const CompletionChoice& choice,
                               const Usage& usage) {
  return ChatCompletionJson(meta, std::vector<CompletionChoice>{choice}, usage);
}

std::string TextCompletionJson(const ResponseMeta& meta, const CompletionChoice& choice,
                               const Usage& usage) {
  return TextCompletionJson(meta, std::vector<CompletionChoice>{choice}, usage);
}

namespace {

json ChatChoiceJson(const CompletionChoice& choice, int index) {
  json message = {
      {"role", "assistant"},
      {"content", choice.content_null && choice.text.empty() ? json(nullptr) : json(choice.text)}};
  if (!choice.reasoning_content.empty()) {
    message["reasoning_content"] = choice.reasoning_content;
    message["reasoning"] = choice.reasoning_content;
  }
  if (!choice.tool_calls.empty()) {
    json calls = json::array();
    for (const ToolCall& call : choice.tool_calls) {
      calls.push_back({{"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    message["tool_calls"] = std::move(calls);
  }
  return {{"index", index},
          {"message", std::move(message)},
          {"logprobs", choice.with_logprobs ? ChatLogprobs(choice.logprobs) : json(nullptr)},
          {"finish_reason", FinishReasonName(choice.finish_reason)}};
}

json TextChoiceJson(const CompletionChoice& choice, int index) {
  int64_t offset = 0;
  return {
      {"index", index},
      {"text", choice.text},
      {"logprobs", choice.with_logprobs ? TextLogprobs(choice.logprobs, &offset) : json(nullptr)},
      {"finish_reason", FinishReasonName(choice.finish_reason)}};
}

}  // namespace

std::string ChatCompletionJson(const ResponseMeta& meta, const std::vector<CompletionChoice>& choices,
                               const Usage& usage) {
  json body = Envelope(meta, "chat.completion");
  json out = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    out.push_back(ChatChoiceJson(choices[i], static_cast<int>(i)));
  }
  body["choices"] = std::move(out);
  body["usage"] = UsageObject(usage);
  return Dump(body);
}

std::string TextCompletionJson(const ResponseMeta& meta, const std::vector<CompletionChoice>& choices,
                               const Usage& usage) {
  json body = Envelope(meta, "text_completion");
  json out = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    out.push_back(TextChoiceJson(choices[i], static_cast<int>(i)));
  }
  body["choices"] = std::move(out);
  body["usage"] = UsageObject(usage);
  return Dump(body);
}

// ---- chat chunks ------------------------------------------------------------------------

ChatChunkWriter::ChatChunkWriter(ResponseMeta meta, bool include_usage, bool with_logprobs)
    : meta_(std::move(meta)), include_usage_(include_usage), with_logprobs_(with_logprobs) {}

std::string ChatChunkWriter::RoleChunk(int index) const {
  json c = {{"index", index},
            {"delta", {{"role", "assistant"}, {"content", ""}}},
            {"logprobs", nullptr},
            {"finish_reason", nullptr}};
  return ChunkJson(meta_, "chat.completion.chunk", std::move(c), include_usage_);
}

std::string ChatChunkWriter::DeltaChunk(std::string_view content, std::string_view reasoning,
                                        const std::vector<TokenLogprob>& logprobs,
                                        int index) const {
  json delta = json::object();
  if (!content.empty() || reasoning.empty()) delta["content"] = content;
  if (!reasoning.empty()) {
    delta["reasoning_content"] = reasoning;
    delta["reasoning"] = reasoning;
  }
  json c = {{"index", index},
            {"delta", std::move(delta)},
            {"logprobs", with_logprobs_ ? ChatLogprobs(logprobs) : json(nullptr)},
            {"finish_reason", nullptr}};
  return ChunkJson(meta_, "chat.completion.chunk", std::move(c), include_usage_);
}

std::string ChatChunkWriter::ToolCallChunk(const ToolCallDelta& call, int index) const {
  json entry = {{"index", call.index}};
  if (!call.id.empty() || !call.name.empty()) {
    entry["id"] = call.id;
    entry["type"] = "function";
    entry["function"] = {{"name", call.name}, {"arguments", call.arguments}};
  } else {
    entry["function"] = {{"arguments", call.arguments}};
  }
  json c = {{"index", index},
            {"delta", {{"tool_calls", json::array({std::move(entry)})}}},
            {"logprobs", nullptr},
            {"finish_reason", nullptr}};
  return ChunkJson(meta_, "chat.completion.chunk", std::move(c), include_usage_);
}

std::string ChatChunkWriter::FinishChunk(FinishReason reason, int index) const {
  json c = {{"index", index},
            {"delta", json::object()},
            {"logprobs", nullptr},
            {"finish_reason", FinishReasonName(reason)}};
  return ChunkJson(meta_, "chat.completion.chunk", std::move(c), include_usage_);
}

std::string ChatChunkWriter::UsageChunk(const Usage& usage) const {
  json body = Envelope(meta_, "chat.completion.chunk");
  body["choices"] = json::array();
  body["usage"] = UsageObject(usage);
  return Dump(body);
}

// ---- text chunks ------------------------------------------------------------------------

TextChunkWriter::TextChunkWriter(ResponseMeta meta, bool include_usage, bool with_logprobs)
    : meta_(std::move(meta)), include_usage_(include_usage), with_logprobs_(with_logprobs) {}

std::string TextChunkWriter::DeltaChunk(std::string_view text,
                                        const std::vector<TokenLogprob>& logprobs, int index) {
  const size_t at = static_cast<size_t>(std::max(index, 0));
  if (text_offsets_.size() <= at) text_offsets_.resize(at + 1, 0);
  int64_t& offset = text_offsets_[at];
  json c = {{"index", index},
            {"text", text},
            {"logprobs", with_logprobs_ ? TextLogprobs(logprobs, &offset) : json(nullptr)},
            {"finish_reason", nullptr}};
  if (!with_logprobs_) offset += static_cast<int64_t>(text.size());
  return ChunkJson(meta_, "text_completion", std::move(c), include_usage_);
}

std::string TextChunkWriter::FinishChunk(FinishReason reason, int index) const {
  json c = {{"index", index},
            {"text", ""},
            {"logprobs", nullptr},
            {"finish_reason", FinishReasonName(reason)}};
  return ChunkJson(meta_, "text_completion", std::move(c), include_usage_);
}

std::string TextChunkWriter::UsageChunk(const Usage& usage) const {
  json body = Envelope(meta_, "text_completion");
  body["choices"] = json::array();
  body["usage"] = UsageObject(usage);
  return Dump(body);
}

}  // namespace deltaserve::router::api
