// The JSON Schema compiler's keyword tables and checks: which keywords annotate, which constrain,
// which are refused (and when they are moot), `type`, and `$ref` resolution.
#include <cmath>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/grammar/internal/json_schema_internal.h"
#include "common/str_util.h"

namespace deltaserve::common::grammar::internal {
namespace {

bool IsTrivialSchema(const Json& s) {
  return (s.is_boolean() && s.get<bool>()) || (s.is_object() && s.empty());
}

bool IsEmptyObject(const Json& s) { return s.is_object() && s.empty(); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// Finds the subschema whose `$anchor` (or draft 4-7 `$id`/`id` "#name") is `name`.
const Json* FindAnchor(const Json& node, std::string_view name, std::string& path, int depth) {
  if (depth > 128) return nullptr;
  if (node.is_object()) {
    for (const char* key : {"$anchor", "$dynamicAnchor", "$id", "id"}) {
      auto it = node.find(key);
      if (it == node.end() || !it->is_string()) continue;
      const std::string& v = it->get_ref<const std::string&>();
      if ((std::string_view(key).find("nchor") != std::string_view::npos && v == name) ||
          (!v.empty() && v[0] == '#' && std::string_view(v).substr(1) == name)) {
        return &node;
      }
    }
    for (const auto& [key, child] : node.items()) {
      const size_t len = path.size();
      path = JoinPath(path, key);
      if (const Json* found = FindAnchor(child, name, path, depth + 1)) return found;
      path.resize(len);
    }
  } else if (node.is_array()) {
    for (size_t i = 0; i < node.size(); ++i) {
      const size_t len = path.size();
      path = JoinPath(path, std::to_string(i));
      if (const Json* found = FindAnchor(node[i], name, path, depth + 1)) return found;
      path.resize(len);
    }
  }
  return nullptr;
}

}  // namespace

absl::Status UnsupportedKeyword(std::string_view keyword, std::string_view path,
                                std::string_view detail) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported JSON Schema keyword \"", Sv(keyword),
                                                 "\" at ", Sv(path), detail.empty() ? "" : ": ",
                                                 Sv(detail)));
}

absl::Status InvalidSchema(std::string_view path, std::string_view detail) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid JSON Schema at ", Sv(path), ": ", Sv(detail)));
}

std::string JoinPath(std::string_view path, std::string_view segment) {
  std::string out(path);
  out.push_back('/');
  for (char c : segment) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool IsAnnotationKeyword(std::string_view key) {
  static const absl::flat_hash_set<std::string_view> kAnnotations = {"title",
                                                                     "description",
                                                                     "default",
                                                                     "examples",
                                                                     "example",
                                                                     "$schema",
                                                                     "$id",
                                                                     "id",
                                                                     "$comment",
                                                                     "deprecated",
                                                                     "readOnly",
                                                                     "writeOnly",
                                                                     "contentEncoding",
                                                                     "contentMediaType",
                                                                     "contentSchema",
                                                                     "$anchor",
                                                                     "$vocabulary",
                                                                     "$defs",
                                                                     "definitions",
                                                                     "discriminator",
                                                                     "xml",
                                                                     "externalDocs",
                                                                     "$dynamicAnchor",
                                                                     "$recursiveAnchor"};
  return kAnnotations.contains(key);
}

bool IsKnownKeyword(std::string_view key) {
  static const absl::flat_hash_set<std::string_view> kKeywords = {"type",
                                                                  "enum",
                                                                  "const",
                                                                  "multipleOf",
                                                                  "maximum",
                                                                  "exclusiveMaximum",
                                                                  "minimum",
                                                                  "exclusiveMinimum",
                                                                  "maxLength",
                                                                  "minLength",
                                                                  "pattern",
                                                                  "maxItems",
                                                                  "minItems",
                                                                  "uniqueItems",
                                                                  "maxContains",
                                                                  "minContains",
                                                                  "maxProperties",
                                                                  "minProperties",
                                                                  "required",
                                                                  "dependentRequired",
                                                                  "format",
                                                                  "allOf",
                                                                  "anyOf",
                                                                  "oneOf",
                                                                  "not",
                                                                  "if",
                                                                  "then",
                                                                  "else",
                                                                  "dependentSchemas",
                                                                  "prefixItems",
                                                                  "items",
                                                                  "additionalItems",
                                                                  "contains",
                                                                  "properties",
                                                                  "patternProperties",
                                                                  "additionalProperties",
                                                                  "propertyNames",
                                                                  "unevaluatedItems",
                                                                  "unevaluatedProperties",
                                                                  "dependencies",
                                                                  "$ref",
                                                                  "$dynamicRef",
                                                                  "$recursiveRef",
                                                                  "nullable"};
  return kKeywords.contains(key) || IsAnnotationKeyword(key);
}

absl::StatusOr<unsigned> SchemaTypes(const Json& schema, std::string_view path) {
  auto it = schema.find("type");
  unsigned types = kAllTypes;
  if (it != schema.end()) {
    auto bit = [&](const Json& name) -> absl::StatusOr<unsigned> {
      if (!name.is_string()) return InvalidSchema(path, "type names must be strings");
      const std::string& n = name.get_ref<const std::string&>();
      if (n == "null") return kNull;
      if (n == "boolean") return kBoolean;
      if (n == "object") return kObject;
      if (n == "array") return kArray;
      if (n == "string") return kString;
      if (n == "integer") return kInteger;
      if (n == "number") return kNumber | kInteger;
      return InvalidSchema(path, absl::StrCat("unknown type \"", n, "\""));
    };
    types = 0;
    if (it->is_array()) {
      for (const Json& name : *it) {
        absl::StatusOr<unsigned> b = bit(name);
        if (!b.ok()) return b.status();
        types |= *b;
      }
    } else {
      absl::StatusOr<unsigned> b = bit(*it);
      if (!b.ok()) return b.status();
      types = *b;
    }
    auto nullable = schema.find("nullable");
    if (nullable != schema.end() && nullable->is_boolean() && nullable->get<bool>()) types |= kNull;
  }
  return types;
}

unsigned ValueType(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return kNull;
    case Json::value_t::boolean:
      return kBoolean;
    case Json::value_t::object:
      return kObject;
    case Json::value_t::array:
      return kArray;
    case Json::value_t::string:
      return kString;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return kInteger;
    case Json::value_t::number_float: {
      // No cast to an integer type: 1e97 is integral too, and out of int64's range.
      const double d = v.get<double>();
      return std::isfinite(d) && std::trunc(d) == d ? kInteger : kNumber;
    }
    default:
      return 0;
  }
}

