// deltaserve-worker processes for the Redis tier's integration tests
// (tests/worker/redis_snapshot_tier_test.cc): a worker on a golden model with small KV pages and
// a metrics port, conversations driven over gRPC with message boundaries and turn-end tokens, its
// metrics read back, and the Redis keys its snapshots go to.
//
//   Worker w = StartWorker("tiny-dense-f32.gguf", {"--redis", redis.url()});
//   Conversation conv(42);  conv.AddUser(30);
//   Streamed s = Call(w, conv.Next());  conv.AddReply(s.tokens);
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/redis_client.h"
#include "common/snapshot_key.h"
#include "deltaserve/v1/worker.grpc.pb.h"
#include "tests/support/child_process.h"

namespace deltaserve::worker::harness {

namespace pb = ::deltaserve::v1;

// Stand-ins for ChatML's framing tokens (any ids of the vocabulary do).
inline const std::vector<int32_t> kTurnEnd = {7, 8};     // <|im_end|> "\n"
inline const std::vector<int32_t> kAssistant = {9, 10};  // <|im_start|>assistant "\n"
inline constexpr int kReply = 5;

// A running deltaserve-worker (its process, gRPC stub, metrics port, snapshot key root).
struct Worker {
  std::unique_ptr<::deltaserve::testing::ChildProcess> proc;
  std::string address;
  int metrics_port = -1;
  std::unique_ptr<pb::Worker::Stub> stub;
  common::SnapshotKey root;  // ModelInfo.snapshot_key_root (zero when snapshots are off)
};

// Starts deltaserve-worker on golden model `gguf` (--ctx 1280, --parallel 2, f32 KV in 16-token
// pages, one thread, metrics on a free port) with `extra` flags after those (a later flag wins).
Worker StartWorker(const std::string& gguf, std::vector<std::string> extra);

// What one Generate call returned.
struct Streamed {
  std::vector<int32_t> tokens;
  int64_t cached = -1;
  grpc::Status status;
  double ms = 0;
};

// A greedy request (temperature 0, ignore_eos) with message boundaries and kTurnEnd.
pb::GenerateRequest Request(const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& boundaries, int max_tokens);
// Runs one Generate call to its end (deadline 120 s: then status is DEADLINE_EXCEEDED).
Streamed Call(Worker& w, const pb::GenerateRequest& req);

// The value of one series, e.g. `deltaserve_model_snapshot_redis_hits_total{model="tiny"}`. A
// series the worker does not export is a test failure (ADD_FAILURE, naming it) and reads as NaN,
// so that no comparison with it can pass either (an absent counter must not equal another).
double Metric(const Worker& w, const std::string& series);
// The series `name{model="tiny",labels}`.
std::string Series(const std::string& name, const std::string& labels = "");
std::string Errors(const std::string& op);        // snapshot_redis_errors_total{op}
std::string Rejected(const std::string& reason);  // snapshot_rejected_total{reason}

// A conversation: user messages of random tokens, replies appended verbatim.
struct Conversation {
  std::vector<int32_t> history;
  std::vector<int32_t> boundaries;
  std::mt19937 rng;
  explicit Conversation(uint32_t seed) : rng(seed) {}

  void AddMessage(const std::vector<int32_t>& body) {
    history.insert(history.end(), body.begin(), body.end());
    history.insert(history.end(), kTurnEnd.begin(), kTurnEnd.end());
    boundaries.push_back(static_cast<int32_t>(history.size()));
  }
  void AddUser(int n) {
    std::uniform_int_distribution<int32_t> id(11, 2000);
    std::vector<int32_t> body;
    for (int i = 0; i < n; ++i) body.push_back(id(rng));
    AddMessage(body);
  }
  std::vector<int32_t> Prompt() const {
    std::vector<int32_t> p = history;
    p.insert(p.end(), kAssistant.begin(), kAssistant.end());
    return p;
  }
  pb::GenerateRequest Next(int max_tokens = kReply) const {
    return Request(Prompt(), boundaries, max_tokens);
  }
  void AddReply(const std::vector<int32_t>& reply) {
    std::vector<int32_t> body = kAssistant;
    body.insert(body.end(), reply.begin(), reply.end());
    AddMessage(body);
  }
};

// The Redis key of the snapshot of `tokens` (all of them) under `root`.
std::string RedisKey(const common::SnapshotKey& root, const std::vector<int32_t>& tokens);
// tokens[0, n).
std::vector<int32_t> Prefix(const std::vector<int32_t>& tokens, size_t n);
// A client of the test's own (5 s deadlines).
std::unique_ptr<common::RedisClient> Client(const std::string& url);
// Milliseconds until `key` exists (polled every millisecond), or -1 after 5 s.
double WaitForKey(common::RedisClient& redis, const std::string& key);
// Runs the next turn of `conv` on `w` and on `cold`: same tokens (EXPECT); appends the reply.
Streamed Turn(Worker& w, Worker& cold, Conversation& conv, const std::string& what);

}  // namespace deltaserve::worker::harness
