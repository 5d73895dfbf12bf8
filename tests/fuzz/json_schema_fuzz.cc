// libFuzzer target for the JSON Schema compiler (common/grammar/json_schema_compiler.h): a
// request's `response_format` schema and tool parameters are untrusted JSON. Each input is
// compiled; a schema that compiles is walked: the input's own bytes, then a greedy walk that
// always takes the smallest allowed byte. Compilation must answer a grammar or InvalidArgument —
// never crash, recurse without bound (nesting, `$ref` cycles, allOf merging) or build without
// bound — and a compiled grammar must allow a byte wherever it says it can continue.
// Seeds: tests/fuzz/seeds/json_schema/, copied at configure time.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/grammar/grammar_matcher.h"
#include "common/grammar/json_schema_compiler.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deltaserve::common::grammar;
  using deltaserve::fuzz::Check;
  constexpr const char* kTarget = "json_schema_fuzz";
  const std::string_view schema(reinterpret_cast<const char*>(data), size);
  JsonGrammarOptions options;
  // Smaller than the defaults, so that one input stays within the fuzzer's time limit.
  options.max_schema_depth = 24;
  options.max_repetition = 256;
  options.limits.max_rules = 1 << 14;
  options.limits.max_symbols = 1 << 17;
  absl::StatusOr<Grammar> g = CompileJsonSchema(schema, options);
  if (!g.ok()) {
    Check(g.status().code() == absl::StatusCode::kInvalidArgument, kTarget,
          "CompileJsonSchema fails with InvalidArgument");
    return 0;
  }
  auto compiled = std::make_shared<CompiledGrammar>(*std::move(g));
  GrammarMatcher m(compiled);
  Check(m.CanContinue(), kTarget, "an instance is never empty");
  for (char c : schema) {
    if (!m.AcceptByte(static_cast<uint8_t>(c))) break;
  }
  GrammarMatcher greedy(compiled);
  for (int step = 0; step < 64 && greedy.CanContinue(); ++step) {
    bool moved = false;
    for (int b = 0; b < 256 && !moved; ++b) moved = greedy.AcceptByte(static_cast<uint8_t>(b));
    Check(moved || compiled->exhausted(), kTarget, "a state that can continue allows a byte");
    if (!moved) break;
  }
  return 0;
}
