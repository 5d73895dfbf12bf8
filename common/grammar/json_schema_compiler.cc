// JSON Schema -> grammar: the entry points, the dispatch over a schema's keywords, `$ref`,
// objects, arrays and the any-value rules. Strings, numbers and allOf merging live in
// json_schema_strings.cc, json_schema_numbers.cc and json_schema_merge.cc (one SchemaCompiler,
// internal/json_schema_internal.h).
#include "common/grammar/json_schema_compiler.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grammar/internal/json_schema_internal.h"
#include "common/json_reader.h"
#include "common/str_util.h"

namespace deltaserve::common::grammar {
namespace internal {
namespace {

bool HasAssertionsBesides(const Json& schema, std::string_view except) {
  for (const auto& [key, value] : schema.items()) {
    if (key != except && IsKnownKeyword(key) && !IsAnnotationKeyword(key)) return true;
  }
  return false;
}

int64_t NonNegativeInt(const Json& v) {
  if (v.is_number_unsigned())
    return static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX));
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= 9.2e18) return INT64_MAX;  // as good as unbounded (and no out-of-range cast)
    if (d >= 0 && d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
  }
  return -1;
}

}  // namespace

absl::StatusOr<int64_t> CountKeyword(const Json& schema, std::string_view key,
                                     std::string_view path) {
  // -1 when absent.
  auto it = schema.find(std::string(key));
  if (it == schema.end()) return int64_t{-1};
  const int64_t n = NonNegativeInt(*it);
  if (n < 0) return InvalidSchema(path, absl::StrCat(Sv(key), " must be a non-negative integer"));
  return n;
}

SchemaCompiler::SchemaCompiler(GrammarBuilder& builder, const Json& root, std::string_view prefix,
                               const JsonGrammarOptions& options)
    : builder_(builder),
      root_(root),
      prefix_(prefix),
      options_(options),
      json_chars_(builder, CodePointSpelling::kJsonString, absl::StrCat(Sv(prefix), "json_")) {}

std::string SchemaCompiler::Name(std::string_view what) const {
  return absl::StrCat(prefix_, Sv(what), "_", next_name_++);
}

Symbol SchemaCompiler::Never() { return builder_.Bytes(ByteClass()); }

Symbol SchemaCompiler::Ws() {
  if (!ws_ && options_.whitespace == JsonWhitespace::kGeneration) {
    ws_ = Symbol::Rule(builder_.Optional(Name("ws"), {builder_.Bytes(ByteClass::Of(' '))}));
  }
  if (!ws_) {
    ByteClass ws;
    for (char c : {' ', '\t', '\n', '\r'}) ws.Add(static_cast<uint8_t>(c));
    if (options_.max_whitespace > 0) {
      ws_ = Symbol::Rule(
          builder_.Repeat(Name("ws"), {builder_.Bytes(ws)}, 0, options_.max_whitespace));
    } else {
      const RuleId r = builder_.AddRule(Name("ws"));
      builder_.AddAlternative(r, {});
      ws_ = Symbol::Rule(r);
    }
  }
  return *ws_;
}

Symbol SchemaCompiler::AnyChar() {
  if (!any_char_) any_char_ = json_chars_.Set({{0, kMaxCodePoint}});
  return *any_char_;
}

Symbol SchemaCompiler::AnyString() {
  if (!any_string_) {
    const RuleId chars = builder_.Star(Name("string_chars"), {AnyChar()});
    const RuleId r = builder_.AddRule(Name("string"));
    Alternative alt = builder_.Literal("\"");
    alt.push_back(Symbol::Rule(chars));
    alt.push_back(builder_.Bytes(ByteClass::Of('"')));
    builder_.AddAlternative(r, std::move(alt));
    any_string_ = Symbol::Rule(r);
  }
  return *any_string_;
}

