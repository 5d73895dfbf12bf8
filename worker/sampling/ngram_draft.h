// n-gram ("prompt lookup") drafting for speculative decoding: when the last n tokens of a
// sequence occurred earlier in it, the tokens that followed that occurrence are a guess for
// what comes next. Costs no model: code that quotes itself, edits of a given text, and
// structured output repeat a lot, so the guesses are often right there.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace deltaserve::worker {

// Settings of the drafter (the --ngram-min / --draft-max flags).
struct NgramDraftOptions {
  int ngram_min = 3;   // shortest suffix that must match
  int ngram_max = 8;   // longest suffix tried first
  int draft_max = 8;   // most tokens drafted per step
  int64_t search_window = 8192;  // only the last this-many tokens are searched
};

// Up to options.draft_max tokens that followed the most recent earlier occurrence of the
// longest suffix of `history` (n from ngram_max down to ngram_min) that occurred before; empty
// when none did.
std::vector<int32_t> DraftFromHistory(absl::Span<const int32_t> history,
                                      const NgramDraftOptions& options);

}  // namespace deltaserve::worker
