// What WorkerPool (router/routing/worker_pool.h) keeps per worker and per poll, shared by
// worker_pool.cc (the workers' set, reloads, tickets and what routing reads) and
// worker_pool_polling.cc (the health polls and tokenizer fetches that fill it in).
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "proto/worker_channel.h"
#include "router/routing/worker_pool.h"

namespace deltaserve::router {

struct WorkerPool::Worker {
  Worker(std::string a, proto::WorkerClientSecurity sec,
         std::shared_ptr<deltaserve::v1::Worker::StubInterface> s, const RoutingSettings& rs)
      : address(std::move(a)),
        security(std::move(sec)),
        stub(std::move(s)),
        breaker(rs.circuit_failures, absl::Milliseconds(rs.circuit_open_ms)) {}

  const std::string address;
  // The channel's TLS and secret; a reload that changes them makes a new Worker (a new channel).
  const proto::WorkerClientSecurity security;
  const std::shared_ptr<deltaserve::v1::Worker::StubInterface> stub;
  // Everything below is guarded by WorkerPool::mu_.
  CircuitBreaker breaker;
  bool removed = false;
  bool polled = false;
  bool reachable = false;
  bool draining = false;
  std::string worker_id;
  std::string device;
  std::string last_error;
  std::vector<std::shared_ptr<const ModelState>> models;
  absl::flat_hash_map<std::string, int64_t> inflight;         // by model
  absl::flat_hash_set<std::string> bad_snapshot_root_logged;  // models whose root was malformed
  bool poll_in_flight = false;
  bool fetch_in_flight = false;
  int64_t rounds = 0;  // polls finished, with the tokenizer fetch they started
};

// One GetWorkerInfo call. Owned by the pool (rpcs_in_flight_, then finished_rpcs_), never by
// its callback, which gets a plain pointer: the context and the worker refer to the channel.
struct WorkerPool::PollCall {
  std::shared_ptr<Worker> worker;
  grpc::ClientContext context;
  deltaserve::v1::WorkerInfoRequest request;
  deltaserve::v1::WorkerInfo response;
  std::vector<std::string> tokenizer_keys;  // a tokenizer fetch: the keys it fetches
};

}  // namespace deltaserve::router
