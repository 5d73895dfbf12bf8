// The early-failure policy against the table of docs/router.md ("before the first token the
// worker answers | router does"): every gRPC status code, each row of the table checked as
// written there, and what a code outside the table gets.
#include "router/routing/internal/early_failure.h"

#include <gtest/gtest.h>

#include <set>

namespace deltaserve::router::internal {
namespace {

using absl::StatusCode;

TEST(EarlyFailureTest, WorkerAndTransportFailuresCountAgainstTheWorkerAndRetry) {
  for (StatusCode code :
       {StatusCode::kUnavailable, StatusCode::kInternal, StatusCode::kUnknown, StatusCode::kAborted,
        StatusCode::kDataLoss, StatusCode::kUnimplemented, StatusCode::kCancelled}) {
    const EarlyFailureVerdict v = ClassifyEarlyFailure(code);
    EXPECT_EQ(v.outcome, CallOutcome::kFailure) << absl::StatusCodeToString(code);
    EXPECT_EQ(v.step, EarlyFailureStep::kRetryFailed) << absl::StatusCodeToString(code);
  }
}

TEST(EarlyFailureTest, SaturationRetriesWithoutABreakerFailure) {
  const EarlyFailureVerdict v = ClassifyEarlyFailure(StatusCode::kResourceExhausted);
  EXPECT_EQ(v.outcome, CallOutcome::kNeutral);
  EXPECT_EQ(v.step, EarlyFailureStep::kRetrySaturated);
}

TEST(EarlyFailureTest, NotFoundMovesToTheNextCandidate) {
  const EarlyFailureVerdict v = ClassifyEarlyFailure(StatusCode::kNotFound);
  EXPECT_EQ(v.outcome, CallOutcome::kSuccess);  // the worker answered: it is healthy
  EXPECT_EQ(v.step, EarlyFailureStep::kNextCandidate);
}

TEST(EarlyFailureTest, RequestErrorsArePassedToTheClient) {
  for (StatusCode code : {StatusCode::kInvalidArgument, StatusCode::kOutOfRange}) {
    const EarlyFailureVerdict v = ClassifyEarlyFailure(code);
    EXPECT_EQ(v.outcome, CallOutcome::kSuccess) << absl::StatusCodeToString(code);
    EXPECT_EQ(v.step, EarlyFailureStep::kPassOn) << absl::StatusCodeToString(code);
  }
}

TEST(EarlyFailureTest, DeadlineIsNeitherHealthNorRetried) {
  const EarlyFailureVerdict v = ClassifyEarlyFailure(StatusCode::kDeadlineExceeded);
  EXPECT_EQ(v.outcome, CallOutcome::kNeutral);
  EXPECT_EQ(v.step, EarlyFailureStep::kDeadline);
}

// Codes outside the table are refusals the protocol does not expect: passed on as INTERNAL,
// never retried, never a breaker failure (the worker answered).
TEST(EarlyFailureTest, EveryOtherCodeIsARefusal) {
  const std::set<StatusCode> in_table = {
      StatusCode::kUnavailable,     StatusCode::kInternal,          StatusCode::kUnknown,
      StatusCode::kAborted,         StatusCode::kDataLoss,          StatusCode::kUnimplemented,
      StatusCode::kCancelled,       StatusCode::kResourceExhausted, StatusCode::kNotFound,
      StatusCode::kInvalidArgument, StatusCode::kOutOfRange,        StatusCode::kDeadlineExceeded};
  int refusals = 0;
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<StatusCode>(c);
    if (in_table.count(code) != 0) continue;
    const EarlyFailureVerdict v = ClassifyEarlyFailure(code);
    EXPECT_EQ(v.outcome, CallOutcome::kSuccess) << absl::StatusCodeToString(code);
    EXPECT_EQ(v.step, EarlyFailureStep::kRefused) << absl::StatusCodeToString(code);
    ++refusals;
  }
  // OK, ALREADY_EXISTS, PERMISSION_DENIED, FAILED_PRECONDITION, UNAUTHENTICATED.
  EXPECT_EQ(refusals, 5);
}

}  // namespace
}  // namespace deltaserve::router::internal
