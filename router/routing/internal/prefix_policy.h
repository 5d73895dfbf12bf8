// Routing by prefix as one pure function: given the workers that can take a request (context
// fits) in least-loaded order, what each holds of the prompt's snapshot prefixes and how busy
// it is, which one goes first. It is the table of docs/router.md ("Routing by prefix"), tested
// row by row (router_prefix_policy_test); ChooseWorkers (worker_choice.h) applies the verdict.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "router/routing/worker_choice.h"

namespace deltaserve::router::internal {

// One worker that can take the request, as the policy sees it.
struct PrefixCandidate {
  bool reports_snapshots = false;  // it sent a snapshot_key_root for the model
  int64_t held_tokens = 0;         // longest prompt prefix it holds a snapshot of; 0: none
  int64_t effective_waiting = 0;   // EffectiveWaiting (worker_choice.h)
  bool saturated = false;          // effective_waiting >= ChoiceOptions::saturated_waiting
};

struct PrefixVerdict {
  PrefixOutcome outcome = PrefixOutcome::kOff;
  // kHit: the index in `candidates` of the worker that goes first; otherwise `candidates.size()`.
  size_t first = 0;
};

// `candidates` least loaded first (ties in that order break towards the less loaded); the
// knobs are ChoiceOptions::prefix_affinity and prefix_max_waiting. A holder is overloaded when
// saturated or its effective waiting is at least `max_waiting`.
PrefixVerdict ChooseByPrefix(absl::Span<const PrefixCandidate> candidates, bool enabled,
                             int32_t max_waiting);

}  // namespace deltaserve::router::internal
