// Unit tests of routing's pure parts: alias resolution (candidates.h), worker choice with load
// and rendezvous affinity (worker_choice.h), the circuit breaker with explicit times, and the
// tokenizer cache. Expected values follow from the rules in each header.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "router/api/api_error.h"
#include "router/routing/candidates.h"
#include "router/routing/circuit_breaker.h"
#include "router/routing/tokenizer_provider.h"
#include "router/routing/worker_choice.h"

namespace deltaserve::router {
namespace {

namespace v1 = ::deltaserve::v1;

api::ChatMessage Msg(std::string role, std::string content) {
  api::ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

RouterConfig AliasConfig3() {
  RouterConfig c;
  c.models = {{"big", "qwen-4b", {}}, {"small", "", {}}, {"coder", "coder-1.5b", {}}};
  c.models[0].defaults.temperature = 0.7;
  c.aliases = {{"fast", {"big", "small"}}, {"any", {"fast", "coder", "big", "nope"}}};
  return c;
}

TEST(ResolveCandidates, AliasChainInOrderWithServedNames) {
  auto c = ResolveCandidates("fast", AliasConfig3());
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), 2u);
  EXPECT_EQ((*c)[0].name, "big");
  EXPECT_EQ((*c)[0].served_name, "qwen-4b");
  EXPECT_EQ((*c)[0].defaults.temperature, 0.7);
  EXPECT_EQ((*c)[1].name, "small");
  EXPECT_EQ((*c)[1].served_name, "small");  // served_name defaults to the name
}

TEST(ResolveCandidates, NestedAliasExpandsInPlaceWithoutDuplicatesOrUnknowns) {
  auto c = ResolveCandidates("any", AliasConfig3());
  ASSERT_TRUE(c.ok());
  std::vector<std::string> names;
  for (const Candidate& x : *c) names.push_back(x.name);
  EXPECT_EQ(names, (std::vector<std::string>{"big", "small", "coder"}));
}

TEST(ResolveCandidates, UnknownModelIsNotFoundNamingTheField) {
  auto c = ResolveCandidates("gpt-4", AliasConfig3());
  ASSERT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(api::ErrorParam(c.status()), "model");
  EXPECT_EQ(api::ErrorCode(c.status()), "model_not_found");
  EXPECT_EQ(api::ApiErrorFromStatus(c.status()).http_status, 404);
}

TEST(ResolveCandidates, WithoutConfiguredModelsAnyNamePassesThrough) {
  RouterConfig c;
  c.aliases = {{"a", {"x", "y"}}};
  auto one = ResolveCandidates("qwen", c);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)[0].served_name, "qwen");
  auto chain = ResolveCandidates("a", c);
  ASSERT_TRUE(chain.ok());
  EXPECT_EQ(chain->size(), 2u);
}

TEST(ApplyModelDefaults, FillsOnlyUnsetFields) {
  ModelDefaults d;
  d.temperature = 0.6;
  d.top_p = 0.9;
  d.top_k = 20;
  d.enable_thinking = false;
  api::CompletionRequest r;
  r.sampling.temperature = 1.2;
  ApplyModelDefaults(d, r);
  EXPECT_EQ(*r.sampling.temperature, 1.2);
  EXPECT_EQ(*r.sampling.top_p, 0.9);
  EXPECT_EQ(*r.sampling.top_k, 20);
  EXPECT_FALSE(r.sampling.min_p.has_value());
  EXPECT_EQ(r.enable_thinking, false);
}

// allow_special_tokens_in_content comes from the model's config alone (docs/chat.md): each
// attempt's request gets the candidate's value, whatever an earlier candidate set.
TEST(ApplyModelDefaults, SpecialTokensInContentFollowTheCandidateModel) {
  api::CompletionRequest r;
  ModelDefaults allowing;
  allowing.allow_special_tokens_in_content = true;
  ApplyModelDefaults(allowing, r);
  EXPECT_TRUE(r.allow_special_tokens_in_content);
  ApplyModelDefaults(ModelDefaults{}, r);
  EXPECT_FALSE(r.allow_special_tokens_in_content);
}

WorkerOption Option(std::string name, int32_t running, int32_t waiting, int32_t ctx = 4096,
                    int64_t need = 10) {
  WorkerOption o;
  o.worker = std::move(name);
  o.available = true;
  o.context_length = ctx;
  o.tokens_needed = need;
  o.load.running = running;
  o.load.waiting = waiting;
  o.load.max_parallel = 4;
  o.load.total_kv_pages = 100;
  o.load.free_kv_pages = 100;
  return o;
}

TEST(ChooseWorkers, LeastLoadedFirstWithoutAffinity) {
  std::vector<WorkerOption> w = {Option("a", 4, 1), Option("b", 1, 0), Option("c", 3, 0)};
  WorkerChoice c = ChooseWorkers(w, 0, {});
  ASSERT_EQ(c.outcome, ChoiceOutcome::kChosen);
  EXPECT_EQ(c.order, (std::vector<size_t>{1, 2, 0}));
  EXPECT_FALSE(c.affinity_applied);
}

