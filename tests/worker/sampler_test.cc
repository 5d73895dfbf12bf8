// The sampler against independent computations: empirical frequencies of 200k draws against the
// exact truncated distribution (computed here by a full sort in double), penalties and bias
// against logits worked out by hand, logprobs against a plain double log-softmax; plus seeding,
// padded vocabulary rows, parameter validation and the stop check.
#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::worker {
namespace {

using ::testing::HasSubstr;

constexpr int kDraws = 200000;

Sampler Make(const SamplingParams& params, int32_t n_valid) {
  absl::StatusOr<Sampler> s = Sampler::Create(params, n_valid);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

SamplingParams Plain(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1234;
  return p;
}

// The distribution the docs define, computed the slow obvious way: sort every token by (logit
// desc, id asc), softmax at the temperature in double, keep the top_k, then the shortest prefix
// whose mass in the top-k-renormalised distribution reaches top_p, then p >= min_p * p_max;
// renormalise over what is left.
std::vector<double> Exact(const std::vector<float>& logits, int n_valid, const SamplingParams& p) {
  std::vector<int> order(n_valid);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
  size_t keep = order.size();
  if (p.top_k > 0) keep = std::min<size_t>(keep, p.top_k);
  std::vector<double> w(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    w[i] = std::exp((static_cast<double>(logits[order[i]]) - logits[order[0]]) / p.temperature);
    sum += w[i];
  }
  size_t nucleus = keep;
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < keep; ++i) {
      cum += w[i] / sum;
      if (cum >= p.top_p) {
        nucleus = i + 1;
        break;
      }
    }
  }
  std::vector<double> dist(logits.size(), 0.0);
  double kept = 0;
  for (size_t i = 0; i < nucleus; ++i) {
    if (w[i] >= p.min_p * w[0]) {
      dist[order[i]] = w[i];
      kept += w[i];
    }
  }
  for (double& x : dist) x /= kept;
  return dist;
}

// Draws kDraws tokens and checks each token's frequency against `want`: within 5 standard
// deviations of a binomial (plus 1e-4 for the float weights), and never a token of probability 0.
void ExpectFrequencies(Sampler& sampler, const std::vector<float>& logits,
                       const std::vector<double>& want) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    const int32_t t = sampler.Sample(logits);
    ASSERT_GE(t, 0);
    ASSERT_LT(t, static_cast<int32_t>(logits.size()));
    ++counts[t];
  }
  for (size_t t = 0; t < logits.size(); ++t) {
    const double f = static_cast<double>(counts[t]) / kDraws;
    if (want[t] == 0.0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " has probability 0";
      continue;
    }
    const double sigma = std::sqrt(want[t] * (1.0 - want[t]) / kDraws);
    EXPECT_NEAR(f, want[t], 5.0 * sigma + 1e-4) << "token " << t;
  }
}

// Twelve logits with a spread like a real model's head, a tie (ids 3 and 7) included.
const std::vector<float> kLogits = {2.0f, 1.5f, -0.5f, 3.0f, 0.0f,  1.0f,
                                    2.5f, 3.0f, -2.0f, 0.7f, -1.0f, 1.2f};

// A double log-softmax of the first n_valid entries.
std::vector<double> LogSoftmax(const std::vector<float>& logits, int n_valid) {
  double m = logits[0];
  for (int i = 0; i < n_valid; ++i) m = std::max<double>(m, logits[i]);
  double sum = 0;
  for (int i = 0; i < n_valid; ++i) sum += std::exp(logits[i] - m);
  std::vector<double> out(n_valid);
  for (int i = 0; i < n_valid; ++i) out[i] = logits[i] - m - std::log(sum);
  return out;
}

// The logits the sampler used, recovered from its logprobs (top_logprobs = all of a tiny vocab):
// logprob differences are logit differences.
std::vector<double> SeenLogitsMinusFirst(Sampler& sampler, const std::vector<float>& logits) {
  TokenLogprobs lp;
  sampler.Sample(logits, &lp);
  std::vector<double> by_id(logits.size(), NAN);
  for (const TokenLogprob& e : lp.top) by_id[e.token] = e.logprob;
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = by_id[i] - by_id[0];
  return out;
}

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  for (float t : {0.0f, -1.0f}) {
    SamplingParams p = Plain(t);
    Sampler s = Make(p, static_cast<int32_t>(kLogits.size()));
    for (int i = 0; i < 10; ++i) EXPECT_EQ(s.Sample(kLogits), 3);  // 3 and 7 tie at 3.0
  }
  EXPECT_EQ(Argmax(kLogits, 12), 3);
  EXPECT_EQ(Argmax(kLogits, 3), 0);
}

