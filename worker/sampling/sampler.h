// Token sampling from a logits row: greedy, or temperature with top-k, top-p (nucleus) and
// min-p filtering, driven by a per-sampler seed so the same seed and logits give the same
// tokens. Padded vocabulary rows (ids >= the tokenizer's size) are never chosen.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "absl/types/span.h"

namespace deltaserve::worker {

// Sampling settings (OpenAI / llama.cpp meanings).
struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy (argmax, lowest id on ties)
  int top_k = 40;            // <= 0: no limit
  float top_p = 0.95f;       // 1: off
  float min_p = 0.05f;       // 0: off; keeps tokens with p >= min_p * p_max
  uint64_t seed = 0;
};

// Draws tokens; see the file comment.
class Sampler {
 public:
  // `n_valid` is the number of real tokens (rows past it are vocabulary padding).
  Sampler(const SamplingParams& params, int32_t n_valid);

  // The next token for `logits` (one row of n_vocab >= n_valid floats).
  int32_t Sample(absl::Span<const float> logits);

 private:
  SamplingParams params_;
  int32_t n_valid_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

// Index of the largest of the first `n_valid` logits (lowest id on ties).
int32_t Argmax(absl::Span<const float> logits, int32_t n_valid);

}  // namespace deltaserve::worker
