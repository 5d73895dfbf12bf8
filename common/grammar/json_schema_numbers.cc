// JSON Schema integers and numbers: exact grammars for minimum/maximum/exclusiveMinimum/
// exclusiveMaximum at any magnitude (bounds are decimal strings, never rounded to int64 or
// double arithmetic), and integer multipleOf without bounds.
//
// A number splits into sign, integer part I and fraction F. For one sign the magnitude lies in
// an interval [L, H]; I strictly between L's and H's integer parts takes any fraction, I equal
// to one of them constrains F digit by digit (a small DFA over decimal digits), and the integer
// parts are ranges of digit strings spelled as sequences of digit classes. Bounded numbers are
// written without exponent (docs/structured_outputs.md); unbounded ones in full JSON syntax.
#include <array>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grammar/internal/json_schema_internal.h"
#include "common/str_util.h"

namespace deltaserve::common::grammar::internal {
namespace {

// An exact decimal: canonical integer digits (no leading zeros, "0" for zero) and fraction
// digits (no trailing zeros). Zero is never negative.
struct Decimal {
  bool negative = false;
  std::string int_digits = "0";
  std::string frac_digits;
};

struct Bound {
  Decimal value;
  bool inclusive = true;
};

void Canonicalize(Decimal& d) {
  const size_t nz = d.int_digits.find_first_not_of('0');
  d.int_digits = nz == std::string::npos ? "0" : d.int_digits.substr(nz);
  while (!d.frac_digits.empty() && d.frac_digits.back() == '0') d.frac_digits.pop_back();
  if (d.int_digits == "0" && d.frac_digits.empty()) d.negative = false;
}

// The exact decimal of a JSON number: integers as they are, doubles as their shortest
// round-trip text (what the schema's author wrote, for any bound written with <= 17 digits).
std::optional<Decimal> ToDecimal(const Json& v) {
  if (!v.is_number()) return std::nullopt;
  std::string text = v.dump();
  Decimal d;
  size_t pos = 0;
  if (text[0] == '-') {
    d.negative = true;
    pos = 1;
  }
  std::string digits;
  int64_t point = -1, exponent = 0;
  for (; pos < text.size(); ++pos) {
    const char c = text[pos];
    if (c >= '0' && c <= '9') {
      digits.push_back(c);
    } else if (c == '.') {
      point = static_cast<int64_t>(digits.size());
    } else if (c == 'e' || c == 'E') {
      exponent = std::stoll(text.substr(pos + 1));
      break;
    }
  }
  if (point < 0) point = static_cast<int64_t>(digits.size());
  point += exponent;  // a double's exponent: |point| stays below ~330
  std::string int_part, frac_part;
  for (int64_t i = std::min<int64_t>(point, 0);
       i < std::max<int64_t>(point, static_cast<int64_t>(digits.size())); ++i) {
    const char digit =
        i >= 0 && i < static_cast<int64_t>(digits.size()) ? digits[static_cast<size_t>(i)] : '0';
    (i < point ? int_part : frac_part).push_back(digit);
  }
  d.int_digits = std::move(int_part);
  d.frac_digits = std::move(frac_part);
  Canonicalize(d);
  return d;
}

int CompareDigits(const std::string& a, const std::string& b) {  // canonical integers
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
}

int CompareMagnitude(const Decimal& a, const Decimal& b) {
  if (int c = CompareDigits(a.int_digits, b.int_digits); c != 0) return c;
  const int c = a.frac_digits.compare(b.frac_digits);  // no trailing zeros: plain order works
  return c < 0 ? -1 : (c == 0 ? 0 : 1);
}

int Compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int c = CompareMagnitude(a, b);
  return a.negative ? -c : c;
}

std::string AddOne(std::string s) {
  int i = static_cast<int>(s.size()) - 1;
  while (i >= 0 && s[static_cast<size_t>(i)] == '9') s[static_cast<size_t>(i--)] = '0';
  if (i < 0) return absl::StrCat("1", s);
  ++s[static_cast<size_t>(i)];
  return s;
}

std::string SubOne(std::string s) {  // s > 0
  int i = static_cast<int>(s.size()) - 1;
  while (s[static_cast<size_t>(i)] == '0') s[static_cast<size_t>(i--)] = '9';
  --s[static_cast<size_t>(i)];
  const size_t nz = s.find_first_not_of('0');
  return nz == std::string::npos ? "0" : s.substr(nz);
}

ByteClass Digits(int lo, int hi) {
  return ByteClass::Range(static_cast<uint8_t>('0' + lo), static_cast<uint8_t>('0' + hi));
}

// Digit strings of a's length from a to b (a <= b), each a sequence of classes after `prefix`.
void SameLengthRange(const std::string& a, const std::string& b, std::vector<ByteClass> prefix,
                     std::vector<std::vector<ByteClass>>& out) {
  if (a.empty()) {
    out.push_back(std::move(prefix));
    return;
  }
  const size_t n = a.size();
  auto with = [&](ByteClass c) {
    std::vector<ByteClass> p = prefix;
    p.push_back(c);
    return p;
  };
  auto any_tail = [&](std::vector<ByteClass> p) {
    for (size_t i = 1; i < n; ++i) p.push_back(Digits(0, 9));
    return p;
  };
  const int a0 = a[0] - '0', b0 = b[0] - '0';
  if (a0 == b0) {
    SameLengthRange(a.substr(1), b.substr(1), with(Digits(a0, a0)), out);
    return;
  }
  const bool low_full = a.find_first_not_of('0', 1) == std::string::npos;
  const bool high_full = b.find_first_not_of('9', 1) == std::string::npos;
  int mid_lo = a0, mid_hi = b0;
  if (!low_full) {
    SameLengthRange(a.substr(1), std::string(n - 1, '9'), with(Digits(a0, a0)), out);
    ++mid_lo;
  }
  if (!high_full) --mid_hi;
  if (mid_lo <= mid_hi) out.push_back(any_tail(with(Digits(mid_lo, mid_hi))));
  if (!high_full) SameLengthRange(std::string(n - 1, '0'), b.substr(1), with(Digits(b0, b0)), out);
}

// A small DFA over fraction digits (see the file comment); state 0 is the start.
struct FracDfa {
  std::vector<std::array<int, 10>> next;  // -1: rejected
  std::vector<bool> accept;
  int Add(bool acc) {
    next.push_back({-1, -1, -1, -1, -1, -1, -1, -1, -1, -1});
    accept.push_back(acc);
    return static_cast<int>(next.size()) - 1;
  }
};

// F >= D (or > D), F and D compared as fractions (zero-padded).
FracDfa LowerDfa(const std::string& d, bool inclusive) {
  FracDfa f;
  const int k = static_cast<int>(d.size());
  for (int i = 0; i <= k + 1; ++i) f.Add(false);
  const int free = k + 1;
  f.accept[static_cast<size_t>(free)] = true;
  for (int x = 0; x < 10; ++x) f.next[static_cast<size_t>(free)][static_cast<size_t>(x)] = free;
  for (int i = 0; i < k; ++i) {
    const int di = d[static_cast<size_t>(i)] - '0';
    for (int x = 0; x < 10; ++x) {
      f.next[static_cast<size_t>(i)][static_cast<size_t>(x)] =
          x > di ? free : (x == di ? i + 1 : -1);
    }
  }
  f.accept[static_cast<size_t>(k)] = inclusive;
  for (int x = 0; x < 10; ++x) {
    f.next[static_cast<size_t>(k)][static_cast<size_t>(x)] = inclusive || x > 0 ? free : k;
  }
  return f;
}

// F <= D (or < D).
FracDfa UpperDfa(const std::string& d, bool inclusive) {
  FracDfa f;
  const int k = static_cast<int>(d.size());
  for (int i = 0; i <= k + 1; ++i) f.Add(true);
  const int free = k + 1;
  for (int x = 0; x < 10; ++x) f.next[static_cast<size_t>(free)][static_cast<size_t>(x)] = free;
  for (int i = 0; i < k; ++i) {
    const int di = d[static_cast<size_t>(i)] - '0';
    for (int x = 0; x < 10; ++x) {
      f.next[static_cast<size_t>(i)][static_cast<size_t>(x)] =
          x < di ? free : (x == di ? i + 1 : -1);
    }
  }
  // All of D matched: only zeros may follow, and then F == D.
  f.accept[static_cast<size_t>(k)] = inclusive;
  f.next[static_cast<size_t>(k)][0] = k;
  return f;
}

FracDfa Product(const FracDfa& a, const FracDfa& b) {
  FracDfa p;
  std::map<std::pair<int, int>, int> index;
  std::vector<std::pair<int, int>> work = {{0, 0}};
  index[{0, 0}] = p.Add(a.accept[0] && b.accept[0]);
  for (size_t w = 0; w < work.size(); ++w) {
    const auto [s, t] = work[w];
    const int from = index[{s, t}];
    for (int x = 0; x < 10; ++x) {
      const int s2 = a.next[static_cast<size_t>(s)][static_cast<size_t>(x)];
      const int t2 = b.next[static_cast<size_t>(t)][static_cast<size_t>(x)];
      if (s2 < 0 || t2 < 0) continue;
      auto it = index.find({s2, t2});
      if (it == index.end()) {
        it = index
                 .emplace(std::make_pair(s2, t2), p.Add(a.accept[static_cast<size_t>(s2)] &&
                                                        b.accept[static_cast<size_t>(t2)]))
                 .first;
        work.emplace_back(s2, t2);
      }
      p.next[static_cast<size_t>(from)][static_cast<size_t>(x)] = it->second;
    }
  }
  return p;
}

class NumberRules {
 public:
  NumberRules(SchemaCompiler& c) : c_(c), b_(c.builder()) {}

