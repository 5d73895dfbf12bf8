// Routing by prefix: the policy (internal/prefix_policy.h) against the table of docs/router.md
// ("Routing by prefix"), row by row; ChooseWorkers applying it next to session affinity; and
// the key matching (internal/prefix_match.h), whose expected keys come from
// common::SnapshotKeysAt on the same tokens, the computation a worker does.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/snapshot_key.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/routing/internal/prefix_match.h"
#include "router/routing/internal/prefix_policy.h"
#include "router/routing/worker_choice.h"

namespace deltaserve::router {
namespace {

using internal::ChooseByPrefix;
using internal::PrefixCandidate;
using internal::PrefixVerdict;
using ::testing::ElementsAre;

constexpr int32_t kMaxWaiting = 4;

PrefixCandidate Holder(int64_t tokens, int64_t waiting = 0, bool saturated = false) {
  return {true, tokens, waiting, saturated};
}
PrefixCandidate Reporter(int64_t waiting = 0) { return {true, 0, waiting, false}; }
PrefixCandidate Silent(int64_t waiting = 0) { return {false, 0, waiting, false}; }

// Row 1: prefix_affinity off → off, whatever the workers hold.
TEST(PrefixPolicyTableTest, Row1KnobOffIsOff) {
  const PrefixVerdict v = ChooseByPrefix({Reporter(), Holder(512)}, false, kMaxWaiting);
  EXPECT_EQ(v.outcome, PrefixOutcome::kOff);
  EXPECT_EQ(v.first, 2u);
}

// Row 2: no worker that can take the request reports snapshot keys → off.
TEST(PrefixPolicyTableTest, Row2NoWorkerReportingKeysIsOff) {
  EXPECT_EQ(ChooseByPrefix({Silent(), Silent(3)}, true, kMaxWaiting).outcome, PrefixOutcome::kOff);
  EXPECT_EQ(ChooseByPrefix({}, true, kMaxWaiting).outcome, PrefixOutcome::kOff);
  // A held length from a worker without a root cannot happen; it would not count either.
  EXPECT_EQ(ChooseByPrefix({{false, 512, 0, false}}, true, kMaxWaiting).outcome,
            PrefixOutcome::kOff);
}

// Row 3: workers report keys, none holds a prefix of this prompt → miss.
TEST(PrefixPolicyTableTest, Row3NoHolderIsAMiss) {
  const PrefixVerdict v = ChooseByPrefix({Silent(), Reporter(), Reporter(9)}, true, kMaxWaiting);
  EXPECT_EQ(v.outcome, PrefixOutcome::kMiss);
  EXPECT_EQ(v.first, 3u);
}

// Row 4: the holder of the longest prefix is not overloaded → it goes first, even when others
// are less loaded or hold shorter prefixes; among equal holders the least loaded one.
TEST(PrefixPolicyTableTest, Row4HolderOfTheLongestPrefixGoesFirst) {
  PrefixVerdict v = ChooseByPrefix({Reporter(), Holder(256), Holder(1024, 3)}, true, kMaxWaiting);
  EXPECT_EQ(v.outcome, PrefixOutcome::kHit);
  EXPECT_EQ(v.first, 2u);
  // Ties: candidates come least loaded first, so the first of the tied holders.
  v = ChooseByPrefix({Reporter(), Holder(1024, 1), Holder(1024, 2)}, true, kMaxWaiting);
  EXPECT_EQ(v.outcome, PrefixOutcome::kHit);
  EXPECT_EQ(v.first, 1u);
  // A tied holder that is overloaded gives way to the other one.
  v = ChooseByPrefix({Holder(1024, kMaxWaiting), Holder(1024, 0)}, true, kMaxWaiting);
  EXPECT_EQ(v.outcome, PrefixOutcome::kHit);
  EXPECT_EQ(v.first, 1u);
  // Just under the threshold still holds.
  v = ChooseByPrefix({Reporter(), Holder(64, kMaxWaiting - 1)}, true, kMaxWaiting);
  EXPECT_EQ(v.outcome, PrefixOutcome::kHit);
  EXPECT_EQ(v.first, 1u);
}

// Row 5: every holder of the longest prefix is overloaded (effective waiting at the threshold
// or saturated) → overloaded: least loaded first, and a shorter holder is not preferred.
TEST(PrefixPolicyTableTest, Row5OverloadedHolderGivesWayToTheLeastLoaded) {
  PrefixVerdict v = ChooseByPrefix({Reporter(), Holder(1024, kMaxWaiting)}, true, kMaxWaiting);
  EXPECT_EQ(v.outcome, PrefixOutcome::kOverloaded);
  EXPECT_EQ(v.first, 2u);
  v = ChooseByPrefix({Reporter(), Holder(1024, 0, /*saturated=*/true)}, true, kMaxWaiting);
  EXPECT_EQ(v.outcome, PrefixOutcome::kOverloaded);
  v = ChooseByPrefix({Reporter(), Holder(256), Holder(1024, 7)}, true, kMaxWaiting);
  EXPECT_EQ(v.outcome, PrefixOutcome::kOverloaded);
  EXPECT_EQ(v.first, 3u);
}

TEST(PrefixPolicyTableTest, OutcomeLabelsAreTheMetricsLabels) {
  EXPECT_EQ(PrefixOutcomeLabel(PrefixOutcome::kOff), "off");
  EXPECT_EQ(PrefixOutcomeLabel(PrefixOutcome::kMiss), "miss");
  EXPECT_EQ(PrefixOutcomeLabel(PrefixOutcome::kHit), "hit");
  EXPECT_EQ(PrefixOutcomeLabel(PrefixOutcome::kOverloaded), "overloaded");
}

WorkerOption Option(std::string name, int32_t running = 0, int32_t waiting = 0) {
  WorkerOption o;
  o.worker = std::move(name);
  o.available = true;
  o.context_length = 4096;
  o.tokens_needed = 100;
  o.load.running = running;
  o.load.waiting = waiting;
  o.load.max_parallel = 1;
  o.load.total_kv_pages = 100;
  o.load.free_kv_pages = 100;
  o.reports_snapshots = true;
  return o;
}

// A session-affinity key whose rendezvous winner among {a, b, c} is `want`.
uint64_t AffinityKeyFor(const std::vector<WorkerOption>& w, const std::string& want) {
  for (uint64_t key = 1;; ++key) {
    const WorkerOption* best = nullptr;
    for (const WorkerOption& o : w) {
      if (best == nullptr || RendezvousScore(key, o.worker) > RendezvousScore(key, best->worker)) {
        best = &o;
      }
    }
    if (best->worker == want) return key;
  }
}

TEST(ChooseWorkersPrefixTest, HolderGoesFirstOverSessionAffinityAndLoad) {
  std::vector<WorkerOption> w = {Option("a"), Option("b"), Option("c", 1)};
  const uint64_t key = AffinityKeyFor(w, "a");
  w[2].held_prefix_tokens = 700;  // the busiest, but within prefix_max_waiting
  const WorkerChoice c = ChooseWorkers(w, key, ChoiceOptions{});
  ASSERT_EQ(c.outcome, ChoiceOutcome::kChosen);
  EXPECT_EQ(c.prefix, PrefixOutcome::kHit);
  EXPECT_FALSE(c.affinity_applied);
  ASSERT_EQ(c.order.size(), 3u);
  EXPECT_EQ(c.order[0], 2u);
}

TEST(ChooseWorkersPrefixTest, MissAndOffKeepSessionAffinity) {
  std::vector<WorkerOption> w = {Option("a"), Option("b"), Option("c")};
  const uint64_t key = AffinityKeyFor(w, "b");
  WorkerChoice c = ChooseWorkers(w, key, ChoiceOptions{});
  EXPECT_EQ(c.prefix, PrefixOutcome::kMiss);
  EXPECT_TRUE(c.affinity_applied);
  EXPECT_EQ(c.order[0], 1u);

  w[2].held_prefix_tokens = 700;
  ChoiceOptions off;
  off.prefix_affinity = false;
  c = ChooseWorkers(w, key, off);
  EXPECT_EQ(c.prefix, PrefixOutcome::kOff);
  EXPECT_TRUE(c.affinity_applied);
  EXPECT_EQ(c.order[0], 1u);
}

TEST(ChooseWorkersPrefixTest, OverloadedHolderLeavesTheLeastLoadedOrder) {
  // max_parallel 1: c's effective waiting is running + waiting - 1 = 4.
  std::vector<WorkerOption> w = {Option("a", 1), Option("b"), Option("c", 1, 4)};
  w[2].held_prefix_tokens = 700;
  const uint64_t key = AffinityKeyFor(w, "a");
  const WorkerChoice c = ChooseWorkers(w, key, ChoiceOptions{});
  EXPECT_EQ(c.prefix, PrefixOutcome::kOverloaded);
  EXPECT_FALSE(c.affinity_applied);
  EXPECT_THAT(c.order, ElementsAre(1u, 0u, 2u));
}

TEST(ChooseWorkersPrefixTest, SaturatedHolderIsOverloadedAndNotTried) {
  std::vector<WorkerOption> w = {Option("a"), Option("b", 1, 40)};
  w[1].held_prefix_tokens = 700;
  const WorkerChoice c = ChooseWorkers(w, 0, ChoiceOptions{});
  EXPECT_EQ(c.prefix, PrefixOutcome::kOverloaded);
  EXPECT_THAT(c.order, ElementsAre(0u));
}

TEST(ChooseWorkersPrefixTest, PrefixMaxWaitingIsTheThreshold) {
  std::vector<WorkerOption> w = {Option("a"), Option("b", 1, 2)};  // b: effective waiting 2
  w[1].held_prefix_tokens = 64;
  ChoiceOptions o;
  o.prefix_max_waiting = 3;
  EXPECT_EQ(ChooseWorkers(w, 0, o).prefix, PrefixOutcome::kHit);
  o.prefix_max_waiting = 2;
  EXPECT_EQ(ChooseWorkers(w, 0, o).prefix, PrefixOutcome::kOverloaded);
}

TEST(ChooseWorkersPrefixTest, WorkersWithoutSnapshotsChooseAsBefore) {
  std::vector<WorkerOption> w = {Option("a", 1), Option("b")};
  for (WorkerOption& o : w) o.reports_snapshots = false;
  const WorkerChoice c = ChooseWorkers(w, 0, ChoiceOptions{});
  EXPECT_EQ(c.prefix, PrefixOutcome::kOff);
  EXPECT_THAT(c.order, ElementsAre(1u, 0u));
}

TEST(PrefixMatchTest, PositionsAreTheLastValidBoundaries) {
  EXPECT_THAT(internal::PrefixPositions({0, 5, 5, 3, 9, 12}, 10), ElementsAre(5, 9));
  std::vector<int32_t> many;
  for (int32_t b = 1; b <= 100; ++b) many.push_back(b * 10);
  const std::vector<int64_t> p = internal::PrefixPositions(many, 1000);
  ASSERT_EQ(p.size(), internal::kMaxPrefixBoundaries);
  EXPECT_EQ(p.front(), 10 * (100 - static_cast<int64_t>(internal::kMaxPrefixBoundaries) + 1));
  EXPECT_EQ(p.back(), 1000);
}

TEST(PrefixMatchTest, LongestHeldPositionWins) {
  const std::vector<int64_t> positions = {10, 20, 30};
  const std::vector<uint64_t> prefixes = {111, 222, 333};
  EXPECT_EQ(internal::LongestHeldPosition(positions, prefixes, {5, 111, 222}), 20);
  EXPECT_EQ(internal::LongestHeldPosition(positions, prefixes, {111, 333}), 30);
  EXPECT_EQ(internal::LongestHeldPosition(positions, prefixes, {4, 5}), 0);
  EXPECT_EQ(internal::LongestHeldPosition(positions, prefixes, {}), 0);
}

TEST(PrefixMatchTest, MatchesTheKeysAWorkerComputes) {
  std::vector<int32_t> tokens(300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7 % 1000);
  const std::vector<int32_t> boundaries = {40, 128, 200};
  common::SnapshotDomain domain;
  domain.model_fingerprint[0] = 1;
  const common::SnapshotKey root = common::SnapshotRootKey(domain);
  domain.k_type = "q8_0";
  const common::SnapshotKey other_root = common::SnapshotRootKey(domain);
  absl::StatusOr<std::vector<common::SnapshotKey>> keys =
      common::SnapshotKeysAt(root, tokens, {40, 128, 200});
  ASSERT_TRUE(keys.ok()) << keys.status();

  internal::PromptPrefixMatcher matcher(tokens, boundaries);
  std::vector<uint64_t> held = {(*keys)[0].Prefix64(), (*keys)[1].Prefix64(), 17};
  std::sort(held.begin(), held.end());
  EXPECT_EQ(matcher.HeldPrefixTokens(tokens, root, held), 128);
  held.push_back((*keys)[2].Prefix64());
  std::sort(held.begin(), held.end());
  EXPECT_EQ(matcher.HeldPrefixTokens(tokens, root, held), 200);
  // The same keys under another chain (other cache types) are another worker's: no match.
  EXPECT_EQ(matcher.HeldPrefixTokens(tokens, other_root, held), 0);
  // A worker that reports nothing holds nothing.
  EXPECT_EQ(matcher.HeldPrefixTokens(tokens, root, {}), 0);
  // A prompt without boundaries matches nothing.
  internal::PromptPrefixMatcher none(tokens, {});
  EXPECT_EQ(none.HeldPrefixTokens(tokens, root, held), 0);
}

}  // namespace
}  // namespace deltaserve::router
