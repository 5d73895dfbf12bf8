#include "router/chat/qwen_chat_template.h"

#include <exception>
#include <nlohmann/json.hpp>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/json_reader.h"
#include "common/str_util.h"

namespace deltaserve::router::chat {
namespace {

using common::Sv;
using Json = nlohmann::ordered_json;  // keeps the client's key order, as Python dicts do

// The tools block of the Qwen3 template, verbatim.
constexpr std::string_view kToolsHeader =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsFooter =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

// Python's json.dumps(ensure_ascii=False) with its default separators. nlohmann's scalar output
// already matches Python's for strings (same escapes, \u00xx lowercase for other control
// characters, '/' and non-ASCII left alone) and for integers; floats use the shortest
// round-trip form in both, with the same exponent style (1e-05, 1e+100).
void DumpPython(const Json& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += Json(it.key()).dump(-1, ' ', false, Json::error_handler_t::replace);
      out += ": ";
      DumpPython(it.value(), out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += ", ";
      DumpPython(v[i], out);
    }
    out += ']';
  } else {
    out += v.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

absl::StatusOr<Json> ParseJson(std::string_view text, std::string_view what) {
  // Linear in an object's key count, unlike Json::parse (common/json_reader.h, issue 17). The
  // request parser has applied the request limits already.
  absl::StatusOr<Json> v = common::ReadOrderedJson(text, common::kNoJsonReadLimits);
  if (!v.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(what), ": not valid JSON: ", v.status().message()));
  }
  return v;
}

// Python's str.strip / lstrip / rstrip with '\n' as the only character removed.
std::string_view LStripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view RStripNewlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

bool IsSystem(const api::ChatMessage& m) { return m.role == "system" || m.role == "developer"; }

bool IsToolResponseWrapped(std::string_view s) {
  return s.starts_with("<tool_response>") && s.ends_with("</tool_response>");
}

// Appends an assistant message's tool calls: `{"name": "...", "arguments": ...}` per call, the
// arguments as written when they are a JSON string (OpenAI sends them so), else as tojson.
absl::Status AppendToolCalls(const api::ChatMessage& m, size_t index, bool has_content,
                             common::MarkedText& out) {
  const std::string path = absl::StrCat("messages[", index, "].tool_calls");
  absl::StatusOr<Json> calls = ParseJson(m.tool_calls_json, path);
  if (!calls.ok()) return calls.status();
  if (!calls->is_array()) return absl::InvalidArgumentError(path + ": must be an array");
  for (size_t i = 0; i < calls->size(); ++i) {
    const Json* call = &(*calls)[i];
    const std::string call_path = absl::StrCat(path, "[", i, "]");
    if (!call->is_object()) return absl::InvalidArgumentError(call_path + ": must be an object");
    // {% if tool_call.function %}{% set tool_call = tool_call.function %}
    if (auto f = call->find("function"); f != call->end() && f->is_object() && !f->empty()) {
      call = &*f;
    }
    auto name = call->find("name");
    if (name == call->end() || !name->is_string()) {
      return absl::InvalidArgumentError(call_path + ".function.name: must be a string");
    }
    if (i > 0 || has_content) out.AppendTrusted("\n");
    out.AppendTrusted("<tool_call>\n{\"name\": \"");
    out.AppendUntrusted(name->get_ref<const std::string&>());
    out.AppendTrusted("\", \"arguments\": ");
    if (auto args = call->find("arguments"); args == call->end() || args->is_null()) {
      out.AppendTrusted("{}");
    } else if (args->is_string()) {
      out.AppendUntrusted(args->get_ref<const std::string&>());
    } else {
      std::string dumped;
      DumpPython(*args, dumped);
      out.AppendUntrusted(dumped);
    }
    out.AppendTrusted("}\n</tool_call>");
  }
  return absl::OkStatus();
}

}  // namespace

namespace internal {

absl::StatusOr<std::string> PythonJsonDumps(std::string_view json) {
  absl::StatusOr<Json> v = ParseJson(json, "json");
  if (!v.ok()) return v.status();
  std::string out;
  DumpPython(*v, out);
  return out;
}

}  // namespace internal

absl::StatusOr<std::string> RenderChat(const std::vector<api::ChatMessage>& messages,
                                       const ChatOptions& options) {
  absl::StatusOr<common::MarkedText> marked = RenderChatMarked(messages, options);
  if (!marked.ok()) return marked.status();
  return std::move(marked->text);
}

