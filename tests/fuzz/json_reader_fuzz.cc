// libFuzzer target for common/json_reader.h, the reader of every request body: its own lexer
// must accept exactly what nlohmann::json::parse accepts and build the same document
// (tests/common/json_reader_differential.h); with the router's limits it must never crash and
// refuse only with a syntax fault or a named limit. Seeds: the request bodies of the
// request_parser target (written by fuzz_seed_corpus).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/json_reader.h"
#include "tests/common/json_reader_differential.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using deltaserve::common::JsonReadFault;
  constexpr const char* kTarget = "json_reader_fuzz";
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string why = deltaserve::common::testing::JsonReaderDisagreement(text);
  if (!why.empty()) std::fprintf(stderr, "%s: %s\n", kTarget, why.c_str());
  deltaserve::fuzz::Check(why.empty(), kTarget, "the reader agrees with nlohmann::json::parse");

  JsonReadFault fault;
  const deltaserve::common::JsonReadLimits tight{
      .max_depth = 8, .max_object_keys = 8, .max_array_elements = 8, .max_containers = 32};
  auto limited = deltaserve::common::ReadOrderedJson(text, tight, &fault);
  deltaserve::fuzz::Check(limited.ok() == (fault.kind == JsonReadFault::Kind::kNone), kTarget,
                          "a fault is reported exactly when the read fails");
  deltaserve::fuzz::Check(fault.kind != JsonReadFault::Kind::kLimit || !fault.limit.empty(),
                          kTarget, "a limit fault names its limit");
  return 0;
}