absl::Status SchemaCompiler::CheckKeywords(const Json& schema, const std::string& path,
                                           unsigned types) const {
  const bool object = types & kObject, array = types & kArray;
  for (const auto& [key, value] : schema.items()) {
    if (!IsKnownKeyword(key) || IsAnnotationKeyword(key)) continue;
    if (key == "not" || key == "$dynamicRef" || key == "$recursiveRef") {
      return UnsupportedKeyword(key, path);
    }
    if (key == "if" && (schema.contains("then") || schema.contains("else"))) {
      return UnsupportedKeyword(key, path, "if/then/else");
    }
    // A lone `if` changes no verdict, except through unevaluated*: the properties (items) it
    // evaluates when it holds count as evaluated, which additionalProperties semantics (how
    // unevaluatedProperties is compiled without applicators) would refuse.
    if (key == "if") {
      for (const char* u : {"unevaluatedProperties", "unevaluatedItems"}) {
        auto it = schema.find(u);
        if (it != schema.end() && !IsTrivialSchema(*it)) {
          return UnsupportedKeyword(u, path, "next to if (the keys if evaluates would count)");
        }
      }
    }
    if (array && (key == "contains" || (key == "unevaluatedItems" && !IsTrivialSchema(value)))) {
      return UnsupportedKeyword(key, path);
    }
    if (object && key == "patternProperties" && !value.is_object()) {
      return InvalidSchema(path, "patternProperties must be an object");
    }
    if (object &&
        (key == "dependentRequired" || key == "dependentSchemas" || key == "dependencies") &&
        !IsEmptyObject(value)) {
      return UnsupportedKeyword(key, path);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<const Json*, std::string>> SchemaCompiler::Resolve(
    std::string_view ref, std::string_view path) const {
  std::string_view r = ref;
  // An absolute reference into this document, through its root `$id`.
  if (auto id = root_.is_object() ? root_.find("$id") : root_.end();
      root_.is_object() && id != root_.end() && id->is_string()) {
    std::string base = id->get<std::string>();
    if (!base.empty() && base.back() == '#') base.pop_back();
    if (!base.empty() && r.substr(0, base.size()) == base) r.remove_prefix(base.size());
  }
  if (r.empty() || r[0] != '#') {
    return UnsupportedKeyword("$ref", path,
                              absl::StrCat("only references within the schema (\"#...\") are "
                                           "supported, not \"",
                                           Sv(ref), "\""));
  }
  const std::string fragment = PercentDecode(r.substr(1));
  if (fragment.empty()) return std::make_pair(&root_, std::string("#"));
  if (fragment[0] != '/') {
    std::string at = "#";
    const Json* found = FindAnchor(root_, fragment, at, 0);
    if (!found) return InvalidSchema(path, absl::StrCat("$ref \"", Sv(ref), "\" names no anchor"));
    return std::make_pair(found, at);
  }
  const Json* node = &root_;
  std::string at = "#";
  size_t pos = 1;
  while (pos <= fragment.size()) {
    size_t end = fragment.find('/', pos);
    if (end == std::string::npos) end = fragment.size();
    std::string token;
    for (size_t i = pos; i < end; ++i) {
      if (fragment[i] == '~' && i + 1 < end && (fragment[i + 1] == '0' || fragment[i + 1] == '1')) {
        token.push_back(fragment[i + 1] == '0' ? '~' : '/');
        ++i;
      } else {
        token.push_back(fragment[i]);
      }
    }
    if (node->is_object() && node->contains(token)) {
      node = &(*node)[token];
    } else if (node->is_array() && !token.empty() &&
               token.find_first_not_of("0123456789") == std::string::npos && token.size() < 10 &&
               std::stoul(token) < node->size()) {
      node = &(*node)[std::stoul(token)];
    } else {
      return InvalidSchema(path, absl::StrCat("$ref \"", Sv(ref), "\" points to nothing"));
    }
    at = JoinPath(at, token);
    pos = end + 1;
  }
  return std::make_pair(node, at);
}

}  // namespace deltaserve::common::grammar::internal
