// The Redis tier of session snapshots (worker/cache/redis_snapshot_tier.h, docs/snapshots.md)
// with real processes: deltaserve-worker binaries on the F32 golden model against a real
// redis-server (tests/support/redis_server.h), driven over gRPC on 127.0.0.1 (label integration).
// The reference for every output is a cold worker (--snapshot-ram 0) given the same request,
// greedy. What is checked:
// - two workers sharing one Redis, a 6-turn conversation alternating between them: every turn
//   equals the cold run, and from turn 2 on the other worker restores the whole previous turn
//   (cached_prompt_tokens = its length: the end-of-output snapshot, found in Redis); the publish
//   latency of a ~1K-token snapshot, printed, and zstd's ratio on it, printed and at least 4 %
//   smaller than raw; a request refused after its lookup ends with the scheduler's status;
// - faults, each recomputed with output equal to the cold run and counted by its metric: blobs
//   with flipped bits (checksum), truncated (format), of another format version (version), made
//   by another model (model) or with other cache types (cache_types) under the key looked up;
//   Redis SIGSTOPped (errors{op="lookup"}, latency bounded), killed (errors) and restarted empty
//   (misses, then hits again); AUTH with the right password works, a wrong one is counted;
//   blobs over --redis-max-bytes are neither written nor fetched; rediss:// (TLS) works; SIGTERM
//   lets a request whose lookup is in flight finish;
// - 1,000 distinct conversations: the RAM tier stays within --snapshot-ram, Redis within its
//   maxmemory (allkeys-lru), and the keys carry a TTL.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/redis_client.h"
#include "gtest/gtest.h"
#include "tests/support/redis_server.h"
#include "tests/worker/snapshot_workers.h"

