// Routing by prefix through RouterBackend over real gRPC (integration): ScriptedWorker test
// doubles report a snapshot key root and the key prefixes they hold (as a worker with
// snapshots would in ModelInfo / ModelLoad); the expected keys come from
// common::SnapshotKeysAt over the prompt's byte tokens, what a worker computes. Also: the
// GenerateRequest carries the renderer's message boundaries and turn-end ids, the metric counts
// each outcome, the config knob turns it off, and a malformed root is ignored and counted.
#include <memory>
#include <string>
#include <vector>

#include "common/snapshot_key.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/routing/routing_metrics.h"
#include "router/routing/routing_state.h"
#include "tests/router/router_backend_fixture.h"

namespace deltaserve::router {
namespace {

namespace v1 = ::deltaserve::v1;
using ::testing::ElementsAre;
using testing::Model;
using testing::Msg;
using testing::RouterBackendTest;
using testing::ScriptedModel;
using testing::ScriptedWorker;

// A conversation of four messages: boundaries (the test renderer's) at 100, 150, 190, 220.
api::CompletionRequest Conversation() {
  api::CompletionRequest r;
  r.model = "m";
  r.request_id = "req-prefix";
  r.messages = {Msg("system", std::string(100, 's')), Msg("user", std::string(50, 'u')),
                Msg("assistant", std::string(40, 'a')), Msg("user", std::string(30, 'q'))};
  return r;
}

common::SnapshotKey Root() {
  common::SnapshotDomain domain;
  domain.model_fingerprint[0] = 7;
  return common::SnapshotRootKey(domain);
}

std::string RootBytes() {
  const common::SnapshotKey root = Root();
  return std::string(root.bytes.begin(), root.bytes.end());
}

// Prefix64 of the conversation's keys at `positions`.
std::vector<uint64_t> HeldAt(std::vector<int64_t> positions) {
  const api::CompletionRequest r = Conversation();
  std::vector<int32_t> tokens;
  for (const api::ChatMessage& m : r.messages) {
    for (unsigned char c : m.content) tokens.push_back(c);
  }
  absl::StatusOr<std::vector<common::SnapshotKey>> keys =
      common::SnapshotKeysAt(Root(), tokens, positions);
  EXPECT_TRUE(keys.ok()) << keys.status();
  std::vector<uint64_t> out;
  for (const common::SnapshotKey& k : *keys) out.push_back(k.Prefix64());
  return out;
}

ScriptedModel SnapshotModel(int32_t running, int32_t waiting, std::vector<uint64_t> held) {
  ScriptedModel m = Model("m", running, waiting);
  m.snapshot_key_root = RootBytes();
  m.snapshot_key_prefixes = std::move(held);
  return m;
}

class RouterBackendPrefixTest : public RouterBackendTest {
 protected:
  int64_t Outcomes(std::string_view outcome) const {
    return pool_->metrics().prefix_routing(outcome);
  }
  // Waits until the pool has polled worker `i` reporting `waiting` sequences.
  bool WaitForWaiting(size_t i, int32_t waiting) {
    return WaitForWorker(i, [&](const WorkerSnapshot& s) {
      return !s.models.empty() && s.models[0]->load.waiting == waiting;
    });
  }
};

TEST_F(RouterBackendPrefixTest, RequestGoesToTheWorkerHoldingItsLongestPrefix) {
  // `shorter` is idle and holds the first message; `longer` is busier (under the threshold:
  // max_parallel 4, running 2) and holds three messages; `plain` has snapshots off.
  ScriptedWorker& shorter = AddWorker({SnapshotModel(0, 0, HeldAt({100}))});
  ScriptedWorker& longer = AddWorker({SnapshotModel(2, 0, HeldAt({100, 190}))});
  ScriptedWorker& plain = AddWorker({Model("m")});
  StartRouter();
  auto o = Run(Conversation());
  ASSERT_TRUE(o->end.has_value()) << (o->error ? o->error->ToString() : "");
  EXPECT_EQ(longer.generate_calls(), 1);
  EXPECT_EQ(shorter.generate_calls() + plain.generate_calls(), 0);
  EXPECT_EQ(Outcomes(kPrefixHit), 1);

  const v1::GenerateRequest g = longer.last_request();
  EXPECT_THAT(g.message_boundaries(), ElementsAre(100, 150, 190, 220));
  EXPECT_THAT(g.turn_end_token_ids(), ElementsAre(7, 10));

  // Once `longer` queues up to prefix_max_waiting (running 4 + waiting 4 on 4 slots), the least
  // loaded worker takes the conversation instead.
  longer.SetModels({SnapshotModel(4, 4, HeldAt({100, 190}))});
  ASSERT_TRUE(WaitForWaiting(1, 4));
  o = Run(Conversation());
  ASSERT_TRUE(o->end.has_value());
  EXPECT_EQ(longer.generate_calls(), 1);
  EXPECT_EQ(shorter.generate_calls() + plain.generate_calls(), 1);
  EXPECT_EQ(Outcomes(kPrefixOverloaded), 1);

  // A conversation no worker holds is a miss.
  api::CompletionRequest other = Conversation();
  other.messages[0].content = "another system prompt";
  ASSERT_TRUE(Run(other)->end.has_value());
  EXPECT_EQ(Outcomes(kPrefixMiss), 1);

  // The knob (a reload: the next request reads the new config) turns it off.
  RouterConfig off = *config_;
  off.routing.prefix_affinity = false;
  config_ = std::make_shared<const RouterConfig>(off);
  ASSERT_TRUE(Run(Conversation())->end.has_value());
  EXPECT_EQ(Outcomes(kPrefixOff), 1);
  EXPECT_EQ(Outcomes(kPrefixHit), 1);

  RoutingState state([this] { return config_; }, pool_.get(), 1700000000);
  api::PrometheusText text;
  state.WriteMetrics(text);
  for (const char* line : {"deltaserve_router_prefix_routing_total{outcome=\"hit\"} 1",
                           "deltaserve_router_prefix_routing_total{outcome=\"overloaded\"} 1",
                           "deltaserve_router_prefix_routing_total{outcome=\"miss\"} 1",
                           "deltaserve_router_prefix_routing_total{outcome=\"off\"} 1"}) {
    EXPECT_NE(text.text().find(line), std::string::npos) << line << "\n" << text.text();
  }
}

TEST_F(RouterBackendPrefixTest, WorkersWithoutSnapshotsRouteAsBeforeAndCountOff) {
  AddWorker({Model("m", 2, 0)});
  ScriptedWorker& idle = AddWorker({Model("m")});
  StartRouter();
  auto o = Run(Conversation());
  ASSERT_TRUE(o->end.has_value());
  EXPECT_EQ(idle.generate_calls(), 1);
  EXPECT_EQ(Outcomes(kPrefixOff), 1);
  EXPECT_EQ(Outcomes(kPrefixHit) + Outcomes(kPrefixMiss) + Outcomes(kPrefixOverloaded), 0);
  // The boundaries go to the worker whether or not it snapshots.
  EXPECT_EQ(idle.last_request().message_boundaries_size(), 4);
}

TEST_F(RouterBackendPrefixTest, MalformedRootIsIgnoredLoggedOnceAndCounted) {
  ScriptedModel bad = SnapshotModel(0, 0, HeldAt({100, 190}));
  bad.snapshot_key_root = "short";  // not 16 bytes: another protocol version
  ScriptedWorker& skewed = AddWorker({bad});
  ScriptedWorker& busy = AddWorker({SnapshotModel(2, 0, {})});
  StartRouter();
  ASSERT_TRUE(pool_->WaitForFirstPolls(absl::Seconds(30), 3));
  auto o = Run(Conversation());
  ASSERT_TRUE(o->end.has_value());
  EXPECT_EQ(skewed.generate_calls(), 1);  // least loaded; its keys are not trusted
  EXPECT_EQ(busy.generate_calls(), 0);
  EXPECT_EQ(Outcomes(kPrefixMiss), 1);
  EXPECT_EQ(pool_->metrics().worker(skewed.address()).bad_snapshot_roots, 1);  // once, not per poll
}

}  // namespace
}  // namespace deltaserve::router