// value_d for d = 0..D: containers only while d > 0, their members value_{d-1}; so any value is
// at most D containers deep and the matcher's stacks stay bounded.
Symbol SchemaCompiler::AnyValue() {
  if (any_value_) return *any_value_;
  const int depth = std::max(options_.max_schema_depth, 1);
  absl::StatusOr<MaybeSymbols> number = CompileNumber(Json::object(), "#", false);
  const Symbol ws = Ws();
  std::vector<Alternative> scalars = {builder_.Literal("null"),
                                      builder_.Literal("true"),
                                      builder_.Literal("false"),
                                      {AnyString()},
                                      **number};
  Symbol below = Symbol::Rule(builder_.Choice(Name("value0"), scalars));
  for (int d = 1; d <= depth; ++d) {
    const Symbol comma = builder_.Bytes(ByteClass::Of(','));
    // array_d ::= "[" ws ( "]" | v ( ws "," ws v )* ws "]" )
    const RuleId more_items = builder_.Star(Name("items_more"), {ws, comma, ws, below});
    const RuleId array = builder_.AddRule(Name(absl::StrCat("array", d)));
    builder_.AddAlternative(
        array, {builder_.Bytes(ByteClass::Of('[')), ws, builder_.Bytes(ByteClass::Of(']'))});
    builder_.AddAlternative(
        array, {builder_.Bytes(ByteClass::Of('[')), ws, below, Symbol::Rule(more_items), ws,
                builder_.Bytes(ByteClass::Of(']'))});
    const Alternative member = {AnyString(), ws, builder_.Bytes(ByteClass::Of(':')), ws, below};
    Alternative more_member = {ws, comma, ws};
    more_member.insert(more_member.end(), member.begin(), member.end());
    const RuleId more_members = builder_.Star(Name("members_more"), more_member);
    const RuleId object = builder_.AddRule(Name(absl::StrCat("object", d)));
    builder_.AddAlternative(
        object, {builder_.Bytes(ByteClass::Of('{')), ws, builder_.Bytes(ByteClass::Of('}'))});
    Alternative full = {builder_.Bytes(ByteClass::Of('{')), ws};
    full.insert(full.end(), member.begin(), member.end());
    full.push_back(Symbol::Rule(more_members));
    full.push_back(ws);
    full.push_back(builder_.Bytes(ByteClass::Of('}')));
    builder_.AddAlternative(object, std::move(full));
    std::vector<Alternative> alts = scalars;
    alts.push_back({Symbol::Rule(array)});
    alts.push_back({Symbol::Rule(object)});
    below = Symbol::Rule(builder_.Choice(Name(absl::StrCat("value", d)), std::move(alts)));
    if (d == depth) any_object_ = Symbol::Rule(object);
  }
  any_value_ = below;
  return below;
}

Symbol SchemaCompiler::AnyObject() {
  if (!any_object_) AnyValue();
  return *any_object_;
}

absl::StatusOr<MaybeSymbols> SchemaCompiler::Compile(const Json& schema, const std::string& path,
                                                     int depth) {
  if (depth > options_.max_schema_depth) {
    return InvalidSchema(path, absl::StrCat("subschemas (and $ref hops) nested deeper than ",
                                            options_.max_schema_depth));
  }
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return MaybeSymbols(Alternative{AnyValue()});
    return MaybeSymbols();
  }
  if (!schema.is_object()) return InvalidSchema(path, "a schema must be an object or a boolean");
  return CompileObjectSchema(schema, path, depth);
}