namespace deltaserve::worker {
namespace {

namespace pb = ::deltaserve::v1;
using harness::Call;
using harness::Client;
using harness::Conversation;
using harness::Errors;
using harness::kReply;
using harness::Metric;
using harness::Prefix;
using harness::RedisKey;
using harness::Rejected;
using harness::Series;
using harness::StartWorker;
using harness::Streamed;
using harness::Turn;
using harness::WaitForKey;
using harness::Worker;
using ::deltaserve::testing::RedisServerOptions;
using ::deltaserve::testing::RedisServerProcess;
using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

const std::string kHits = Series("deltaserve_model_snapshot_redis_hits_total");
const std::string kLookups = Series("deltaserve_model_snapshot_redis_lookups_total");

TEST(RedisSnapshotTierTest, TwoWorkersShareRedisAndResumeEachOthersTurnsExactly) {
  RedisServerProcess redis;
  ASSERT_TRUE(redis.Start());
  Worker a = StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url()});
  Worker b =
      StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url(), "--redis-compression", "zstd"});
  Worker cold = StartWorker("tiny-dense-f32.gguf", {"--snapshot-ram", "0"});
  ASSERT_TRUE(a.stub && b.stub && cold.stub);
  auto client = Client(redis.url());

  Conversation conv(42);
  int64_t previous_end = 0;
  for (int turn = 1; turn <= 6; ++turn) {
    conv.AddUser(15 + 5 * turn);
    Worker& w = turn % 2 == 1 ? a : b;
    const std::string what = "turn " + std::to_string(turn);
    const Streamed got = Turn(w, cold, conv, what);
    // The end of the previous turn's reply message is a boundary of this prompt, and only the
    // other worker has it: it came from Redis.
    EXPECT_EQ(got.cached, turn == 1 ? 0 : previous_end) << what;
    previous_end = static_cast<int64_t>(conv.history.size());
    ASSERT_GE(WaitForKey(*client, RedisKey(w.root, conv.history)), 0) << what;
  }
  EXPECT_EQ(Metric(a, kHits), 2);
  EXPECT_EQ(Metric(b, kHits), 3);
  EXPECT_EQ(Metric(a, Errors("lookup")) + Metric(b, Errors("get")) + Metric(a, Errors("set")), 0);

  // Publish latency: from the end of a ~1K-token request's stream to its end-of-output snapshot
  // being readable in Redis.
  Conversation big(7);
  big.AddUser(994);
  const pb::GenerateRequest big_request = big.Next(4);
  const Streamed first = Call(a, big_request);
  ASSERT_TRUE(first.status.ok());
  const Clock::time_point ended = Clock::now();
  big.AddReply(first.tokens);
  const std::string key = RedisKey(a.root, big.history);
  const double ms = WaitForKey(*client, key);
  ASSERT_GE(ms, 0);
  const double waited = std::chrono::duration<double, std::milli>(Clock::now() - ended).count();
  const std::string names[] = {key};
  const int64_t raw = (*client->StrLens(names))[0];
  std::printf(
      "publish latency of a %zu-token snapshot (%lld bytes): %.1f ms after the stream "
      "ended (worker's own figure, SET reply: %.1f ms mean over %g blobs)\n",
      big.history.size(), static_cast<long long>(raw), waited,
      1e3 * Metric(a, Series("deltaserve_model_snapshot_redis_publish_seconds_sum")) /
          Metric(a, Series("deltaserve_model_snapshot_redis_publish_seconds_count")),
      Metric(a, Series("deltaserve_model_snapshot_redis_publish_seconds_count")));
  EXPECT_LT(waited, 1000);
  // The prompt's snapshot (at its message boundary, 996) is written after the end of the output.
  ASSERT_GE(WaitForKey(*client, RedisKey(a.root, Prefix(big.history, 996))), 0);

  // The same request on b (zstd) resumes from a's prompt snapshot and writes the same
  // end-of-output key again, compressed: the ratio on one snapshot.
  const Streamed second = Call(b, big_request);
  ASSERT_TRUE(second.status.ok());
  EXPECT_EQ(second.tokens, first.tokens);
  EXPECT_EQ(second.cached, 996);
  int64_t zstd = raw;
  for (int i = 0; i < 3000 && zstd == raw; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    zstd = (*client->StrLens(names))[0];
  }
  ASSERT_NE(zstd, raw) << "b did not write the snapshot again";
  // Compressed, and by a margin only the KV and state sections can give: they are ~99.8 % of the
  // blob (f32 values, 2.2 MB; the token ids 4 KB), and zstd level 1 takes ~8 % off them (the f32
  // sign/exponent bytes of values of like magnitude repeat; docs/snapshots.md: 2,185,392 ->
  // 2,010,576). The bound is half that saving: a blob that only compressed its tokens section
  // (< 0.2 %), or grew by zstd's framing, fails. The data is deterministic (greedy, fixed
  // conversation), so the ratio does not vary between runs, only slightly between builds.
  EXPECT_LT(static_cast<double>(zstd), 0.96 * static_cast<double>(raw))
      << "zstd " << zstd << " bytes against " << raw << " raw";

  // A request refused by the scheduler after its Redis lookup (submitted from a fetch thread)
  // still ends with the scheduler's status: 1,200 prompt tokens + 200 over the context of 1,280.
  Conversation too_long(8);
  too_long.AddUser(600);
  too_long.AddUser(596);
  const double lookups = Metric(b, kLookups);
  const Streamed refused = Call(b, too_long.Next(200));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::OUT_OF_RANGE)
      << refused.status.error_message();
  EXPECT_EQ(Metric(b, kLookups), lookups + 1);
  std::printf("zstd level 1 on that snapshot: %lld -> %lld bytes (ratio %.3f)\n",
              static_cast<long long>(raw), static_cast<long long>(zstd),
              static_cast<double>(raw) / static_cast<double>(zstd));
}

// Turn 1 of a fresh conversation on `writer`; returns the Redis key of its end-of-output
// snapshot under `root` once it is there.
std::string WrittenTurn(Worker& writer, Conversation& conv, common::RedisClient& client,
                        const common::SnapshotKey& root) {
  conv.AddUser(30);
  const Streamed t1 = Call(writer, conv.Next());
  EXPECT_TRUE(t1.status.ok()) << t1.status.error_message();
  conv.AddReply(t1.tokens);
  const std::string key = RedisKey(root, conv.history);
  EXPECT_GE(WaitForKey(client, RedisKey(writer.root, conv.history)), 0);
  return key;
}

