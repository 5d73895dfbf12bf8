// RouterBackend with the real chat renderer (router/chat/chat_prompt_renderer.h) over gRPC against
// ScriptedWorker (a TEST DOUBLE of deltaserve.v1.Worker): the prompt a worker receives when it
// reports the Qwen3.5 template equals the tokenization of every rendered fixture of
// ../shared/fixtures/chat/qwen3.5.json (jinja2's output); the scripted outputs of
// ../shared/fixtures/toolcalls.json come back as the fixture's content / reasoning / tool calls /
// finish reason, streamed (deltas in the documented order) and not; tool_choice "none",
// parallel_tool_calls false, thinking_budget, and a template's raise_exception as a 400.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gguf_file.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/api_error.h"
#include "router/api/request_parser.h"
#include "router/chat/chat_prompt_renderer.h"
#include "router/chat/tokenizer_from_proto.h"
#include "tests/router/router_backend_fixture.h"
#include "tests/support/test_paths.h"
#include "tests/support/tokenizer_proto.h"

namespace deltaserve::router::testing {
namespace {

using json = nlohmann::ordered_json;
namespace v1 = ::deltaserve::v1;

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json ReadJson(const std::string& path) {
  return json::parse(ReadText(path), nullptr, /*allow_exceptions=*/false);
}

// Everything a chat generation delivered, in order.
class ChatRecorder : public api::GenerationObserver {
 public:
  void OnStart(const api::GenerationStart&) override {}
  void OnDelta(api::GenerationDelta d) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!d.reasoning_text.empty()) kinds.push_back('r');
    if (!d.text.empty()) kinds.push_back('c');
    if (!d.tool_calls.empty()) kinds.push_back('t');
    reasoning += d.reasoning_text;
    content += d.text;
    for (api::ToolCallDelta& c : d.tool_calls) {
      if (static_cast<size_t>(c.index) >= calls.size()) calls.resize(c.index + 1);
      api::ToolCall& out = calls[c.index];
      if (!c.id.empty()) {
        EXPECT_TRUE(out.id.empty()) << "a call's id is sent once";
        out.id = c.id;
        out.name = c.name;
        if (streamed) {
          EXPECT_EQ(c.arguments, "") << "a streamed call's first piece has no arguments";
        }
      } else {
        EXPECT_FALSE(out.id.empty()) << "arguments before the call's first piece";
      }
      out.arguments += c.arguments;
    }
  }
  void OnEnd(const api::GenerationEnd& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    end = e;
    done = true;
    cv_.notify_all();
  }
  void OnError(const absl::Status& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    error = s;
    done = true;
    cv_.notify_all();
  }
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    // A bound against a hang (generous: ASan on a loaded machine is slow).
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return done; });
  }

  bool streamed = false;  // set before the generation starts
  std::string kinds;      // 'r' reasoning, 'c' content, 't' tool call, one per delta part
  std::string reasoning, content;
  std::vector<api::ToolCall> calls;
  std::optional<api::GenerationEnd> end;
  std::optional<absl::Status> error;
  bool done = false;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

// A chat body parsed as the HTTP layer parses it.
api::CompletionRequest Parse(const json& body) {
  absl::StatusOr<api::CompletionRequest> r = api::ParseChatCompletionRequest(body.dump());
  EXPECT_TRUE(r.ok()) << r.status() << " for " << body.dump();
  return r.ok() ? *r : api::CompletionRequest{};
}

// `text` in pieces of about `every` bytes, never inside a UTF-8 character (a worker's text deltas
// are whole characters: TokenEvent.text is a proto string).
std::vector<std::string> Pieces(const std::string& text, size_t every) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = std::min(text.size(), at + every);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    out.push_back(text.substr(at, end - at));
    at = end;
  }
  return out;
}

class RouterChatTest : public RouterBackendTest {
 protected:
  RouterChatTest() { renderer_in_use_ = &chat_renderer_; }

  std::shared_ptr<ChatRecorder> Go(const api::CompletionRequest& request) {
    auto recorder = std::make_shared<ChatRecorder>();
    recorder->streamed = request.stream;
    handle_ = backend_->Generate(request, recorder);
    EXPECT_TRUE(recorder->Wait());
    return recorder;
  }

  chat::ChatPromptRenderer chat_renderer_;
};

