#include "common/jinja/chat_template.h"

#include "common/jinja/interpreter.h"
#include "common/jinja/parser.h"

namespace deltaserve::common {

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  auto tmpl = jinja::ParseTemplate(source);
  if (!tmpl.ok()) return tmpl.status();
  return ChatTemplate(std::shared_ptr<const jinja::Template>(std::move(*tmpl)));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  absl::StatusOr<MarkedText> marked = RenderMarked(context, {});
  if (!marked.ok()) return marked.status();
  return std::move(marked->text);
}

absl::StatusOr<MarkedText> ChatTemplate::RenderMarked(
    const nlohmann::ordered_json& context, absl::Span<const std::string> trusted_keys) const {
  jinja::Interpreter interpreter(*tmpl_);
  return interpreter.Render(context, trusted_keys);
}

bool IsRaisedByTemplate(const absl::Status& status) {
  return status.GetPayload(jinja::kRaiseExceptionPayload).has_value();
}

}  // namespace deltaserve::common
