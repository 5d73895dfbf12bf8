#include "router/routing/internal/prefix_policy.h"

#include <algorithm>

namespace deltaserve::router::internal {

PrefixVerdict ChooseByPrefix(absl::Span<const PrefixCandidate> candidates, bool enabled,
                             int32_t max_waiting) {
  PrefixVerdict verdict;
  verdict.first = candidates.size();
  const bool any_reports =
      std::any_of(candidates.begin(), candidates.end(),
                  [](const PrefixCandidate& c) { return c.reports_snapshots; });
  if (!enabled || !any_reports) return verdict;  // kOff
  int64_t longest = 0;
  for (const PrefixCandidate& c : candidates) {
    if (c.reports_snapshots) longest = std::max(longest, c.held_tokens);
  }
  if (longest <= 0) {
    verdict.outcome = PrefixOutcome::kMiss;
    return verdict;
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    const PrefixCandidate& c = candidates[i];
    if (!c.reports_snapshots || c.held_tokens != longest) continue;
    if (c.saturated || c.effective_waiting >= max_waiting) continue;
    verdict.outcome = PrefixOutcome::kHit;
    verdict.first = i;
    return verdict;
  }
  // A shorter prefix elsewhere is not preferred over the least loaded worker: with a Redis tier
  // any worker fetches the longest one (docs/router.md, "Routing by prefix").
  verdict.outcome = PrefixOutcome::kOverloaded;
  return verdict;
}

}  // namespace deltaserve::router::internal
