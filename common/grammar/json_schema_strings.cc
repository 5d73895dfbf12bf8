// JSON Schema strings (minLength/maxLength/pattern/format), literal values (enum/const) and
// object keys (listed ones, any other key, patternProperties keys).
// Formats are regexes in our own subset, compiled like a `pattern` but matched whole; each is
// written to accept only what the validator Python's `jsonschema` uses would accept (sound), and
// what it would refuse is refused here too, except where docs/structured_outputs.md says the
// grammar is stricter.
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grammar/grammar_matcher.h"
#include "common/grammar/internal/json_schema_internal.h"
#include "common/grammar/internal/regex_rules.h"
#include "common/grammar/regex.h"
#include "common/str_util.h"
#include "common/unicode.h"

namespace deltaserve::common::grammar::internal {
namespace {

// RFC 3339 full-date with the real calendar (days per month, Feb 29 in leap years only, years
// 0001-9999): what `datetime.date.fromisoformat` and rfc3339_validator accept.
constexpr const char* kDate =
    "(?:(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-"
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|"
    "02-(?:0[1-9]|1[0-9]|2[0-8]))"
    "|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)";
// RFC 3339 full-time; the fraction is bounded (9 digits) so that a model cannot loop on digits.
constexpr const char* kTime =
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?"
    "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
constexpr const char* kHex = "[0-9a-fA-F]";
// A DNS label (RFC 1123): letters, digits, inner hyphens, 1-62 characters here so that four
// labels stay within the 253-character limit of a name.
constexpr const char* kLabel = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?";
constexpr const char* kIpv4Octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

// The regex (anchored at both ends) of a supported format, or empty.
std::string FormatRegex(std::string_view format) {
  if (format == "date") return kDate;
  if (format == "time") return kTime;
  if (format == "date-time") return absl::StrCat(kDate, "[Tt]", kTime);
  if (format == "uuid") {
    return absl::StrCat(kHex, "{8}-", kHex, "{4}-", kHex, "{4}-", kHex, "{4}-", kHex, "{12}");
  }
  if (format == "ipv4") return absl::StrCat(kIpv4Octet, "(?:\\.", kIpv4Octet, "){3}");
  if (format == "hostname") return absl::StrCat(kLabel, "(?:\\.", kLabel, "){0,3}");
  if (format == "email") {
    // RFC 5322 dot-atom local part @ a host name (no quoted local parts, no IP literals).
    const std::string atom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    return absl::StrCat(atom, "(?:\\.", atom, ")*@", kLabel, "(?:\\.", kLabel, ")*");
  }
  if (format == "uri" || format == "uri-reference") {
    // RFC 3986 URI (absolute, with optional query and fragment); no IP-literal hosts.
    const std::string pct = "%[0-9A-Fa-f]{2}";
    const std::string sub = "!$&'()*+,;=";
    const std::string pchar = absl::StrCat("(?:[A-Za-z0-9._~", sub, ":@-]|", pct, ")");
    const std::string userinfo = absl::StrCat("(?:[A-Za-z0-9._~", sub, ":-]|", pct, ")*");
    const std::string regname = absl::StrCat("(?:[A-Za-z0-9._~", sub, "-]|", pct, ")*");
    const std::string segments = absl::StrCat("(?:/", pchar, "*)*");
    const std::string hier =
        absl::StrCat("(?://(?:", userinfo, "@)?", regname, "(?::[0-9]*)?", segments, "|/(?:", pchar,
                     "+", segments, ")?|", pchar, "+", segments, "|)");
    const std::string tail = absl::StrCat("(?:", pchar, "|[/?])*");
    const std::string query_fragment = absl::StrCat("(?:\\?", tail, ")?(?:#", tail, ")?");
    const std::string uri = absl::StrCat("[A-Za-z][A-Za-z0-9+.-]*:", hier, query_fragment);
    if (format == "uri") return uri;
    // RFC 3986 relative-ref: its first segment has no ':' (it would read as a scheme).
    const std::string segment_nc = absl::StrCat("(?:[A-Za-z0-9._~", sub, "@-]|", pct, ")");
    const std::string relative =
        absl::StrCat("(?://(?:", userinfo, "@)?", regname, "(?::[0-9]*)?", segments, "|/(?:", pchar,
                     "+", segments, ")?|", segment_nc, "+", segments, "|)", query_fragment);
    return absl::StrCat("(?:", uri, ")|(?:", relative, ")");
  }
  return "";
}

size_t CodePointCount(const std::string& s) {
  size_t n = 0, pos = 0;
  while (pos < s.size()) {
    DecodeUtf8(s, pos);
    ++n;
  }
  return n;
}

bool NumberIn(const Json& schema, const Json& v) {
  const double x = v.get<double>();
  auto bound = [&](const char* key, auto ok) {
    auto it = schema.find(key);
    return it == schema.end() || !it->is_number() || ok(it->template get<double>());
  };
  bool ok = bound("minimum", [&](double b) { return x >= b; }) &&
            bound("maximum", [&](double b) { return x <= b; });
  // Draft 4 spells exclusive bounds as booleans beside minimum/maximum.
  auto ex_min = schema.find("exclusiveMinimum"), ex_max = schema.find("exclusiveMaximum");
  if (ex_min != schema.end() && ex_min->is_boolean() && ex_min->get<bool>()) {
    ok = ok && bound("minimum", [&](double b) { return x > b; });
  } else {
    ok = ok && bound("exclusiveMinimum", [&](double b) { return x > b; });
  }
  if (ex_max != schema.end() && ex_max->is_boolean() && ex_max->get<bool>()) {
    ok = ok && bound("maximum", [&](double b) { return x < b; });
  } else {
    ok = ok && bound("exclusiveMaximum", [&](double b) { return x < b; });
  }
  return ok;
}

// Above this many optional counts (1,024 block rules) "up to n" takes the binary form: U(n) ::=
// O_{k-1} ... O_0 | P_k U(n - 2^k) with 2^k <= n < 2^(k+1) and O_i ::= P_i | "" — O(log n)
// rules, but many parses alive per count (slow first masks), for bounds nobody writes by hand.
constexpr int64_t kMaxBlockedRepeat = 65536;
// The block form costs q + ~130 rules per string; past this many rules in the grammar so far
// the binary form is taken instead, so that a schema of many long strings (500 properties of
// maxLength 65000: 560K rules, refused only after 0.46 s of building) stays cheap to compile and
// within GrammarLimits::max_rules. Those strings' first masks are slower, not wrong.
constexpr int64_t kBlockedRuleBudget = 16384;

template <typename Power>
Symbol BinaryUpTo(GrammarBuilder& b, const SchemaCompiler& c, int64_t n, Power& power) {
  std::vector<Symbol> optional;  // O_i
  auto opt = [&](size_t i) {
    while (optional.size() <= i) {
      const size_t j = optional.size();
      optional.push_back(Symbol::Rule(b.Optional(c.Name("opt_pow"), {power(j)})));
    }
    return optional[i];
  };
  // Built from the smallest remainder up: U(n) refers to U(n - 2^k).
  std::vector<int64_t> chain;
  for (int64_t m = n; m > 0;) {
    chain.push_back(m);
    m -= int64_t{1} << (63 - __builtin_clzll(static_cast<uint64_t>(m)));
  }
  std::optional<Symbol> up_to;  // U(0) is the empty string
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const int k = 63 - __builtin_clzll(static_cast<uint64_t>(*it));
    const RuleId r = b.AddRule(c.Name("up_to"));
    Alternative all;
    for (int i = k - 1; i >= 0; --i) all.push_back(opt(static_cast<size_t>(i)));
    b.AddAlternative(r, std::move(all));
    Alternative more = {power(static_cast<size_t>(k))};
    if (up_to) more.push_back(*up_to);
    b.AddAlternative(r, std::move(more));
    up_to = Symbol::Rule(r);
  }
  return *up_to;
}

// x{min,max} in few rules (a plain string's maxLength may be 65535). Exactly `min`: powers
// P_i ::= P_{i-1} P_{i-1} match x^(2^i) and min is the powers of its bits (one parse). Up to
// n = max - min more, n = 64q + r: U(0) ::= T_r and U(a) ::= B U(a-1) | T_63, where B is
// exactly 64 x's (one rule of 64 symbols) and T_k up to k x's (nested optionals, a rule per
// count). U(a) matches 0..64a + r x's, and at any count at most two parses are alive (inside a
// block B, or inside the tail T_63), so a matcher state holds two short stacks. (The binary
// form of "up to n", optional powers O_{k-1} ... O_0, kept dozens of parses alive per count:
// each count's DFA state cost ~12 us to build, the cold-mask tail of issue 13.) Each count
// still has its own matcher state (the language needs them), built lazily; q + ~130 rules (up
// to kMaxBlockedRepeat counts, BinaryUpTo above that).
Alternative CompactRepeat(GrammarBuilder& b, const SchemaCompiler& c, Symbol x, int64_t min,
                          int64_t max) {
  std::vector<Symbol> powers = {x};
  auto power = [&](size_t i) {
    while (powers.size() <= i) {
      const RuleId r = b.AddRule(c.Name("pow"));
      b.AddAlternative(r, {powers.back(), powers.back()});
      powers.push_back(Symbol::Rule(r));
    }
    return powers[i];
  };
  Alternative out;
  for (int i = 62; i >= 0; --i) {
    if ((min >> i) & 1) out.push_back(power(static_cast<size_t>(i)));
  }
  if (max < 0) {
    out.push_back(Symbol::Rule(b.Star(c.Name("chars"), {x})));
    return out;
  }
  const int64_t n = max - min;
  if (n == 0) return out;
  constexpr int64_t kBlock = 64;
  if (n > kMaxBlockedRepeat ||
      static_cast<int64_t>(b.rule_count()) + n / kBlock + 2 * kBlock > kBlockedRuleBudget) {
    out.push_back(BinaryUpTo(b, c, n, power));
    return out;
  }
  const int64_t q = n / kBlock;
  const int64_t r = n % kBlock;
  std::optional<Symbol> up_to;  // U(0): T_r, nothing when r == 0
  if (r > 0) up_to = Symbol::Rule(b.Repeat(c.Name("tail"), {x}, 0, static_cast<int>(r)));
  if (q > 0) {
    const Symbol block = Symbol::Rule(b.Repeat(c.Name("block"), {x}, kBlock, kBlock));
    const Symbol tail = Symbol::Rule(b.Repeat(c.Name("tail"), {x}, 0, kBlock - 1));
    for (int64_t a = 1; a <= q; ++a) {
      const RuleId u = b.AddRule(c.Name("up_to"));
      Alternative more = {block};
      if (up_to) more.push_back(*up_to);
      b.AddAlternative(u, std::move(more));
      b.AddAlternative(u, {tail});
      up_to = Symbol::Rule(u);
    }
  }
  out.push_back(*up_to);
  return out;
}

}  // namespace