  // Magnitudes in [lower, upper] (upper absent: unbounded) as alternatives.
  std::vector<Alternative> Magnitudes(const Bound& lower, const std::optional<Bound>& upper,
                                      bool integer) {
    std::vector<Alternative> out;
    if (upper) {
      const int c = CompareMagnitude(lower.value, upper->value);
      if (c > 0 || (c == 0 && !(lower.inclusive && upper->inclusive))) return out;
    }
    if (integer) {
      std::string lo = lower.value.int_digits;
      if (!lower.value.frac_digits.empty() || !lower.inclusive) lo = AddOne(lo);
      std::optional<std::string> hi;
      if (upper) {
        hi = upper->value.int_digits;
        if (upper->value.frac_digits.empty() && !upper->inclusive) {
          if (*hi == "0") return out;
          hi = SubOne(*hi);
        }
        if (CompareDigits(lo, *hi) > 0) return out;
      }
      return IntRange(lo, hi);
    }
    const std::string& li = lower.value.int_digits;
    const FracDfa low = LowerDfa(lower.value.frac_digits, lower.inclusive);
    if (upper && li == upper->value.int_digits) {
      AddWithFraction(out, {Literal(li)},
                      Product(low, UpperDfa(upper->value.frac_digits, upper->inclusive)));
      return out;
    }
    AddWithFraction(out, {Literal(li)}, low);
    std::optional<std::string> mid_hi;
    if (upper) mid_hi = upper->value.int_digits == "0" ? "" : SubOne(upper->value.int_digits);
    const std::string mid_lo = AddOne(li);
    if (!mid_hi || (!mid_hi->empty() && CompareDigits(mid_lo, *mid_hi) <= 0)) {
      for (Alternative& a : IntRange(mid_lo, mid_hi)) {
        a.push_back(AnyFraction());
        out.push_back(std::move(a));
      }
    }
    if (upper) {
      AddWithFraction(out, {Literal(upper->value.int_digits)},
                      UpperDfa(upper->value.frac_digits, upper->inclusive));
    }
    return out;
  }

