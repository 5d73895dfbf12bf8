#include "common/grammar/internal/xml_call_parameters.h"

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grammar/internal/json_schema_internal.h"
#include "common/grammar/json_schema_compiler.h"
#include "common/grammar/regex.h"
#include "common/str_util.h"

namespace deltaserve::common::grammar::internal {
namespace {

// Removes '<' from every character set of a regex. A raw-text parameter value must not hold
// "</" (the parser would end the value there), and a regex is not intersected with "no </"
// cheaply; without '<' it cannot produce one. Stricter than needed ("a<b" is lost), never
// unsound. False when a set held nothing but '<' (the pattern needs one: refused, not silently
// left unmatchable).
bool DropLessThan(RegexNode& node) {
  bool ok = true;
  if (node.kind == RegexNode::Kind::kCodePointSet && !node.ranges.empty()) {
    std::vector<std::pair<uint32_t, uint32_t>> kept;
    for (const auto& [lo, hi] : node.ranges) {
      if (hi < '<' || lo > '<') {
        kept.emplace_back(lo, hi);
        continue;
      }
      if (lo < '<') kept.emplace_back(lo, '<' - 1);
      if (hi > '<') kept.emplace_back('<' + 1, hi);
    }
    ok = !kept.empty();
    node.ranges = std::move(kept);
  }
  for (const std::unique_ptr<RegexNode>& child : node.children) ok = DropLessThan(*child) && ok;
  return ok;
}

using json = nlohmann::ordered_json;

absl::Status Refused(std::string_view keyword, std::string_view where, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported JSON Schema keyword \"", Sv(keyword),
                                                 "\" at ", Sv(where), ": ", Sv(why)));
}

}  // namespace

RuleId RawText::Char(bool no_slash) {
  RuleId& cached = no_slash ? char_no_slash_ : char_;
  if (cached != kNone) return cached;
  const RuleId r = b_.AddRule(no_slash ? "raw_char_no_slash" : "raw_char");
  ByteClass ascii = ByteClass::Range(0x20, 0x7e);
  ascii.Add('\t');
  ascii.Add('\n');
  ascii.Add('\r');
  ascii.Remove('<');
  if (no_slash) ascii.Remove('/');
  const ByteClass tail = ByteClass::Range(0x80, 0xbf);
  b_.AddAlternative(r, {b_.Bytes(ascii)});
  b_.AddAlternative(r, {b_.Bytes(ByteClass::Range(0xc2, 0xdf)), b_.Bytes(tail)});
  b_.AddAlternative(
      r, {b_.Bytes(ByteClass::Of(0xe0)), b_.Bytes(ByteClass::Range(0xa0, 0xbf)), b_.Bytes(tail)});
  ByteClass e1 = ByteClass::Range(0xe1, 0xec);
  e1.AddRange(0xee, 0xef);
  b_.AddAlternative(r, {b_.Bytes(e1), b_.Bytes(tail), b_.Bytes(tail)});
  b_.AddAlternative(
      r, {b_.Bytes(ByteClass::Of(0xed)), b_.Bytes(ByteClass::Range(0x80, 0x9f)), b_.Bytes(tail)});
  b_.AddAlternative(r, {b_.Bytes(ByteClass::Of(0xf0)), b_.Bytes(ByteClass::Range(0x90, 0xbf)),
                        b_.Bytes(tail), b_.Bytes(tail)});
  b_.AddAlternative(
      r, {b_.Bytes(ByteClass::Range(0xf1, 0xf3)), b_.Bytes(tail), b_.Bytes(tail), b_.Bytes(tail)});
  b_.AddAlternative(r, {b_.Bytes(ByteClass::Of(0xf4)), b_.Bytes(ByteClass::Range(0x80, 0x8f)),
                        b_.Bytes(tail), b_.Bytes(tail)});
  cached = r;
  return r;
}

RuleId RawText::Free() {
  if (free_ != kNone) return free_;
  free_ = b_.AddRule("raw_text");
  const RuleId after_lt = b_.AddRule("raw_text_after_lt");
  const Symbol lt = b_.Bytes(ByteClass::Of('<'));
  b_.AddAlternative(free_, {});
  b_.AddAlternative(free_, {Symbol::Rule(Char(false)), Symbol::Rule(free_)});
  b_.AddAlternative(free_, {lt, Symbol::Rule(after_lt)});
  b_.AddAlternative(after_lt, {});
  b_.AddAlternative(after_lt, {Symbol::Rule(Char(true)), Symbol::Rule(free_)});
  b_.AddAlternative(after_lt, {lt, Symbol::Rule(after_lt)});
  return free_;
}