Alternative SchemaCompiler::StringLiteral(std::string_view text) {
  Alternative alt = {builder_.Bytes(ByteClass::Of('"'))};
  Alternative body = json_chars_.Literal(text);
  alt.insert(alt.end(), body.begin(), body.end());
  alt.push_back(builder_.Bytes(ByteClass::Of('"')));
  return alt;
}

Alternative SchemaCompiler::ValueLiteral(const Json& value) {
  if (value.is_string()) return StringLiteral(value.get_ref<const std::string&>());
  const Symbol ws = Ws();
  auto append = [](Alternative& a, const Alternative& b) { a.insert(a.end(), b.begin(), b.end()); };
  if (value.is_array()) {
    Alternative alt = {builder_.Bytes(ByteClass::Of('[')), ws};
    for (size_t i = 0; i < value.size(); ++i) {
      if (i > 0) append(alt, {ws, builder_.Bytes(ByteClass::Of(',')), ws});
      append(alt, ValueLiteral(value[i]));
    }
    if (!value.empty()) alt.push_back(ws);
    alt.push_back(builder_.Bytes(ByteClass::Of(']')));
    return alt;
  }
  if (value.is_object()) {
    Alternative alt = {builder_.Bytes(ByteClass::Of('{')), ws};
    bool first = true;
    for (const auto& [key, v] : value.items()) {
      if (!first) append(alt, {ws, builder_.Bytes(ByteClass::Of(',')), ws});
      first = false;
      append(alt, StringLiteral(key));
      append(alt, {ws, builder_.Bytes(ByteClass::Of(':')), ws});
      append(alt, ValueLiteral(v));
    }
    if (!value.empty()) alt.push_back(ws);
    alt.push_back(builder_.Bytes(ByteClass::Of('}')));
    return alt;
  }
  return builder_.Literal(
      value.dump());  // null, true, false, numbers as nlohmann (shortest) writes them
}

