// The grammar engine's intermediate form: a context-free grammar over bytes, what JSON Schema,
// regexes, `json_object` and forced tool calls compile to (json_schema_compiler.h, regex.h) and
// what GrammarMatcher (grammar_matcher.h) walks byte by byte. Bytes, not characters: the model's
// byte-level BPE tokens are byte strings, and a token is allowed when its bytes continue a valid
// prefix. UTF-8 is spelled out as byte classes by whoever builds the grammar.
//
//   GrammarBuilder b;
//   RuleId digits = b.AddRule("digits");
//   b.AddAlternative(digits, {b.Bytes(ByteClass::Range('0', '9')), Symbol::Rule(digits)});
//   b.AddAlternative(digits, {b.Bytes(ByteClass::Range('0', '9'))});
//   ASSIGN_OR_RETURN(Grammar g, std::move(b).Build(digits));
//
// Form of the rules: each rule is a list of alternatives, each alternative a sequence of symbols
// (a byte class or a rule reference); an empty alternative matches the empty string. Build
// refuses what the matcher cannot walk: references to missing rules, left recursion (a rule that
// can reach itself without consuming a byte), and grammars over the size limits. It drops the
// alternatives that can never match (an empty byte class, a rule that derives no finite string),
// so that every prefix the matcher accepts can still be completed; a root that matches nothing
// is refused.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace deltaserve::common::grammar {

using RuleId = uint32_t;

// A set of byte values (256 bits).
class ByteClass {
 public:
  ByteClass() = default;
  static ByteClass Of(uint8_t byte);
  static ByteClass Range(uint8_t lo, uint8_t hi);  // lo..hi inclusive
  static ByteClass Any();

  void Add(uint8_t byte) { bits_[byte >> 6] |= uint64_t{1} << (byte & 63); }
  void AddRange(uint8_t lo, uint8_t hi);
  void AddClass(const ByteClass& other);
  void Remove(uint8_t byte) { bits_[byte >> 6] &= ~(uint64_t{1} << (byte & 63)); }
  ByteClass Complement() const;
  bool Has(uint8_t byte) const { return (bits_[byte >> 6] >> (byte & 63)) & 1; }
  bool Empty() const { return (bits_[0] | bits_[1] | bits_[2] | bits_[3]) == 0; }
  int Count() const;
  bool operator==(const ByteClass& other) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const ByteClass& c) {
    return H::combine(std::move(h), c.bits_);
  }

  // GBNF-style text: `[a-z0-9_]`, `[^"\\\x00-\x1f]`, or a quoted byte `"a"`.
  std::string ToString() const;

 private:
  std::array<uint64_t, 4> bits_{};
};

// One element of an alternative: a byte from a class, or a reference to a rule.
struct Symbol {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  uint32_t index = 0;  // into Grammar::byte_classes() (kBytes) or Grammar::rules() (kRule)

  static Symbol Rule(RuleId rule) { return {Kind::kRule, rule}; }
  bool operator==(const Symbol& other) const = default;
};

using Alternative = std::vector<Symbol>;

struct Rule {
  std::string name;  // for printing and error messages; unique within a grammar
  std::vector<Alternative> alternatives;
};

// Limits Build enforces, so that an untrusted schema cannot make a grammar that eats the worker.
struct GrammarLimits {
  size_t max_rules = 1 << 16;
  size_t max_symbols = 1 << 20;  // summed over all alternatives
};

// An immutable, validated grammar (see the file comment).
class Grammar {
 public:
  const std::vector<Rule>& rules() const { return rules_; }
  const std::vector<ByteClass>& byte_classes() const { return byte_classes_; }
  RuleId root() const { return root_; }
  size_t symbol_count() const;

  // The grammar in a GBNF-like text, one rule per line from the root:
  //   root ::= "{" ws "\"name\"" ws ":" ws string ws "}"
  // (runs of single-byte symbols print as one quoted literal). For `deltaserve-grammar compile`
  // and test failure messages; not parsed back.
  std::string ToString() const;

 private:
  friend class GrammarBuilder;
  std::vector<Rule> rules_;
  std::vector<ByteClass> byte_classes_;  // interned: each class once
  RuleId root_ = 0;
};

// Builds a Grammar rule by rule; the helpers below add the usual regular-expression shapes as
// rules of their own (right-recursive, so that Build's left-recursion check passes).
class GrammarBuilder {
 public:
  // A new rule with no alternatives yet. `name` is made unique (a numeric suffix) if taken.
  RuleId AddRule(std::string_view name);
  void AddAlternative(RuleId rule, Alternative alternative);

  // The symbol for one byte of `c` (interned).
  Symbol Bytes(const ByteClass& c);
  // One symbol per byte of `text`.
  Alternative Literal(std::string_view text);

  // New rules for `body`? `body`* `body`+ and `body`{min,max} (max < 0: unbounded). Bounded
  // repetition expands into max rules; callers keep max reasonable (the limits apply at Build).
  // `body` must not match the empty string in Star/Plus/unbounded Repeat: the loop would then
  // reach itself without consuming a byte, which Build refuses as left recursion.
  RuleId Optional(std::string_view name, Alternative body);
  RuleId Star(std::string_view name, Alternative body);
  RuleId Plus(std::string_view name, Alternative body);
  RuleId Repeat(std::string_view name, Alternative body, int min, int max);
  // A rule with one alternative per entry of `choices`.
  RuleId Choice(std::string_view name, std::vector<Alternative> choices);

  size_t rule_count() const { return grammar_.rules_.size(); }
  size_t symbol_count() const;

  // Validates (see the file comment) and returns the grammar rooted at `root`.
  absl::StatusOr<Grammar> Build(RuleId root, const GrammarLimits& limits = {}) &&;

 private:
  Grammar grammar_;
  absl::flat_hash_map<std::string, RuleId> rule_by_name_;
  absl::flat_hash_map<ByteClass, uint32_t> class_index_;
  int64_t invalid_rule_ = -1;  // an AddAlternative to a rule that does not exist, for Build
};

}  // namespace deltaserve::common::grammar
