#include "router/api/internal/responses_input.h"

#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/str_util.h"
#include "router/api/api_error.h"
#include "router/api/internal/json_fields.h"
#include "router/api/responses_request.h"

namespace deltaserve::router::api::internal {
namespace {

using common::Sv;
using json = nlohmann::ordered_json;

// The conversation as chat messages, built item by item.
class InputReader {
 public:
  explicit InputReader(std::vector<ChatMessage>* messages)
      : messages_(*messages), first_(messages->size()) {}

  absl::Status Item(const json& item, const std::string& path) {
    if (!item.is_object()) return TypeError(path, "an object (an input item)", item);
    std::optional<std::string> type;
    DS_RETURN_IF_ERROR(ReadString(item, "type", path + ".type", &type));
    if (!type) {
      // EasyInputMessage: {"role", "content"} without a type.
      if (Member(item, "role") == nullptr) return Missing(path + ".type");
      type = "message";
    }
    if (*type == "message") return Message(item, path);
    if (*type == "function_call") return FunctionCall(item, path);
    if (*type == "function_call_output") return FunctionCallOutput(item, path);
    if (*type == "reasoning") return Reasoning(item, path);
    if (*type == "item_reference") {
      return Unsupported(path + ".type",
                         "input items of type 'item_reference' need stored responses; DeltaServe "
                         "stores none (send the item itself)");
    }
    return Unsupported(path + ".type",
                       absl::StrCat("input items of type '", *type,
                                    "' are not supported; supported: message, function_call, "
                                    "function_call_output, reasoning"));
  }

  // Calls gathered into the assistant messages' tool_calls_json.
  void Finish() {
    for (size_t i = 0; i < calls_.size(); ++i) {
      if (!calls_[i].empty()) messages_[first_ + i].tool_calls_json = Dump(calls_[i]);
    }
  }

 private:
  absl::Status Message(const json& item, const std::string& path) {
    std::string role;
    DS_RETURN_IF_ERROR(RequiredString(item, "role", path + ".role", &role));
    if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
      return InvalidRequestError(
          path + ".role", "invalid_value",
          absl::StrCat("'", path, ".role' must be one of user, system, developer, assistant; got '",
                       role, "'"));
    }
    ChatMessage m;
    m.role = role;
    const json* content = Member(item, "content");
    if (content == nullptr) return Missing(path + ".content");
    DS_RETURN_IF_ERROR(Content(*content, path + ".content", &m.content));
    if (role == "assistant") {
      m.reasoning_content = std::exchange(pending_reasoning_, "");
      Push(std::move(m));
      assistant_open_ = true;
    } else {
      // Reasoning that no assistant item follows has nothing to belong to: dropped.
      pending_reasoning_.clear();
      Push(std::move(m));
    }
    return absl::OkStatus();
  }