namespace {

// The schema of one value with the root's `$defs` / `definitions` carried along, so that its
// local `$ref`s resolve when it is compiled on its own.
std::string WithRootDefinitions(const json& value_schema, const json& root) {
  if (!value_schema.is_object()) return value_schema.dump();
  json copy = value_schema;
  for (const char* key : {"$defs", "definitions"}) {
    auto it = root.find(key);
    if (it != root.end() && !copy.contains(key)) copy[key] = *it;
  }
  return copy.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The type the tool-call parser reads a value as (router/chat/tool_call_types.h,
// DeclaredTypeOf; ../shared/fixtures/toolcalls.md rule 6): the first non-null member of "type"
// ("null" when that is all), else that of the first anyOf / oneOf member whose type is not
// null; else "string" (raw text). `from_combinator` says which member decided, if one did.
std::string DeclaredType(const json& schema, const json** from_combinator) {
  *from_combinator = nullptr;
  auto first_type = [](const json& type) -> std::string {
    if (type.is_string()) return type.get<std::string>();
    if (!type.is_array()) return "";
    bool saw_null = false;
    for (const json& t : type) {
      if (!t.is_string()) continue;
      if (t.get_ref<const std::string&>() == "null") {
        saw_null = true;
        continue;
      }
      return t.get<std::string>();
    }
    return saw_null ? "null" : "";
  };
  if (!schema.is_object()) return "string";
  if (auto type = schema.find("type"); type != schema.end()) {
    if (std::string t = first_type(*type); !t.empty()) return t;
  }
  for (const char* combinator : {"anyOf", "oneOf"}) {
    auto members = schema.find(combinator);
    if (members == schema.end() || !members->is_array()) continue;
    for (const json& m : *members) {
      if (!m.is_object() || !m.contains("type")) continue;
      const std::string t = first_type(m["type"]);
      if (!t.empty() && t != "null") {
        *from_combinator = &m;
        return t;
      }
    }
  }
  return "string";
}

// Whether `schema` admits strings as far as its own "type" says (no type: yes).
bool MayBeString(const json& schema) {
  if (!schema.is_object()) return !(schema.is_boolean() && !schema.get<bool>());
  auto type = schema.find("type");
  if (type == schema.end()) return true;
  if (type->is_string()) return type->get<std::string>() == "string";
  if (type->is_array()) {
    for (const json& t : *type) {
      if (t.is_string() && t.get_ref<const std::string&>() == "string") return true;
    }
  }
  return false;
}

// A local `$ref` ("#/$defs/Name", "#/definitions/Name") resolved against `root`, following
// chains up to 16 hops; nullptr when it is not such a reference or does not resolve.
const json* ResolveLocalRef(const json& schema, const json& root) {
  const json* at = &schema;
  for (int hop = 0; hop < 16; ++hop) {
    if (!at->is_object()) return at;
    auto ref = at->find("$ref");
    if (ref == at->end()) return at;
    if (!ref->is_string()) return nullptr;
    const std::string& r = ref->get_ref<const std::string&>();
    const json* target = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string_view p(prefix);
      if (r.compare(0, p.size(), p) != 0) continue;
      std::string name;  // JSON pointer unescaping: ~1 is '/', ~0 is '~'
      for (size_t i = p.size(); i < r.size(); ++i) {
        if (r[i] == '/') return nullptr;  // deeper pointers are not followed here
        if (r[i] == '~' && i + 1 < r.size() && (r[i + 1] == '0' || r[i + 1] == '1')) {
          name += r[++i] == '0' ? '~' : '/';
        } else {
          name += r[i];
        }
      }
      auto defs = root.find(std::string(p.substr(2, p.size() - 3)));
      if (defs != root.end() && defs->is_object()) {
        auto it = defs->find(name);
        if (it != defs->end()) target = &*it;
      }
    }
    if (target == nullptr) return nullptr;
    at = target;
  }
  return nullptr;
}

// Whether a keyword only annotates or names a combinator member here (what may sit beside
// "$ref" / "anyOf" in a raw-text parameter without constraining it further).
bool OnlyBeside(const json& schema, std::string_view keyword) {
  for (auto it = schema.begin(); it != schema.end(); ++it) {
    if (it.key() != keyword && !internal::IsAnnotationKeyword(it.key()) && it.key() != "type") {
      return false;
    }
  }
  return true;
}

// The rule for a raw-text value (see ToolCallFormat::kQwenXml): string keywords enforced,
// applicators and `format` refused, keywords of other types moot (the value is a string).
absl::StatusOr<RuleId> AddRawTextValue(GrammarBuilder& b, RawText& raw, const json& schema,
                                       const std::string& where, const std::string& name) {
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) {
      return absl::InvalidArgumentError(absl::StrCat("the schema at ", where, " is false"));
    }
    return raw.Free();
  }
  std::optional<int64_t> min_length, max_length;
  const json* enum_values = nullptr;
  const json* const_value = nullptr;
  const json* pattern = nullptr;
  for (auto it = schema.begin(); it != schema.end(); ++it) {
    const std::string& k = it.key();
    if (k == "anyOf" || k == "oneOf" || k == "allOf" || k == "not" || k == "if" || k == "then" ||
        k == "else" || k == "$ref" || k == "$dynamicRef" || k == "format" ||
        k == "contentEncoding" || k == "contentSchema") {
      return Refused(k, where,
                     "a string parameter of a forced Qwen XML call is raw text, where only "
                     "enum, const, pattern, minLength and maxLength are enforced");
    }
    if (k == "minLength" || k == "maxLength") {
      if (!it->is_number_integer() && !it->is_number_unsigned()) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", k, "\" at ", where, " must be a non-negative integer"));
      }
      const int64_t v = it->get<int64_t>();
      if (v < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", k, "\" at ", where, " must be a non-negative integer"));
      }
      (k == "minLength" ? min_length : max_length) = v;
    } else if (k == "enum") {
      enum_values = &*it;
    } else if (k == "const") {
      const_value = &*it;
    } else if (k == "pattern") {
      pattern = &*it;
    }
  }
  auto literal_ok = [](const std::string& s) { return s.find("</") == std::string::npos; };
  if (const_value != nullptr || enum_values != nullptr) {
    std::vector<Alternative> choices;
    auto add = [&](const json& v) {
      if (!v.is_string()) return;  // a non-string member cannot be written as raw text
      const std::string& s = v.get_ref<const std::string&>();
      // Code points: every byte but UTF-8 continuation bytes starts one.
      const int64_t n = std::count_if(
          s.begin(), s.end(), [](char c) { return (static_cast<uint8_t>(c) & 0xc0) != 0x80; });
      if (!literal_ok(s) || (max_length && n > *max_length) || (min_length && n < *min_length)) {
        return;
      }
      choices.push_back(b.Literal(s));
    };
    if (const_value != nullptr) {
      add(*const_value);
    } else if (enum_values->is_array()) {
      for (const json& v : *enum_values) add(v);
    }
    if (choices.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", const_value != nullptr ? "const" : "enum", "\" at ", where,
          " has no string value a raw-text parameter can take (strings without \"</\")"));
    }
    return b.Choice(absl::StrCat(name, "_enum"), std::move(choices));
  }
  if (pattern != nullptr) {
    if (!pattern->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"pattern\" at ", where, " must be a string"));
    }
    if (min_length || max_length) {
      return Refused(max_length ? "maxLength" : "minLength", where,
                     "a raw-text parameter enforces \"pattern\" or a length, not both");
    }
    absl::StatusOr<RegexAst> ast = ParseRegex(pattern->get_ref<const std::string&>());
    if (!ast.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"pattern\" at ", where, ": ", ast.status().message()));
    }
    if (!DropLessThan(**ast)) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"pattern\" at ", where,
                       " needs a '<', which a raw-text parameter value cannot hold (its closing "
                       "tag is \"</\")"));
    }
    absl::StatusOr<RuleId> r =
        AddRegexRules(b, **ast, absl::StrCat(name, "_pattern"), RegexTarget::kRawBytes);
    if (!r.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"pattern\" at ", where, ": ", r.status().message()));
    }
    return *r;
  }
  const int64_t lo = min_length.value_or(0);
  if (max_length && *max_length < lo) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"maxLength\" at ", where, " is below \"minLength\""));
  }
  constexpr int64_t kMaxRepetition = 4096;  // JsonGrammarOptions::max_repetition's default
  if (lo > kMaxRepetition || (max_length && *max_length > kMaxRepetition)) {
    return Refused(max_length && *max_length > kMaxRepetition ? "maxLength" : "minLength", where,
                   absl::StrCat("bounds above ", kMaxRepetition, " are refused"));
  }
  if (!max_length && lo == 0) return raw.Free();
  const Alternative one_char = {Symbol::Rule(raw.Char(false))};
  if (!max_length) {
    // At least `lo` characters without '<', then any text without "</".
    const RuleId head =
        b.Repeat(absl::StrCat(name, "_min"), one_char, static_cast<int>(lo), static_cast<int>(lo));
    const RuleId r = b.AddRule(name);
    b.AddAlternative(r, {Symbol::Rule(head), Symbol::Rule(raw.Free())});
    return r;
  }
  // Bounded: code points other than '<', counted exactly.
  return b.Repeat(name, one_char, static_cast<int>(lo), static_cast<int>(*max_length));
}

