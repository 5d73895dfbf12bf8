#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_features.h"
#include "worker/sampling/token_mask.h"

namespace deltaserve::worker {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Candidate {
  float logit;
  int32_t id;
  float weight;  // exp((logit - max) / temperature): 1 for the best token
};

// The sampling order: higher logit first, lower id first among equals (a strict total order, so
// every selection below is deterministic).
bool Better(const Candidate& a, const Candidate& b) {
  return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

// Per-thread buffers, so a Sampler per request stays small (a full-vocabulary candidate list is
// 1.8 MB at 151,936 tokens) and Sample does not allocate once they have grown.
struct Scratch {
  std::vector<float> adjusted;
  std::vector<Candidate> candidates;
  std::vector<Candidate> top;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// The full-vocabulary passes below run every token over 151,936 logits. They are written so that
// GCC vectorises them (branch-free, independent accumulators; -fno-trapping-math in
// worker/CMakeLists.txt lets it if-convert the selects) and built twice, for AVX2 and for the
// baseline: DELTASERVE_SAMPLER_PASS(ret, Name, (params), (args)) defines Name, which runs NameImpl
// compiled for AVX2 from the CPU kernel level avx2 up and for the baseline at scalar
// (kernels/cpu/cpu_features.h, DELTASERVE_CPU_ISA). Neither copy uses FMA, so both give the same
// bits and a seed gives the same tokens on every x86-64 host. Measured on the 2-core dev VM,
// 151,936 logits: the exp-sum pass 700 us scalar -> 255 us SSE2 -> 116 us AVX2; the max pass
// 80 us -> 20 us. The copies are opaque to the optimiser (noipa), as the target_clones they
// replaced were: a copy specialised for a caller's constant n = 64 draws a false
// -Waggressive-loop-optimizations from g++ 12.
#define DELTASERVE_SAMPLER_IMPL __attribute__((always_inline)) inline
#if defined(__clang__)
#define DELTASERVE_SAMPLER_OPAQUE __attribute__((noinline))
#else
#define DELTASERVE_SAMPLER_OPAQUE __attribute__((noipa))
#endif
#if defined(__x86_64__)
#define DELTASERVE_SAMPLER_PASS(ret, name, params, args)                                           \
  __attribute__((target("avx2"))) DELTASERVE_SAMPLER_OPAQUE ret name##Avx2 params {                \
    return name##Impl args;                                                                        \
  }                                                                                                \
  DELTASERVE_SAMPLER_OPAQUE ret name##Baseline params { return name##Impl args; }                  \
  ret name params {                                                                                \
    return kernels::ActiveIsa() >= kernels::CpuIsa::kAvx2 ? name##Avx2 args : name##Baseline args; \
  }
#else
#define DELTASERVE_SAMPLER_PASS(ret, name, params, args) \
  ret name params { return name##Impl args; }
#endif

// exp(x) for x <= 0, as a float, within 1e-7 relative of the true value (Cephes expf: x = n ln 2
// + r, a degree-6 polynomial in r, 2^n by the exponent bits); 0 below -87 (where expf is
// subnormal or 0) and for NaN. Branch-free, so loops over it vectorise.
inline float ExpNonPositive(float x) {
  const float xc = x > -87.0f ? x : -87.0f;
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x >= -87.0f ? y * scale : 0.0f;
}

// Largest logit, ignoring NaN; -inf when there is none. GCC's auto-vectoriser leaves a float max
// reduction scalar (NaN order), so this one is written with generic vectors (GCC and Clang).
DELTASERVE_SAMPLER_IMPL float MaxLogitImpl(const float* x, size_t n) {
  using F8 = float __attribute__((vector_size(32)));
  using I8 = int32_t __attribute__((vector_size(32)));
  F8 lanes = {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    F8 v;
    std::memcpy(&v, x + i, sizeof v);
    const I8 gt = v > lanes;  // all ones where v is larger (false for NaN)
    lanes =
        reinterpret_cast<F8>((gt & reinterpret_cast<I8>(v)) | (~gt & reinterpret_cast<I8>(lanes)));
  }
  float m = -kInf;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int j = 0; j < 8; ++j) m = lanes[j] > m ? lanes[j] : m;
  return m;
}
DELTASERVE_SAMPLER_PASS(float, MaxLogit, (const float* x, size_t n), (x, n))

// Sum of ExpNonPositive((x[i] - m) * inv_t): the softmax denominator relative to the max `m`.
DELTASERVE_SAMPLER_IMPL double SumExpImpl(const float* x, size_t n, float m, float inv_t) {
  constexpr size_t kBlock = 256;
  float w[kBlock];
  double acc[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) w[j] = ExpNonPositive((x[i + j] - m) * inv_t);
    for (size_t j = 0; j < kBlock; j += 4) {
      for (int a = 0; a < 4; ++a) acc[a] += w[j + a];
    }
  }
  double sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; i < n; ++i) sum += ExpNonPositive((x[i] - m) * inv_t);
  return sum;
}
DELTASERVE_SAMPLER_PASS(double, SumExp, (const float* x, size_t n, float m, float inv_t),
                        (x, n, m, inv_t))