absl::StatusOr<MaybeSymbols> SchemaCompiler::CompileString(const Json& schema,
                                                           const std::string& path) {
  absl::StatusOr<int64_t> min_len = CountKeyword(schema, "minLength", path);
  absl::StatusOr<int64_t> max_len = CountKeyword(schema, "maxLength", path);
  if (!min_len.ok()) return min_len.status();
  if (!max_len.ok()) return max_len.status();
  const int64_t min = std::max<int64_t>(*min_len, 0), max = *max_len;
  if (max >= 0 && max < min) return MaybeSymbols();
  auto pattern = schema.find("pattern");
  auto format = schema.find("format");
  std::string regex;
  const char* keyword = nullptr;
  if (pattern != schema.end()) {
    if (!pattern->is_string()) return InvalidSchema(path, "pattern must be a string");
    regex = pattern->get<std::string>();
    keyword = "pattern";
  }
  if (format != schema.end()) {
    if (!format->is_string()) return InvalidSchema(path, "format must be a string");
    const std::string name = format->get<std::string>();
    const std::string format_regex = FormatRegex(name);
    if (format_regex.empty()) {
      return UnsupportedKeyword("format", path,
                                absl::StrCat("format \"", name,
                                             "\" (supported: date-time, date, time, uuid, email, "
                                             "uri, uri-reference, ipv4, hostname)"));
    }
    if (keyword) return UnsupportedKeyword("format", path, "format together with pattern");
    regex = format_regex;
    keyword = "format";
  }
  Alternative content;
  if (keyword) {
    if (min > options_.max_repetition) {
      return UnsupportedKeyword(
          "minLength", path,
          absl::StrCat("over the limit of ", options_.max_repetition, " next to ", keyword));
    }
    absl::StatusOr<RegexAst> ast = ParseRegex(regex);
    if (!ast.ok()) return UnsupportedKeyword(keyword, path, std::string(ast.status().message()));
    RegexRuleOptions ro;
    ro.search = pattern != schema.end();
    ro.min_length = min;
    ro.max_length = max;
    absl::StatusOr<RuleId> rule = AddRegexRulesWith(json_chars_, **ast, Name(keyword), ro);
    if (!rule.ok()) return UnsupportedKeyword(keyword, path, std::string(rule.status().message()));
    content = {Symbol::Rule(*rule)};
  } else if (min == 0 && max < 0) {
    content = {Symbol::Rule(builder_.Star(Name("chars"), {AnyChar()}))};
  } else if (max > 64 || min > 64) {
    content = CompactRepeat(builder_, *this, AnyChar(), min, max);
  } else if (max != 0) {
    content = {Symbol::Rule(
        builder_.Repeat(Name("chars"), {AnyChar()}, static_cast<int>(min), static_cast<int>(max)))};
  }
  Alternative alt = {builder_.Bytes(ByteClass::Of('"'))};
  alt.insert(alt.end(), content.begin(), content.end());
  alt.push_back(builder_.Bytes(ByteClass::Of('"')));
  return MaybeSymbols(std::move(alt));
}