TEST(SamplerTest, TemperatureAloneMatchesSoftmax) {
  for (float t : {0.5f, 1.0f, 1.7f}) {
    SCOPED_TRACE(t);
    SamplingParams p = Plain(t);
    Sampler s = Make(p, 12);
    ExpectFrequencies(s, kLogits, Exact(kLogits, 12, p));
  }
}

TEST(SamplerTest, TopKMatchesRenormalisedTopK) {
  SamplingParams p = Plain(1.0f);
  p.top_k = 4;  // ids 3, 7 (tied), 6, 0
  Sampler s = Make(p, 12);
  const std::vector<double> want = Exact(kLogits, 12, p);
  EXPECT_GT(want[0], 0.0);
  EXPECT_EQ(want[1], 0.0);
  ExpectFrequencies(s, kLogits, want);
}

TEST(SamplerTest, TopKBoundaryTieKeepsLowestId) {
  SamplingParams p = Plain(1.0f);
  p.top_k = 1;  // 3 and 7 tie: only 3 survives
  Sampler s = Make(p, 12);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(s.Sample(kLogits), 3);
}

TEST(SamplerTest, TopPMatchesNucleus) {
  for (float top_p : {0.3f, 0.8f, 0.95f}) {
    for (int top_k : {0, 6}) {
      SCOPED_TRACE(testing::Message() << "top_p " << top_p << " top_k " << top_k);
      SamplingParams p = Plain(0.8f);
      p.top_p = top_p;
      p.top_k = top_k;
      Sampler s = Make(p, 12);
      ExpectFrequencies(s, kLogits, Exact(kLogits, 12, p));
    }
  }
}

TEST(SamplerTest, MinPMatchesRatioToBest) {
  SamplingParams p = Plain(1.0f);
  p.min_p = 0.2f;  // keeps logits >= 3 + ln 0.2 = 1.39: ids 0, 1, 3, 6, 7
  Sampler s = Make(p, 12);
  const std::vector<double> want = Exact(kLogits, 12, p);
  EXPECT_GT(want[1], 0.0);
  EXPECT_EQ(want[11], 0.0);
  ExpectFrequencies(s, kLogits, want);
}

TEST(SamplerTest, DefaultChainMatchesExact) {
  SamplingParams p;  // temperature 0.8, top_k 40, top_p 0.95, min_p 0.05
  p.seed = 7;
  Sampler s = Make(p, 12);
  ExpectFrequencies(s, kLogits, Exact(kLogits, 12, p));
}

// At the real vocabulary size with no top_k, the nucleus is found by selection, not a sort: every
// draw must fall in the nucleus the full sort finds, and the best tokens' frequencies match.
TEST(SamplerTest, FullVocabularyNucleusMatchesSort) {
  constexpr int kVocab = 151936;
  std::mt19937 gen(42);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(kVocab);
  for (float& l : logits) l = normal(gen);
  for (int i = 0; i < 50; ++i) logits[gen() % kVocab] += 12.0f;  // a head, as a trained model has
  SamplingParams p = Plain(1.0f);
  p.top_p = 0.9f;
  p.min_p = 0.01f;
  const std::vector<double> want = Exact(logits, kVocab, p);
  Sampler s = Make(p, kVocab);
  std::map<int32_t, int> counts;
  constexpr int kN = 20000;
  for (int i = 0; i < kN; ++i) ++counts[s.Sample(logits)];
  for (const auto& [t, c] : counts) EXPECT_GT(want[t], 0.0) << "token " << t << " drawn " << c;
  for (const auto& [t, c] : counts) {
    const double sigma = std::sqrt(want[t] * (1.0 - want[t]) / kN);
    EXPECT_NEAR(static_cast<double>(c) / kN, want[t], 5.0 * sigma + 1e-3) << "token " << t;
  }
}