// The first index at which the running sum of ExpNonPositive((x[i] - m) * inv_t) exceeds
// `target`, or -1 when rounding leaves it short. Sums in blocks as SumExp does, and walks one
// token at a time only inside the block that crosses the target.
DELTASERVE_SAMPLER_IMPL int32_t FindCumulativeImpl(const float* x, size_t n, float m, float inv_t,
                                                   double target) {
  constexpr size_t kBlock = 256;
  float w[kBlock];
  double cum = 0;
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t len = std::min(kBlock, n - i);
    for (size_t j = 0; j < len; ++j) w[j] = ExpNonPositive((x[i + j] - m) * inv_t);
    double acc[4] = {0, 0, 0, 0};
    size_t j = 0;
    for (; j + 4 <= len; j += 4) {
      for (int a = 0; a < 4; ++a) acc[a] += w[j + a];
    }
    double block = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (; j < len; ++j) block += w[j];
    if (cum + block <= target) {
      cum += block;
      continue;
    }
    for (j = 0; j < len; ++j) {
      cum += w[j];
      if (cum > target && w[j] > 0.0f) return static_cast<int32_t>(i + j);
    }
  }
  return -1;
}
DELTASERVE_SAMPLER_PASS(int32_t, FindCumulative,
                        (const float* x, size_t n, float m, float inv_t, double target),
                        (x, n, m, inv_t, target))

// First index holding `value` (the max, so it exists unless all are NaN: then 0).
int32_t FirstIndexOf(absl::Span<const float> row, float value) {
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] == value) return static_cast<int32_t>(i);
  }
  return 0;
}

// Tokens per block that the selections below test with one MaxLogit before looking inside.
constexpr size_t kSkipBlock = 64;

// Keeps in `heap` the `k` best of row[i] >= floor (NaN never passes), as a heap whose front is
// the worst kept. Ids are visited in increasing order, so an equal logit never displaces.
void SelectTopK(absl::Span<const float> row, size_t k, float floor, std::vector<Candidate>& heap) {
  heap.clear();
  size_t i = 0;
  for (; i < row.size() && heap.size() < k; ++i) {
    if (row[i] >= floor) {
      heap.push_back({row[i], static_cast<int32_t>(i), 0.0f});
      std::push_heap(heap.begin(), heap.end(), Better);
    }
  }
  if (heap.size() < k) return;
  float gate = heap.front().logit;  // >= floor
  while (i < row.size()) {
    const size_t end = std::min(i + kSkipBlock, row.size());
    // Most blocks hold nothing above the gate: one vectorised max skips them.
    if (end - i == kSkipBlock && !(MaxLogit(&row[i], kSkipBlock) > gate)) {
      i = end;
      continue;
    }
    for (; i < end; ++i) {
      if (!(row[i] > gate)) continue;
      std::pop_heap(heap.begin(), heap.end(), Better);
      heap.back() = {row[i], static_cast<int32_t>(i), 0.0f};
      std::push_heap(heap.begin(), heap.end(), Better);
      gate = heap.front().logit;
    }
  }
}

// Appends to `c` every token with row[i] >= floor, its weight unset.
void CollectAtLeast(absl::Span<const float> row, float floor, std::vector<Candidate>& c) {
  c.clear();
  for (size_t i = 0; i < row.size();) {
    const size_t end = std::min(i + kSkipBlock, row.size());
    if (end - i == kSkipBlock && !(MaxLogit(&row[i], kSkipBlock) >= floor)) {
      i = end;
      continue;
    }
    for (; i < end; ++i) {
      if (row[i] >= floor) c.push_back({row[i], static_cast<int32_t>(i), 0.0f});
    }
  }
}