absl::StatusOr<MaybeSymbols> SchemaCompiler::CompileObjectSchema(const Json& schema,
                                                                 const std::string& path,
                                                                 int depth) {
  if (auto n = schema.find("not"); n != schema.end()) {
    // `not` as a positive constraint where one exists (json_schema_merge.cc), merged in.
    absl::StatusOr<Json> constraint = NotAsConstraint(*n, JoinPath(path, "not"));
    if (!constraint.ok()) return constraint.status();
    Json rest = schema;
    rest.erase("not");
    if (constraint->is_boolean() && !constraint->get<bool>()) return MaybeSymbols();
    absl::StatusOr<Json> merged =
        Merge(Json{{"allOf", Json::array({std::move(rest), *std::move(constraint)})}}, path, depth);
    if (!merged.ok()) return merged.status();
    return Compile(*merged, path, depth + 1);
  }
  auto ref = schema.find("$ref");
  if (ref != schema.end()) {
    if (!ref->is_string()) return InvalidSchema(path, "$ref must be a string");
    if (!HasAssertionsBesides(schema, "$ref")) {
      return CompileRef(ref->get<std::string>(), path, depth + 1);
    }
  }
  if (ref != schema.end() || schema.contains("allOf")) {
    absl::StatusOr<Json> merged = Merge(schema, path, depth);
    if (!merged.ok()) return merged.status();
    return Compile(*merged, path, depth + 1);
  }
  if (schema.contains("anyOf") || schema.contains("oneOf")) {
    return CompileAlternatives(schema, path, depth);
  }
  return CompileTypes(schema, path, depth);
}

absl::StatusOr<MaybeSymbols> SchemaCompiler::CompileRef(const std::string& ref,
                                                        const std::string& path, int depth) {
  absl::StatusOr<std::pair<const Json*, std::string>> target = Resolve(ref, path);
  if (!target.ok()) return target.status();
  auto it = ref_rules_.find(target->second);
  if (it != ref_rules_.end()) return MaybeSymbols(Alternative{Symbol::Rule(it->second)});
  std::string name = target->second.substr(target->second.rfind('/') + 1);
  const RuleId rule = builder_.AddRule(Name(absl::StrCat("ref_", name.size() > 32 ? "" : name)));
  ref_rules_.emplace(target->second, rule);
  absl::StatusOr<MaybeSymbols> body = Compile(*target->first, target->second, depth);
  if (!body.ok()) return body.status();
  // A schema that matches nothing: the alternative is dropped at Build, and with it every
  // alternative that needs this rule.
  builder_.AddAlternative(rule, body->has_value() ? **body : Alternative{Never()});
  return MaybeSymbols(Alternative{Symbol::Rule(rule)});
}

absl::StatusOr<MaybeSymbols> SchemaCompiler::CompileAlternatives(const Json& schema,
                                                                 const std::string& path,
                                                                 int depth) {
  if (schema.contains("anyOf") && schema.contains("oneOf")) {
    return UnsupportedKeyword("oneOf", path, "together with anyOf in one schema");
  }
  const bool one_of = schema.contains("oneOf");
  const std::string key = one_of ? "oneOf" : "anyOf";
  const Json& list = schema[key];
  if (!list.is_array() || list.empty()) {
    return InvalidSchema(path, absl::StrCat(key, " must be a non-empty array"));
  }
  Json siblings = schema;
  siblings.erase(key);
  const bool merge = HasAssertionsBesides(siblings, "");
  std::vector<Json> alts;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!merge) {
      alts.push_back(list[i]);
      continue;
    }
    Json both = siblings;
    both["allOf"] = Json::array({list[i]});
    absl::StatusOr<Json> merged =
        Merge(both, JoinPath(JoinPath(path, key), std::to_string(i)), depth);
    if (!merged.ok()) return merged.status();
    alts.push_back(*std::move(merged));
  }
  if (one_of) {
    if (absl::Status s = SeparateOneOf(alts, path, depth); !s.ok()) return s;
  }
  std::vector<Alternative> compiled;
  for (size_t i = 0; i < alts.size(); ++i) {
    absl::StatusOr<MaybeSymbols> a =
        Compile(alts[i], JoinPath(JoinPath(path, key), std::to_string(i)), depth + 1);
    if (!a.ok()) return a.status();
    if (a->has_value()) compiled.push_back(**a);
  }
  if (compiled.empty()) return MaybeSymbols();
  if (compiled.size() == 1) return MaybeSymbols(compiled[0]);
  return MaybeSymbols(Alternative{Symbol::Rule(builder_.Choice(Name(key), std::move(compiled)))});
}