// A trie of the listed keys over code points: at a trie node, a character that continues a
// listed key follows the trie, any other leaves it for good; the closing quote is allowed
// except right after a whole listed key.
Symbol SchemaCompiler::KeyExcluding(const std::vector<std::string>& keys) {
  struct Node {
    std::map<uint32_t, size_t> next;
    bool terminal = false;
  };
  std::vector<Node> trie(1);
  for (const std::string& key : keys) {
    size_t at = 0, pos = 0;
    while (pos < key.size()) {
      const uint32_t cp = DecodeUtf8(key, pos);
      auto it = trie[at].next.find(cp);
      if (it == trie[at].next.end()) {
        trie.emplace_back();
        it = trie[at].next.emplace(cp, trie.size() - 1).first;
      }
      at = it->second;
    }
    trie[at].terminal = true;
  }
  const Symbol quote = builder_.Bytes(ByteClass::Of('"'));
  const RuleId free_rest = builder_.Star(Name("key_chars"), {AnyChar()});
  std::vector<RuleId> rules(trie.size());
  for (size_t i = 0; i < trie.size(); ++i) rules[i] = builder_.AddRule(Name("key"));
  // Characters other than a node's children: when those are all plain ASCII (the usual keys),
  // one byte class plus a rule shared by all nodes for everything that is not plain ASCII,
  // instead of a rule per node.
  CodePointRanges plain;
  for (uint32_t cp = 0; cp < 0x80; ++cp) {
    if (IsPlainByte(cp, CodePointSpelling::kJsonString)) plain.emplace_back(cp, cp);
  }
  plain = NormalizeRanges(plain);
  const Symbol not_plain = json_chars_.Set(ComplementRanges(plain));
  for (size_t i = 0; i < trie.size(); ++i) {
    CodePointRanges children;
    ByteClass other_plain;
    for (const auto& r : plain)
      other_plain.AddRange(static_cast<uint8_t>(r.first), static_cast<uint8_t>(r.second));
    bool all_plain = true;
    for (const auto& [cp, child] : trie[i].next) {
      children.emplace_back(cp, cp);
      if (IsPlainByte(cp, CodePointSpelling::kJsonString)) {
        other_plain.Remove(static_cast<uint8_t>(cp));
      } else {
        all_plain = false;
      }
      builder_.AddAlternative(rules[i], {json_chars_.Set({{cp, cp}}), Symbol::Rule(rules[child])});
    }
    if (!trie[i].terminal) builder_.AddAlternative(rules[i], {quote});
    if (all_plain) {
      if (!other_plain.Empty()) {
        builder_.AddAlternative(rules[i],
                                {builder_.Bytes(other_plain), Symbol::Rule(free_rest), quote});
      }
      builder_.AddAlternative(rules[i], {not_plain, Symbol::Rule(free_rest), quote});
    } else {
      builder_.AddAlternative(
          rules[i], {json_chars_.Set(ComplementRanges(children)), Symbol::Rule(free_rest), quote});
    }
  }
  const RuleId key = builder_.AddRule(Name("other_key"));
  builder_.AddAlternative(key, {quote, Symbol::Rule(rules[0])});
  return Symbol::Rule(key);
}