// Reorders `c` so that its nucleus comes first and returns the nucleus size: the shortest prefix,
// in Better order, whose weight reaches `target`. A weighted quickselect (expected O(n), no sort):
// the nucleus's last element stays inside [lo, hi), and [0, lo) holds the better ones, of weight
// `before` < target.
size_t NucleusSize(std::vector<Candidate>& c, double target) {
  size_t lo = 0, hi = c.size();
  double before = 0;
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(c.begin() + lo, c.begin() + mid, c.begin() + hi, Better);
    double left = 0;
    for (size_t i = lo; i < mid; ++i) left += c[i].weight;
    if (before + left >= target) {
      hi = mid;
    } else {
      before += left;
      lo = mid;
    }
  }
  return lo + 1;
}

// Temperature sampling with top-k, top-p and min-p over `row` (max logit `m`, finite), with `u`
// uniform in [0, 1) choosing among the survivors (docs/sampling.md has the exact rule).
int32_t SampleTruncated(const SamplingParams& params, absl::Span<const float> row, float m,
                        double u, std::vector<Candidate>& c) {
  const auto n = static_cast<int32_t>(row.size());
  const float t = params.temperature;
  const float inv_t = 1.0f / t;
  auto weight = [&](float l) { return ExpNonPositive((l - m) * inv_t); };
  const bool use_top_k = params.top_k > 0 && params.top_k < n;
  const bool use_top_p = params.top_p < 1.0f;
  const bool use_min_p = params.min_p > 0.0f;
  // Logit floors only prune candidates early; they sit a little below the exact cut (slack for
  // rounding) and the exact tests on the weights follow.
  const float slack = 1e-3f * t + 1e-5f * std::abs(m);
  const float min_p_floor = use_min_p ? m + t * std::log(params.min_p) - slack : -kInf;

  if (!use_top_k && !use_top_p && !use_min_p) {
    // Plain temperature: no candidate list, two vectorised passes.
    const int32_t i = FindCumulative(row.data(), row.size(), m, inv_t,
                                     u * SumExp(row.data(), row.size(), m, inv_t));
    if (i >= 0) return i;
    for (int32_t j = n - 1; j >= 0; --j) {
      if (weight(row[j]) > 0.0f) return j;
    }
    return FirstIndexOf(row, m);
  }

  double mass = 0;  // of the distribution top_p is measured in: over the top-k set, or all
  if (use_top_k) {
    // With top_p the whole top-k set counts towards its mass, so min_p may not prune it here.
    SelectTopK(row, static_cast<size_t>(params.top_k), use_top_p ? -kInf : min_p_floor, c);
    for (Candidate& e : c) {
      e.weight = weight(e.logit);
      mass += e.weight;
    }
  } else {
    float floor = min_p_floor;
    if (use_top_p) {
      mass = SumExp(row.data(), row.size(), m, inv_t);
      // Tokens of weight below eps hold less than (1 - top_p) of the mass between them, so the
      // nucleus is complete before the first of them.
      const double eps = 0.5 * (1.0 - params.top_p) * mass / n;
      floor = std::max(floor, m + t * static_cast<float>(std::log(eps)) - slack);
    }
    CollectAtLeast(row, floor, c);
    for (Candidate& e : c) e.weight = weight(e.logit);
  }
  if (use_top_p) c.resize(NucleusSize(c, params.top_p * mass));
  if (use_min_p) {
    const float min_p = params.min_p;
    c.erase(std::remove_if(c.begin(), c.end(),
                           [min_p](const Candidate& e) { return e.weight < min_p; }),
            c.end());
  }
  double total = 0;
  for (const Candidate& e : c) total += e.weight;
  double r = u * total;
  for (const Candidate& e : c) {
    r -= e.weight;
    if (r < 0) return e.id;
  }
  // Rounding left r >= 0 after the last: the last candidate with any weight.
  for (auto it = c.rbegin(); it != c.rend(); ++it) {
    if (it->weight > 0) return it->id;
  }
  return FirstIndexOf(row, m);
}