absl::StatusOr<MaybeSymbols> SchemaCompiler::CompileTypes(const Json& schema,
                                                          const std::string& path, int depth) {
  absl::StatusOr<unsigned> types = SchemaTypes(schema, path);
  if (!types.ok()) return types.status();
  absl::Status keywords = CheckKeywords(schema, path, *types);
  if (!keywords.ok()) return keywords;
  if (schema.contains("enum") || schema.contains("const")) return CompileEnum(schema, path, *types);
  std::vector<Alternative> alts;
  auto add = [&](absl::StatusOr<MaybeSymbols> s) -> absl::Status {
    if (!s.ok()) return s.status();
    if (s->has_value()) alts.push_back(**s);
    return absl::OkStatus();
  };
  absl::Status s;
  if (*types & kNull) alts.push_back(builder_.Literal("null"));
  if (*types & kBoolean) {
    alts.push_back(builder_.Literal("true"));
    alts.push_back(builder_.Literal("false"));
  }
  if ((*types & kObject) && !(s = add(CompileObject(schema, path, depth))).ok()) return s;
  if ((*types & kArray) && !(s = add(CompileArray(schema, path, depth))).ok()) return s;
  if ((*types & kString) && !(s = add(CompileString(schema, path))).ok()) return s;
  if (*types & (kNumber | kInteger)) {
    if (!(s = add(CompileNumber(schema, path, !(*types & kNumber)))).ok()) return s;
  }
  if (alts.empty()) return MaybeSymbols();
  if (alts.size() == 1) return MaybeSymbols(alts[0]);
  return MaybeSymbols(Alternative{Symbol::Rule(builder_.Choice(Name("value"), std::move(alts)))});
}

