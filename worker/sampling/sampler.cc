#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>

namespace deltaserve::worker {

int32_t Argmax(absl::Span<const float> logits, int32_t n_valid) {
  const int32_t n = std::min<int32_t>(n_valid, static_cast<int32_t>(logits.size()));
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

Sampler::Sampler(const SamplingParams& params, int32_t n_valid)
    : params_(params), n_valid_(n_valid), rng_(params.seed) {}

int32_t Sampler::Sample(absl::Span<const float> logits) {
  const int32_t n = std::min<int32_t>(n_valid_, static_cast<int32_t>(logits.size()));
  if (params_.temperature <= 0.0f || n <= 1) return Argmax(logits, n);
  candidates_.clear();
  for (int32_t i = 0; i < n; ++i) candidates_.emplace_back(logits[i], i);
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t keep = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(keep);
  // Softmax at the temperature over the survivors (sorted, largest first).
  const float max_logit = candidates_[0].first;
  std::vector<double> p(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    p[i] = std::exp(static_cast<double>(candidates_[i].first - max_logit) / params_.temperature);
    sum += p[i];
  }
  for (double& x : p) x /= sum;
  if (params_.min_p > 0.0f) {
    const double floor = params_.min_p * p[0];
    while (keep > 1 && p[keep - 1] < floor) --keep;
  }
  if (params_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < keep; ++i) {
      cum += p[i];
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i];
  std::uniform_real_distribution<double> uniform(0.0, total);
  double r = uniform(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= p[i];
    if (r <= 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace deltaserve::worker
