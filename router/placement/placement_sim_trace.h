// Synthetic routing traces for the placement simulator (deltaserve-placement-sim
// --synthetic-trace): the routing model that deltaserve-synth --expert-skew builds into a
// model's router weights, sampled directly, so the simulator can be run on long traces without
// running a model. Expert popularity in each layer is Zipf-distributed with exponent S: the
// expert of rank r is chosen with weight r^-S, the k experts of a token drawn without
// replacement (Gumbel top-k, which is what a softmax router's top-k of noisy logits does). Each
// of `topics` topics ranks the experts of each layer by its own permutation
// (common::ZipfExpertRanks, as deltaserve-synth --expert-skew does), and the trace is a
// series of conversations of `topic_steps` decode steps, each on one topic: the hot experts stay
// put within a conversation and move when the topic changes. S = 0 routes uniformly.
//
//   SyntheticTraceOptions o{.skew = 1.0, .steps = 20000};
//   common::RoutingTrace t = SyntheticRoutingTrace(o);
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/routing_trace.h"

namespace deltaserve::router {

struct SyntheticTraceOptions {
  int64_t n_layer = 40;
  int64_t n_expert = 256;
  int64_t k = 8;
  double skew = 1.0;           // Zipf exponent S (0: uniform)
  int64_t topics = 8;          // distinct hot sets (1: one ranking per layer, no drift)
  int64_t steps = 20000;       // decode steps of one token
  int64_t topic_steps = 2000;  // steps per conversation before the topic may change
  uint64_t seed = 1;
};

// The trace (header model name "synthetic-zipf"). InvalidArgument on a shape out of the trace
// format's limits, skew < 0, topics < 1, steps < 1 or topic_steps < 1.
absl::StatusOr<common::RoutingTrace> SyntheticRoutingTrace(const SyntheticTraceOptions& options);

}  // namespace deltaserve::router