// The template path end to end: the worker reports qwen3.5.jinja and the Qwen3 vocabulary; for
// every fixture case with a generation prompt, the ids the worker receives are the tokenization
// of the fixture's expected text (jinja2 3.1.6's rendering under transformers' settings).
TEST_F(RouterChatTest, WorkerTemplateRendersEveryQwen35FixturePrompt) {
  absl::StatusOr<std::unique_ptr<common::GgufFile>> gguf =
      common::GgufFile::Open(deltaserve::testing::GoldenPath("qwen3-vocab-qwen35pre.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<v1::Tokenizer> proto = deltaserve::testing::TokenizerProtoFromGguf(**gguf);
  ASSERT_TRUE(proto.ok()) << proto.status();
  absl::StatusOr<std::unique_ptr<common::Tokenizer>> tokenizer = chat::TokenizerFromProto(*proto);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const json cases = ReadJson(deltaserve::testing::FixturesPath("chat/qwen3.5.json"));
  ASSERT_TRUE(cases.is_array());

  ScriptedModel m = Model("m");
  m.chat_template = ReadText(deltaserve::testing::FixturesPath("templates/qwen3.5.jinja"));
  m.tokenizer = std::make_shared<const v1::Tokenizer>(*proto);
  m.tokenizer_digest = "qwen3-vocab";
  m.context_length = 1 << 20;
  ScriptedWorker& w = AddWorker({m});
  tokenizer_builder_ = chat::TokenizerFromProto;
  StartRouter();

  int checked = 0;
  for (const json& c : cases) {
    if (!c.contains("expected") || !c["add_generation_prompt"].get<bool>()) continue;
    json messages = c["messages"];
    bool image = false;
    int call = 0;
    std::vector<std::string> ids;
    for (json& msg : messages) {
      if (msg["content"].is_array()) {
        for (const json& part : msg["content"]) image |= part.value("type", "") != "text";
      }
      // OpenAI requires ids linking results to calls; the template does not print them.
      if (msg.contains("tool_calls")) {
        for (json& tc : msg["tool_calls"]) {
          if (!tc.contains("id")) tc["id"] = absl::StrCat("call_", call++);
          ids.push_back(tc["id"].get<std::string>());
        }
      }
      if (msg["role"] == "tool" && !msg.contains("tool_call_id")) {
        msg["tool_call_id"] = ids.empty() ? "call_x" : ids.front();
        if (!ids.empty()) ids.erase(ids.begin());
      }
    }
    if (image) continue;  // only text parts are accepted
    json body = {{"model", "m"}, {"messages", messages}};
    if (!c["tools"].is_null()) body["tools"] = c["tools"];
    json kwargs = c["kwargs"];
    kwargs.erase("eos_token");  // the router passes the tokenizer's own
    if (!kwargs.empty()) body["chat_template_kwargs"] = kwargs;
    std::shared_ptr<ChatRecorder> r = Go(Parse(body));
    ASSERT_FALSE(r->error.has_value()) << c["name"] << ": " << *r->error;
    const std::vector<int32_t> expected =
        (*tokenizer)->Encode(c["expected"].get<std::string>(), /*parse_special=*/true);
    const v1::GenerateRequest sent = w.last_request();
    EXPECT_EQ(std::vector<int32_t>(sent.prompt_token_ids().begin(), sent.prompt_token_ids().end()),
              expected)
        << c["name"];
    EXPECT_FALSE(sent.message_boundaries().empty()) << c["name"];
    EXPECT_EQ(sent.turn_end_token_ids_size(), 2) << c["name"];
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

// The template's own raise_exception is the client's 400 with the template's words.
TEST_F(RouterChatTest, TemplateRaiseExceptionIsA400WithItsMessage) {
  ScriptedModel m = Model("m");
  m.chat_template =
      "{%- if messages[0].role != 'user' %}{{ raise_exception('First message must be from the "
      "user.') }}{%- endif %}{{ messages[0].content }}";
  AddWorker({m});
  StartRouter();
  std::shared_ptr<ChatRecorder> r = Go(Parse(json::parse(
      R"({"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]})")));
  ASSERT_TRUE(r->error.has_value());
  EXPECT_EQ(r->error->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r->error->message(), "First message must be from the user.");
  const api::ApiError e = api::ApiErrorFromStatus(*r->error);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
}

// Each ../shared/fixtures/toolcalls.json output, scripted in 3-byte pieces (tags split), comes
// back as the fixture expects: whole (stream false, ParseModelOutput) and streamed (reasoning
// first, then content / calls; a call's id and name before its arguments).
TEST_F(RouterChatTest, ToolCallFixturesStreamedAndWhole) {
  const json cases = ReadJson(deltaserve::testing::FixturesPath("toolcalls.json"));
  ASSERT_TRUE(cases.is_array());
  // "m": no template, the Qwen3 fallback (thinking on, the model writes its own <think>).
  // "opened": a generation prompt ending with "<think>\n" as Qwen3.5's does, so the worker's
  // text starts inside the block; toolcalls.md's raw_output then carries that opener, which the
  // worker never generates.
  ScriptedModel opened = Model("opened");
  opened.chat_template = "{{ messages[0].content }}<|im_end|>\n<|im_start|>assistant\n<think>\n";
  ScriptedWorker& w = AddWorker({Model("m"), opened});
  StartRouter();
  int opened_runs = 0;
  for (const json& c : cases) {
    const std::string raw = c["raw_output"].get<std::string>();
    // (model, what the worker generates)
    std::vector<std::pair<std::string, std::string>> runs;
    if (raw.starts_with("<think>")) {
      runs.emplace_back("m", raw);
      runs.emplace_back("opened", raw.substr(std::string_view("<think>").size()));
    } else if (raw.find("</think>") != std::string::npos) {
      runs.emplace_back("opened", raw);  // rule 1's orphan </think>
    } else {
      runs.emplace_back("m", raw);
    }
    for (const auto& [model, generated] : runs)
      for (bool stream : {false, true}) {
        opened_runs += model == "opened";
        const std::string label =
            absl::StrCat(c["name"].get<std::string>(), " on ", model, stream ? " streamed" : "");
        GenerateScript script;
        script.pieces = Pieces(generated, 3);
        w.SetScript(script);
        json body = {{"model", model},
                     {"messages", json::array({{{"role", "user"}, {"content", "go"}}})},
                     {"stream", stream}};
        if (c.contains("tools") && !c["tools"].is_null()) body["tools"] = c["tools"];
        std::shared_ptr<ChatRecorder> r = Go(Parse(body));
        ASSERT_FALSE(r->error.has_value()) << label << ": " << *r->error;
        const json& want = c["expected"];
        EXPECT_EQ(r->content, want["content"].is_null() ? "" : want["content"].get<std::string>())
            << label;
        EXPECT_EQ(r->reasoning, want["reasoning_content"].is_null()
                                    ? ""
                                    : want["reasoning_content"].get<std::string>())
            << label;
        ASSERT_EQ(r->calls.size(), want["tool_calls"].size()) << label;
        for (size_t i = 0; i < r->calls.size(); ++i) {
          EXPECT_EQ(r->calls[i].name, want["tool_calls"][i]["name"]) << label;
          EXPECT_EQ(r->calls[i].id.rfind("call_", 0), 0u) << label;
          EXPECT_EQ(json::parse(r->calls[i].arguments), want["tool_calls"][i]["arguments"])
              << label;
        }
        ASSERT_TRUE(r->end.has_value()) << label;
        EXPECT_EQ(api::FinishReasonName(r->end->finish_reason), want["finish"].get<std::string>())
            << label;
        EXPECT_TRUE(r->end->content_null_when_empty) << label;
        if (stream) {
          const size_t first_other = r->kinds.find_first_not_of('r');
          EXPECT_TRUE(first_other == std::string::npos ||
                      r->kinds.find('r', first_other) == std::string::npos)
              << label << ": reasoning after content or calls: " << r->kinds;
        }
      }
  }
  EXPECT_GE(opened_runs, 2 * 5);
}

// After a prompt that did not open a think block, an answer's content streams as it comes
// (more than one content delta), not held to the end for a `</think>` that may follow.
TEST_F(RouterChatTest, AnswerWithoutOpenerStreamsItsContent) {
  ScriptedWorker& w = AddWorker({Model("m")});
  StartRouter();
  GenerateScript script;
  script.pieces = Pieces("The capital of France is Paris, on the Seine.", 5);
  w.SetScript(script);
  std::shared_ptr<ChatRecorder> r = Go(Parse(json::parse(
      R"({"model":"m","stream":true,"messages":[{"role":"user","content":"capital?"}]})")));
  ASSERT_FALSE(r->error.has_value()) << *r->error;
  EXPECT_EQ(r->content, "The capital of France is Paris, on the Seine.");
  EXPECT_EQ(r->reasoning, "");
  EXPECT_GE(std::count(r->kinds.begin(), r->kinds.end(), 'c'), 5) << r->kinds;
}

constexpr char kWeatherTools[] = R"([{"type":"function","function":{"name":"get_weather",
  "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])";

TEST_F(RouterChatTest, ToolChoiceNoneLeavesMarkupAsContent) {
  ScriptedWorker& w = AddWorker({Model("m")});
  StartRouter();
  const std::string raw =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  GenerateScript script;
  script.pieces = Pieces(raw, 4);
  w.SetScript(script);
  json body = {{"model", "m"},
               {"messages", json::array({{{"role", "user"}, {"content", "weather?"}}})},
               {"tools", json::parse(kWeatherTools)},
               {"tool_choice", "none"}};
  std::shared_ptr<ChatRecorder> r = Go(Parse(body));
  EXPECT_TRUE(r->calls.empty());
  EXPECT_EQ(r->content, raw);
  EXPECT_EQ(r->end->finish_reason, api::FinishReason::kStop);
}

TEST_F(RouterChatTest, ParallelToolCallsFalseKeepsTheFirstCall) {
  ScriptedWorker& w = AddWorker({Model("m")});
  StartRouter();
  const std::string raw =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Rome\"}}\n</tool_call>";
  GenerateScript script;
  script.pieces = Pieces(raw, 5);
  w.SetScript(script);
  for (bool stream : {false, true}) {
    json body = {{"model", "m"},
                 {"messages", json::array({{{"role", "user"}, {"content", "weather?"}}})},
                 {"tools", json::parse(kWeatherTools)},
                 {"parallel_tool_calls", false},
                 {"stream", stream}};
    std::shared_ptr<ChatRecorder> r = Go(Parse(body));
    ASSERT_EQ(r->calls.size(), 1u) << stream;
    EXPECT_EQ(json::parse(r->calls[0].arguments), json({{"city", "Paris"}}));
    EXPECT_EQ(r->end->finish_reason, api::FinishReason::kToolCalls);
  }
}

// A call cut by max_tokens: "length" stays (the worker's finish reason wins over tool_calls).
TEST_F(RouterChatTest, LengthStaysLengthWithACompleteCall) {
  ScriptedWorker& w = AddWorker({Model("m")});
  StartRouter();
  GenerateScript script;
  script.pieces = {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"};
  script.finish = v1::FINISH_REASON_LENGTH;
  w.SetScript(script);
  json body = {{"model", "m"},
               {"messages", json::array({{{"role", "user"}, {"content", "weather?"}}})},
               {"tools", json::parse(kWeatherTools)}};
  std::shared_ptr<ChatRecorder> r = Go(Parse(body));
  EXPECT_EQ(r->calls.size(), 1u);
  EXPECT_EQ(r->end->finish_reason, api::FinishReason::kLength);
}

// thinking_budget reaches the worker as reasoning_budget; the Qwen3.5 prompt opens <think>, so
// the output up to </think> is reasoning.
TEST_F(RouterChatTest, ThinkingBudgetAndOpenedThinkBlock) {
  ScriptedModel m = Model("m");
  m.chat_template = ReadText(deltaserve::testing::FixturesPath("templates/qwen3.5.jinja"));
  ScriptedWorker& w = AddWorker({m});
  StartRouter();
  GenerateScript script;
  script.pieces = {"Let me ", "think.\n</thi", "nk>\n\nIt is ", "4."};
  w.SetScript(script);
  for (bool stream : {false, true}) {
    json body = {{"model", "m"},
                 {"messages", json::array({{{"role", "user"}, {"content", "2+2?"}}})},
                 {"thinking_budget", 64},
                 {"stream", stream}};
    std::shared_ptr<ChatRecorder> r = Go(Parse(body));
    ASSERT_FALSE(r->error.has_value()) << *r->error;
    EXPECT_EQ(r->reasoning, "Let me think.") << stream;
    EXPECT_EQ(r->content, "It is 4.") << stream;
    EXPECT_TRUE(w.last_request().has_reasoning_budget());
    EXPECT_EQ(w.last_request().reasoning_budget(), 64);
  }
  json body = {{"model", "m"},
               {"messages", json::array({{{"role", "user"}, {"content", "2+2?"}}})},
               {"chat_template_kwargs", {{"thinking_budget", 8}}}};
  Go(Parse(body));
  EXPECT_EQ(w.last_request().reasoning_budget(), 8);
  body.erase("chat_template_kwargs");
  Go(Parse(body));
  EXPECT_FALSE(w.last_request().has_reasoning_budget());
}

}  // namespace
}  // namespace deltaserve::router::testing