absl::StatusOr<MaybeSymbols> SchemaCompiler::CompileObject(const Json& schema,
                                                           const std::string& path, int depth) {
  struct Member {
    std::string key;
    MaybeSymbols value;
    bool required = false;
  };
  std::vector<Member> members;
  std::vector<std::string> listed;
  const Json empty = Json::object();
  auto props_it = schema.find("properties");
  const Json& props = props_it != schema.end() ? *props_it : empty;
  if (!props.is_object()) return InvalidSchema(path, "properties must be an object");
  std::set<std::string> required;
  std::vector<std::string> required_order;  // unlisted required keys come in this order
  if (auto r = schema.find("required"); r != schema.end()) {
    if (!r->is_array()) return InvalidSchema(path, "required must be an array");
    for (const Json& k : *r) {
      if (!k.is_string()) return InvalidSchema(path, "required must list strings");
      if (required.insert(k.get<std::string>()).second)
        required_order.push_back(k.get<std::string>());
    }
  }
  // additionalProperties: a schema for the other keys, or none (false).
  MaybeSymbols additional;
  auto ap = schema.find("additionalProperties");
  if (ap == schema.end() && schema.contains("unevaluatedProperties")) {
    ap = schema.find("unevaluatedProperties");  // same thing without applicators (CheckKeywords)
  }
  if (ap != schema.end()) {
    absl::StatusOr<MaybeSymbols> a = Compile(*ap, JoinPath(path, ap.key()), depth + 1);
    if (!a.ok()) return a.status();
    additional = *std::move(a);
  } else if (options_.additional_properties_default) {
    additional = Alternative{AnyValue()};
  }
  for (const auto& [key, sub] : props.items()) {
    absl::StatusOr<MaybeSymbols> v =
        Compile(sub, JoinPath(JoinPath(path, "properties"), key), depth + 1);
    if (!v.ok()) return v.status();
    listed.push_back(key);
    const bool req = required.count(key) > 0;
    if (!v->has_value()) {
      if (req) return MaybeSymbols();  // a required key no value can satisfy
      continue;
    }
    members.push_back({key, *std::move(v), req});
  }
  for (const std::string& key : required_order) {
    if (props.contains(key)) continue;
    if (!additional) return MaybeSymbols();
    members.push_back({key, additional, true});
    listed.push_back(key);
  }
  // Other keys: any key but the listed ones with the additionalProperties schema, or, under
  // patternProperties, keys matching a pattern with that pattern's schema.
  Alternative other_key;
  MaybeSymbols other_value = additional;
  if (auto pp = schema.find("patternProperties");
      pp != schema.end() && pp->is_object() && !pp->empty()) {
    absl::StatusOr<std::pair<Alternative, MaybeSymbols>> keys =
        PatternKeys(*pp, listed, JoinPath(path, "patternProperties"), depth);
    if (!keys.ok()) return keys.status();
    other_key = keys->first;
    other_value = keys->second;
  } else if (additional) {
    other_key = {KeyExcluding(listed)};
  }
  if (auto pn = schema.find("propertyNames"); pn != schema.end() && !(pn->is_boolean() && pn->get<bool>()) &&
                                              !(pn->is_object() && pn->empty())) {
    if (schema.contains("patternProperties") && !schema["patternProperties"].empty()) {
      return UnsupportedKeyword("propertyNames", path, "together with patternProperties");
    }
    absl::StatusOr<PropertyNameRules> names =
        PropertyNames(*pn, listed, JoinPath(path, "propertyNames"), depth);
    if (!names.ok()) return names.status();
    // Listed keys that the names schema refuses cannot appear.
    std::vector<Member> kept;
    for (Member& m : members) {
      if (names->allowed.count(m.key)) {
        kept.push_back(std::move(m));
      } else if (m.required) {
        return MaybeSymbols();
      }
    }
    members = std::move(kept);
    if (!names->other_key) other_value.reset();  // no other key can be generated safely
    if (other_value) other_key = *names->other_key;
  }
  absl::StatusOr<int64_t> min_props = CountKeyword(schema, "minProperties", path);
  absl::StatusOr<int64_t> max_props = CountKeyword(schema, "maxProperties", path);
  if (!min_props.ok()) return min_props.status();
  if (!max_props.ok()) return max_props.status();
  const int64_t min_count = std::max<int64_t>(*min_props, 0);
  const int64_t max_count = *max_props;  // -1: none
  if (min_count > options_.max_repetition || max_count > options_.max_repetition) {
    return UnsupportedKeyword(
        min_count > options_.max_repetition ? "minProperties" : "maxProperties", path,
        absl::StrCat("over the limit of ", options_.max_repetition));
  }
  // Rules P(i, c): members i.. still to place, c placed so far (saturated at `cap`, which only
  // needs to tell 0 (no comma yet) and the counts the bounds mention apart).
  const int64_t cap = max_count >= 0 ? max_count : std::max<int64_t>(min_count, 1);
  const size_t n = members.size();
  const Symbol ws = Ws();
  const Symbol colon = builder_.Bytes(ByteClass::Of(':'));
  const Symbol comma = builder_.Bytes(ByteClass::Of(','));
  const Symbol close = builder_.Bytes(ByteClass::Of('}'));
  std::map<std::pair<size_t, int64_t>, RuleId> rules;
  std::vector<std::pair<size_t, int64_t>> pending;
  auto rule_for = [&](size_t i, int64_t c) {
    auto it = rules.find({i, c});
    if (it != rules.end()) return Symbol::Rule(it->second);
    const RuleId r = builder_.AddRule(Name("members"));
    rules.emplace(std::make_pair(i, c), r);
    pending.emplace_back(i, c);
    return Symbol::Rule(r);
  };
  const Alternative start = {builder_.Bytes(ByteClass::Of('{')), ws, rule_for(0, 0)};
  while (!pending.empty()) {
    const size_t i = pending.back().first;
    const int64_t c = pending.back().second;
    pending.pop_back();
    const RuleId r = rules[{i, c}];
    const bool room = max_count < 0 || c < max_count;
    const int64_t next = std::min(c + 1, cap);
    auto member = [&](const Alternative& key, const Alternative& value, Symbol then) {
      Alternative alt;
      if (c > 0) alt = {ws, comma, ws};
      alt.insert(alt.end(), key.begin(), key.end());
      alt.insert(alt.end(), {ws, colon, ws});
      alt.insert(alt.end(), value.begin(), value.end());
      alt.push_back(then);
      return alt;
    };
    if (i < n) {
      const Member& m = members[i];
      if (!m.required) builder_.AddAlternative(r, {rule_for(i + 1, c)});
      if (room)
        builder_.AddAlternative(r, member(StringLiteral(m.key), *m.value, rule_for(i + 1, next)));
      continue;
    }
    if (c >= min_count)
      builder_.AddAlternative(r, c > 0 ? Alternative{ws, close} : Alternative{close});
    if (other_value && room) {
      builder_.AddAlternative(r, member(other_key, *other_value, rule_for(n, next)));
    }
  }
  return MaybeSymbols(start);
}