  // Canonical integers (no leading zeros) from lo to hi (absent: unbounded).
  std::vector<Alternative> IntRange(const std::string& lo, const std::optional<std::string>& hi) {
    std::vector<std::vector<ByteClass>> seqs;
    const size_t last_len = hi ? hi->size() : lo.size();
    for (size_t len = lo.size(); len <= last_len; ++len) {
      const std::string from = len == lo.size() ? lo : absl::StrCat("1", std::string(len - 1, '0'));
      const std::string to = hi && len == hi->size() ? *hi : std::string(len, '9');
      SameLengthRange(from, to, {}, seqs);
    }
    std::vector<Alternative> out;
    for (const auto& seq : seqs) {
      Alternative alt;
      for (const ByteClass& c : seq) alt.push_back(b_.Bytes(c));
      out.push_back(std::move(alt));
    }
    if (!hi) {  // every longer number: [1-9][0-9]{len(lo),}
      out.push_back({b_.Bytes(Digits(1, 9)),
                     Symbol::Rule(b_.Repeat(c_.Name("digits"), {b_.Bytes(Digits(0, 9))},
                                            static_cast<int>(lo.size()), -1))});
    }
    return out;
  }

  Symbol AnyFraction() {
    if (!any_fraction_) {
      const RuleId digits = b_.Plus(c_.Name("frac_digits"), {b_.Bytes(Digits(0, 9))});
      any_fraction_ = Symbol::Rule(
          b_.Optional(c_.Name("fraction"), {b_.Bytes(ByteClass::Of('.')), Symbol::Rule(digits)}));
    }
    return *any_fraction_;
  }