absl::StatusOr<SchemaCompiler::PropertyNameRules> SchemaCompiler::PropertyNames(
    const Json& names, const std::vector<std::string>& listed, const std::string& path,
    int depth) {
  // A key is a string: the names schema with type string (so that, e.g., a bare maxLength
  // means what it says for keys).
  const Json as_string = {{"allOf", Json::array({names, Json{{"type", "string"}}})}};
  PropertyNameRules out;
  if (listed.size() > 4096) return UnsupportedKeyword("propertyNames", path, "too many properties");
  {
    // Which listed keys it allows: their JSON text walked through its grammar, built apart.
    GrammarBuilder b;
    SchemaCompiler alone(b, root_, "names_", options_);
    absl::StatusOr<MaybeSymbols> key = alone.Compile(as_string, path, depth + 1);
    if (!key.ok()) return key.status();
    if (key->has_value()) {
      const RuleId root = b.AddRule("names_root");
      b.AddAlternative(root, **key);
      absl::StatusOr<Grammar> g = std::move(b).Build(root, options_.limits);
      if (g.ok()) {
        auto compiled = std::make_shared<CompiledGrammar>(*std::move(g));
        for (const std::string& k : listed) {
          GrammarMatcher m(compiled);
          if (m.AcceptBytes(Json(k).dump()) && m.IsAccepting()) out.allowed.insert(k);
        }
      }
    }
  }
  // The other keys it allows.
  const Json& n = names;
  if (n.is_object() && (n.contains("enum") || n.contains("const"))) {
    std::vector<Alternative> keys;
    std::vector<Json> values;
    if (auto e = n.find("enum"); e != n.end() && e->is_array()) values.assign(e->begin(), e->end());
    if (auto c = n.find("const"); c != n.end()) values = {*c};
    for (const Json& v : values) {
      if (!v.is_string()) continue;
      const std::string& k = v.get_ref<const std::string&>();
      if (std::find(listed.begin(), listed.end(), k) != listed.end()) continue;
      keys.push_back(StringLiteral(k));
    }
    out.other_key = keys.empty() ? Alternative{Never()}
                                 : Alternative{Symbol::Rule(builder_.Choice(Name("name_keys"), std::move(keys)))};
    return out;
  }
  if (!out.allowed.empty()) return out;  // a generated key could repeat a listed one
  absl::StatusOr<MaybeSymbols> key = Compile(as_string, path, depth + 1);
  if (!key.ok()) return key.status();
  out.other_key = key->has_value() ? **key : Alternative{Never()};
  return out;
}