absl::StatusOr<MaybeSymbols> SchemaCompiler::CompileArray(const Json& schema,
                                                          const std::string& path, int depth) {
  // Positional schemas (prefixItems; `items` as an array before 2020-12), then one for the rest.
  std::vector<MaybeSymbols> prefix;
  MaybeSymbols rest = Alternative{AnyValue()};
  auto compile = [&](const Json& sub, const std::string& at) -> absl::StatusOr<MaybeSymbols> {
    return Compile(sub, at, depth + 1);
  };
  const Json* positional = nullptr;
  std::string positional_key;
  auto items = schema.find("items");
  if (auto p = schema.find("prefixItems"); p != schema.end()) {
    positional = &*p;
    positional_key = "prefixItems";
  } else if (items != schema.end() && items->is_array()) {
    positional = &*items;
    positional_key = "items";
  }
  if (positional) {
    if (!positional->is_array()) return InvalidSchema(path, "prefixItems must be an array");
    for (size_t i = 0; i < positional->size(); ++i) {
      absl::StatusOr<MaybeSymbols> s =
          compile((*positional)[i], JoinPath(JoinPath(path, positional_key), std::to_string(i)));
      if (!s.ok()) return s.status();
      prefix.push_back(*std::move(s));
    }
  }
  const Json* rest_schema = nullptr;
  std::string rest_key;
  if (positional_key == "items") {
    if (auto a = schema.find("additionalItems"); a != schema.end()) {
      rest_schema = &*a;
      rest_key = "additionalItems";
    }
  } else if (items != schema.end()) {
    rest_schema = &*items;
    rest_key = "items";
  }
  if (rest_schema) {
    absl::StatusOr<MaybeSymbols> s = compile(*rest_schema, JoinPath(path, rest_key));
    if (!s.ok()) return s.status();
    rest = *std::move(s);
  }
  absl::StatusOr<int64_t> min_items = CountKeyword(schema, "minItems", path);
  absl::StatusOr<int64_t> max_items = CountKeyword(schema, "maxItems", path);
  if (!min_items.ok()) return min_items.status();
  if (!max_items.ok()) return max_items.status();
  const int64_t min_count = std::max<int64_t>(*min_items, 0);
  int64_t max_count = *max_items;
  if (min_count > options_.max_repetition || max_count > options_.max_repetition) {
    return UnsupportedKeyword(min_count > options_.max_repetition ? "minItems" : "maxItems", path,
                              absl::StrCat("over the limit of ", options_.max_repetition));
  }
  if (auto u = schema.find("uniqueItems");
      u != schema.end() && u->is_boolean() && u->get<bool>() && (max_count < 0 || max_count > 1)) {
    return CompileUniqueItems(schema, path, min_count, max_count);
  }
  // E(i): i items so far. Past the positional ones and minItems nothing changes but whether a
  // comma comes first, so counts saturate at `cap` unless maxItems needs them all.
  const int64_t np = static_cast<int64_t>(prefix.size());
  const int64_t cap = max_count >= 0 ? max_count : std::max<int64_t>({np, min_count, 1});
  const Symbol ws = Ws();
  const Symbol comma = builder_.Bytes(ByteClass::Of(','));
  const Symbol close = builder_.Bytes(ByteClass::Of(']'));
  std::map<int64_t, RuleId> rules;
  std::vector<int64_t> pending;
  auto rule_for = [&](int64_t i) {
    auto it = rules.find(i);
    if (it != rules.end()) return Symbol::Rule(it->second);
    const RuleId r = builder_.AddRule(Name("items"));
    rules.emplace(i, r);
    pending.push_back(i);
    return Symbol::Rule(r);
  };
  const Alternative start = {builder_.Bytes(ByteClass::Of('[')), ws, rule_for(0)};
  while (!pending.empty()) {
    const int64_t i = pending.back();
    pending.pop_back();
    const RuleId r = rules[i];
    if (i >= min_count)
      builder_.AddAlternative(r, i > 0 ? Alternative{ws, close} : Alternative{close});
    const MaybeSymbols& item = i < np ? prefix[static_cast<size_t>(i)] : rest;
    if (!item || (max_count >= 0 && i >= max_count)) continue;
    Alternative alt;
    if (i > 0) alt = {ws, comma, ws};
    alt.insert(alt.end(), item->begin(), item->end());
    alt.push_back(rule_for(std::min(i + 1, cap)));
    builder_.AddAlternative(r, std::move(alt));
  }
  return MaybeSymbols(start);
}

}  // namespace internal