TEST(SamplerTest, PaddedRowsAreNeverChosenNorReported) {
  // 10 real tokens, 6 padding rows holding the largest logits.
  std::vector<float> logits = {0.1f, 0.4f, -0.3f, 0.2f, 0.0f, 0.3f, -0.1f, 0.05f, 0.15f, 0.25f};
  logits.resize(16, 50.0f);
  SamplingParams greedy = Plain(0.0f);
  greedy.top_logprobs = 20;
  Sampler g = Make(greedy, 10);
  TokenLogprobs lp;
  EXPECT_EQ(g.Sample(logits, &lp), 1);
  ASSERT_EQ(lp.top.size(), 10u);  // only the 10 real tokens exist
  for (const TokenLogprob& e : lp.top) EXPECT_LT(e.token, 10);
  const std::vector<double> want = LogSoftmax(logits, 10);
  EXPECT_NEAR(lp.logprob, want[1], 1e-6);

  for (float top_p : {1.0f, 0.9f}) {
    SamplingParams p = Plain(2.0f);
    p.top_p = top_p;
    Sampler s = Make(p, 10);
    for (int i = 0; i < 20000; ++i) ASSERT_LT(s.Sample(logits), 10);
  }
  SamplingParams biased = Plain(1.0f);
  biased.logit_bias = {{9, 100.0f}};
  Sampler b = Make(biased, 10);
  for (int i = 0; i < 1000; ++i) ASSERT_LT(b.Sample(logits), 10);
}

TEST(SamplerTest, SameSeedSameTokensWhateverElseRuns) {
  SamplingParams p;
  p.seed = 99;
  p.top_k = 0;
  p.top_p = 0.9f;
  p.presence_penalty = 0.5f;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<std::vector<float>> rows(200, std::vector<float>(1000));
  for (auto& row : rows) {
    for (float& l : row) l = normal(gen);
  }
  auto run = [&](bool with_neighbour) {
    Sampler s = Make(p, 1000);
    SamplingParams other = p;
    other.seed = 3;
    Sampler neighbour = Make(other, 1000);
    std::vector<int32_t> out;
    for (const auto& row : rows) {
      if (with_neighbour) neighbour.Accept(neighbour.Sample(row));  // a batch mate, same thread
      const int32_t t = s.Sample(row);
      s.Accept(t);
      out.push_back(t);
    }
    return out;
  };
  const std::vector<int32_t> alone = run(false);
  EXPECT_EQ(run(true), alone);
  SamplingParams other = p;
  other.seed = 100;
  Sampler d = Make(other, 1000);
  std::vector<int32_t> different;
  for (const auto& row : rows) {
    different.push_back(d.Sample(row));
    d.Accept(different.back());
  }
  EXPECT_NE(different, alone);
}

TEST(SamplerTest, UnsetSeedIsDrawnAndReproducible) {
  SamplingParams p = Plain(1.0f);
  p.seed.reset();
  Sampler a = Make(p, 12);
  Sampler b = Make(p, 12);
  EXPECT_NE(a.seed(), b.seed());  // 64 random bits each: equal with probability 2^-64
  p.seed = a.seed();
  Sampler again = Make(p, 12);
  EXPECT_EQ(again.seed(), a.seed());
  for (int i = 0; i < 500; ++i) ASSERT_EQ(a.Sample(kLogits), again.Sample(kLogits));
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f, -0.25f};
  SamplingParams p = Plain(0.0f);
  p.repetition_penalty = 2.0f;
  p.top_logprobs = 6;
  Sampler s = Make(p, 6);
  s.AcceptPrompt(std::vector<int32_t>{3, 1});
  s.Accept(4);
  s.Accept(4);
  // Hand-computed: 3 -> 3/2, 1 -> -1*2, 4 -> 0*2 = 0; the others unchanged.
  const std::vector<double> adjusted = {2.0, -2.0, 0.5, 1.5, 0.0, -0.25};
  const std::vector<double> seen = SeenLogitsMinusFirst(s, logits);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(seen[i], adjusted[i] - adjusted[0], 1e-5) << i;
  EXPECT_EQ(s.Sample(logits), 0);  // 3.0 was the argmax before the penalty
}

