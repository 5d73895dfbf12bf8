// How RouterBackend answers a Generate call that failed before the client received anything:
// what the failure says about the worker (for its circuit breaker) and what the generation does
// next. A pure function of the status code, so that the policy of docs/router.md ("before the
// first token the worker answers | router does") is one table with one test
// (router_early_failure_test) instead of a branch inside the call's completion callback.
#pragma once

#include "absl/status/status.h"
#include "router/routing/worker_pool.h"

namespace deltaserve::router::internal {

// What the generation does after a call failed before the first token.
enum class EarlyFailureStep {
  kPassOn,          // the request is at fault: the worker's status goes to the client (4xx)
  kDeadline,        // the worker did not start in time: DEADLINE_EXCEEDED to the client (504)
  kRefused,         // a refusal the protocol does not expect: INTERNAL to the client (500)
  kNextCandidate,   // the worker does not serve the model: poll it soon, try the next candidate
  kRetrySaturated,  // the worker's queue is full: try again elsewhere (429 if all say so)
  kRetryFailed,     // the worker or the transport failed: try again elsewhere
};

// The two halves of the answer.
struct EarlyFailureVerdict {
  CallOutcome outcome;  // what the call says about the worker's health
  EarlyFailureStep step;
};

// The verdict for a call that ended with `code` before the first token (a stream that ended
// without a final event comes here as INTERNAL, a FinalEvent ERROR as INTERNAL and CANCELLED
// as UNAVAILABLE; never OK).
EarlyFailureVerdict ClassifyEarlyFailure(absl::StatusCode code);

}  // namespace deltaserve::router::internal
