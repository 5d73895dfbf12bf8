// allOf (and `$ref` beside other keywords) as one merged schema, and the disjointness check that
// lets oneOf compile as anyOf. Merging is exact for the keywords it knows: the merged schema
// accepts an instance iff every part does (properties are merged per key with the other part's
// additionalProperties standing in for a key it does not list; bounds take the tighter one;
// anyOf/oneOf inside a part are distributed). Two different `pattern`s or `format`s cannot be
// intersected and are refused naming the keyword.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grammar/internal/json_schema_internal.h"
#include "common/str_util.h"

namespace deltaserve::common::grammar::internal {
namespace {

constexpr int kMaxMergeDepth = 16;
constexpr int kMaxMergeSteps = 4096;
constexpr size_t kMaxDistributed = 64;

bool IsFalse(const Json& s) { return s.is_boolean() && !s.get<bool>(); }
bool IsTrue(const Json& s) {
  return (s.is_boolean() && s.get<bool>()) || (s.is_object() && s.empty());
}

Json TypeNames(unsigned t) {
  Json names = Json::array();
  if (t & kNull) names.push_back("null");
  if (t & kBoolean) names.push_back("boolean");
  if (t & kObject) names.push_back("object");
  if (t & kArray) names.push_back("array");
  if (t & kString) names.push_back("string");
  if (t & kNumber) {
    names.push_back("number");
  } else if (t & kInteger) {
    names.push_back("integer");
  }
  return names;
}

// The values a schema's enum/const allow (nullopt: no such keyword).
std::optional<std::vector<Json>> ListedValues(const Json& s) {
  if (!s.is_object()) return std::nullopt;
  std::optional<std::vector<Json>> out;
  if (auto e = s.find("enum"); e != s.end() && e->is_array())
    out = std::vector<Json>(e->begin(), e->end());
  if (auto c = s.find("const"); c != s.end()) {
    std::vector<Json> v;
    if (!out || std::find(out->begin(), out->end(), *c) != out->end()) v.push_back(*c);
    out = std::move(v);
  }
  return out;
}

// Keywords MergePlain combines itself (the others are copied, and must agree when both sides
// have them).
bool IsMergedKeyword(std::string_view key) {
  static const char* const kMerged[] = {"type",
                                        "nullable",
                                        "enum",
                                        "const",
                                        "properties",
                                        "additionalProperties",
                                        "required",
                                        "items",
                                        "prefixItems",
                                        "minimum",
                                        "exclusiveMinimum",
                                        "minLength",
                                        "minItems",
                                        "minProperties",
                                        "maximum",
                                        "exclusiveMaximum",
                                        "maxLength",
                                        "maxItems",
                                        "maxProperties",
                                        "uniqueItems",
                                        "pattern",
                                        "format",
                                        "multipleOf"};
  for (const char* k : kMerged) {
    if (key == k) return true;
  }
  return false;
}

class Merger {
 public:
  Merger(const SchemaCompiler& c, const std::string& path) : c_(c), path_(path) {}

  // `s` without $ref/allOf at its top (nor the draft 4 boolean exclusive bounds).
  absl::StatusOr<Json> Normalize(const Json& s, int depth) {
    if (!s.is_object()) return s;
    if (depth > kMaxMergeDepth) {
      return UnsupportedKeyword("allOf", path_, "$ref/allOf nested too deep to merge (recursion?)");
    }
    Json base = s;
    for (const char* key : {"exclusiveMinimum", "exclusiveMaximum"}) {
      auto e = base.find(key);
      if (e == base.end() || !e->is_boolean()) continue;
      const char* plain = std::string_view(key) == "exclusiveMinimum" ? "minimum" : "maximum";
      const bool exclusive = e->get<bool>();
      base.erase(key);
      if (exclusive && base.contains(plain)) {
        base[key] = base[plain];
        base.erase(plain);
      }
    }
    std::vector<Json> parts;
    if (auto r = base.find("$ref"); r != base.end()) {
      if (!r->is_string()) return InvalidSchema(path_, "$ref must be a string");
      absl::StatusOr<std::pair<const Json*, std::string>> target =
          c_.Resolve(r->get<std::string>(), path_);
      if (!target.ok()) return target.status();
      parts.push_back(*target->first);
      base.erase("$ref");
    }
    if (auto a = base.find("allOf"); a != base.end()) {
      if (!a->is_array()) return InvalidSchema(path_, "allOf must be an array");
      for (const Json& p : *a) parts.push_back(p);
      base.erase("allOf");
    }
    if (parts.empty()) return base;
    Json out = std::move(base);
    for (const Json& p : parts) {
      absl::StatusOr<Json> m = MergeTwo(out, p, depth + 1);
      if (!m.ok()) return m.status();
      out = *std::move(m);
    }
    return out;
  }