namespace {

absl::StatusOr<internal::Json> ReadSchema(std::string_view text, const JsonGrammarOptions& o) {
  JsonReadLimits limits;
  limits.max_depth = 2 * std::max(o.max_schema_depth, 1) + 2;
  limits.max_object_keys = 10'000;
  limits.max_array_elements = 100'000;
  limits.max_containers = 1 << 18;
  absl::StatusOr<nlohmann::ordered_json> doc = ReadOrderedJson(text, limits);
  if (!doc.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON Schema is not valid JSON: ", doc.status().message()));
  }
  return doc;
}

}  // namespace

absl::StatusOr<RuleId> AddJsonSchemaRules(GrammarBuilder& builder, std::string_view schema_json,
                                          std::string_view prefix,
                                          const JsonGrammarOptions& options) {
  absl::StatusOr<internal::Json> doc = ReadSchema(schema_json, options);
  if (!doc.ok()) return doc.status();
  internal::SchemaCompiler compiler(builder, *doc, prefix, options);
  absl::StatusOr<internal::MaybeSymbols> body = compiler.Compile(*doc, "#", 0);
  if (!body.ok()) return body.status();
  if (!body->has_value()) {
    return absl::InvalidArgumentError("JSON Schema accepts no instance (e.g. `false`)");
  }
  const RuleId root = builder.AddRule(absl::StrCat(Sv(prefix), "root"));
  builder.AddAlternative(root, **body);
  return root;
}

absl::StatusOr<Grammar> CompileJsonSchema(std::string_view schema_json,
                                          const JsonGrammarOptions& options) {
  GrammarBuilder builder;
  absl::StatusOr<RuleId> root = AddJsonSchemaRules(builder, schema_json, "", options);
  if (!root.ok()) return root.status();
  absl::StatusOr<Grammar> g = std::move(builder).Build(*root, options.limits);
  if (!g.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "JSON Schema compiles to a grammar the engine refuses: ", g.status().message()));
  }
  return g;
}

Grammar JsonObjectGrammar(const JsonGrammarOptions& options) {
  GrammarBuilder builder;
  const internal::Json empty = internal::Json::object();
  internal::SchemaCompiler compiler(builder, empty, "", options);
  const RuleId root = builder.AddRule("root");
  builder.AddAlternative(root, {compiler.AnyObject()});
  absl::StatusOr<Grammar> g = std::move(builder).Build(root, options.limits);
  // Only the options' sizes can make this fail (a huge max_schema_depth); fall back to defaults.
  if (!g.ok()) return JsonObjectGrammar(JsonGrammarOptions{});
  return *std::move(g);
}

}  // namespace deltaserve::common::grammar
