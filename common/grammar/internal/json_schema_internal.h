// The JSON Schema compiler's insides, shared by json_schema_compiler.cc (dispatch, `$ref`,
// objects, arrays, any-value), json_schema_strings.cc (strings, formats, enum/const literals,
// keys), json_schema_numbers.cc (integer and number ranges), json_schema_merge.cc (allOf
// merging, `not`, oneOf disjointness), json_schema_keywords.cc (keyword tables, `type`, `$ref`
// resolution) and json_schema_unique_items.cc. One SchemaCompiler per compiled schema; not
// thread-safe.
//
// A subschema compiles to the symbols matching one instance (its JSON text), or to nullopt when
// no instance can match (`false`, an empty type intersection, a required property whose schema
// is `false`): the caller then drops that branch. Recursion over the schema is bounded by
// JsonGrammarOptions::max_schema_depth (each nested subschema and each `$ref` hop is a level).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"
#include "common/grammar/internal/code_points.h"
#include "common/grammar/json_schema_compiler.h"
#include "nlohmann/json.hpp"

namespace deltaserve::common::grammar::internal {

using Json = nlohmann::ordered_json;
using MaybeSymbols = std::optional<Alternative>;

// InvalidArgument `unsupported JSON Schema keyword "X" at PATH` (+ ": detail").
absl::Status UnsupportedKeyword(std::string_view keyword, std::string_view path,
                                std::string_view detail = {});
// InvalidArgument `invalid JSON Schema at PATH: detail`.
absl::Status InvalidSchema(std::string_view path, std::string_view detail);
// PATH/segment with `~` and `/` escaped as JSON Pointer does.
std::string JoinPath(std::string_view path, std::string_view segment);

// The non-negative integer value of keyword `key` (minItems, maxLength, ...): -1 when absent,
// InvalidArgument when not a non-negative integer.
absl::StatusOr<int64_t> CountKeyword(const Json& schema, std::string_view key,
                                     std::string_view path);

// Keywords that only annotate (ignored) — see the header of json_schema_compiler.h.
bool IsAnnotationKeyword(std::string_view key);
// Every keyword a JSON Schema draft (4 to 2020-12) or OpenAPI defines that constrains instances
// or structures the schema; a key outside this list and the annotations is not JSON Schema and
// is ignored (as validators ignore it).
bool IsKnownKeyword(std::string_view key);

// The types a schema admits, as bits.
enum TypeBits : unsigned {
  kNull = 1,
  kBoolean = 2,
  kObject = 4,
  kArray = 8,
  kString = 16,
  kInteger = 32,
  kNumber = 64,  // includes integers
  kAllTypes = 127,
};
// The `type` (and OpenAPI `nullable`) of `schema` as bits; kAllTypes when absent.
absl::StatusOr<unsigned> SchemaTypes(const Json& schema, std::string_view path);
// The type bit of a JSON value (kInteger for integral numbers, also 1.0).
unsigned ValueType(const Json& value);

class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder& builder, const Json& root, std::string_view prefix,
                 const JsonGrammarOptions& options);

  // The symbols matching one instance of `schema` (found at `path`), nullopt for none.
  absl::StatusOr<MaybeSymbols> Compile(const Json& schema, const std::string& path, int depth);

  // Shared pieces, built once on first use.
  Symbol Ws();        // what options.whitespace allows between two JSON tokens
  Symbol AnyValue();  // any JSON value, containers nested at most max_schema_depth deep
  Symbol AnyObject();
  Symbol AnyString();  // a whole JSON string, quotes included
  Symbol AnyChar();    // one character inside a JSON string
  Symbol Never();      // matches nothing
  GrammarBuilder& builder() { return builder_; }
  CodePointSetRules& json_chars() { return json_chars_; }
  const JsonGrammarOptions& options() const { return options_; }
  const Json& root() const { return root_; }
  // `"text"` spelled as JSON writers spell it (see code_points.h).
  Alternative StringLiteral(std::string_view text);
  // The JSON text of `value` (keys in its order, whitespace between tokens as Ws()).
  Alternative ValueLiteral(const Json& value);
  // A new rule name within this compiler's prefix, unique (a counter): GrammarBuilder::AddRule
  // probes suffixes for a taken name, which would make thousands of same-named rules quadratic.
  std::string Name(std::string_view what) const;

  // `$ref` resolution: the schema `ref` points to and its path; InvalidArgument for a remote or
  // dangling reference.
  absl::StatusOr<std::pair<const Json*, std::string>> Resolve(std::string_view ref,
                                                              std::string_view path) const;

  // json_schema_strings.cc
  absl::StatusOr<MaybeSymbols> CompileString(const Json& schema, const std::string& path);
  absl::StatusOr<MaybeSymbols> CompileEnum(const Json& schema, const std::string& path,
                                           unsigned types);
  // json_schema_numbers.cc
  absl::StatusOr<MaybeSymbols> CompileNumber(const Json& schema, const std::string& path,
                                             bool integer);
  // json_schema_merge.cc: `schema` (with allOf, or $ref beside other assertions) as one schema
  // without them; may contain anyOf/oneOf from distributing over alternatives.
  absl::StatusOr<Json> Merge(const Json& schema, const std::string& path, int depth);
  // `not: S` as a schema to merge in, for the shapes that have one: S trivially true (-> false),
  // false (-> true), only `type` (-> the other types), only `required` or an anyOf of only
  // `required`s (-> an object with a key of each forbidden; stricter when a list has several
  // keys). Anything else is refused naming `not`.
  absl::StatusOr<Json> NotAsConstraint(const Json& not_schema, const std::string& path) const;
  // Whether no instance can match both `a` and `b` (a sufficient check; false = unknown).
  bool ProvablyDisjoint(const Json& a, const Json& b, int depth) const;
  // Makes oneOf's alternatives pairwise disjoint so that they compile as anyOf: a pair that is
  // not provably disjoint but only admits objects, each requiring a key the other does not,
  // gets in each a key the other requires forbidden (sound: the grammar is then stricter than
  // oneOf); any other pair is refused naming oneOf.
  absl::Status SeparateOneOf(std::vector<Json>& alts, const std::string& path, int depth) const;

 private:
  absl::StatusOr<MaybeSymbols> CompileObjectSchema(const Json& schema, const std::string& path,
                                                   int depth);
  absl::StatusOr<MaybeSymbols> CompileTypes(const Json& schema, const std::string& path, int depth);
  absl::StatusOr<MaybeSymbols> CompileRef(const std::string& ref, const std::string& path,
                                          int depth);
  absl::StatusOr<MaybeSymbols> CompileAlternatives(const Json& schema, const std::string& path,
                                                   int depth);
  absl::StatusOr<MaybeSymbols> CompileObject(const Json& schema, const std::string& path,
                                             int depth);
  absl::StatusOr<MaybeSymbols> CompileArray(const Json& schema, const std::string& path, int depth);
  absl::Status CheckKeywords(const Json& schema, const std::string& path, unsigned types) const;
  // "any string but these keys", quotes included.
  Symbol KeyExcluding(const std::vector<std::string>& keys);
  // uniqueItems: true (json_schema_unique_items.cc): arrays of distinct values from a small
  // finite set, minItems..maxItems (max < 0: none) long; refused for other items.
  absl::StatusOr<MaybeSymbols> CompileUniqueItems(const Json& schema, const std::string& path,
                                                  int64_t min_count, int64_t max_count);
  // propertyNames (json_schema_strings.cc): which listed keys the names schema allows, and the
  // symbols of the other keys it allows — its string grammar when no listed key matches it, the
  // remaining values when it lists them (enum/const); none (nullopt) otherwise, and then no
  // other key is generated (stricter than additionalProperties).
  struct PropertyNameRules {
    std::set<std::string> allowed;
    std::optional<Alternative> other_key;
  };
  absl::StatusOr<PropertyNameRules> PropertyNames(const Json& names,
                                                  const std::vector<std::string>& listed,
                                                  const std::string& path, int depth);
  // patternProperties (json_schema_strings.cc): the key (quotes included) and value symbols of
  // the keys its patterns allow. Keys that match no pattern are not generated (stricter than
  // additionalProperties when that allows them); refused when the patterns have different
  // schemas or a listed key matches a pattern.
  absl::StatusOr<std::pair<Alternative, MaybeSymbols>> PatternKeys(
      const Json& patterns, const std::vector<std::string>& listed, const std::string& path,
      int depth);

  GrammarBuilder& builder_;
  const Json& root_;
  std::string prefix_;
  JsonGrammarOptions options_;
  CodePointSetRules json_chars_;
  std::optional<Symbol> ws_, any_value_, any_object_, any_string_, any_char_;
  std::map<std::string, RuleId> ref_rules_;  // by resolved JSON pointer
  mutable uint64_t next_name_ = 0;
};

}  // namespace deltaserve::common::grammar::internal
