#pragma once
// A per-worker circuit breaker. `failures_to_open` consecutive failures (of calls or of health
// polls) open it: the worker gets no calls for `open_for`. Then it is half-open: one call (or
// the next health poll) is the trial; success closes the circuit, failure opens it again.
// Only call successes reset the failure count while closed: a worker that answers its health
// poll but fails every Generate still opens. Not thread-safe; WorkerPool guards it. Times are
// passed in so tests need no clock.

#include <cstdint>
#include <string_view>

#include "absl/time/time.h"

namespace deltaserve::router {

enum class CircuitState { kClosed, kOpen, kHalfOpen };
std::string_view CircuitStateName(CircuitState state);

class CircuitBreaker {
 public:
  CircuitBreaker(int failures_to_open, absl::Duration open_for);

  // kOpen turns into kHalfOpen once `open_for` has passed.
  CircuitState State(absl::Time now) const;
  // Whether a call would be admitted now (closed, or half-open with no trial in flight).
  bool Admits(absl::Time now) const;
  // Admits a call: always when closed; in half-open only the one trial until it reports.
  bool TryBeginCall(absl::Time now);

  // A call finished well: closes a half-open circuit, resets the failure count.
  void RecordCallSuccess(absl::Time now);
  // A health poll succeeded: closes a half-open circuit (the poll was the trial).
  void RecordPollSuccess(absl::Time now);
  // A call or poll failed. Returns true when this failure opened the circuit. Failures while
  // open are ignored (the open period is not extended by polls of a dead worker).
  bool RecordFailure(absl::Time now);
  // A call ended without telling whether the worker is healthy (cancelled, queue full).
  void RecordNeutral(absl::Time now);

  void Reconfigure(int failures_to_open, absl::Duration open_for);
  int consecutive_failures() const { return failures_; }

 private:
  int failures_to_open_;
  absl::Duration open_for_;
  int failures_ = 0;
  bool open_ = false;
  absl::Time open_until_ = absl::InfinitePast();
  bool trial_in_flight_ = false;
};

}  // namespace deltaserve::router
