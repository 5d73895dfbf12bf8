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
  jinja::Interpreter interpreter(*tmpl_);
  return interpreter.Render(context);
}

bool IsRaisedByTemplate(const absl::Status& status) {
  return status.GetPayload(jinja::kRaiseExceptionPayload).has_value();
}

}  // namespace deltaserve::common
