// The request's declared tools as the tool-call parser needs them: which function names exist
// (rule 7 of ../shared/fixtures/toolcalls.md) and each parameter's JSON-schema type, which decides
// how a call's text value becomes a JSON value (rule 6). Pure functions over the OpenAI `tools`
// array; malformed entries are ignored, never thrown on.
//
//   ToolCatalog catalog(request["tools"]);
//   if (catalog.Declares("get_weather")) value = ConvertTextValue("45", catalog.ParameterType(..));
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace deltaserve::router {

// The type a parameter's schema declares, as far as converting a text value goes.
enum class DeclaredValueType { kString, kInteger, kNumber, kBoolean, kObject, kArray, kNull };

// The type of one property schema: its "type" (for a union like ["boolean","null"] the first
// non-null member; ["null"] alone is kNull), else the first non-null member type of "anyOf" /
// "oneOf" (what pydantic writes for Optional[int]; an extension of rule 6), else kString (rule 6:
// "string (or no type) -> raw text"). Unknown type names read as kString.
DeclaredValueType DeclaredTypeOf(const nlohmann::ordered_json& property_schema);

// Rule 6: the JSON value of a call's raw text value `raw` for a parameter of type `type`.
// kString: the text unchanged. Otherwise the text with ASCII whitespace trimmed is read: "null" ->
// null; kInteger/kNumber: a JSON number literal -> that number ("03106" is not one); kBoolean:
// true/false in any letter case; kObject/kArray: JSON text of that kind. A text that does not
// convert stays the raw string (untrimmed).
nlohmann::ordered_json ConvertTextValue(std::string_view raw, DeclaredValueType type);

// The request's tools: function names and parameter types. Accepts the chat-completions shape
// {"type":"function","function":{"name","parameters"}} and the flat {"name","parameters"} one.
class ToolCatalog {
 public:
  ToolCatalog() = default;
  explicit ToolCatalog(const nlohmann::ordered_json& tools);

  // No function declared: nothing is parsed as a call (rule 7).
  bool empty() const { return functions_.empty(); }
  bool Declares(std::string_view function) const;
  // The declared type of `parameter` of `function`; kString for a parameter not in the schema
  // (rule 7: kept as raw text).
  DeclaredValueType ParameterType(std::string_view function, std::string_view parameter) const;
  // JSON-format calls (rule 6, last sentence): each top-level string value of `arguments` whose
  // declared type is not string is converted as ConvertTextValue does. Other values unchanged.
  void ConvertJsonArguments(std::string_view function, nlohmann::ordered_json& arguments) const;

 private:
  using ParameterTypes = std::map<std::string, DeclaredValueType, std::less<>>;
  std::map<std::string, ParameterTypes, std::less<>> functions_;
};

}  // namespace deltaserve::router