TEST(ChooseWorkers, RouterInflightCountsWhenPolledLoadLags) {
  std::vector<WorkerOption> w = {Option("a", 0, 0), Option("b", 1, 0)};
  w[0].router_inflight = 3;  // three streams opened since the last poll said "idle"
  EXPECT_EQ(ChooseWorkers(w, 0, {}).order[0], 1u);
}

TEST(ChooseWorkers, FreePagesBreakLoadTies) {
  std::vector<WorkerOption> w = {Option("a", 1, 0), Option("b", 1, 0)};
  w[0].load.free_kv_pages = 10;
  EXPECT_EQ(ChooseWorkers(w, 0, {}).order[0], 1u);
}

TEST(ChooseWorkers, AffinityIsStickyAndSurvivesOtherWorkersLeaving) {
  std::vector<WorkerOption> w = {Option("a", 0, 0), Option("b", 2, 0), Option("c", 1, 0),
                                 Option("d", 3, 0)};
  std::map<size_t, int> winners;
  for (uint64_t key = 1; key <= 200; ++key) {
    WorkerChoice first = ChooseWorkers(w, key, {});
    ASSERT_TRUE(first.affinity_applied);
    // The same key always picks the same worker, whatever the (unsaturated) loads.
    for (int i = 0; i < 3; ++i) EXPECT_EQ(ChooseWorkers(w, key, {}).order[0], first.order[0]);
    ++winners[first.order[0]];
    // Rendezvous: taking away a worker that is not the winner does not move the key.
    std::vector<WorkerOption> fewer = w;
    const size_t other = (first.order[0] + 1) % w.size();
    fewer[other].available = false;
    EXPECT_EQ(ChooseWorkers(fewer, key, {}).order[0], first.order[0]);
  }
  // Keys spread over all four workers (200 keys: each gets some).
  EXPECT_EQ(winners.size(), 4u);
}

TEST(ChooseWorkers, AffinityYieldsWhenItsWorkerQueues) {
  std::vector<WorkerOption> w = {Option("a", 0, 0), Option("b", 0, 0)};
  uint64_t key = 1;
  const size_t fav = ChooseWorkers(w, key, {}).order[0];
  w[fav].load.running = 4;
  w[fav].load.waiting = 4;  // affinity_max_waiting is 4
  WorkerChoice c = ChooseWorkers(w, key, {});
  EXPECT_EQ(c.order[0], 1 - fav);
  EXPECT_EQ(c.order.size(), 2u);  // still usable, just not first
}

TEST(ChooseWorkers, ContextTooSmallReportsTheLargestContext) {
  std::vector<WorkerOption> w = {Option("a", 0, 0, 512, 1000), Option("b", 0, 0, 768, 1000)};
  WorkerChoice c = ChooseWorkers(w, 0, {});
  EXPECT_EQ(c.outcome, ChoiceOutcome::kContextTooSmall);
  EXPECT_EQ(c.largest_context, 768);
  EXPECT_EQ(c.tokens_needed, 1000);
  w.push_back(Option("c", 0, 0, 1000, 1000));  // exactly fits
  EXPECT_EQ(ChooseWorkers(w, 0, {}).order, (std::vector<size_t>{2}));
}

TEST(ChooseWorkers, SaturatedAndNoWorkerOutcomes) {
  ChoiceOptions o;
  o.saturated_waiting = 8;
  std::vector<WorkerOption> w = {Option("a", 4, 8), Option("b", 4, 9)};
  EXPECT_EQ(ChooseWorkers(w, 0, o).outcome, ChoiceOutcome::kSaturated);
  w[1].load.waiting = 7;
  EXPECT_EQ(ChooseWorkers(w, 0, o).order, (std::vector<size_t>{1}));
  for (auto& x : w) x.available = false;
  EXPECT_EQ(ChooseWorkers(w, 0, o).outcome, ChoiceOutcome::kNoWorker);
  EXPECT_EQ(ChooseWorkers({}, 0, o).outcome, ChoiceOutcome::kNoWorker);
}

