// The parameters of a forced tool call in Qwen XML markup (ToolCallFormat::kQwenXml,
// common/grammar/output_constraint.h) as grammar rules: each value written as the tool-call
// parser reads it back, raw text for a string (string keywords enforced, no "</" inside) and
// JSON text for any other type. Used by output_constraint.cc, which frames the calls.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"
#include "common/grammar/json_schema_compiler.h"
#include "nlohmann/json.hpp"

namespace deltaserve::common::grammar::internal {

// Builds the rules shared by the raw-text (XML) values: one UTF-8 code point from a set.
class RawText {
 public:
  explicit RawText(GrammarBuilder& b) : b_(b) {}

  // One code point other than '<' (and, when `no_slash`, '/'): tab, newline, carriage return,
  // printable ASCII, or a well-formed multi-byte UTF-8 sequence.
  RuleId Char(bool no_slash);

  // Any text without "</" (so no value can end its own parameter early):
  //   free ::= "" | char free | "<" after_lt      after_lt ::= "" | char_no_slash free | "<"
  //   after_lt
  RuleId Free();

 private:
  static constexpr RuleId kNone = ~RuleId{0};
  GrammarBuilder& b_;
  RuleId char_ = kNone, char_no_slash_ = kNone, free_ = kNone;
};

// The parameters of one function in the XML format: "<parameter=P>\nVALUE\n</parameter>\n" per
// property, in `properties` order, optional ones skippable; `required` names missing from
// `properties` follow as free text.
absl::StatusOr<Alternative> AddXmlParameters(GrammarBuilder& b, RawText& raw,
                                             JsonWhitespace whitespace,
                                             const nlohmann::ordered_json& root,
                                             const std::string& fn);

}  // namespace deltaserve::common::grammar::internal
