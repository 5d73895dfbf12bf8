#include "router/routing/circuit_breaker.h"

#include <algorithm>

namespace deltaserve::router {

std::string_view CircuitStateName(CircuitState state) {
  switch (state) {
    case CircuitState::kClosed:
      return "closed";
    case CircuitState::kOpen:
      return "open";
    case CircuitState::kHalfOpen:
      return "half_open";
  }
  return "unknown";
}

CircuitBreaker::CircuitBreaker(int failures_to_open, absl::Duration open_for)
    : failures_to_open_(std::max(1, failures_to_open)), open_for_(open_for) {}

void CircuitBreaker::Reconfigure(int failures_to_open, absl::Duration open_for) {
  failures_to_open_ = std::max(1, failures_to_open);
  open_for_ = open_for;
}

CircuitState CircuitBreaker::State(absl::Time now) const {
  if (!open_) return CircuitState::kClosed;
  return now < open_until_ ? CircuitState::kOpen : CircuitState::kHalfOpen;
}

bool CircuitBreaker::Admits(absl::Time now) const {
  switch (State(now)) {
    case CircuitState::kClosed:
      return true;
    case CircuitState::kOpen:
      return false;
    case CircuitState::kHalfOpen:
      return !trial_in_flight_;
  }
  return false;
}

bool CircuitBreaker::TryBeginCall(absl::Time now) {
  switch (State(now)) {
    case CircuitState::kClosed:
      return true;
    case CircuitState::kOpen:
      return false;
    case CircuitState::kHalfOpen:
      if (trial_in_flight_) return false;
      trial_in_flight_ = true;
      return true;
  }
  return false;
}

void CircuitBreaker::RecordCallSuccess(absl::Time now) {
  if (State(now) == CircuitState::kOpen) return;
  open_ = false;
  trial_in_flight_ = false;
  failures_ = 0;
}

void CircuitBreaker::RecordPollSuccess(absl::Time now) {
  if (State(now) != CircuitState::kHalfOpen) return;
  open_ = false;
  trial_in_flight_ = false;
  failures_ = 0;
}

bool CircuitBreaker::RecordFailure(absl::Time now) {
  switch (State(now)) {
    case CircuitState::kOpen:
      return false;
    case CircuitState::kHalfOpen:
      open_until_ = now + open_for_;
      trial_in_flight_ = false;
      return true;
    case CircuitState::kClosed:
      if (++failures_ < failures_to_open_) return false;
      open_ = true;
      open_until_ = now + open_for_;
      trial_in_flight_ = false;
      return true;
  }
  return false;
}

void CircuitBreaker::RecordNeutral(absl::Time now) {
  if (State(now) == CircuitState::kHalfOpen) trial_in_flight_ = false;
}

}  // namespace deltaserve::router
