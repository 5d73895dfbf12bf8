#include "router/chat/tool_call_types.h"

#include <cctype>
#include <optional>

#include "router/chat/internal/markup_scan.h"

namespace deltaserve::router {
namespace {

using nlohmann::ordered_json;

DeclaredValueType TypeFromName(std::string_view name) {
  if (name == "integer") return DeclaredValueType::kInteger;
  if (name == "number") return DeclaredValueType::kNumber;
  if (name == "boolean") return DeclaredValueType::kBoolean;
  if (name == "object") return DeclaredValueType::kObject;
  if (name == "array") return DeclaredValueType::kArray;
  if (name == "null") return DeclaredValueType::kNull;
  return DeclaredValueType::kString;
}

// The first non-null member of a "type" value (a name or a list of names); nullopt when absent.
std::optional<DeclaredValueType> TypeOfTypeField(const ordered_json& type) {
  if (type.is_string()) return TypeFromName(type.get_ref<const std::string&>());
  if (!type.is_array()) return std::nullopt;
  bool saw_null = false;
  for (const ordered_json& member : type) {
    if (!member.is_string()) continue;
    const std::string& name = member.get_ref<const std::string&>();
    if (name == "null") {
      saw_null = true;
      continue;
    }
    return TypeFromName(name);
  }
  if (saw_null) return DeclaredValueType::kNull;
  return std::nullopt;
}

// A JSON number literal exactly (RFC 8259 grammar): no leading '+', no leading zeros, no NaN.
bool IsJsonNumber(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  auto digits = [&] {
    const size_t start = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') ++i;
    return i > start;
  };
  if (i < n && s[i] == '-') ++i;
  if (i < n && s[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < n && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == n;
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

const ordered_json* Find(const ordered_json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

}  // namespace

DeclaredValueType DeclaredTypeOf(const ordered_json& property_schema) {
  if (const ordered_json* type = Find(property_schema, "type")) {
    if (std::optional<DeclaredValueType> t = TypeOfTypeField(*type)) return *t;
  }
  for (const char* combinator : {"anyOf", "oneOf"}) {
    const ordered_json* members = Find(property_schema, combinator);
    if (members == nullptr || !members->is_array()) continue;
    for (const ordered_json& member : *members) {
      const ordered_json* type = Find(member, "type");
      if (type == nullptr) continue;
      std::optional<DeclaredValueType> t = TypeOfTypeField(*type);
      if (t.has_value() && *t != DeclaredValueType::kNull) return *t;
    }
  }
  return DeclaredValueType::kString;
}

ordered_json ConvertTextValue(std::string_view raw, DeclaredValueType type) {
  if (type == DeclaredValueType::kString) return ordered_json(std::string(raw));
  const std::string_view text = internal::TrimSpace(raw);
  if (text == "null") return ordered_json(nullptr);
  switch (type) {
    case DeclaredValueType::kInteger:
    case DeclaredValueType::kNumber:
      if (IsJsonNumber(text)) {
        ordered_json number = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
        if (number.is_number()) return number;
      }
      break;
    case DeclaredValueType::kBoolean:
      if (EqualsIgnoringCase(text, "true")) return ordered_json(true);
      if (EqualsIgnoringCase(text, "false")) return ordered_json(false);
      break;
    case DeclaredValueType::kObject:
    case DeclaredValueType::kArray: {
      ordered_json parsed = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (type == DeclaredValueType::kObject ? parsed.is_object() : parsed.is_array()) {
        return parsed;
      }
      break;
    }
    default:
      break;
  }
  return ordered_json(std::string(raw));
}

ToolCatalog::ToolCatalog(const ordered_json& tools) {
  if (!tools.is_array()) return;
  for (const ordered_json& tool : tools) {
    const ordered_json* function = Find(tool, "function");
    if (function == nullptr || !function->is_object()) function = &tool;
    const ordered_json* name = Find(*function, "name");
    if (name == nullptr || !name->is_string()) continue;
    ParameterTypes& types = functions_[name->get_ref<const std::string&>()];
    const ordered_json* parameters = Find(*function, "parameters");
    const ordered_json* properties = parameters ? Find(*parameters, "properties") : nullptr;
    if (properties == nullptr || !properties->is_object()) continue;
    for (auto it = properties->begin(); it != properties->end(); ++it) {
      types[it.key()] = DeclaredTypeOf(it.value());
    }
  }
}

bool ToolCatalog::Declares(std::string_view function) const {
  return functions_.find(function) != functions_.end();
}

DeclaredValueType ToolCatalog::ParameterType(std::string_view function,
                                             std::string_view parameter) const {
  auto f = functions_.find(function);
  if (f == functions_.end()) return DeclaredValueType::kString;
  auto p = f->second.find(parameter);
  return p == f->second.end() ? DeclaredValueType::kString : p->second;
}

void ToolCatalog::ConvertJsonArguments(std::string_view function, ordered_json& arguments) const {
  if (!arguments.is_object()) return;
  for (auto it = arguments.begin(); it != arguments.end(); ++it) {
    if (!it.value().is_string()) continue;
    const DeclaredValueType type = ParameterType(function, it.key());
    if (type == DeclaredValueType::kString) continue;
    const std::string raw = it.value().get<std::string>();
    it.value() = ConvertTextValue(raw, type);
  }
}

}  // namespace deltaserve::router