TEST(SamplerTest, RepetitionWindowForgetsOlderTokens) {
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  SamplingParams p = Plain(0.0f);
  p.repetition_penalty = 4.0f;
  p.repetition_last_n = 2;
  p.top_logprobs = 4;
  Sampler s = Make(p, 4);
  s.AcceptPrompt(std::vector<int32_t>{0, 1, 2});  // window: 1, 2
  std::vector<double> seen = SeenLogitsMinusFirst(s, logits);
  EXPECT_NEAR(seen[1], -0.75, 1e-6);  // 0.25 - 1
  EXPECT_NEAR(seen[2], -0.75, 1e-6);
  EXPECT_NEAR(seen[3], 0.0, 1e-6);
  EXPECT_EQ(s.Sample(logits), 0);
  s.Accept(0);
  s.Accept(3);  // window: 0, 3
  seen = SeenLogitsMinusFirst(s, logits);
  EXPECT_NEAR(seen[1], 0.75, 1e-6);  // 1 - 0.25
  EXPECT_NEAR(seen[2], 0.75, 1e-6);
  EXPECT_NEAR(seen[3], 0.0, 1e-6);
  EXPECT_EQ(s.Sample(logits), 1);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesCountGeneratedTokensOnly) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.5f, -1.0f};
  SamplingParams p = Plain(0.0f);
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.top_logprobs = 5;
  Sampler s = Make(p, 5);
  s.AcceptPrompt(std::vector<int32_t>{1, 1, 1});  // the prompt does not count
  for (int32_t t : {2, 2, 2, 3}) s.Accept(t);
  // OpenAI: logit - presence * (count > 0) - frequency * count.
  const std::vector<double> adjusted = {1.0, 2.0, 3.0 - 0.5 - 0.75, 0.5 - 0.5 - 0.25, -1.0};
  const std::vector<double> seen = SeenLogitsMinusFirst(s, logits);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(seen[i], adjusted[i] - adjusted[0], 1e-5) << i;
  EXPECT_EQ(s.Sample(logits), 1);

  SamplingParams negative = p;
  negative.presence_penalty = -2.0f;  // negative values encourage repeats
  negative.frequency_penalty = 0.0f;
  Sampler n = Make(negative, 5);
  n.Accept(1);
  EXPECT_EQ(n.Sample(logits), 1);  // 2 + 2 = 4 beats 3
}

TEST(SamplerTest, LogitBiasAddsAfterPenalties) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.5f};
  SamplingParams p = Plain(0.0f);
  p.logit_bias = {{2, -100.0f}, {3, 1.25f}};
  p.repetition_penalty = 2.0f;
  p.top_logprobs = 4;
  Sampler s = Make(p, 4);
  s.Accept(3);
  // Token 3: 0.5 / 2 (penalty on the model's logit) + 1.25 = 1.5; token 2: 3 - 100.
  const std::vector<double> adjusted = {1.0, 2.0, -97.0, 1.5};
  const std::vector<double> seen = SeenLogitsMinusFirst(s, logits);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(seen[i], adjusted[i] - adjusted[0], 1e-4) << i;
  EXPECT_EQ(s.Sample(logits), 1);

  SamplingParams force = Plain(1.0f);
  force.logit_bias = {{0, 100.0f}};
  Sampler f = Make(force, 4);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(f.Sample(logits), 0);
}

TEST(SamplerTest, LogprobsAreRawLogSoftmaxBeforeTemperatureAndTruncation) {
  constexpr int kVocab = 5000;
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(kVocab + 64, 1e3f);  // padded rows must not enter the sum
  for (int i = 0; i < kVocab; ++i) logits[i] = normal(gen);
  logits[17] = logits[4000] = 12.0f;  // a tie at the top: 17 is listed first
  const std::vector<double> want = LogSoftmax(logits, kVocab);
  std::vector<int> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return want[a] != want[b] ? want[a] > want[b] : a < b; });
  for (float t : {0.0f, 0.3f, 2.0f}) {
    SamplingParams p = Plain(t);
    p.top_k = 3;
    p.top_p = 0.5f;
    p.top_logprobs = kMaxTopLogprobs;
    Sampler s = Make(p, kVocab);
    TokenLogprobs lp;
    for (int i = 0; i < 50; ++i) {
      const int32_t tok = s.Sample(logits, &lp);
      EXPECT_NEAR(lp.logprob, want[tok], 1e-5);
      ASSERT_EQ(lp.top.size(), static_cast<size_t>(kMaxTopLogprobs));
      for (int j = 0; j < kMaxTopLogprobs; ++j) {
        EXPECT_EQ(lp.top[j].token, order[j]) << "rank " << j;
        EXPECT_NEAR(lp.top[j].logprob, want[order[j]], 1e-5) << "rank " << j;
      }
    }
  }
  SamplingParams none = Plain(1.0f);
  Sampler s = Make(none, kVocab);
  TokenLogprobs lp;
  lp.top.push_back({1, 1.0f});
  const int32_t tok = s.Sample(logits, &lp);
  EXPECT_TRUE(lp.top.empty());
  EXPECT_NEAR(lp.logprob, want[tok], 1e-5);
}

TEST(SamplerTest, AcceptIgnoresIdsOutsideTheVocabulary) {
  SamplingParams p = Plain(0.0f);
  p.frequency_penalty = 2.0f;
  p.repetition_penalty = 3.0f;
  Sampler s = Make(p, 4);
  s.AcceptPrompt(std::vector<int32_t>{-1, 4, 100});
  s.Accept(-5);
  s.Accept(4);
  const std::vector<float> logits = {0.0f, 1.0f, 0.5f, 0.25f, 9.0f, 9.0f};
  EXPECT_EQ(s.Sample(logits), 1);
}

