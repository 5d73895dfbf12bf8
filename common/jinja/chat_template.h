// A model's chat template (the Jinja text of tokenizer.chat_template), rendered byte for byte as
// Python jinja2 renders it under transformers (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loopcontrols, the generation tag, tojson with ensure_ascii=False,
// raise_exception, strftime_now). What is supported and how errors read: docs/chat_templates.md.
//
//   absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(gguf_template_text);
//   nlohmann::ordered_json ctx = {{"messages", messages}, {"tools", nullptr},
//                                 {"add_generation_prompt", true}, {"eos_token", "<|im_end|>"}};
//   absl::StatusOr<std::string> prompt = t->Render(ctx);
//   absl::StatusOr<MarkedText> marked = t->RenderMarked(ctx, {"bos_token", "eos_token"});
//   ids = tokenizer.EncodeMarked(marked->text, marked->untrusted);  // request text stays text
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/marked_text.h"
#include "nlohmann/json.hpp"

namespace deltaserve::common {

namespace jinja {
struct Template;
}  // namespace jinja

class ChatTemplate {
 public:
  // Parses `source`; unknown syntax or an unsupported tag/filter/test is an InvalidArgument
  // naming the line (and column) — never a crash.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source);

  // Renders with `context` (a JSON object: messages, tools, add_generation_prompt, bos/eos
  // tokens and any chat_template_kwargs as top-level variables; keys in insertion order).
  // raise_exception(msg) → InvalidArgument whose message is exactly msg, carrying the
  // kRaiseExceptionPayload payload (IsRaisedByTemplate tells it apart); runtime failures (calling
  // a method on null, bad types) → InvalidArgument "chat template line N: TypeError: …"; a render
  // past the engine's limits → ResourceExhausted naming the line.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

  // Render, also saying which bytes of the text came from `context` rather than from the
  // template's own text: every string in it (dict keys too) except those under the top-level
  // keys named in `trusted_keys` (the caller's own values, such as the tokenizer's bos_token).
  // Text the template computes from context strings (tojson, upper, a slice) counts as context;
  // concatenation and trimming keep the marks byte for byte (docs/chat_templates.md). The text
  // is exactly Render's.
  absl::StatusOr<MarkedText> RenderMarked(const nlohmann::ordered_json& context,
                                          absl::Span<const std::string> trusted_keys) const;

 private:
  explicit ChatTemplate(std::shared_ptr<const jinja::Template> tmpl) : tmpl_(std::move(tmpl)) {}
  std::shared_ptr<const jinja::Template> tmpl_;
};

// True when `status` is the template's own raise_exception(...) (transformers' TemplateError):
// its message is then exactly the template's text, fit to show to the client.
bool IsRaisedByTemplate(const absl::Status& status);

}  // namespace deltaserve::common
