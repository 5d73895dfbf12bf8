// Token sampling for one request, with OpenAI / vLLM / llama.cpp semantics (docs/sampling.md):
// repetition, presence and frequency penalties and logit bias on the raw logits, then greedy or
// temperature with top-k, top-p and min-p truncation, top-n logprobs, and the stop check the
// scheduler runs on each new token. Per request: Sampler::Create(params, n_valid), AcceptPrompt,
// then per step Sample(logits) -> token, Accept(token), StopCondition::Check(token).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace deltaserve::worker {

class TokenMask;  // token_mask.h

// Most alternatives a request may ask logprobs for (OpenAI's limit).
inline constexpr int kMaxTopLogprobs = 20;

// Sampling settings of one request; ValidateSamplingParams lists the accepted ranges.
struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy (argmax after penalties and bias, lowest id on ties)
  int top_k = 40;            // -1 or 0: no limit
  float top_p = 0.95f;       // in (0, 1]; 1: off
  float min_p = 0.05f;       // in [0, 1]; 0: off; keeps tokens with p >= min_p * p_max

  // OpenAI: logit -= presence_penalty * (count > 0) + frequency_penalty * count, where count is
  // how often the token was generated so far (the prompt does not count). Each in [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // llama.cpp / HF: a token present in the last `repetition_last_n` tokens of prompt + output
  // has a positive logit divided by, a non-positive one multiplied by the penalty. > 0; 1: off.
  float repetition_penalty = 1.0f;
  int repetition_last_n = -1;  // -1: the whole context; 0: off; N > 0: the last N tokens

  // Token id -> added to its logit (after the penalties). Ids in [0, n_valid), values in
  // [-100, 100] (OpenAI's range; -100 bans a token in practice, +100 all but forces it).
  absl::flat_hash_map<int32_t, float> logit_bias;

  // Seeds the sampler's own RNG; unset: one is drawn from std::random_device (Sampler::seed()).
  std::optional<uint64_t> seed;

  // Alternatives to report with each token's logprob, in [0, kMaxTopLogprobs].
  int top_logprobs = 0;

  // Stop settings, read by StopCondition.
  std::vector<int32_t> stop_token_ids;  // each in [0, n_valid); finish reason "stop"
  bool ignore_eos = false;              // do not stop on the model's end-of-generation tokens
  std::optional<int32_t> max_tokens;    // >= 1; unset: no limit here; finish reason "length"
};

// OK, or InvalidArgument naming the first offending field and value. `n_valid` is the number of
// real tokens (the tokenizer's size; logits rows past it are vocabulary padding).
absl::Status ValidateSamplingParams(const SamplingParams& params, int32_t n_valid);

// A token and its log-probability (natural log).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// What Sample reports when asked: log-softmax of the logits after penalties and bias, before
// temperature and truncation (what OpenAI reports), over the n_valid real tokens only.
struct TokenLogprobs {
  float logprob = 0.0f;           // of the sampled token
  // The top_logprobs most likely, best first, lowest id on ties; tokens of probability zero
  // (masked out) are left out, so there may be fewer.
  std::vector<TokenLogprob> top;
};

// Draws the tokens of one request; see the file comment. Holds the RNG and the token counts the
// penalties need (only for the tokens seen); the per-call scratch buffers are per thread, so a
// sampler is small and Sample does not allocate once a thread has warmed up. Not thread-safe.
class Sampler {
 public:
  // Validates `params` (ValidateSamplingParams) for a vocabulary of `n_valid` real tokens.
  static absl::StatusOr<Sampler> Create(const SamplingParams& params, int32_t n_valid);

  // Records the prompt for the repetition penalty (call once, before the first Sample).
  void AcceptPrompt(absl::Span<const int32_t> prompt);

  // Records a generated token (normally the one Sample returned) for the penalties.
  void Accept(int32_t token);

  // The next token for `logits` (one row of n_vocab >= n_valid floats, [n_vocab]); never an id
  // >= n_valid. Does not Accept it. When `logprobs` is given it is filled (its vectors are
  // reused). Draws exactly one number from the RNG when not greedy, none when greedy.
  // `allowed` (grammar-constrained decoding, constrained_decoding.h): tokens outside it (ids at
  // or past its n_vocab included) get a logit of -inf after the penalties and bias, before
  // temperature and truncation, so logprobs are those of the constrained distribution. The
  // caller makes sure it allows at least one token.
  int32_t Sample(absl::Span<const float> logits, TokenLogprobs* logprobs = nullptr,
                 const TokenMask* allowed = nullptr);

  // The seed in use: params.seed, or the one drawn when it was unset.
  uint64_t seed() const { return seed_; }
  const SamplingParams& params() const { return params_; }

 private:
  Sampler(const SamplingParams& params, int32_t n_valid, uint64_t seed);

  // Penalties and bias over `logits` (copied into `out`, [n] floats).
  void ApplyPenaltiesAndBias(absl::Span<const float> logits, std::vector<float>& out) const;
  bool HasAdjustments() const;
  // Sets the logits of tokens outside `allowed` to -inf.
  static void MaskDisallowed(const TokenMask& allowed, std::vector<float>& logits);
  void RecordForRepetition(int32_t token);
  // A double in [0, 1) from 53 bits of the RNG (same on every platform, unlike
  // std::uniform_real_distribution).
  double NextUniform();

  SamplingParams params_;
  int32_t n_valid_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  bool use_repetition_ = false;                  // repetition_penalty != 1 and a window
  bool use_occurrence_ = false;                  // presence or frequency penalty != 0
  std::vector<std::pair<int32_t, float>> bias_;  // logit_bias, as a list
  // Generated token -> count (presence / frequency penalties).
  absl::flat_hash_map<int32_t, int32_t> generated_counts_;
  // Token -> occurrences in the repetition window; with a last-N window the ring of those N.
  absl::flat_hash_map<int32_t, int32_t> window_counts_;
  std::vector<int32_t> window_ring_;
  size_t window_head_ = 0;  // next slot of window_ring_ to overwrite once it is full
};

// Why generation ended.
enum class FinishReason { kNone, kStop, kLength };

// "stop", "length", or "" for kNone (OpenAI's finish_reason strings).
std::string_view FinishReasonName(FinishReason reason);

// The per-token stop check: a stop token (params.stop_token_ids, plus the model's end-of-
// generation ids unless params.ignore_eos) ends with "stop", the max_tokens-th generated token
// with "length"; "stop" wins when both apply. The stop token itself should not be emitted as
// text; the max_tokens-th token is. Expects params validated (Sampler::Create).
class StopCondition {
 public:
  StopCondition(const SamplingParams& params, absl::Span<const int32_t> eos_token_ids);

  // Counts `token` as generated and says whether to stop after it.
  FinishReason Check(int32_t token);

  int32_t n_generated() const { return n_generated_; }

 private:
  std::vector<int32_t> stop_ids_;  // sorted, unique
  std::optional<int32_t> max_tokens_;
  int32_t n_generated_ = 0;
};

// Index of the largest of the first `n_valid` logits (lowest id on ties).
int32_t Argmax(absl::Span<const float> logits, int32_t n_valid);

}  // namespace deltaserve::worker