TEST(RedisSnapshotTierTest, BadBlobsAndRedisFaultsAreRecomputedAndCounted) {
  RedisServerProcess redis;
  ASSERT_TRUE(redis.Start());
  Worker w1 = StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url()});
  Worker w2 = StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url()});
  Worker cold = StartWorker("tiny-dense-f32.gguf", {"--snapshot-ram", "0"});
  Worker moe = StartWorker("tiny-moe-f32.gguf", {"--redis", redis.url()});
  Worker f16 =
      StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url(), "--cache-type-k", "f16"});
  ASSERT_TRUE(w1.stub && w2.stub && cold.stub && moe.stub && f16.stub);
  ASSERT_NE(moe.root, w1.root);
  ASSERT_NE(f16.root, w1.root);
  auto client = Client(redis.url());

  // A blob written by `writer` for turn 1, altered by `alter` and stored under w1's key of that
  // prefix; turn 2 on w2 (which holds nothing of it) must refuse it for `reason` and still give
  // the cold run's tokens.
  uint32_t seed = 100;
  auto bad_blob = [&](Worker& writer, const std::string& reason,
                      const std::function<void(std::string&)>& alter) {
    Conversation conv(seed++);
    const std::string key = WrittenTurn(writer, conv, *client, w1.root);
    const int64_t end = static_cast<int64_t>(conv.history.size());
    auto blob = client->Get(RedisKey(writer.root, conv.history));
    ASSERT_TRUE(blob.ok() && blob->has_value()) << reason;
    std::string bytes = **blob;
    alter(bytes);
    ASSERT_TRUE(client->Set(key, bytes).ok());
    const double before = Metric(w2, Rejected(reason));
    conv.AddUser(12);
    const Streamed got = Turn(w2, cold, conv, reason);
    EXPECT_LT(got.cached, end) << reason;  // a shorter prefix (w1's prompt snapshot) or none
    EXPECT_EQ(Metric(w2, Rejected(reason)), before + 1) << reason;
  };
  bad_blob(w1, "checksum", [](std::string& b) { b[b.size() / 2] ^= 0x10; });
  bad_blob(w1, "format", [](std::string& b) { b.resize(b.size() - 1000); });
  bad_blob(w1, "version", [](std::string& b) { b[8] = 2; });
  bad_blob(moe, "model", [](std::string&) {});
  bad_blob(f16, "cache_types", [](std::string&) {});

  // Redis stopped (SIGSTOP): every call runs into its deadline; the request does not wait
  // longer than the lookup's 50 ms (asserted generously: the cold run's time plus 1 s).
  {
    Conversation conv(200);
    WrittenTurn(w1, conv, *client, w1.root);
    conv.AddUser(12);
    const Streamed cold_run = Call(cold, conv.Next());
    const double errors = Metric(w2, Errors("lookup"));
    redis.Pause();
    const Streamed got = Turn(w2, cold, conv, "paused");
    redis.Resume();
    EXPECT_EQ(got.cached, 0);
    EXPECT_LT(got.ms, cold_run.ms + 1000);
    EXPECT_EQ(Metric(w2, Errors("lookup")), errors + 1);
  }

  // Redis killed mid-run: lookups fail fast, requests are served; restarted empty: what was
  // written before is a miss, and new snapshots are written and found again.
  {
    Conversation before_kill(300);
    WrittenTurn(w1, before_kill, *client, w1.root);
    redis.Kill();
    Conversation during(301);
    during.AddUser(20);
    const double errors = Metric(w2, Errors("lookup"));
    const Streamed a = Turn(w1, cold, during, "killed, w1");
    during.AddUser(12);
    const Streamed b = Turn(w2, cold, during, "killed, w2");
    EXPECT_EQ(b.cached, 0);
    EXPECT_EQ(Metric(w2, Errors("lookup")), errors + 1);
    ASSERT_TRUE(redis.Restart());
    // The clients retry a failed connect after 1 s (RedisOptions::reconnect_backoff).
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    const double lookups = Metric(w2, kLookups), hits = Metric(w2, kHits);
    before_kill.AddUser(12);
    const Streamed miss = Turn(w2, cold, before_kill, "restarted, old conversation");
    EXPECT_EQ(miss.cached, 0);
    EXPECT_EQ(Metric(w2, kLookups), lookups + 1);
    EXPECT_EQ(Metric(w2, kHits), hits);
    Conversation after(302);
    WrittenTurn(w1, after, *client, w1.root);
    const int64_t end = static_cast<int64_t>(after.history.size());
    after.AddUser(12);
    const Streamed hit = Turn(w2, cold, after, "restarted, new conversation");
    EXPECT_EQ(hit.cached, end);
    EXPECT_EQ(Metric(w2, kHits), hits + 1);
  }
}