  Symbol Literal(const std::string& digits) {
    const RuleId r = b_.AddRule(c_.Name("int"));
    b_.AddAlternative(r, b_.Literal(digits));
    return Symbol::Rule(r);
  }

  // Appends `head` followed by a fraction the DFA accepts (none, or "." digits).
  void AddWithFraction(std::vector<Alternative>& out, Alternative head, const FracDfa& dfa) {
    // Live states: those from which an accepting state is reachable.
    const size_t n = dfa.next.size();
    std::vector<bool> live(dfa.accept);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t s = 0; s < n; ++s) {
        if (live[s]) continue;
        for (int t : dfa.next[s]) {
          if (t >= 0 && live[static_cast<size_t>(t)]) {
            live[s] = changed = true;
            break;
          }
        }
      }
    }
    std::vector<RuleId> rules(n);
    for (size_t s = 0; s < n; ++s) rules[s] = live[s] ? b_.AddRule(c_.Name("frac")) : 0;
    auto transitions = [&](size_t s, Alternative prefix, RuleId into) {
      std::map<int, ByteClass> by_target;
      for (int x = 0; x < 10; ++x) {
        const int t = dfa.next[s][static_cast<size_t>(x)];
        if (t >= 0 && live[static_cast<size_t>(t)]) by_target[t].Add(static_cast<uint8_t>('0' + x));
      }
      for (const auto& [t, cls] : by_target) {
        Alternative alt = prefix;
        alt.push_back(b_.Bytes(cls));
        alt.push_back(Symbol::Rule(rules[static_cast<size_t>(t)]));
        b_.AddAlternative(into, std::move(alt));
      }
      return !by_target.empty();
    };
    for (size_t s = 0; s < n; ++s) {
      if (!live[s]) continue;
      if (dfa.accept[s]) b_.AddAlternative(rules[s], {});
      transitions(s, {}, rules[s]);
    }
    if (!live[0]) return;
    const RuleId fraction = b_.AddRule(c_.Name("fraction"));
    if (dfa.accept[0]) b_.AddAlternative(fraction, {});
    transitions(0, {b_.Bytes(ByteClass::Of('.'))}, fraction);
    head.push_back(Symbol::Rule(fraction));
    out.push_back(std::move(head));
  }

  // Integers that are multiples of k, no bounds: the remainder mod k as DFA state.
  std::vector<Alternative> Multiples(int64_t k) {
    std::vector<RuleId> rem(static_cast<size_t>(k));
    for (auto& r : rem) r = b_.AddRule(c_.Name("mod"));
    auto edges = [&](int64_t r, int first_digit, RuleId into, Alternative prefix) {
      std::map<int64_t, ByteClass> by_target;
      for (int x = first_digit; x < 10; ++x)
        by_target[(r * 10 + x) % k].Add(static_cast<uint8_t>('0' + x));
      for (const auto& [t, cls] : by_target) {
        Alternative alt = prefix;
        alt.push_back(b_.Bytes(cls));
        alt.push_back(Symbol::Rule(rem[static_cast<size_t>(t)]));
        b_.AddAlternative(into, std::move(alt));
      }
    };
    for (int64_t r = 0; r < k; ++r) {
      if (r == 0) b_.AddAlternative(rem[0], {});
      edges(r, 0, rem[static_cast<size_t>(r)], {});
    }
    const RuleId nonzero = b_.AddRule(c_.Name("multiple"));
    edges(0, 1, nonzero, {});
    return {{b_.Bytes(ByteClass::Of('0'))},
            {Symbol::Rule(nonzero)},
            {b_.Bytes(ByteClass::Of('-')), Symbol::Rule(nonzero)}};
  }

 private:
  SchemaCompiler& c_;
  GrammarBuilder& b_;
  std::optional<Symbol> any_fraction_;
};