absl::StatusOr<common::MarkedText> RenderChatMarked(const std::vector<api::ChatMessage>& messages,
                                                    const ChatOptions& options) {
  if (messages.empty()) return absl::InvalidArgumentError("messages: must not be empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (!IsSystem(messages[i]) && r != "user" && r != "assistant" && r != "tool") {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "].role: unknown role '", r, "'"));
    }
  }
  common::MarkedText out;
  const bool first_is_system = IsSystem(messages[0]);

  Json tools = Json::array();
  if (!options.tools_json.empty()) {
    absl::StatusOr<Json> parsed = ParseJson(options.tools_json, "tools");
    if (!parsed.ok()) return parsed.status();
    if (!parsed->is_array()) return absl::InvalidArgumentError("tools: must be an array");
    tools = *std::move(parsed);
  }
  if (!tools.empty()) {
    out.AppendTrusted("<|im_start|>system\n");
    if (first_is_system) {
      out.AppendUntrusted(messages[0].content);
      out.AppendTrusted("\n\n");
    }
    out.AppendTrusted(kToolsHeader);
    std::string dumped;
    for (const Json& tool : tools) {
      out.AppendTrusted("\n");
      dumped.clear();
      DumpPython(tool, dumped);
      out.AppendUntrusted(dumped);
    }
    out.AppendTrusted(kToolsFooter);
  } else if (first_is_system) {
    out.AppendTrusted("<|im_start|>system\n");
    out.AppendUntrusted(messages[0].content);
    out.AppendTrusted("<|im_end|>\n");
  }

  // The last real user query: later assistant turns keep their reasoning (multi-step tool use).
  size_t last_query = messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role == "user" && !IsToolResponseWrapped(messages[i].content)) {
      last_query = i;
      break;
    }
  }

  for (size_t i = 0; i < messages.size(); ++i) {
    const api::ChatMessage& m = messages[i];
    const bool last = i + 1 == messages.size();
    if (m.role == "user" || (IsSystem(m) && i > 0)) {
      // A later system message keeps its own turn; "developer" is OpenAI's name for system.
      out.AppendTrusted(IsSystem(m) ? "<|im_start|>system\n" : "<|im_start|>user\n");
      out.AppendUntrusted(m.content);
      out.AppendTrusted("<|im_end|>\n");
    } else if (m.role == "assistant") {
      std::string_view content = m.content_null ? std::string_view() : m.content;
      std::string_view reasoning;
      if (!m.reasoning_content.empty()) {
        reasoning = m.reasoning_content;
      } else if (const size_t end = content.find("</think>"); end != std::string_view::npos) {
        // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
        std::string_view before = RStripNewlines(content.substr(0, end));
        if (const size_t start = before.rfind("<think>"); start != std::string_view::npos) {
          before = before.substr(start + std::string_view("<think>").size());
        }
        reasoning = LStripNewlines(before);
        // content.split('</think>')[-1].lstrip('\n')
        const size_t last_end = content.rfind("</think>");
        content = LStripNewlines(content.substr(last_end + std::string_view("</think>").size()));
      }
      if (i > last_query && (last || !reasoning.empty())) {
        out.AppendTrusted("<|im_start|>assistant\n<think>\n");
        out.AppendUntrusted(RStripNewlines(LStripNewlines(reasoning)));
        out.AppendTrusted("\n</think>\n\n");
        out.AppendUntrusted(LStripNewlines(content));
      } else {
        out.AppendTrusted("<|im_start|>assistant\n");
        out.AppendUntrusted(content);
      }
      if (!m.tool_calls_json.empty()) {
        if (auto s = AppendToolCalls(m, i, !content.empty(), out); !s.ok()) return s;
      }
      out.AppendTrusted("<|im_end|>\n");
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out.AppendTrusted("<|im_start|>user");
      out.AppendTrusted("\n<tool_response>\n");
      out.AppendUntrusted(m.content);
      out.AppendTrusted("\n</tool_response>");
      if (last || messages[i + 1].role != "tool") out.AppendTrusted("<|im_end|>\n");
    }
    // The first system message was written above.
  }

  if (options.add_generation_prompt) {
    out.AppendTrusted("<|im_start|>assistant\n");
    if (!options.enable_thinking) out.AppendTrusted("<think>\n\n</think>\n\n");
  }
  return out;
}

}  // namespace deltaserve::router::chat