TEST(RedisSnapshotTierTest, AuthWorksAndAWrongPasswordIsCountedNotFatal) {
  RedisServerProcess redis;
  RedisServerOptions options;
  options.password = "s3cret";
  ASSERT_TRUE(redis.Start(options));
  const std::string wrong = "redis://:wr0ng@127.0.0.1:" + std::to_string(redis.port());
  Worker w1 = StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url()});
  Worker w2 = StartWorker("tiny-dense-f32.gguf", {"--redis", wrong});
  Worker w3 = StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url()});
  Worker cold = StartWorker("tiny-dense-f32.gguf", {"--snapshot-ram", "0"});
  ASSERT_TRUE(w1.stub && w2.stub && w3.stub && cold.stub);
  auto client = Client(redis.url());
  Conversation conv(400);
  conv.AddUser(30);
  Turn(w1, cold, conv, "auth turn 1");
  const int64_t end = static_cast<int64_t>(conv.history.size());
  ASSERT_GE(WaitForKey(*client, RedisKey(w1.root, conv.history)), 0);
  conv.AddUser(12);
  Conversation copy = conv;
  const Streamed refused = Turn(w2, cold, conv, "wrong password");
  EXPECT_EQ(refused.cached, 0);
  EXPECT_GE(Metric(w2, Errors("lookup")), 1);
  const Streamed found = Turn(w3, cold, copy, "right password");
  EXPECT_EQ(found.cached, end);
  // Neither password reaches a log.
  for (Worker* w : {&w1, &w2, &w3}) {
    EXPECT_EQ(w->proc->err().find("s3cret"), std::string::npos);
    EXPECT_EQ(w->proc->err().find("wr0ng"), std::string::npos);
  }
  EXPECT_NE(w2.proc->err().find("lookup_error"), std::string::npos) << w2.proc->err();
}

TEST(RedisSnapshotTierTest, TlsRedisCarriesSnapshotsBetweenWorkers) {
  if (!::deltaserve::testing::RedisServerHasTls()) GTEST_SKIP() << "redis-server without TLS";
  RedisServerProcess redis;
  RedisServerOptions options;
  options.tls = ::deltaserve::testing::MakeTestTlsFiles(redis.dir());
  ASSERT_TRUE(options.tls.has_value());
  ASSERT_TRUE(redis.Start(options));
  ASSERT_EQ(redis.url().rfind("rediss://", 0), 0u) << redis.url();
  Worker w1 = StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url()});
  Worker w2 = StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url()});
  Worker cold = StartWorker("tiny-dense-f32.gguf", {"--snapshot-ram", "0"});
  ASSERT_TRUE(w1.stub && w2.stub && cold.stub);
  auto client = Client(redis.url());
  Conversation conv(600);
  conv.AddUser(30);
  Turn(w1, cold, conv, "tls turn 1");
  const int64_t end = static_cast<int64_t>(conv.history.size());
  ASSERT_GE(WaitForKey(*client, RedisKey(w1.root, conv.history)), 0);
  conv.AddUser(12);
  EXPECT_EQ(Turn(w2, cold, conv, "tls turn 2").cached, end);
}

