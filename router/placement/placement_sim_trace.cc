#include "router/placement/placement_sim_trace.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace deltaserve::router {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A small generator for the sampling (SplitMix64 stream).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return Mix(state_++); }
  // Uniform in (0, 1).
  double Open01() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1p-53; }

 private:
  uint64_t state_;
};

}  // namespace

absl::StatusOr<common::RoutingTrace> SyntheticRoutingTrace(const SyntheticTraceOptions& o) {
  common::RoutingTrace t;
  t.header.n_layer = o.n_layer;
  t.header.n_expert = o.n_expert;
  t.header.k = o.k;
  t.header.model_name = "synthetic-zipf";
  if (absl::Status s = common::ValidateRoutingTraceHeader(t.header); !s.ok()) return s;
  if (!std::isfinite(o.skew) || o.skew < 0 || o.topics < 1 || o.steps < 1 || o.topic_steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic trace: skew must be >= 0 and topics, steps, topic steps >= 1 (skew ", o.skew,
        ", topics ", o.topics, ", steps ", o.steps, ", topic steps ", o.topic_steps, ")"));
  }
  // log weights [topic][layer][expert] = -S ln(rank + 1).
  std::vector<std::vector<std::vector<double>>> logw(
      static_cast<size_t>(o.topics),
      std::vector<std::vector<double>>(static_cast<size_t>(o.n_layer)));
  for (int64_t c = 0; c < o.topics; ++c) {
    for (int64_t l = 0; l < o.n_layer; ++l) {
      const std::vector<int32_t> rank = common::ZipfExpertRanks(o.seed, l, c, o.n_expert);
      auto& w = logw[c][l];
      w.resize(rank.size());
      for (size_t e = 0; e < rank.size(); ++e) w[e] = -o.skew * std::log(rank[e] + 1.0);
    }
  }
  Rng rng(Mix(o.seed ^ 0x5EEDull));
  std::vector<std::pair<double, int32_t>> scores(static_cast<size_t>(o.n_expert));
  int64_t topic = 0;
  t.steps.reserve(static_cast<size_t>(o.steps));
  for (int64_t s = 0; s < o.steps; ++s) {
    if (s % o.topic_steps == 0) topic = static_cast<int64_t>(rng.Next() % o.topics);
    common::RoutingStep step;
    step.index = static_cast<uint64_t>(s);
    step.n_tokens = 1;
    step.ids.reserve(static_cast<size_t>(o.n_layer * o.k));
    for (int64_t l = 0; l < o.n_layer; ++l) {
      const auto& w = logw[topic][l];
      for (int64_t e = 0; e < o.n_expert; ++e) {
        // Gumbel-max: the top k of log w + Gumbel noise are k draws without replacement.
        scores[e] = {w[e] - std::log(-std::log(rng.Open01())), static_cast<int32_t>(e)};
      }
      std::partial_sort(scores.begin(), scores.begin() + o.k, scores.end(),
                        [](const auto& a, const auto& b) { return a.first > b.first; });
      for (int64_t j = 0; j < o.k; ++j) step.ids.push_back(scores[j].second);
    }
    t.steps.push_back(std::move(step));
  }
  return t;
}

}  // namespace deltaserve::router