// Fills `out` for `token` from `row` (max logit `m`): log-softmax at temperature 1.
void FillLogprobs(absl::Span<const float> row, float m, int32_t token, int top_logprobs,
                  std::vector<Candidate>& heap, TokenLogprobs& out) {
  const double sum = std::isfinite(m) ? SumExp(row.data(), row.size(), m, 1.0f) : 0.0;
  // All -inf (or a +inf): no distribution to speak of; report the logits shifted by the max.
  const double lse = std::isfinite(m) ? m + std::log(sum) : static_cast<double>(m);
  out.logprob = static_cast<float>(row[token] - lse);
  out.top.clear();
  if (top_logprobs == 0) return;
  SelectTopK(row, static_cast<size_t>(top_logprobs), -kInf, heap);
  std::sort_heap(heap.begin(), heap.end(), Better);
  for (const Candidate& e : heap) {
    // A token of probability zero (masked out by an output constraint) is no alternative: fewer
    // than top_logprobs come back rather than a -inf no JSON can carry (vLLM clamps to -9999).
    if (std::isfinite(m) && !std::isfinite(e.logit)) continue;
    out.top.push_back({e.id, static_cast<float>(e.logit - lse)});
  }
}

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("sampling: ", what));
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p, int32_t n_valid) {
  if (n_valid < 1)
    return Invalid(absl::StrCat("the vocabulary has no tokens (n_valid ", n_valid, ")"));
  if (!std::isfinite(p.temperature)) {
    return Invalid(absl::StrCat("temperature must be a finite number, got ", p.temperature));
  }
  if (p.top_k < -1) {
    return Invalid(
        absl::StrCat("top_k must be -1 or 0 (no limit) or a positive count, got ", p.top_k));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return Invalid(absl::StrCat("top_p must be in (0, 1], got ", p.top_p));
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return Invalid(absl::StrCat("min_p must be in [0, 1], got ", p.min_p));
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return Invalid(absl::StrCat("presence_penalty must be in [-2, 2], got ", p.presence_penalty));
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return Invalid(absl::StrCat("frequency_penalty must be in [-2, 2], got ", p.frequency_penalty));
  }
  if (!(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty))) {
    return Invalid(
        absl::StrCat("repetition_penalty must be a finite number > 0, got ", p.repetition_penalty));
  }
  if (p.repetition_last_n < -1) {
    return Invalid(
        absl::StrCat("repetition_last_n must be -1 (whole context), 0 (off) or a "
                     "token count, got ",
                     p.repetition_last_n));
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= n_valid) {
      return Invalid(absl::StrCat("logit_bias names token ", id, ", outside the vocabulary [0, ",
                                  n_valid, ")"));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return Invalid(
          absl::StrCat("logit_bias for token ", id, " must be in [-100, 100], got ", bias));
    }
  }
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs) {
    return Invalid(
        absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs, "], got ", p.top_logprobs));
  }
  for (int32_t id : p.stop_token_ids) {
    if (id < 0 || id >= n_valid) {
      return Invalid(absl::StrCat("stop_token_ids names token ", id,
                                  ", outside the vocabulary [0, ", n_valid, ")"));
    }
  }
  if (p.max_tokens.has_value() && *p.max_tokens < 1) {
    return Invalid(absl::StrCat("max_tokens must be at least 1, got ", *p.max_tokens));
  }
  return absl::OkStatus();
}

int32_t Argmax(absl::Span<const float> logits, int32_t n_valid) {
  const size_t n = std::min<size_t>(std::max<int32_t>(n_valid, 0), logits.size());
  const absl::Span<const float> row = logits.first(n);
  return FirstIndexOf(row, MaxLogit(row.data(), n));
}

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params, int32_t n_valid) {
  if (absl::Status s = ValidateSamplingParams(params, n_valid); !s.ok()) return s;
  uint64_t seed;
  if (params.seed.has_value()) {
    seed = *params.seed;
  } else {
    std::random_device device;
    seed = (static_cast<uint64_t>(device()) << 32) ^ device();
  }
  return Sampler(params, n_valid, seed);
}

Sampler::Sampler(const SamplingParams& params, int32_t n_valid, uint64_t seed)
    : params_(params), n_valid_(n_valid), seed_(seed), rng_(seed) {
  use_repetition_ = params.repetition_penalty != 1.0f && params.repetition_last_n != 0;
  use_occurrence_ = params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f;
  bias_.assign(params.logit_bias.begin(), params.logit_bias.end());
  // Fixed order, so the float sums below do not depend on the hash map's iteration order.
  std::sort(bias_.begin(), bias_.end());
}

void Sampler::AcceptPrompt(absl::Span<const int32_t> prompt) {
  if (!use_repetition_) return;
  const int32_t last_n = params_.repetition_last_n;
  // Only the last N can still be in the window once the prompt is in.
  if (last_n > 0 && prompt.size() > static_cast<size_t>(last_n)) prompt = prompt.last(last_n);
  for (int32_t token : prompt) {
    if (token >= 0 && token < n_valid_) RecordForRepetition(token);
  }
}

