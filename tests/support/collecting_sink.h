// A GenerationSink for worker tests: keeps every generated token id and the final result, for
// the test to compare after the scheduler has run the request.
//
//   auto sink = std::make_shared<CollectingSink>();
//   scheduler.Submit(std::move(request), sink);  ... run ...
//   EXPECT_EQ(sink->tokens, expected);  ASSERT_TRUE(sink->result.has_value());
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "worker/sched/scheduler.h"

namespace deltaserve::testing {

class CollectingSink : public worker::GenerationSink {
 public:
  void OnTokens(absl::Span<const worker::GeneratedToken> tokens) override {
    for (const worker::GeneratedToken& t : tokens) this->tokens.push_back(t.token);
  }
  void OnFinish(const worker::GenerationResult& r) override { result = r; }
  std::vector<int32_t> tokens;
  std::optional<worker::GenerationResult> result;
};

}  // namespace deltaserve::testing