// One value in the XML format: raw text where the parser reads a string, else JSON (rule 6).
absl::StatusOr<RuleId> AddXmlValue(GrammarBuilder& b, RawText& raw, JsonWhitespace whitespace,
                                   const json& schema, const json& root, const std::string& where,
                                   const std::string& name, int depth = 0) {
  if (depth > 16) {
    return Refused("$ref", where, "more than 16 $ref / anyOf hops to a parameter's own schema");
  }
  const json* member = nullptr;
  const std::string declared = DeclaredType(schema, &member);
  const json* combinator = nullptr;
  std::string combinator_name;
  if (schema.is_object()) {
    for (const char* c : {"anyOf", "oneOf"}) {
      if (auto it = schema.find(c); it != schema.end()) {
        combinator = &*it;
        combinator_name = c;
      }
    }
  }
  if (declared == "string") {
    if (schema.is_object() && schema.contains("type") && member == nullptr) {
      // "type" decided. A union listing string first is written as a string.
      return AddRawTextValue(b, raw, schema, where, name);
    }
    if (member != nullptr) {
      // Optional[str] and the like: the string member is written; every other member must not
      // admit strings (a string could then match them instead, or none).
      for (const json& m : *combinator) {
        if (&m != member && MayBeString(m)) {
          return Refused(combinator_name, where,
                         "a raw-text parameter takes one string member of anyOf / oneOf; the "
                         "others must not admit strings");
        }
      }
      if (!OnlyBeside(schema, combinator_name)) {
        return Refused(combinator_name, where,
                       "a raw-text parameter takes anyOf / oneOf only beside annotations");
      }
      return AddRawTextValue(b, raw, *member, where, name);
    }
    if (schema.is_object() && schema.contains("$ref") && OnlyBeside(schema, "$ref")) {
      // An enum class as pydantic writes it: {"$ref": "#/$defs/Color"}. The parser reads it as
      // a string (it does not follow $ref), so the target must be a string schema.
      const json* target = ResolveLocalRef(schema, root);
      const json* ignored = nullptr;
      if (target == nullptr || DeclaredType(*target, &ignored) != "string" ||
          (target->is_object() && !target->contains("type") && target->contains("enum") &&
           !std::all_of((*target)["enum"].begin(), (*target)["enum"].end(),
                        [](const json& v) { return v.is_string(); }))) {
        return Refused("$ref", where,
                       "a parameter given by $ref is read back as a string: it must resolve "
                       "(locally) to a string schema");
      }
      return AddXmlValue(b, raw, whitespace, *target, root, where, name, depth + 1);
    }
    if (combinator != nullptr && OnlyBeside(schema, combinator_name)) {
      // Optional[Enum] as pydantic writes it: one member that is not {"type": "null"} (a $ref,
      // or an untyped enum), read back as a string: that member is written.
      const json* only = nullptr;
      int others = 0;
      for (const json& m : *combinator) {
        const bool is_null = m.is_object() && m.contains("type") && m["type"] == "null";
        if (!is_null) {
          only = &m;
          ++others;
        }
      }
      if (others == 1) {
        return AddXmlValue(b, raw, whitespace, *only, root, where, name, depth + 1);
      }
    }
    return AddRawTextValue(b, raw, schema, where, name);
  }
  // JSON text. Where the parser's declared type is not string but the schema admits a string,
  // a JSON string would come back as raw text with its quotes: refused.
  if (schema.is_object()) {
    auto type = schema.find("type");
    if (type != schema.end() && type->is_array() && MayBeString(schema)) {
      return Refused("type", where,
                     "a forced Qwen XML call writes a value of a type union as its first "
                     "non-null type; list \"string\" first or drop it");
    }
    if (type == schema.end() && combinator != nullptr) {
      for (const json& m : *combinator) {
        if (MayBeString(m)) {
          return Refused(combinator_name, where,
                         "a member admitting strings would come back as raw text; a value whose "
                         "members are not all strings or all non-strings cannot be written");
        }
      }
    }
  }
  JsonGrammarOptions options;
  options.whitespace = whitespace;
  options.additional_properties_default = false;
  absl::StatusOr<RuleId> r =
      AddJsonSchemaRules(b, WithRootDefinitions(schema, root), name, options);
  if (!r.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", r.status().message()));
  }
  return *r;
}
}  // namespace

