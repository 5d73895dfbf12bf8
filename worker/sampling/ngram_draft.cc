#include "worker/sampling/ngram_draft.h"

#include <algorithm>

namespace deltaserve::worker {

std::vector<int32_t> DraftFromHistory(absl::Span<const int32_t> history,
                                      const NgramDraftOptions& options) {
  const int64_t len = static_cast<int64_t>(history.size());
  const int64_t lo = std::max<int64_t>(0, len - options.search_window);
  if (options.draft_max <= 0 || options.ngram_min <= 0) return {};
  for (int64_t n = std::min<int64_t>(options.ngram_max, len - 1); n >= options.ngram_min; --n) {
    const int32_t* suffix = history.data() + len - n;
    // Latest start s < len - n whose n tokens equal the suffix and that leaves a token after.
    for (int64_t s = len - n - 1; s >= lo; --s) {
      if (history[s + n - 1] != suffix[n - 1] || history[s] != suffix[0]) continue;
      if (!std::equal(suffix, suffix + n, history.data() + s)) continue;
      const int64_t from = s + n;
      const int64_t count = std::min<int64_t>(options.draft_max, len - from);
      return {history.begin() + from, history.begin() + from + count};
    }
  }
  return {};
}

}  // namespace deltaserve::worker