void Sampler::Accept(int32_t token) {
  if (token < 0 || token >= n_valid_) return;  // never sampled, so never penalised
  if (use_occurrence_) ++generated_counts_[token];
  if (use_repetition_) RecordForRepetition(token);
}

void Sampler::RecordForRepetition(int32_t token) {
  const int32_t last_n = params_.repetition_last_n;
  if (last_n > 0) {
    if (window_ring_.size() < static_cast<size_t>(last_n)) {
      window_ring_.push_back(token);
    } else {
      const auto oldest = window_counts_.find(window_ring_[window_head_]);
      if (--oldest->second == 0) window_counts_.erase(oldest);
      window_ring_[window_head_] = token;
      window_head_ = (window_head_ + 1) % window_ring_.size();
    }
  }
  ++window_counts_[token];
}

bool Sampler::HasAdjustments() const {
  return !bias_.empty() || (use_repetition_ && !window_counts_.empty()) ||
         (use_occurrence_ && !generated_counts_.empty());
}

void Sampler::ApplyPenaltiesAndBias(absl::Span<const float> logits, std::vector<float>& out) const {
  out.assign(logits.begin(), logits.end());
  const auto n = static_cast<int32_t>(out.size());
  if (use_repetition_) {
    const float r = params_.repetition_penalty;
    for (const auto& [token, count] : window_counts_) {
      if (token >= n) continue;
      float& l = out[token];
      l = l > 0.0f ? l / r : l * r;
    }
  }
  if (use_occurrence_) {
    for (const auto& [token, count] : generated_counts_) {
      if (token >= n) continue;
      out[token] -=
          params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
    }
  }
  for (const auto& [token, bias] : bias_) {
    if (token < n) out[token] += bias;
  }
}

void Sampler::MaskDisallowed(const TokenMask& allowed, std::vector<float>& logits) {
  const size_t n = logits.size();
  const absl::Span<const uint64_t> words = allowed.words();
  const size_t covered = std::min(n, static_cast<size_t>(allowed.n_vocab()));
  // A word at a time: grammar masks are mostly all-zero or all-one words.
  for (size_t w = 0; w * 64 < covered; ++w) {
    const size_t base = w * 64;
    const size_t end = std::min(covered, base + 64);
    const uint64_t bits = words[w];
    if (bits == ~uint64_t{0}) continue;
    if (bits == 0) {
      std::fill(logits.begin() + base, logits.begin() + end, -kInf);
      continue;
    }
    for (size_t i = base; i < end; ++i) {
      if (((bits >> (i - base)) & 1) == 0) logits[i] = -kInf;
    }
  }
  std::fill(logits.begin() + covered, logits.end(), -kInf);
}

double Sampler::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::Sample(absl::Span<const float> logits, TokenLogprobs* logprobs,
                        const TokenMask* allowed) {
  const int32_t n = std::min<int32_t>(n_valid_, static_cast<int32_t>(logits.size()));
  if (n <= 0) return 0;
  Scratch& scratch = ThreadScratch();
  absl::Span<const float> row = logits.first(n);
  if (HasAdjustments() || allowed != nullptr) {
    ApplyPenaltiesAndBias(row, scratch.adjusted);
    if (allowed != nullptr) MaskDisallowed(*allowed, scratch.adjusted);
    row = scratch.adjusted;
  }
  const float m = MaxLogit(row.data(), row.size());
  int32_t token;
  if (params_.temperature <= 0.0f || n == 1 || !std::isfinite(m)) {
    token = FirstIndexOf(row, m);
  } else {
    token = SampleTruncated(params_, row, m, NextUniform(), scratch.candidates);
  }
  if (logprobs != nullptr) {
    FillLogprobs(row, m, token, params_.top_logprobs, scratch.top, *logprobs);
  }
  return token;
}

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kNone:
      break;
  }
  return "";
}

StopCondition::StopCondition(const SamplingParams& params, absl::Span<const int32_t> eos_token_ids)
    : stop_ids_(params.stop_token_ids), max_tokens_(params.max_tokens) {
  if (!params.ignore_eos)
    stop_ids_.insert(stop_ids_.end(), eos_token_ids.begin(), eos_token_ids.end());
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
}

FinishReason StopCondition::Check(int32_t token) {
  ++n_generated_;
  if (std::binary_search(stop_ids_.begin(), stop_ids_.end(), token)) return FinishReason::kStop;
  if (max_tokens_.has_value() && n_generated_ >= *max_tokens_) return FinishReason::kLength;
  return FinishReason::kNone;
}

}  // namespace deltaserve::worker