TEST(RedisSnapshotTierTest, SigtermLetsARequestInItsRedisLookupFinish) {
  RedisServerProcess redis;
  ASSERT_TRUE(redis.Start());
  // A long lookup deadline so that SIGTERM surely arrives while the lookup waits on a stopped
  // Redis: the drain must let the request reach its scheduler and finish.
  Worker w = StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url(), "--redis-timeout", "800"});
  ASSERT_TRUE(w.stub);
  Conversation conv(700);
  conv.AddUser(30);
  redis.Pause();
  Streamed got;
  std::thread client([&] { got = Call(w, conv.Next()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  w.proc->Signal(SIGTERM);
  client.join();
  redis.Resume();
  EXPECT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.tokens.size(), static_cast<size_t>(kReply));
  EXPECT_GE(got.ms, 700);  // it did wait for the lookup's deadline
  EXPECT_EQ(w.proc->Wait(seconds(30)), 0) << w.proc->err();
}

TEST(RedisSnapshotTierTest, AThousandConversationsStayWithinTheRamBudgetAndRedisCap) {
  constexpr int64_t kCap = 24 << 20;
  RedisServerProcess redis;
  RedisServerOptions options;
  options.maxmemory = kCap;
  options.maxmemory_policy = "allkeys-lru";
  ASSERT_TRUE(redis.Start(options));
  constexpr int64_t kBudget = 4 << 20;
  Worker w = StartWorker("tiny-dense-f32.gguf",
                         {"--redis", redis.url(), "--snapshot-ram", std::to_string(kBudget),
                          "--parallel", "4", "--ctx", "128"});
  ASSERT_TRUE(w.stub);
  auto client = Client(redis.url());
  std::atomic<int> next{0}, failed{0};
  std::atomic<double> max_ram{0};
  auto stream = [&] {
    while (true) {
      const int i = next++;
      if (i >= 1000) return;
      Conversation conv(10000 + i);
      conv.AddUser(24);
      const Streamed s = Call(w, conv.Next(2));
      if (!s.status.ok() || s.tokens.size() != 2) ++failed;
      if (i % 50 == 0) {
        const double ram = Metric(w, Series("deltaserve_model_snapshot_ram_bytes"));
        double seen = max_ram.load();
        while (ram > seen && !max_ram.compare_exchange_weak(seen, ram)) {
        }
      }
    }
  };
  std::vector<std::thread> streams;
  for (int i = 0; i < 4; ++i) streams.emplace_back(stream);
  for (std::thread& t : streams) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(max_ram.load(), 0);
  EXPECT_LE(max_ram.load(), kBudget);
  EXPECT_LE(Metric(w, Series("deltaserve_model_snapshot_ram_bytes")), kBudget);
  const double written = Metric(w, Series("deltaserve_model_snapshot_redis_written_bytes_total"));
  EXPECT_GT(written, 2.0 * kCap) << "the cap was never under pressure";
  auto info = client->Info("memory");
  ASSERT_TRUE(info.ok()) << info.status();
  const size_t at = info->find("used_memory:");
  ASSERT_NE(at, std::string::npos);
  int64_t used = 0;
  ASSERT_TRUE(absl::SimpleAtoi(info->substr(at + 12, info->find('\r', at) - at - 12), &used));
  std::printf(
      "redis used_memory %lld of maxmemory %lld after %.0f bytes written (%.0f snapshots "
      "not written: queue full or evicted first)\n",
      static_cast<long long>(used), static_cast<long long>(kCap), written,
      Metric(w, Series("deltaserve_model_snapshot_redis_publish_dropped_total")));
  EXPECT_LE(used, kCap);
  const std::string_view scan[] = {"SCAN", "0", "MATCH", "ds:snap:v1:*", "COUNT", "1000"};
  auto keys = client->Command(scan);
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->elements.size(), 2u);
  int sampled = 0;
  for (const common::RedisReply& k : keys->elements[1].elements) {
    if (sampled == 20) break;
    auto ttl = client->Ttl(k.str);
    ASSERT_TRUE(ttl.ok()) << ttl.status();
    if (!ttl->has_value()) continue;  // evicted since the SCAN
    EXPECT_GT(**ttl, absl::ZeroDuration()) << k.str;
    EXPECT_LE(**ttl, absl::Seconds(3600)) << k.str;
    ++sampled;
  }
  EXPECT_GT(sampled, 0);
}

TEST(RedisSnapshotTierTest, SnapshotsOverTheSizeCapAreNeitherWrittenNorRead) {
  RedisServerProcess redis;
  ASSERT_TRUE(redis.Start());
  // A 70-token snapshot of tiny-dense-f32 is ~180 KB; 64 KiB lets none through.
  Worker small =
      StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url(), "--redis-max-bytes", "64KiB"});
  Worker big = StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url()});
  Worker cold = StartWorker("tiny-dense-f32.gguf", {"--snapshot-ram", "0"});
  ASSERT_TRUE(small.stub && big.stub && cold.stub);
  auto client = Client(redis.url());
  Conversation conv(500);
  conv.AddUser(60);
  Turn(small, cold, conv, "small writes");
  const std::string skipped =
      Series("deltaserve_model_snapshot_redis_write_skipped_total", "reason=\"too_large\"");
  for (int i = 0; i < 2000 && Metric(small, skipped) < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(Metric(small, skipped), 2);  // the prompt's snapshot and the end of the output
  EXPECT_EQ(Metric(small, Series("deltaserve_model_snapshot_redis_written_total")), 0);

  Conversation other(501);
  other.AddUser(60);
  Turn(big, cold, other, "big writes");
  ASSERT_GE(WaitForKey(*client, RedisKey(big.root, other.history)), 0);
  ASSERT_GE(WaitForKey(*client, RedisKey(big.root, Prefix(other.history, other.boundaries[0]))), 0);
  other.AddUser(10);
  const Streamed got = Turn(small, cold, other, "small reads");
  EXPECT_EQ(got.cached, 0);
  // STRLEN shows both of big's blobs too large: neither is fetched.
  EXPECT_EQ(Metric(small, Rejected("too_large")), 2);
  EXPECT_EQ(Metric(small, Errors("get")), 0);
}

}  // namespace
}  // namespace deltaserve::worker
