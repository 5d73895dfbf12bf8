#pragma once
// Renders an OpenAI chat conversation into the prompt text of the Qwen ChatML family, exactly as
// the Qwen3 Jinja chat template does (the template in ../shared/golden/
// qwen3-vocab-qwen35pre.gguf's `tokenizer.chat_template`, Qwen/Qwen3-* on Hugging Face):
//
//   <|im_start|>system\n{system}<|im_end|>\n          (when the first message is a system one)
//   <|im_start|>user\n{text}<|im_end|>\n
//   <|im_start|>assistant\n{text}<tool_call>...<|im_end|>\n
//   <|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>\n   (tool messages)
//   <|im_start|>assistant\n[<think>\n\n</think>\n\n]  (generation prompt; the part in [] when
//                                                      enable_thinking is false)
//
// Tools are listed in the system turn in Qwen's "# Tools" block, one JSON object per line as
// Python's json.dumps writes it (", " and ": " separators, non-ASCII kept). The text is then
// tokenized with special-token parsing on (<|im_start|> etc. become their control tokens) except
// in the request's own text, which RenderChatMarked marks: message content, reasoning, tool-call
// names and arguments, and the tools (docs/chat.md, "Special tokens in content").

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/marked_text.h"
#include "router/api/completion_request.h"

namespace deltaserve::router::chat {

// The template's switches.
struct ChatOptions {
  // Qwen's `enable_thinking` (chat_template_kwargs). False appends an empty think block to the
  // generation prompt so the model answers directly.
  bool enable_thinking = true;
  // Ends the text with the assistant turn's opening ("<|im_start|>assistant\n").
  bool add_generation_prompt = true;
  // The request's `tools` array as JSON text; empty (or "[]") for none.
  std::string tools_json;
};

// The prompt text for `messages`. Roles: "system" and "developer" (rendered as system), "user",
// "assistant" (with `tool_calls_json` and `reasoning_content`), "tool". InvalidArgument naming
// the message (`messages[2].tool_calls`, `tools`) when there are no messages, a role is unknown,
// or tools / tool_calls are not valid JSON arrays of objects.
absl::StatusOr<std::string> RenderChat(const std::vector<api::ChatMessage>& messages,
                                       const ChatOptions& options);
// RenderChat's text with the bytes that came from the request marked untrusted.
absl::StatusOr<common::MarkedText> RenderChatMarked(const std::vector<api::ChatMessage>& messages,
                                                    const ChatOptions& options);

namespace internal {

// JSON text as Python's json.dumps(value, ensure_ascii=False) writes it, keys in their order in
// `json` (the template's `tojson` filter). InvalidArgument when `json` does not parse.
absl::StatusOr<std::string> PythonJsonDumps(std::string_view json);

}  // namespace internal

}  // namespace deltaserve::router::chat
