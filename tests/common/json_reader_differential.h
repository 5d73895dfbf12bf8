#pragma once
// The differential property of common/json_reader.h against nlohmann::json::parse, shared by
// the unit test (json_reader_differential_test.cc, generated inputs) and the libFuzzer target
// (tests/fuzz/json_reader_fuzz.cc): ReadOrderedJson accepts exactly what nlohmann's parser
// accepts, and builds the same document (same dump: key order, duplicate keys, integer vs
// unsigned vs double, string bytes). The reader has its own lexer since issue 17's speed work,
// so nlohmann's parser is the independent reference for its grammar. One deliberate difference:
// nlohmann stops at a NUL byte outside a string and ignores the rest; the reader refuses it.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json_reader.h"
#include "nlohmann/json.hpp"

namespace deltaserve::common::testing {

// "" when the reader and nlohmann agree on `text`, else what differs.
inline std::string JsonReaderDisagreement(std::string_view text) {
  using json = nlohmann::ordered_json;
  const json reference = json::parse(text.begin(), text.end(), nullptr,
                                     /*allow_exceptions=*/false);
  absl::StatusOr<json> ours = ReadOrderedJson(text, kNoJsonReadLimits);
  if (reference.is_discarded()) {
    return ours.ok() ? "accepted what nlohmann refuses" : "";
  }
  // nlohmann's lexer takes a NUL byte outside a string for the end of the input and ignores what
  // follows (a raw NUL inside a string is an error to both); the reader refuses anything after
  // the value, as RFC 8259 does. So: refused here, and the part before the NUL agrees.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    if (ours.ok()) return "accepted bytes after a NUL byte";
    return JsonReaderDisagreement(text.substr(0, nul));
  }
  if (!ours.ok()) return "refused what nlohmann accepts: " + std::string(ours.status().message());
  const std::string a = ours->dump(-1, ' ', false, json::error_handler_t::replace);
  const std::string b = reference.dump(-1, ' ', false, json::error_handler_t::replace);
  if (a != b) return "different documents: " + a.substr(0, 200) + " vs " + b.substr(0, 200);
  // Integer and unsigned dump alike ("1"): compare the value types too, everywhere (an explicit
  // stack: fuzzed documents nest thousands deep).
  std::vector<std::pair<const json*, const json*>> todo = {{&*ours, &reference}};
  while (!todo.empty()) {
    auto [x, y] = todo.back();
    todo.pop_back();
    if (x->type() != y->type() || x->size() != y->size()) return "different value types";
    if (x->is_structured()) {
      for (auto i = x->begin(), j = y->begin(); i != x->end(); ++i, ++j) todo.push_back({&*i, &*j});
    }
  }
  return "";
}

}  // namespace deltaserve::common::testing