absl::Status ReadBound(const Json& schema, const std::string& path, bool lower,
                       std::optional<Bound>& out) {
  const char* plain = lower ? "minimum" : "maximum";
  const char* exclusive = lower ? "exclusiveMinimum" : "exclusiveMaximum";
  auto tighten = [&](const Decimal& v, bool inclusive) {
    if (!out) {
      out = Bound{v, inclusive};
      return;
    }
    const int c = Compare(v, out->value) * (lower ? 1 : -1);
    if (c > 0 || (c == 0 && !inclusive)) out = Bound{v, inclusive};
  };
  auto p = schema.find(plain);
  auto e = schema.find(exclusive);
  const bool draft4_exclusive = e != schema.end() && e->is_boolean() && e->get<bool>();
  if (p != schema.end()) {
    std::optional<Decimal> v = ToDecimal(*p);
    if (!v) return InvalidSchema(path, absl::StrCat(plain, " must be a number"));
    tighten(*v, !draft4_exclusive);
  }
  if (e != schema.end() && !e->is_boolean()) {
    std::optional<Decimal> v = ToDecimal(*e);
    if (!v) return InvalidSchema(path, absl::StrCat(exclusive, " must be a number"));
    tighten(*v, false);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MaybeSymbols> SchemaCompiler::CompileNumber(const Json& schema,
                                                           const std::string& path, bool integer) {
  std::optional<Bound> lower, upper;
  if (absl::Status s = ReadBound(schema, path, true, lower); !s.ok()) return s;
  if (absl::Status s = ReadBound(schema, path, false, upper); !s.ok()) return s;
  NumberRules rules(*this);
  std::vector<Alternative> alts;
  if (auto m = schema.find("multipleOf"); m != schema.end()) {
    if (!m->is_number() || m->get<double>() <= 0) {
      return InvalidSchema(path, "multipleOf must be a positive number");
    }
    if (ValueType(*m) != kInteger) {
      return UnsupportedKeyword("multipleOf", path, "a fractional multipleOf");
    }
    const double k = m->get<double>();
    if (k != 1) {
      if (lower || upper || k > 10000) {
        return UnsupportedKeyword("multipleOf", path,
                                  "only integer multipleOf up to 10000 without bounds");
      }
      // Only integral instances are multiples of an integer (the grammar writes them as such).
      alts = rules.Multiples(static_cast<int64_t>(k));
      return MaybeSymbols(Alternative{Symbol::Rule(builder_.Choice(Name("multiple_of"), alts))});
    }
    integer = true;
  }
  if (!lower && !upper) {
    // -?(0|[1-9][0-9]*) (\.[0-9]+)? ([eE][+-]?[0-9]+)?
    const Symbol digit = builder_.Bytes(Digits(0, 9));
    const RuleId digits = builder_.Star(Name("digits"), {digit});
    const RuleId int_part =
        builder_.Choice(Name("int"), {{builder_.Bytes(ByteClass::Of('0'))},
                                      {builder_.Bytes(Digits(1, 9)), Symbol::Rule(digits)}});
    Alternative alt = {
        Symbol::Rule(builder_.Optional(Name("sign"), {builder_.Bytes(ByteClass::Of('-'))})),
        Symbol::Rule(int_part)};
    if (!integer) {
      const RuleId plus = builder_.Plus(Name("digits"), {digit});
      ByteClass e, sign;
      e.Add('e');
      e.Add('E');
      sign.Add('+');
      sign.Add('-');
      alt.push_back(rules.AnyFraction());
      alt.push_back(Symbol::Rule(builder_.Optional(
          Name("exponent"),
          {builder_.Bytes(e),
           Symbol::Rule(builder_.Optional(Name("exp_sign"), {builder_.Bytes(sign)})),
           Symbol::Rule(plus)})));
    }
    return MaybeSymbols(std::move(alt));
  }
  const Decimal zero;
  // x >= 0.
  if (!upper || !upper->value.negative) {
    Bound lo{zero, true};
    if (lower && !lower->value.negative) lo = *lower;
    for (Alternative& a : rules.Magnitudes(lo, upper, integer)) alts.push_back(std::move(a));
  }
  // x < 0: magnitudes in (|upper| or 0 exclusive, |lower|].
  if (!lower || lower->value.negative) {
    Bound lo{zero, false};
    if (upper && upper->value.negative) lo = *upper;
    lo.value.negative = false;
    std::optional<Bound> hi = lower;
    if (hi) hi->value.negative = false;
    for (Alternative& a : rules.Magnitudes(lo, hi, integer)) {
      a.insert(a.begin(), builder_.Bytes(ByteClass::Of('-')));
      alts.push_back(std::move(a));
    }
  }
  if (alts.empty()) return MaybeSymbols();
  return MaybeSymbols(Alternative{Symbol::Rule(builder_.Choice(Name("number"), std::move(alts)))});
}

}  // namespace deltaserve::common::grammar::internal