  absl::StatusOr<Json> MergeTwo(const Json& a_in, const Json& b_in, int depth) {
    if (++steps_ > kMaxMergeSteps) return UnsupportedKeyword("allOf", path_, "too large to merge");
    absl::StatusOr<Json> a = Normalize(a_in, depth);
    if (!a.ok()) return a.status();
    absl::StatusOr<Json> b = Normalize(b_in, depth);
    if (!b.ok()) return b.status();
    if (IsFalse(*a) || IsFalse(*b)) return Json(false);
    if (IsTrue(*a)) return *b;
    if (IsTrue(*b)) return *a;
    if (!a->is_object() || !b->is_object())
      return InvalidSchema(path_, "a schema must be an object or a boolean");
    for (const Json* side : {&*a, &*b}) {
      for (const char* key : {"anyOf", "oneOf"}) {
        auto alts = side->find(key);
        if (alts == side->end()) continue;
        if (!alts->is_array()) return InvalidSchema(path_, absl::StrCat(key, " must be an array"));
        const Json& other = side == &*a ? *b : *a;
        Json rest = *side;
        rest.erase(key);
        Json out = Json::array();
        for (const Json& alt : *alts) {
          absl::StatusOr<Json> with_rest = MergeTwo(rest, alt, depth + 1);
          if (!with_rest.ok()) return with_rest.status();
          absl::StatusOr<Json> m = MergeTwo(*with_rest, other, depth + 1);
          if (!m.ok()) return m.status();
          out.push_back(*std::move(m));
        }
        if (out.size() > kMaxDistributed) {
          return UnsupportedKeyword("allOf", path_,
                                    "too many combinations of anyOf/oneOf alternatives");
        }
        return Json{{key, std::move(out)}};
      }
    }
    return MergePlain(*a, *b);
  }