absl::StatusOr<Alternative> AddXmlParameters(GrammarBuilder& b, RawText& raw,
                                             JsonWhitespace whitespace, const json& root,
                                             const std::string& fn) {
  Alternative seq;
  if (root.is_boolean() || root.is_null()) return seq;
  if (!root.is_object()) {
    return absl::InvalidArgumentError("the parameters schema must be an object");
  }
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& k = it.key();
    if (k == "type") {
      if (!(it->is_string() && it->get<std::string>() == "object")) {
        return Refused("type", "#", "a function's parameters are an object");
      }
    } else if (k != "properties" && k != "required" && k != "additionalProperties" &&
               k != "strict" && !internal::IsAnnotationKeyword(k)) {
      return Refused(k, "#",
                     "the parameters of a forced Qwen XML call take \"properties\", "
                     "\"required\" and \"additionalProperties\" at the top level");
    }
  }
  std::vector<std::string> required;
  if (auto req = root.find("required"); req != root.end()) {
    if (!req->is_array()) {
      return absl::InvalidArgumentError("\"required\" at # must be an array of strings");
    }
    for (const json& r : *req) {
      if (!r.is_string()) {
        return absl::InvalidArgumentError("\"required\" at # must be an array of strings");
      }
      required.push_back(r.get<std::string>());
    }
  }
  auto is_required = [&](const std::string& p) {
    return std::find(required.begin(), required.end(), p) != required.end();
  };
  auto param_name_ok = [](const std::string& p) {
    return !p.empty() && p.find_first_of("<>\n") == std::string::npos;
  };
  const json empty_properties = json::object();
  const json* properties = &empty_properties;
  if (auto props = root.find("properties"); props != root.end()) {
    if (!props->is_object()) {
      return absl::InvalidArgumentError("\"properties\" at # must be an object");
    }
    properties = &*props;
  }
  int index = 0;
  auto add_param = [&](const std::string& p, const json& schema) -> absl::Status {
    const std::string where = absl::StrCat("#/properties/", p);
    if (!param_name_ok(p)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the parameter name \"", p,
                       "\" cannot be written in a Qwen XML call ('<', '>' or a "
                       "newline)"));
    }
    const std::string rule_name = absl::StrCat(fn, "_p", index++);
    absl::StatusOr<RuleId> value = AddXmlValue(b, raw, whitespace, schema, root, where, rule_name);
    if (!value.ok()) return value.status();
    Alternative body = b.Literal(absl::StrCat("<parameter=", p, ">\n"));
    body.push_back(Symbol::Rule(*value));
    const Alternative close = b.Literal("\n</parameter>\n");
    body.insert(body.end(), close.begin(), close.end());
    if (is_required(p)) {
      const RuleId r = b.AddRule(rule_name + "_param");
      b.AddAlternative(r, std::move(body));
      seq.push_back(Symbol::Rule(r));
    } else {
      seq.push_back(Symbol::Rule(b.Optional(rule_name + "_param", std::move(body))));
    }
    return absl::OkStatus();
  };
  for (auto it = properties->begin(); it != properties->end(); ++it) {
    if (absl::Status s = add_param(it.key(), *it); !s.ok()) return s;
  }
  for (const std::string& p : required) {
    if (properties->contains(p)) continue;
    if (absl::Status s = add_param(p, json(true)); !s.ok()) return s;
  }
  return seq;
}

}  // namespace deltaserve::common::grammar::internal
