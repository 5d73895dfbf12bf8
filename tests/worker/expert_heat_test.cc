// Decayed routed-token counts (worker/sched/expert_heat.h) on a fake clock, fed through the
// engine's own ForwardCounters: the count halves every half-life when nothing arrives, tokens
// that arrive between two readings weigh the mean decay over the interval, steady traffic
// converges to rate x half-life / ln 2 whatever the reading interval, totals are exact and a
// reset of the counters is not taken for negative traffic.
#include "worker/sched/expert_heat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "worker/engine/forward_counters.h"

namespace deltaserve::worker {
namespace {

// Routes `n` tokens of `layer` to `expert` (as the forward pass would, k = 1).
void Route(ForwardCounters& c, int64_t layer, int32_t expert, int n) {
  const std::vector<int32_t> ids(static_cast<size_t>(n), expert);
  c.CountRoutes(layer, ids.data(), n);
}

struct FakeClock {
  double now = 1000.0;
  ExpertHeat::Clock fn() {
    return [this] { return now; };
  }
};

TEST(ExpertHeatTest, ShapeFollowsTheCountersAndStartsAtZero) {
  ForwardCounters c(3, 5);
  FakeClock clock;
  ExpertHeat heat(c, 60, clock.fn());
  EXPECT_EQ(heat.n_layer(), 3);
  EXPECT_EQ(heat.n_expert(), 5);
  EXPECT_EQ(heat.half_life_seconds(), 60);
  const ExpertHeat::Reading r = heat.Read();
  ASSERT_EQ(r.decayed.size(), 3u);
  ASSERT_EQ(r.total.size(), 3u);
  for (int l = 0; l < 3; ++l) {
    ASSERT_EQ(r.decayed[l].size(), 5u);
    for (int e = 0; e < 5; ++e) {
      EXPECT_EQ(r.decayed[l][e], 0.0);
      EXPECT_EQ(r.total[l][e], 0u);
    }
  }
  // A dense model's counters have no experts.
  ForwardCounters dense(4, 0);
  ExpertHeat none(dense, 60, clock.fn());
  EXPECT_TRUE(none.Read().decayed.empty());
}

TEST(ExpertHeatTest, HalvesEveryHalfLifeWithoutTraffic) {
  ForwardCounters c(2, 4);
  FakeClock clock;
  ExpertHeat heat(c, 60, clock.fn());
  heat.Read();
  Route(c, 1, 2, 1000);
  // Read at once: the tokens arrived in an interval of length 0, undecayed.
  EXPECT_DOUBLE_EQ(heat.Read().decayed[1][2], 1000.0);
  clock.now += 60;
  EXPECT_NEAR(heat.Read().decayed[1][2], 500.0, 1e-9);
  clock.now += 120;
  EXPECT_NEAR(heat.Read().decayed[1][2], 125.0, 1e-9);
  // Reading more often changes nothing: 3 x 20 s is one half-life as well.
  for (int i = 0; i < 3; ++i) {
    clock.now += 20;
    heat.Read();
  }
  const ExpertHeat::Reading r = heat.Read();
  EXPECT_NEAR(r.decayed[1][2], 62.5, 1e-9);
  EXPECT_EQ(r.total[1][2], 1000u);
  EXPECT_EQ(r.decayed[1][1], 0.0);
  EXPECT_EQ(r.decayed[0][2], 0.0);
}

TEST(ExpertHeatTest, TokensBetweenReadingsWeighTheMeanDecayOverTheInterval) {
  ForwardCounters c(1, 2);
  FakeClock clock;
  const double h = 60;
  ExpertHeat heat(c, h, clock.fn());
  heat.Read();
  clock.now += h;
  Route(c, 0, 0, 1000);
  // Over one half-life the decay 2^(-(t - s)/h) averages (1 - 1/2) / ln 2 = 0.7213.
  const double first = heat.Read().decayed[0][0];
  EXPECT_NEAR(first, 1000 * 0.5 / std::log(2.0), 1e-9);
  // Another 1000 over the next half-life: the first batch has halved meanwhile.
  clock.now += h;
  Route(c, 0, 0, 1000);
  EXPECT_NEAR(heat.Read().decayed[0][0], first / 2 + first, 1e-9);
  EXPECT_EQ(heat.Read().total[0][0], 2000u);
}

TEST(ExpertHeatTest, SteadyTrafficConvergesToRateTimesHalfLifeOverLn2AtAnyReadingInterval) {
  // 100 tokens a second, one every 10 ms, for 20 half-lives; read every `interval` seconds.
  const double h = 30, rate = 100;
  for (const double interval : {0.5, 10.0, 45.0}) {
    ForwardCounters c(1, 1);
    FakeClock clock;
    ExpertHeat heat(c, h, clock.fn());
    double next_read = clock.now + interval;
    const double end = clock.now + 20 * h;
    while (clock.now < end) {
      clock.now += 0.01;
      Route(c, 0, 0, 1);
      if (clock.now >= next_read) {
        heat.Read();
        next_read += interval;
      }
    }
    // Read when a tick's token has just arrived, as at any other time of the run: the
    // exponential sum of evenly spaced tokens is within half a token's weight of the integral.
    const double expected = rate * h / std::log(2.0);
    EXPECT_NEAR(heat.Read().decayed[0][0], expected, expected * 2e-3) << "interval " << interval;
  }
}

TEST(ExpertHeatTest, ACounterResetIsNewTrafficNotNegative) {
  ForwardCounters c(1, 3);
  FakeClock clock;
  ExpertHeat heat(c, 60, clock.fn());
  Route(c, 0, 1, 500);
  EXPECT_DOUBLE_EQ(heat.Read().decayed[0][1], 500.0);
  c.Reset();
  Route(c, 0, 1, 20);
  const ExpertHeat::Reading r = heat.Read();
  EXPECT_DOUBLE_EQ(r.decayed[0][1], 520.0);
  EXPECT_EQ(r.total[0][1], 20u);
  // A clock that steps back is no time at all, not growth.
  clock.now -= 30;
  EXPECT_DOUBLE_EQ(heat.Read().decayed[0][1], 520.0);
}

TEST(ExpertHeatTest, ReadersOnSeveralThreadsSeeEveryTokenOnce) {
  ForwardCounters c(2, 8);
  FakeClock clock;  // constant: no decay, so the decayed count is the total
  ExpertHeat heat(c, 60, clock.fn());
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&heat] {
      for (int i = 0; i < 200; ++i) heat.Read();
    });
  }
  for (int i = 0; i < 2000; ++i) Route(c, i % 2, i % 8, 1);
  for (auto& t : readers) t.join();
  const ExpertHeat::Reading r = heat.Read();
  double sum = 0;
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 8; ++e) {
      EXPECT_DOUBLE_EQ(r.decayed[l][e], static_cast<double>(r.total[l][e]));
      sum += r.decayed[l][e];
    }
  }
  EXPECT_DOUBLE_EQ(sum, 2000.0);
}

}  // namespace
}  // namespace deltaserve::worker