 private:
  absl::StatusOr<Json> MergePlain(const Json& a, const Json& b) {
    Json out = Json::object();
    absl::StatusOr<unsigned> ta = SchemaTypes(a, path_), tb = SchemaTypes(b, path_);
    if (!ta.ok()) return ta.status();
    if (!tb.ok()) return tb.status();
    const unsigned t = *ta & *tb;
    if (t != kAllTypes) out["type"] = TypeNames(t);
    std::optional<std::vector<Json>> va = ListedValues(a), vb = ListedValues(b);
    if (va || vb) {
      std::vector<Json> values;
      if (va && vb) {
        for (const Json& v : *va) {
          if (std::find(vb->begin(), vb->end(), v) != vb->end()) values.push_back(v);
        }
      } else {
        values = va ? *va : *vb;
      }
      out["enum"] = Json(values);
    }
    // Properties: a key one side lists and the other does not meets the other's
    // additionalProperties (when it has one).
    const Json none;
    auto get = [](const Json& s, const char* key) -> const Json* {
      auto it = s.find(key);
      return it == s.end() ? nullptr : &*it;
    };
    const Json* pa = get(a, "properties");
    const Json* pb = get(b, "properties");
    const Json* apa = get(a, "additionalProperties");
    const Json* apb = get(b, "additionalProperties");
    auto both = [](const Json* x, const Json* y) -> Json {
      if (x && y) return Json{{"allOf", Json::array({*x, *y})}};
      return x ? *x : *y;
    };
    if (pa || pb) {
      Json props = Json::object();
      for (const Json* p : {pa, pb}) {
        if (!p) continue;
        if (!p->is_object()) return InvalidSchema(path_, "properties must be an object");
        for (const auto& [key, sub] : p->items()) {
          if (props.contains(key)) continue;
          const Json* sa = pa && pa->contains(key) ? &(*pa)[key] : apa;
          const Json* sb = pb && pb->contains(key) ? &(*pb)[key] : apb;
          props[key] = both(sa, sb);
        }
      }
      out["properties"] = std::move(props);
    }
    if (apa || apb) out["additionalProperties"] = both(apa, apb);
    if (const Json* ra = get(a, "required"), *rb = get(b, "required"); ra || rb) {
      Json req = Json::array();
      for (const Json* r : {ra, rb}) {
        if (!r) continue;
        for (const Json& k : *r) {
          if (std::find(req.begin(), req.end(), k) == req.end()) req.push_back(k);
        }
      }
      out["required"] = std::move(req);
    }
    // Bounds: the tighter one.
    for (const char* key :
         {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"}) {
      const Json *x = get(a, key), *y = get(b, key);
      if (x && y && x->is_number() && y->is_number()) {
        out[key] = x->get<double>() >= y->get<double>() ? *x : *y;
      } else if (x || y) {
        out[key] = x ? *x : *y;
      }
    }
    for (const char* key :
         {"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"}) {
      const Json *x = get(a, key), *y = get(b, key);
      if (x && y && x->is_number() && y->is_number()) {
        out[key] = x->get<double>() <= y->get<double>() ? *x : *y;
      } else if (x || y) {
        out[key] = x ? *x : *y;
      }
    }
    if (const Json* x = get(a, "uniqueItems"), *y = get(b, "uniqueItems"); x || y) {
      out["uniqueItems"] =
          (x && x->is_boolean() && x->get<bool>()) || (y && y->is_boolean() && y->get<bool>());
    }
    // Items: the positional schemas pairwise, each side's `items` standing in past its own.
    const Json* ia = get(a, "items");
    const Json* ib = get(b, "items");
    const Json* xa = get(a, "prefixItems");
    const Json* xb = get(b, "prefixItems");
    if ((ia && ia->is_array()) || (ib && ib->is_array())) {
      if (!(ia && ib && *ia == *ib)) {
        return UnsupportedKeyword("items", path_, "array-form items under allOf (use prefixItems)");
      }
    }
    if (xa || xb) {
      Json prefix = Json::array();
      const size_t n = std::max(xa ? xa->size() : 0, xb ? xb->size() : 0);
      for (size_t i = 0; i < n; ++i) {
        const Json* sa = xa && i < xa->size() ? &(*xa)[i] : ia;
        const Json* sb = xb && i < xb->size() ? &(*xb)[i] : ib;
        prefix.push_back(sa || sb ? both(sa, sb) : Json(true));
      }
      out["prefixItems"] = std::move(prefix);
    }
    if (ia || ib) out["items"] = (ia && ia->is_array()) ? *ia : both(ia, ib);
    // Keywords that must agree to be merged.
    for (const char* key : {"pattern", "format", "multipleOf"}) {
      const Json *x = get(a, key), *y = get(b, key);
      if (x && y && *x != *y) {
        return UnsupportedKeyword(key, path_, "two different values under allOf");
      }
      if (x || y) out[key] = x ? *x : *y;
    }
    // The rest: kept, for the compiler to accept or refuse as usual.
    for (const Json* side : {&a, &b}) {
      for (const auto& [key, value] : side->items()) {
        if (key == "unevaluatedProperties" || key == "unevaluatedItems") {
          return UnsupportedKeyword(key, path_,
                                    "next to allOf, anyOf, oneOf or $ref (it would see their "
                                    "properties)");
        }
        if (key == "patternProperties" && !(value.is_object() && value.empty())) {
          // additionalProperties of one side would have to skip the other's pattern keys.
          return UnsupportedKeyword(key, path_, "under allOf/$ref");
        }
        if (!IsKnownKeyword(key) || IsAnnotationKeyword(key)) continue;
        if (out.contains(key)) {
          // Both sides have it: only the same value can be kept without losing one.
          if (side == &b && a.contains(key) && a[key] != value && !IsMergedKeyword(key)) {
            return UnsupportedKeyword(key, path_, "two different values under allOf");
          }
          continue;
        }
        if (!IsMergedKeyword(key)) out[key] = value;
      }
    }
    return out;
  }

  const SchemaCompiler& c_;
  const std::string& path_;
  int steps_ = 0;
};

}  // namespace

absl::StatusOr<Json> SchemaCompiler::Merge(const Json& schema, const std::string& path, int depth) {
  (void)depth;
  Merger m(*this, path);
  return m.Normalize(schema, 0);
}

namespace {

// `s` with plain `$ref`s followed (a few hops).
const Json& Deref(const SchemaCompiler& c, const Json& s_in) {
  const Json* s = &s_in;
  for (int hops = 0; hops < 8 && s->is_object() && s->contains("$ref") && s->size() == 1 &&
                     (*s)["$ref"].is_string();
       ++hops) {
    auto target = c.Resolve((*s)["$ref"].get<std::string>(), "#");
    if (!target.ok()) break;
    s = target->first;
  }
  return *s;
}

// The types whose instances `s` may accept (type, nullable, and the values of enum/const).
unsigned AdmittedTypes(const Json& s) {
  if (IsFalse(s)) return 0;
  if (!s.is_object()) return kAllTypes;
  absl::StatusOr<unsigned> t = SchemaTypes(s, "#");
  unsigned bits = t.ok() ? *t : kAllTypes;
  if (std::optional<std::vector<Json>> values = ListedValues(s)) {
    unsigned vt = 0;
    for (const Json& v : *values) vt |= ValueType(v);
    // An integral value is a number too; a fractional one only matches "number".
    const unsigned integer = (vt & kInteger) ? unsigned{kInteger} : 0u;
    const unsigned number = (vt & kNumber) ? unsigned{kNumber} : 0u;
    bits &= integer | number | (vt & ~unsigned{kInteger | kNumber});
  }
  return bits;
}

std::vector<std::string> RequiredKeys(const Json& s) {
  std::vector<std::string> keys;
  if (!s.is_object()) return keys;
  if (auto r = s.find("required"); r != s.end() && r->is_array()) {
    for (const Json& k : *r) {
      if (k.is_string()) keys.push_back(k.get<std::string>());
    }
  }
  return keys;
}

}  // namespace

absl::StatusOr<Json> SchemaCompiler::NotAsConstraint(const Json& not_in,
                                                     const std::string& path) const {
  const Json& n = Deref(*this, not_in);
  if (IsTrue(n)) return Json(false);
  if (IsFalse(n)) return Json(true);
  auto refuse = [&](std::string_view detail) { return UnsupportedKeyword("not", path, detail); };
  if (!n.is_object()) return refuse("not of a non-schema");
  std::vector<std::string> keys;
  for (const auto& [key, value] : n.items()) {
    if (IsKnownKeyword(key) && !IsAnnotationKeyword(key)) keys.push_back(key);
  }
  if (keys.size() == 1 && keys[0] == "type") {
    absl::StatusOr<unsigned> excluded = SchemaTypes(n, path);
    if (!excluded.ok()) return excluded.status();
    if ((*excluded & kInteger) && !(*excluded & kNumber)) {
      return refuse("not of integer (the numbers that are not integers have no grammar here)");
    }
    return Json{{"type", TypeNames(kAllTypes & ~*excluded)}};
  }
  // not(required [k, ...]): an object missing one of the keys; forbidding the first is enough.
  auto first_required = [](const Json& s) -> std::string {
    if (!s.is_object()) return "";
    for (const auto& [key, value] : s.items()) {
      if (IsKnownKeyword(key) && !IsAnnotationKeyword(key) && key != "required") return "";
    }
    auto r = s.find("required");
    if (r == s.end() || !r->is_array() || r->empty() || !(*r)[0].is_string()) return "";
    return (*r)[0].get<std::string>();
  };
  Json forbidden = Json::object();
  if (keys.size() == 1 && keys[0] == "required") {
    const std::string k = first_required(n);
    if (k.empty()) return refuse("not of an empty required");
    forbidden[k] = false;
  } else if (keys.size() == 1 && keys[0] == "anyOf" && n["anyOf"].is_array()) {
    for (const Json& alt : n["anyOf"]) {
      const std::string k = first_required(Deref(*this, alt));
      if (k.empty())
        return refuse("not of an anyOf whose alternatives are not plain required lists");
      forbidden[k] = false;
    }
  } else {
    return refuse(
        "only not of {}, a type, required keys, or an anyOf of required keys is supported");
  }
  return Json{{"type", "object"}, {"properties", std::move(forbidden)}};
}

absl::Status SchemaCompiler::SeparateOneOf(std::vector<Json>& alts, const std::string& path,
                                           int depth) const {
  std::vector<Json> forbid(alts.size(), Json::object());
  for (size_t i = 0; i < alts.size(); ++i) {
    for (size_t j = i + 1; j < alts.size(); ++j) {
      if (ProvablyDisjoint(alts[i], alts[j], depth)) continue;
      const Json& a = Deref(*this, alts[i]);
      const Json& b = Deref(*this, alts[j]);
      const std::vector<std::string> ra = RequiredKeys(a), rb = RequiredKeys(b);
      auto missing = [](const std::vector<std::string>& from, const std::vector<std::string>& in) {
        for (const std::string& k : from) {
          if (std::find(in.begin(), in.end(), k) == in.end()) return k;
        }
        return std::string();
      };
      const std::string only_a = missing(ra, rb), only_b = missing(rb, ra);
      if ((AdmittedTypes(a) & AdmittedTypes(b)) == kObject && !only_a.empty() && !only_b.empty()) {
        // Each alternative forbids a key the other requires: an instance one accepts then lacks
        // what the other needs, so no instance the grammar accepts matches both.
        forbid[j][only_a] = false;
        forbid[i][only_b] = false;
        continue;
      }
      return UnsupportedKeyword(
          "oneOf", path,
          absl::StrCat("alternatives ", i, " and ", j,
                       " may both match an instance (which oneOf rejects); anyOf, or "
                       "alternatives told apart by type, const/enum or required keys, are "
                       "supported"));
    }
  }
  for (size_t i = 0; i < alts.size(); ++i) {
    if (forbid[i].empty()) continue;
    Json both = {{"allOf", Json::array({alts[i], Json{{"properties", forbid[i]}}})}};
    absl::StatusOr<Json> merged = const_cast<SchemaCompiler*>(this)->Merge(both, path, depth);
    if (!merged.ok()) return merged.status();
    alts[i] = *std::move(merged);
  }
  return absl::OkStatus();
}

bool SchemaCompiler::ProvablyDisjoint(const Json& a_in, const Json& b_in, int depth) const {
  if (depth > options_.max_schema_depth) return false;
  const Json& a = Deref(*this, a_in);
  const Json& b = Deref(*this, b_in);
  if (IsFalse(a) || IsFalse(b)) return true;
  if (!a.is_object() || !b.is_object()) return false;
  if (a.contains("$ref") || b.contains("$ref") || a.contains("allOf") || b.contains("allOf") ||
      a.contains("anyOf") || b.contains("anyOf") || a.contains("oneOf") || b.contains("oneOf")) {
    return false;  // would need merging first; unknown
  }
  const unsigned common = AdmittedTypes(a) & AdmittedTypes(b);
  if (common == 0) return true;
  std::optional<std::vector<Json>> va = ListedValues(a), vb = ListedValues(b);
  if (va && vb) {
    bool shared = false;
    for (const Json& v : *va) shared = shared || std::find(vb->begin(), vb->end(), v) != vb->end();
    if (!shared) return true;
  }
  if (common != kObject) return false;
  // Only objects remain: a key one requires that the other forbids, or that both require with
  // disjoint schemas, tells them apart.
  auto property = [](const Json& s, const std::string& key) -> const Json* {
    auto p = s.find("properties");
    if (p != s.end() && p->is_object() && p->contains(key)) return &(*p)[key];
    auto ap = s.find("additionalProperties");
    return ap != s.end() ? &*ap : nullptr;
  };
  const std::vector<std::string> ra = RequiredKeys(a), rb = RequiredKeys(b);
  for (int side = 0; side < 2; ++side) {
    const Json& x = side == 0 ? a : b;
    const Json& y = side == 0 ? b : a;
    const std::vector<std::string>& rx = side == 0 ? ra : rb;
    const std::vector<std::string>& ry = side == 0 ? rb : ra;
    for (const std::string& key : rx) {
      const Json* in_y = property(y, key);
      if (in_y && IsFalse(*in_y)) return true;
      if (std::find(ry.begin(), ry.end(), key) == ry.end()) continue;
      const Json* in_x = property(x, key);
      if (in_x && in_y && ProvablyDisjoint(*in_x, *in_y, depth + 1)) return true;
    }
  }
  return false;
}

}  // namespace deltaserve::common::grammar::internal