absl::StatusOr<std::pair<Alternative, MaybeSymbols>> SchemaCompiler::PatternKeys(
    const Json& patterns, const std::vector<std::string>& listed, const std::string& path,
    int depth) {
  const Json& first = patterns.begin().value();
  std::vector<Alternative> keys;
  if (listed.size() * patterns.size() > 4096) {
    return UnsupportedKeyword("patternProperties", path, "too many patterns and properties");
  }
  for (const auto& [pattern, sub] : patterns.items()) {
    if (sub != first) {
      return UnsupportedKeyword("patternProperties", path,
                                "patterns with different schemas (a key may match several)");
    }
    absl::StatusOr<RegexAst> ast = ParseRegex(pattern);
    if (!ast.ok())
      return UnsupportedKeyword("patternProperties", path, std::string(ast.status().message()));
    // A listed key that matches would need both schemas, and must not come twice.
    for (const std::string& key : listed) {
      GrammarBuilder b;
      CodePointSetRules raw(b, CodePointSpelling::kUtf8, "");
      absl::StatusOr<RuleId> rule = AddRegexRulesWith(raw, **ast, "key", RegexRuleOptions{});
      if (!rule.ok())
        return UnsupportedKeyword("patternProperties", path, std::string(rule.status().message()));
      absl::StatusOr<Grammar> g = std::move(b).Build(*rule);
      if (!g.ok()) continue;  // the pattern matches nothing
      GrammarMatcher m(std::make_shared<CompiledGrammar>(*std::move(g)));
      if (m.AcceptBytes(key) && m.IsAccepting()) {
        return UnsupportedKeyword(
            "patternProperties", path,
            absl::StrCat("pattern \"", pattern, "\" matches the listed property \"", key, "\""));
      }
    }
    absl::StatusOr<RuleId> rule =
        AddRegexRulesWith(json_chars_, **ast, Name("key_pattern"), RegexRuleOptions{});
    if (!rule.ok())
      return UnsupportedKeyword("patternProperties", path, std::string(rule.status().message()));
    keys.push_back({builder_.Bytes(ByteClass::Of('"')), Symbol::Rule(*rule),
                    builder_.Bytes(ByteClass::Of('"'))});
  }
  absl::StatusOr<MaybeSymbols> value =
      Compile(first, JoinPath(path, patterns.begin().key()), depth + 1);
  if (!value.ok()) return value.status();
  return std::make_pair(
      Alternative{Symbol::Rule(builder_.Choice(Name("pattern_keys"), std::move(keys)))},
      *std::move(value));
}

