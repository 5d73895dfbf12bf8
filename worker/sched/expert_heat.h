// How hot each expert of an MoE model is (docs/moe_placement.md): per (layer, expert) routed-token
// counts with an exponential decay of a given half-life, what GetExpertStats serves and the
// router's placement plans from. The engine already counts routed tokens, cumulatively, in its
// ForwardCounters (relaxed atomics written by the forward pass); the decay is computed here, on
// read, from the difference between two readings, so the forward pass does nothing more than it
// did. Lives beside the scheduler rather than in the service so that it depends on the engine's
// counters only (its test needs no gRPC).
//
// The decayed count of an expert at time t is the sum over its routed tokens of
// 2^(-(t - arrival) / half_life). A reading only sees how many tokens arrived since the last
// one, not when: they are taken as spread evenly over that interval, i.e. weighted by the mean
// decay over it, (1 - 2^(-dt/h)) / (dt ln 2 / h). For traffic at a steady rate r this makes the
// decayed count r * h / ln 2 whatever the time between readings (the router polls every 30 s by
// default); a burst is over- or under-weighted by at most the decay over one interval.
//
//   ExpertHeat heat(model.counters(), /*half_life_seconds=*/60);
//   ExpertHeat::Reading r = heat.Read();   // any thread
//   r.decayed[layer][expert], r.total[layer][expert]
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "worker/engine/forward_counters.h"

namespace deltaserve::worker {

// See the file comment. Thread-safe.
class ExpertHeat {
 public:
  // Seconds on a monotonic clock; tests inject a fake one.
  using Clock = std::function<double()>;
  // std::chrono::steady_clock in seconds.
  static double SteadySeconds();

  // `counters` (the model's, n_layer x n_expert) must outlive this. The decayed counts start at
  // zero now; tokens counted before this call are taken as arriving between now and the first
  // reading. `half_life_seconds` must be > 0 (a smaller value is taken as 1e-3).
  ExpertHeat(const ForwardCounters& counters, double half_life_seconds,
             Clock clock = &ExpertHeat::SteadySeconds);

  int64_t n_layer() const { return n_layer_; }
  int64_t n_expert() const { return n_expert_; }
  double half_life_seconds() const { return half_life_; }

  struct Reading {
    double time = 0;                           // the clock's value when read
    std::vector<std::vector<double>> decayed;  // [layer][expert], decayed routed tokens
    std::vector<std::vector<uint64_t>> total;  // [layer][expert], routed tokens, not decayed
  };
  // Folds in the tokens routed since the last reading and returns the counts now.
  Reading Read();

 private:
  const ForwardCounters& counters_;
  const int64_t n_layer_, n_expert_;
  const double half_life_;
  Clock clock_;
  std::mutex mu_;
  double last_time_;
  std::vector<uint64_t> last_total_;  // [layer * n_expert + expert] at the last reading
  std::vector<double> decayed_;       // the same, decayed to last_time_
};

}  // namespace deltaserve::worker
