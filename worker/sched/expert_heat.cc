#include "worker/sched/expert_heat.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

namespace deltaserve::worker {

double ExpertHeat::SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ExpertHeat::ExpertHeat(const ForwardCounters& counters, double half_life_seconds, Clock clock)
    : counters_(counters),
      n_layer_(counters.n_expert() > 0 ? counters.n_layer() : 0),
      n_expert_(counters.n_expert()),
      half_life_(std::max(half_life_seconds, 1e-3)),
      clock_(std::move(clock)),
      last_time_(clock_()),
      last_total_(static_cast<size_t>(n_layer_ * n_expert_), 0),
      decayed_(static_cast<size_t>(n_layer_ * n_expert_), 0.0) {}

ExpertHeat::Reading ExpertHeat::Read() {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_();
  // A clock that went back (it must not) is taken as no time passed.
  const double dt = std::max(0.0, now - last_time_);
  const double x = dt * std::log(2.0) / half_life_;  // ln of the decay over the interval
  const double keep = std::exp(-x);
  // The mean of 2^(-(now - s) / h) over s in [last, now]: the weight of tokens that arrived
  // somewhere in the interval (see the file comment); 1 for an empty interval.
  const double fresh = x < 1e-9 ? 1.0 : -std::expm1(-x) / x;
  Reading r;
  r.time = now;
  r.decayed.assign(static_cast<size_t>(n_layer_), std::vector<double>(n_expert_));
  r.total.assign(static_cast<size_t>(n_layer_), std::vector<uint64_t>(n_expert_));
  for (int64_t l = 0; l < n_layer_; ++l) {
    for (int64_t e = 0; e < n_expert_; ++e) {
      const size_t i = static_cast<size_t>(l * n_expert_ + e);
      const uint64_t total = counters_.routed(l, e);
      // Below the last reading: the counters were reset (ForwardCounters::Reset); everything
      // they hold now is new.
      const uint64_t added = total >= last_total_[i] ? total - last_total_[i] : total;
      decayed_[i] = decayed_[i] * keep + static_cast<double>(added) * fresh;
      last_total_[i] = total;
      r.decayed[l][e] = decayed_[i];
      r.total[l][e] = total;
    }
  }
  last_time_ = std::max(last_time_, now);
  return r;
}

}  // namespace deltaserve::worker
