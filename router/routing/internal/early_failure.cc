#include "router/routing/internal/early_failure.h"

namespace deltaserve::router::internal {

EarlyFailureVerdict ClassifyEarlyFailure(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:  // the router should have caught it: version skew
    case absl::StatusCode::kOutOfRange:
      return {CallOutcome::kSuccess, EarlyFailureStep::kPassOn};
    case absl::StatusCode::kDeadlineExceeded:
      return {CallOutcome::kNeutral, EarlyFailureStep::kDeadline};
    case absl::StatusCode::kNotFound:
      return {CallOutcome::kSuccess, EarlyFailureStep::kNextCandidate};
    case absl::StatusCode::kResourceExhausted:
      return {CallOutcome::kNeutral, EarlyFailureStep::kRetrySaturated};
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kCancelled:  // not the router's: the worker or the transport cancelled
      return {CallOutcome::kFailure, EarlyFailureStep::kRetryFailed};
    default:
      return {CallOutcome::kSuccess, EarlyFailureStep::kRefused};
  }
}

}  // namespace deltaserve::router::internal