TEST(ChooseWorkers, JustArrivedSequencesThatFitFreeSlotsAreNoQueue) {
  // A poll taken during a burst: 40 sequences arrived since the worker's last step and count as
  // waiting, but 86 of its 96 slots are free and so are its pages: not saturated.
  ChoiceOptions o;  // saturated_waiting 32
  WorkerOption busy = Option("a", 10, 40);
  busy.load.max_parallel = 96;
  EXPECT_EQ(EffectiveWaiting(busy), 0);
  EXPECT_EQ(ChooseWorkers({busy}, 0, o).outcome, ChoiceOutcome::kChosen);
  // Beyond the free slots it is a queue: 90 running + 40 waiting on 96 slots = 34 queued.
  busy.load.running = 90;
  EXPECT_EQ(EffectiveWaiting(busy), 34);
  EXPECT_EQ(ChooseWorkers({busy}, 0, o).outcome, ChoiceOutcome::kSaturated);
  // Without a free KV page every waiting sequence waits, free slots or not.
  busy.load.running = 10;
  busy.load.free_kv_pages = 0;
  EXPECT_EQ(EffectiveWaiting(busy), 40);
  EXPECT_EQ(ChooseWorkers({busy}, 0, o).outcome, ChoiceOutcome::kSaturated);
  // The router's own streams beyond the slots count even when the poll saw none waiting.
  WorkerOption lagging = Option("b", 0, 0);
  lagging.load.max_parallel = 4;
  lagging.router_inflight = 40;
  EXPECT_EQ(EffectiveWaiting(lagging), 36);
}

TEST(AffinityKey, SameConversationPrefixSameKey) {
  api::CompletionRequest a;
  a.messages = {Msg("system", "be brief"), Msg("user", "hi")};
  api::CompletionRequest b = a;
  b.messages.push_back(Msg("assistant", "hello"));
  b.messages.push_back(Msg("user", "more"));
  EXPECT_EQ(AffinityKey(a), AffinityKey(b));  // a later turn of the same conversation
  api::CompletionRequest c = a;
  c.messages[1].content = "other";
  EXPECT_NE(AffinityKey(a), AffinityKey(c));
  EXPECT_NE(AffinityKey(a), 0u);
  api::CompletionRequest empty;
  empty.endpoint = api::Endpoint::kCompletions;
  EXPECT_EQ(AffinityKey(empty), 0u);
}

TEST(CircuitBreaker, OpensAfterConsecutiveFailuresAndClosesAfterATrial) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  CircuitBreaker b(3, absl::Seconds(5));
  EXPECT_FALSE(b.RecordFailure(t0));
  EXPECT_FALSE(b.RecordFailure(t0));
  b.RecordCallSuccess(t0);  // resets the count
  EXPECT_FALSE(b.RecordFailure(t0));
  EXPECT_FALSE(b.RecordFailure(t0));
  b.RecordPollSuccess(t0);  // polls do not reset it while closed
  EXPECT_TRUE(b.RecordFailure(t0));
  EXPECT_EQ(b.State(t0), CircuitState::kOpen);
  EXPECT_FALSE(b.TryBeginCall(t0 + absl::Seconds(4)));
  EXPECT_FALSE(b.RecordFailure(t0 + absl::Seconds(4)));  // ignored while open
  const absl::Time t1 = t0 + absl::Seconds(5);
  EXPECT_EQ(b.State(t1), CircuitState::kHalfOpen);
  EXPECT_TRUE(b.TryBeginCall(t1));   // the trial
  EXPECT_FALSE(b.TryBeginCall(t1));  // only one
  EXPECT_FALSE(b.Admits(t1));
  EXPECT_TRUE(b.RecordFailure(t1));  // a failed trial opens it again
  EXPECT_EQ(b.State(t1 + absl::Seconds(4)), CircuitState::kOpen);
  const absl::Time t2 = t1 + absl::Seconds(5);
  EXPECT_TRUE(b.TryBeginCall(t2));
  b.RecordCallSuccess(t2);
  EXPECT_EQ(b.State(t2), CircuitState::kClosed);
  EXPECT_EQ(b.consecutive_failures(), 0);
}

TEST(CircuitBreaker, HalfOpenClosesOnAPollAndNeutralEndsFreeTheTrial) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  CircuitBreaker b(1, absl::Milliseconds(100));
  EXPECT_TRUE(b.RecordFailure(t0));
  const absl::Time t1 = t0 + absl::Milliseconds(100);
  EXPECT_TRUE(b.TryBeginCall(t1));
  b.RecordNeutral(t1);  // e.g. the trial was cancelled: another call may be the trial
  EXPECT_TRUE(b.Admits(t1));
  b.RecordPollSuccess(t1);
  EXPECT_EQ(b.State(t1), CircuitState::kClosed);
}

TEST(CachingTokenizerProvider, BuildsOncePerDigest) {
  int builds = 0;
  CachingTokenizerProvider provider([&](const v1::Tokenizer&) {
    ++builds;
    common::TokenizerVocab vocab;
    vocab.tokens = {"a", "b"};
    return common::Tokenizer::Create(std::move(vocab));
  });
  v1::Tokenizer proto;
  auto a = provider.Get(proto, "d1");
  auto b = provider.Get(proto, "d1");
  auto c = provider.Get(proto, "d2");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  EXPECT_EQ(builds, 2);
  EXPECT_EQ(provider.size(), 2u);
}

}  // namespace
}  // namespace deltaserve::router
