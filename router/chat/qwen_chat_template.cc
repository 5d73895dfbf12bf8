#include "router/chat/qwen_chat_template.h"

#include <exception>
#include <nlohmann/json.hpp>
#include <string_view>

#include "absl/strings/str_cat.h"
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
  try {
    return Json::parse(text);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(what), ": not valid JSON: ", e.what()));
  }
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
                             std::string& out) {
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
    if (i > 0 || has_content) out += '\n';
    out += "<tool_call>\n{\"name\": \"";
    out += name->get_ref<const std::string&>();
    out += "\", \"arguments\": ";
    if (auto args = call->find("arguments"); args == call->end() || args->is_null()) {
      out += "{}";
    } else if (args->is_string()) {
      out += args->get_ref<const std::string&>();
    } else {
      DumpPython(*args, out);
    }
    out += "}\n</tool_call>";
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
  if (messages.empty()) return absl::InvalidArgumentError("messages: must not be empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (!IsSystem(messages[i]) && r != "user" && r != "assistant" && r != "tool") {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "].role: unknown role '", r, "'"));
    }
  }
  std::string out;
  const bool first_is_system = IsSystem(messages[0]);

  Json tools = Json::array();
  if (!options.tools_json.empty()) {
    absl::StatusOr<Json> parsed = ParseJson(options.tools_json, "tools");
    if (!parsed.ok()) return parsed.status();
    if (!parsed->is_array()) return absl::InvalidArgumentError("tools: must be an array");
    tools = *std::move(parsed);
  }
  if (!tools.empty()) {
    out += "<|im_start|>system\n";
    if (first_is_system) absl::StrAppend(&out, messages[0].content, "\n\n");
    out += kToolsHeader;
    for (const Json& tool : tools) {
      out += '\n';
      DumpPython(tool, out);
    }
    out += kToolsFooter;
  } else if (first_is_system) {
    absl::StrAppend(&out, "<|im_start|>system\n", messages[0].content, "<|im_end|>\n");
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
      absl::StrAppend(&out, "<|im_start|>", IsSystem(m) ? "system" : "user", "\n", m.content,
                      "<|im_end|>\n");
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
        absl::StrAppend(&out, "<|im_start|>assistant\n<think>\n",
                        Sv(RStripNewlines(LStripNewlines(reasoning))), "\n</think>\n\n",
                        Sv(LStripNewlines(content)));
      } else {
        absl::StrAppend(&out, "<|im_start|>assistant\n", Sv(content));
      }
      if (!m.tool_calls_json.empty()) {
        if (auto s = AppendToolCalls(m, i, !content.empty(), out); !s.ok()) return s;
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      absl::StrAppend(&out, "\n<tool_response>\n", m.content, "\n</tool_response>");
      if (last || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
    // The first system message was written above.
  }

  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (!options.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

}  // namespace deltaserve::router::chat
