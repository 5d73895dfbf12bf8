#include "router/upstream/upstream_stream.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"

namespace deltaserve::router::upstream {
namespace {

using json = nlohmann::json;

// Most tool calls one answer may hold (an index beyond is a broken upstream).
constexpr int64_t kMaxToolCalls = 1024;

absl::StatusOr<json> ParseObject(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("the upstream sent an event that is not a JSON object");
  }
  return j;
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t Int(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

const json* Obj(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? &*it : nullptr;
}

// The upstream's own error object, as a status whose message is the upstream's.
absl::Status UpstreamError(const json& error) {
  std::string message = error.is_object() ? Str(error, "message") : std::string();
  if (message.empty()) message = "no message";
  return absl::UnavailableError(absl::StrCat("the upstream reported an error mid-stream: ",
                                             message.substr(0, 512)));
}

api::FinishReason OpenAiFinish(const std::string& reason) {
  if (reason == "length") return api::FinishReason::kLength;
  if (reason == "tool_calls" || reason == "function_call") return api::FinishReason::kToolCalls;
  if (reason == "content_filter") return api::FinishReason::kContentFilter;
  return api::FinishReason::kStop;
}

class OpenAiTranslator : public StreamTranslator {
 public:
  OpenAiTranslator(api::Endpoint endpoint, int n)
      : chat_(endpoint == api::Endpoint::kChatCompletions), ends_(static_cast<size_t>(n)) {}

  absl::Status OnEvent(const SseEvent& event, std::vector<api::GenerationDelta>* out) override {
    if (event.data == "[DONE]") {
      done_seen_ = true;
      return absl::OkStatus();
    }
    absl::StatusOr<json> chunk = ParseObject(event.data);
    if (!chunk.ok()) return chunk.status();
    return Chunk(*chunk, /*whole=*/false, out);
  }

  absl::Status ReadWhole(std::string_view body, std::vector<api::GenerationDelta>* out) override {
    absl::StatusOr<json> whole = ParseObject(body);
    if (!whole.ok()) return whole.status();
    absl::Status s = Chunk(*whole, /*whole=*/true, out);
    done_seen_ = true;
    return s;
  }

  bool done() const override {
    if (done_seen_) return true;
    for (const auto& e : ends_) {
      if (!e.has_value()) return false;
    }
    return usage_seen_;
  }

  bool CompleteAtEof() const override {
    if (done_seen_) return true;
    for (const auto& e : ends_) {
      if (!e.has_value()) return false;
    }
    return true;
  }

  api::GenerationEnd End() const override {
    api::GenerationEnd end;
    for (const auto& e : ends_) {
      api::ChoiceEnd ce;
      ce.finish_reason = e.value_or(api::FinishReason::kStop);
      ce.content_null_when_empty = chat_;
      end.choices.push_back(ce);
    }
    end.finish_reason = end.choices[0].finish_reason;
    end.content_null_when_empty = chat_;
    if (end.choices.size() == 1) end.choices.clear();
    end.usage = usage_;
    return end;
  }

 private:
  absl::Status Chunk(const json& chunk, bool whole, std::vector<api::GenerationDelta>* out) {
    if (auto it = chunk.find("error"); it != chunk.end() && !it->is_null()) {
      return UpstreamError(*it);
    }
    if (const json* usage = Obj(chunk, "usage")) {
      usage_seen_ = true;
      usage_.prompt_tokens = Int(*usage, "prompt_tokens");
      usage_.completion_tokens = Int(*usage, "completion_tokens");
      if (const json* d = Obj(*usage, "prompt_tokens_details")) {
        usage_.cached_tokens = Int(*d, "cached_tokens");
      }
      if (const json* d = Obj(*usage, "completion_tokens_details")) {
        usage_.reasoning_tokens = Int(*d, "reasoning_tokens");
      }
    }
    auto choices = chunk.find("choices");
    if (choices == chunk.end() || !choices->is_array()) return absl::OkStatus();
    for (const json& c : *choices) {
      if (!c.is_object()) continue;
      const int64_t index = Int(c, "index");
      if (index < 0 || index >= static_cast<int64_t>(ends_.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("the upstream sent choice ", index, " of ", ends_.size()));
      }
      api::GenerationDelta d;
      d.choice = static_cast<int32_t>(index);
      const json* delta = Obj(c, whole && chat_ ? "message" : "delta");
      if (!chat_) d.text = Str(c, "text");
      if (delta != nullptr) {
        d.text = Str(*delta, "content");
        d.reasoning_text = Str(*delta, "reasoning_content");
        if (d.reasoning_text.empty()) d.reasoning_text = Str(*delta, "reasoning");
        if (auto calls = delta->find("tool_calls"); calls != delta->end() && calls->is_array()) {
          int64_t position = 0;
          for (const json& call : *calls) {
            if (!call.is_object()) continue;
            const int64_t call_index = call.contains("index") ? Int(call, "index") : position;
            ++position;
            if (call_index < 0 || call_index >= kMaxToolCalls) {
              return absl::InvalidArgumentError(
                  absl::StrCat("the upstream sent tool call index ", call_index));
            }
            const json* fn = Obj(call, "function");
            const std::string id = Str(call, "id");
            const std::string name = fn != nullptr ? Str(*fn, "name") : std::string();
            const std::string args = fn != nullptr ? Str(*fn, "arguments") : std::string();
            // A call's first piece carries its id and name; arguments follow in their own.
            if (!id.empty() || !name.empty()) {
              d.tool_calls.push_back({static_cast<int>(call_index), id, name, ""});
            }
            if (!args.empty()) d.tool_calls.push_back({static_cast<int>(call_index), "", "", args});
          }
        }
      }
      if (!d.text.empty() || !d.reasoning_text.empty() || !d.tool_calls.empty()) {
        d.tokens = 1;
        out->push_back(std::move(d));
      }
      const std::string finish = Str(c, "finish_reason");
      if (!finish.empty()) ends_[static_cast<size_t>(index)] = OpenAiFinish(finish);
    }
    return absl::OkStatus();
  }

  bool chat_;
  std::vector<std::optional<api::FinishReason>> ends_;
  api::Usage usage_;
  bool usage_seen_ = false;
  bool done_seen_ = false;
};

class AnthropicTranslator : public StreamTranslator {
 public:
  absl::Status OnEvent(const SseEvent& event, std::vector<api::GenerationDelta>* out) override {
    absl::StatusOr<json> e = ParseObject(event.data);
    if (!e.ok()) return e.status();
    const std::string type = event.event.empty() ? Str(*e, "type") : event.event;
    if (type == "error") return UpstreamError(e->value("error", json::object()));
    if (type == "message_start") {
      if (const json* message = Obj(*e, "message")) {
        if (const json* usage = Obj(*message, "usage")) Usage(*usage);
      }
    } else if (type == "content_block_start") {
      const json* block = Obj(*e, "content_block");
      if (block == nullptr) return Malformed("content_block_start without content_block");
      const int64_t index = Int(*e, "index");
      const std::string kind = Str(*block, "type");
      blocks_[index] = kind;
      api::GenerationDelta d;
      if (kind == "tool_use") {
        tool_index_[index] = tools_++;
        d.tool_calls.push_back({tool_index_[index], Str(*block, "id"), Str(*block, "name"), ""});
      } else if (kind == "text") {
        d.text = Str(*block, "text");
      } else if (kind == "thinking") {
        d.reasoning_text = Str(*block, "thinking");
      }
      Emit(std::move(d), out);
    } else if (type == "content_block_delta") {
      const json* delta = Obj(*e, "delta");
      if (delta == nullptr) return Malformed("content_block_delta without delta");
      const int64_t index = Int(*e, "index");
      const std::string kind = Str(*delta, "type");
      api::GenerationDelta d;
      if (kind == "text_delta") {
        d.text = Str(*delta, "text");
      } else if (kind == "thinking_delta") {
        d.reasoning_text = Str(*delta, "thinking");
      } else if (kind == "input_json_delta") {
        auto it = tool_index_.find(index);
        if (it == tool_index_.end()) return Malformed("input_json_delta outside a tool_use block");
        d.tool_calls.push_back({it->second, "", "", Str(*delta, "partial_json")});
      }
      Emit(std::move(d), out);
    } else if (type == "message_delta") {
      if (const json* delta = Obj(*e, "delta")) {
        const std::string reason = Str(*delta, "stop_reason");
        if (!reason.empty()) stop_reason_ = reason;
        const std::string sequence = Str(*delta, "stop_sequence");
        if (!sequence.empty()) stop_sequence_ = sequence;
      }
      if (const json* usage = Obj(*e, "usage")) Usage(*usage);
    } else if (type == "message_stop") {
      done_ = true;
    }
    // ping, content_block_stop and newer events: nothing to pass on.
    return absl::OkStatus();
  }

  absl::Status ReadWhole(std::string_view body, std::vector<api::GenerationDelta>* out) override {
    absl::StatusOr<json> m = ParseObject(body);
    if (!m.ok()) return m.status();
    if (Str(*m, "type") == "error") return UpstreamError(m->value("error", json::object()));
    if (const json* usage = Obj(*m, "usage")) Usage(*usage);
    auto content = m->find("content");
    if (content != m->end() && content->is_array()) {
      for (const json& block : *content) {
        if (!block.is_object()) continue;
        api::GenerationDelta d;
        const std::string kind = Str(block, "type");
        if (kind == "text") d.text = Str(block, "text");
        if (kind == "thinking") d.reasoning_text = Str(block, "thinking");
        if (kind == "tool_use") {
          const int index = tools_++;
          d.tool_calls.push_back({index, Str(block, "id"), Str(block, "name"), ""});
          d.tool_calls.push_back(
              {index, "", "", block.value("input", json::object()).dump()});
        }
        Emit(std::move(d), out);
      }
    }
    stop_reason_ = Str(*m, "stop_reason");
    stop_sequence_ = Str(*m, "stop_sequence");
    done_ = true;
    return absl::OkStatus();
  }

  bool done() const override { return done_; }

  api::GenerationEnd End() const override {
    api::GenerationEnd end;
    end.content_null_when_empty = true;
    end.finish_reason = stop_reason_ == "max_tokens"   ? api::FinishReason::kLength
                        : stop_reason_ == "tool_use"   ? api::FinishReason::kToolCalls
                        : stop_reason_ == "refusal"    ? api::FinishReason::kContentFilter
                                                       : api::FinishReason::kStop;
    end.matched_stop = stop_sequence_;
    end.usage.prompt_tokens = input_tokens_ + cache_read_ + cache_creation_;
    end.usage.cached_tokens = cache_read_;
    end.usage.completion_tokens = output_tokens_;
    return end;
  }

  int64_t early_prompt_tokens() const override {
    return input_tokens_ + cache_read_ + cache_creation_;
  }

 private:
  static absl::Status Malformed(std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("the upstream sent ", common::Sv(what)));
  }
  void Usage(const json& usage) {
    // message_delta's counts are cumulative; a field it leaves out keeps its earlier value.
    if (usage.contains("input_tokens")) input_tokens_ = Int(usage, "input_tokens");
    if (usage.contains("cache_read_input_tokens")) {
      cache_read_ = Int(usage, "cache_read_input_tokens");
    }
    if (usage.contains("cache_creation_input_tokens")) {
      cache_creation_ = Int(usage, "cache_creation_input_tokens");
    }
    if (usage.contains("output_tokens")) output_tokens_ = Int(usage, "output_tokens");
  }
  static void Emit(api::GenerationDelta d, std::vector<api::GenerationDelta>* out) {
    if (d.text.empty() && d.reasoning_text.empty() && d.tool_calls.empty()) return;
    d.tokens = 1;
    out->push_back(std::move(d));
  }

  std::map<int64_t, std::string> blocks_;
  std::map<int64_t, int> tool_index_;
  int tools_ = 0;
  std::string stop_reason_;
  std::string stop_sequence_;
  int64_t input_tokens_ = 0, cache_read_ = 0, cache_creation_ = 0, output_tokens_ = 0;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<StreamTranslator> MakeStreamTranslator(UpstreamKind kind, api::Endpoint endpoint,
                                                       int n) {
  if (kind == UpstreamKind::kAnthropic) return std::make_unique<AnthropicTranslator>();
  return std::make_unique<OpenAiTranslator>(endpoint, n < 1 ? 1 : n);
}

}  // namespace deltaserve::router::upstream