  // Text of a message's content: a string, or parts input_text / output_text / refusal joined
  // without a separator (as chat joins its text parts).
  absl::Status Content(const json& content, const std::string& path, std::string* out) {
    if (content.is_string()) {
      *out = content.get<std::string>();
      return absl::OkStatus();
    }
    if (!content.is_array()) {
      return TypeError(path, "a string or an array of content parts", content);
    }
    for (size_t i = 0; i < content.size(); ++i) {
      const json& part = content[i];
      const std::string ppath = absl::StrCat(path, "[", i, "]");
      if (!part.is_object()) return TypeError(ppath, "an object (a content part)", part);
      std::string type;
      DS_RETURN_IF_ERROR(RequiredString(part, "type", ppath + ".type", &type));
      if (type == "input_text" || type == "output_text") {
        std::string text;
        DS_RETURN_IF_ERROR(RequiredString(part, "text", ppath + ".text", &text));
        *out += text;
      } else if (type == "refusal") {
        std::string text;
        DS_RETURN_IF_ERROR(RequiredString(part, "refusal", ppath + ".refusal", &text));
        *out += text;
      } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
        return Unsupported(ppath + ".type",
                           absl::StrCat("content parts of type '", type,
                                        "' are not supported: the served models read text only"));
      } else {
        return Unsupported(ppath + ".type",
                           absl::StrCat("content part type '", type,
                                        "' is not supported; supported: input_text, output_text, "
                                        "refusal"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status FunctionCall(const json& item, const std::string& path) {
    std::string call_id, name, arguments;
    DS_RETURN_IF_ERROR(RequiredString(item, "call_id", path + ".call_id", &call_id));
    DS_RETURN_IF_ERROR(RequiredString(item, "name", path + ".name", &name));
    DS_RETURN_IF_ERROR(RequiredString(item, "arguments", path + ".arguments", &arguments));
    if (!assistant_open_) {
      // A call without an assistant message before it in the same turn gets its own message.
      ChatMessage m;
      m.role = "assistant";
      m.content_null = true;
      m.reasoning_content = std::exchange(pending_reasoning_, "");
      Push(std::move(m));
      assistant_open_ = true;
    }
    json call = json::object();
    call["id"] = call_id;
    call["type"] = "function";
    call["function"] = json{{"name", name}, {"arguments", arguments}};
    calls_.back().push_back(std::move(call));
    call_ids_.insert(std::move(call_id));
    return absl::OkStatus();
  }

  absl::Status FunctionCallOutput(const json& item, const std::string& path) {
    ChatMessage m;
    m.role = "tool";
    DS_RETURN_IF_ERROR(RequiredString(item, "call_id", path + ".call_id", &m.tool_call_id));
    if (!call_ids_.contains(m.tool_call_id)) {
      return InvalidRequestError(path + ".call_id", "invalid_value",
                                 absl::StrCat("'", path, ".call_id' is '", m.tool_call_id,
                                              "', which matches no function_call item before it"));
    }
    const json* output = Member(item, "output");
    if (output == nullptr) return Missing(path + ".output");
    DS_RETURN_IF_ERROR(Content(*output, path + ".output", &m.content));
    pending_reasoning_.clear();
    Push(std::move(m));
    return absl::OkStatus();
  }

  // Its reasoning_text content (else its summary) becomes the next assistant message's
  // reasoning_content; encrypted_content cannot be read here and is ignored.
  absl::Status Reasoning(const json& item, const std::string& path) {
    std::vector<std::string> content, summary;
    DS_RETURN_IF_ERROR(Texts(item, "content", "reasoning_text", path, &content));
    DS_RETURN_IF_ERROR(Texts(item, "summary", "summary_text", path, &summary));
    std::string text =
        !content.empty() ? absl::StrJoin(content, "\n") : absl::StrJoin(summary, "\n\n");
    if (!pending_reasoning_.empty() && !text.empty()) pending_reasoning_ += "\n\n";
    pending_reasoning_ += text;
    assistant_open_ = false;
    return absl::OkStatus();
  }

  absl::Status Texts(const json& item, const char* name, std::string_view part_type,
                     const std::string& path, std::vector<std::string>* out) {
    const json* parts = Member(item, name);
    const std::string ppath = absl::StrCat(path, ".", name);
    if (parts == nullptr) return absl::OkStatus();
    if (!parts->is_array()) return TypeError(ppath, "an array", *parts);
    for (size_t i = 0; i < parts->size(); ++i) {
      const json& part = (*parts)[i];
      const std::string p = absl::StrCat(ppath, "[", i, "]");
      if (!part.is_object()) return TypeError(p, "an object", part);
      std::string type, text;
      DS_RETURN_IF_ERROR(RequiredString(part, "type", p + ".type", &type));
      if (type != part_type) {
        return InvalidRequestError(
            p + ".type", "invalid_value",
            absl::StrCat("'", p, ".type' must be '", Sv(part_type), "', got '", type, "'"));
      }
      DS_RETURN_IF_ERROR(RequiredString(part, "text", p + ".text", &text));
      out->push_back(std::move(text));
    }
    return absl::OkStatus();
  }

  void Push(ChatMessage m) {
    if (m.role != "assistant") assistant_open_ = false;
    messages_.push_back(std::move(m));
    calls_.emplace_back(json::array());
  }

  std::vector<ChatMessage>& messages_;
  const size_t first_;       // messages_ before the input's (the instructions)
  std::vector<json> calls_;  // per input message: its tool calls (assistant messages)
  std::set<std::string, std::less<>> call_ids_;
  std::string pending_reasoning_;
  // The last message is an assistant turn that a function_call item extends.
  bool assistant_open_ = false;
};

}  // namespace

absl::Status ParseResponsesInput(const json& doc, std::vector<ChatMessage>* messages) {
  const json* input = Member(doc, "input");
  if (input == nullptr) return Missing("input");
  if (input->is_string()) {
    ChatMessage m;
    m.role = "user";
    m.content = input->get<std::string>();
    messages->push_back(std::move(m));
    return absl::OkStatus();
  }
  if (!input->is_array()) return TypeError("input", "a string or an array of input items", *input);
  if (input->size() > kMaxInputItems) {
    return LimitError(
        "input", "max_input_items",
        absl::StrCat("'input' may hold at most ", kMaxInputItems, " items, got ", input->size()));
  }
  InputReader reader(messages);
  for (size_t i = 0; i < input->size(); ++i) {
    DS_RETURN_IF_ERROR(reader.Item((*input)[i], absl::StrCat("input[", i, "]")));
  }
  reader.Finish();
  return absl::OkStatus();
}

}  // namespace deltaserve::router::api::internal