absl::StatusOr<MaybeSymbols> SchemaCompiler::CompileEnum(const Json& schema,
                                                         const std::string& path, unsigned types) {
  // Besides type, the keywords whose effect on a listed value is checked here; any other
  // assertion next to enum/const would need the intersection of two grammars.
  static const char* const kChecked[] = {"type",
                                         "nullable",
                                         "enum",
                                         "const",
                                         "minLength",
                                         "maxLength",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum",
                                         "minItems",
                                         "maxItems",
                                         "required",
                                         "minProperties",
                                         "maxProperties"};
  for (const auto& [key, value] : schema.items()) {
    if (!IsKnownKeyword(key) || IsAnnotationKeyword(key)) continue;
    bool checked = false;
    for (const char* k : kChecked) checked = checked || key == k;
    if (!checked) return UnsupportedKeyword(key, path, "together with enum/const");
  }
  std::vector<Json> values;
  if (auto e = schema.find("enum"); e != schema.end()) {
    if (!e->is_array()) return InvalidSchema(path, "enum must be an array");
    for (const Json& v : *e) values.push_back(v);
  }
  if (auto c = schema.find("const"); c != schema.end()) {
    if (schema.contains("enum")) {
      bool listed = false;
      for (const Json& v : values) listed = listed || v == *c;
      values.clear();
      if (listed) values.push_back(*c);
    } else {
      values = {*c};
    }
  }
  auto count = [&](const char* key) {
    absl::StatusOr<int64_t> n = CountKeyword(schema, key, path);
    return n.ok() ? *n : int64_t{-1};
  };
  std::vector<Alternative> alts;
  for (const Json& v : values) {
    const unsigned t = ValueType(v);
    if (!(types & t) && !(t == kNumber && (types & kNumber))) continue;
    if (t == kString) {
      const int64_t n = static_cast<int64_t>(CodePointCount(v.get_ref<const std::string&>()));
      if (n < count("minLength") || (count("maxLength") >= 0 && n > count("maxLength"))) continue;
    }
    if ((t == kInteger || t == kNumber) && !NumberIn(schema, v)) continue;
    if (t == kArray) {
      const int64_t n = static_cast<int64_t>(v.size());
      if (n < count("minItems") || (count("maxItems") >= 0 && n > count("maxItems"))) continue;
    }
    if (t == kObject) {
      const int64_t n = static_cast<int64_t>(v.size());
      if (n < count("minProperties") ||
          (count("maxProperties") >= 0 && n > count("maxProperties"))) {
        continue;
      }
      bool has_required = true;
      if (auto r = schema.find("required"); r != schema.end() && r->is_array()) {
        for (const Json& k : *r)
          has_required = has_required && k.is_string() && v.contains(k.get<std::string>());
      }
      if (!has_required) continue;
    }
    alts.push_back(ValueLiteral(v));
  }
  if (alts.empty()) return MaybeSymbols();
  if (alts.size() == 1) return MaybeSymbols(alts[0]);
  return MaybeSymbols(Alternative{Symbol::Rule(builder_.Choice(Name("enum"), std::move(alts)))});
}

}  // namespace deltaserve::common::grammar::internal
