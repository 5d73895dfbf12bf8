// `uniqueItems: true` for arrays whose items come from a small finite set (enum/const, boolean,
// null): the grammar tracks which values were used (a rule per subset), so no value repeats.
// Items that can take unboundedly many values (strings, numbers, objects) cannot be checked by
// a grammar of bounded size and stay refused.
#include <algorithm>
#include <bit>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grammar/internal/json_schema_internal.h"

namespace deltaserve::common::grammar::internal {
namespace {

constexpr size_t kMaxUniqueValues = 10;  // 2^10 subsets

// The values `items` admits when they are finitely many and listed, else nullopt.
std::optional<std::vector<Json>> FiniteValues(const SchemaCompiler& c, const Json& items_in) {
  const Json* items = &items_in;
  for (int hops = 0; hops < 8 && items->is_object() && items->contains("$ref"); ++hops) {
    if (items->size() != 1 || !(*items)["$ref"].is_string()) return std::nullopt;
    auto target = c.Resolve((*items)["$ref"].get<std::string>(), "#");
    if (!target.ok()) return std::nullopt;
    items = target->first;
  }
  if (!items->is_object()) return std::nullopt;
  for (const auto& [key, value] : items->items()) {
    if (IsKnownKeyword(key) && !IsAnnotationKeyword(key) && key != "type" && key != "enum" &&
        key != "const" && key != "nullable") {
      return std::nullopt;
    }
  }
  absl::StatusOr<unsigned> types = SchemaTypes(*items, "#");
  if (!types.ok()) return std::nullopt;
  std::vector<Json> values;
  if (items->contains("enum") || items->contains("const")) {
    if (auto e = items->find("enum"); e != items->end()) {
      if (!e->is_array()) return std::nullopt;
      values.assign(e->begin(), e->end());
    }
    if (auto k = items->find("const"); k != items->end()) {
      const bool listed =
          !items->contains("enum") || std::find(values.begin(), values.end(), *k) != values.end();
      values.clear();
      if (listed) values.push_back(*k);
    }
  } else {
    if (*types & ~unsigned{kNull | kBoolean}) return std::nullopt;
    if (*types & kNull) values.push_back(nullptr);
    if (*types & kBoolean) values.insert(values.end(), {false, true});
  }
  std::vector<Json> out;  // admitted by type, and distinct as JSON values (1 equals 1.0)
  for (const Json& v : values) {
    const unsigned t = ValueType(v);
    if (!(*types & t)) continue;
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

}  // namespace

absl::StatusOr<MaybeSymbols> SchemaCompiler::CompileUniqueItems(const Json& schema,
                                                                const std::string& path,
                                                                int64_t min_count,
                                                                int64_t max_count) {
  auto items = schema.find("items");
  if (schema.contains("prefixItems") || items == schema.end() || items->is_array()) {
    return UnsupportedKeyword("uniqueItems", path,
                              "uniqueItems: true needs `items` with finitely many listed values");
  }
  std::optional<std::vector<Json>> values = FiniteValues(*this, *items);
  if (!values || values->size() > kMaxUniqueValues) {
    return UnsupportedKeyword("uniqueItems", path,
                              absl::StrCat("uniqueItems: true needs items from enum/const/boolean/"
                                           "null with at most ",
                                           kMaxUniqueValues, " values"));
  }
  std::vector<Alternative> literals;
  for (const Json& v : *values) literals.push_back(ValueLiteral(v));
  const Symbol ws = Ws();
  const Symbol comma = builder_.Bytes(ByteClass::Of(','));
  const Symbol close = builder_.Bytes(ByteClass::Of(']'));
  // U(S): the values of S used so far (their count is the array's length).
  std::map<uint32_t, RuleId> rules;
  std::vector<uint32_t> pending;
  auto rule_for = [&](uint32_t used) {
    auto it = rules.find(used);
    if (it != rules.end()) return Symbol::Rule(it->second);
    const RuleId r = builder_.AddRule(Name("unique_items"));
    rules.emplace(used, r);
    pending.push_back(used);
    return Symbol::Rule(r);
  };
  const Alternative start = {builder_.Bytes(ByteClass::Of('[')), ws, rule_for(0)};
  while (!pending.empty()) {
    const uint32_t used = pending.back();
    pending.pop_back();
    const RuleId r = rules[used];
    const int64_t count = std::popcount(used);
    if (count >= min_count)
      builder_.AddAlternative(r, count > 0 ? Alternative{ws, close} : Alternative{close});
    if (max_count >= 0 && count >= max_count) continue;
    for (size_t i = 0; i < literals.size(); ++i) {
      if (used & (1u << i)) continue;
      Alternative alt;
      if (count > 0) alt = {ws, comma, ws};
      alt.insert(alt.end(), literals[i].begin(), literals[i].end());
      alt.push_back(rule_for(used | (1u << i)));
      builder_.AddAlternative(r, std::move(alt));
    }
  }
  return MaybeSymbols(start);
}

}  // namespace deltaserve::common::grammar::internal