TEST(SamplerTest, InvalidParametersAreRefusedByName) {
  struct Case {
    std::string want;
    void (*edit)(SamplingParams&);
  };
  const std::vector<Case> cases = {
      {"temperature must be a finite number, got nan",
       [](SamplingParams& p) { p.temperature = NAN; }},
      {"top_k must be -1 or 0", [](SamplingParams& p) { p.top_k = -2; }},
      {"top_p must be in (0, 1], got -0.5", [](SamplingParams& p) { p.top_p = -0.5f; }},
      {"top_p must be in (0, 1], got 0", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p must be in (0, 1], got 1.5", [](SamplingParams& p) { p.top_p = 1.5f; }},
      {"min_p must be in [0, 1], got -0.1", [](SamplingParams& p) { p.min_p = -0.1f; }},
      {"presence_penalty must be in [-2, 2], got 2.5",
       [](SamplingParams& p) { p.presence_penalty = 2.5f; }},
      {"frequency_penalty must be in [-2, 2], got -3",
       [](SamplingParams& p) { p.frequency_penalty = -3.0f; }},
      {"repetition_penalty must be a finite number > 0, got 0",
       [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_last_n must be -1", [](SamplingParams& p) { p.repetition_last_n = -2; }},
      {"logit_bias names token 100, outside the vocabulary [0, 100)",
       [](SamplingParams& p) { p.logit_bias[100] = 1.0f; }},
      {"logit_bias names token -1", [](SamplingParams& p) { p.logit_bias[-1] = 1.0f; }},
      {"logit_bias for token 5 must be in [-100, 100], got 101",
       [](SamplingParams& p) { p.logit_bias[5] = 101.0f; }},
      {"top_logprobs must be in [0, 20], got 21", [](SamplingParams& p) { p.top_logprobs = 21; }},
      {"top_logprobs must be in [0, 20], got -1", [](SamplingParams& p) { p.top_logprobs = -1; }},
      {"stop_token_ids names token 250",
       [](SamplingParams& p) {
         p.stop_token_ids = {1, 250};
       }},
      {"max_tokens must be at least 1, got 0", [](SamplingParams& p) { p.max_tokens = 0; }},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.edit(p);
    absl::StatusOr<Sampler> s = Sampler::Create(p, 100);
    ASSERT_FALSE(s.ok()) << c.want;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.want));
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("sampling: "));
  }
  EXPECT_FALSE(Sampler::Create(SamplingParams{}, 0).ok());
  SamplingParams edges;
  edges.top_k = -1;
  edges.top_p = 1.0f;
  edges.min_p = 1.0f;
  edges.presence_penalty = -2.0f;
  edges.frequency_penalty = 2.0f;
  edges.logit_bias = {{0, -100.0f}, {99, 100.0f}};
  edges.top_logprobs = 20;
  edges.max_tokens = 1;
  EXPECT_TRUE(ValidateSamplingParams(edges, 100).ok());
}

TEST(StopConditionTest, StopTokensEosAndMaxTokens) {
  SamplingParams p;
  p.stop_token_ids = {7, 9};
  p.max_tokens = 4;
  const std::vector<int32_t> eos = {2};
  StopCondition stop(p, eos);
  EXPECT_EQ(stop.Check(1), FinishReason::kNone);
  EXPECT_EQ(stop.Check(3), FinishReason::kNone);
  EXPECT_EQ(stop.Check(9), FinishReason::kStop);
  EXPECT_EQ(stop.n_generated(), 3);

  StopCondition eos_stop(p, eos);
  EXPECT_EQ(eos_stop.Check(2), FinishReason::kStop);

  StopCondition length(p, eos);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(length.Check(5), FinishReason::kNone);
  EXPECT_EQ(length.Check(5), FinishReason::kLength);  // the 4th token is emitted, then stop

  StopCondition both(p, eos);
  for (int i = 0; i < 3; ++i) both.Check(5);
  EXPECT_EQ(both.Check(7), FinishReason::kStop);  // "stop" wins over "length"

  SamplingParams ignore = p;
  ignore.ignore_eos = true;
  ignore.max_tokens.reset();
  StopCondition no_eos(ignore, eos);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(no_eos.Check(2), FinishReason::kNone);
  EXPECT_EQ(no_eos.Check(7), FinishReason::kStop);  // explicit stop ids still apply

  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_EQ(FinishReasonName(FinishReason::kNone), "");
}

}  // namespace
}  // namespace deltaserve::worker
