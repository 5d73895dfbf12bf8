// The worker's gRPC service (proto/deltaserve/v1/worker.proto): Generate streams one request's
// tokens from a model's scheduler, GetWorkerInfo describes the models (tokenizer, chat template,
// memory plan, live load), Drain stops admitting. Built on gRPC's callback API: a Generate call
// is a ServerWriteReactor fed by the scheduler's thread through a small thread-safe queue, so no
// thread blocks per stream. The worker detokenizes (so stop strings are matched on text and the
// router receives text deltas) and ends a stream at a stop string by cancelling the sequence.
// Every call carries the router's request id in the `x-request-id` metadata; the service logs
// one line per finished request with it.
// With a Redis tier (--redis), a request whose prompt may have a longer snapshot in Redis than in
// RAM is submitted from the tier's fetch threads once the lookup is done (bounded by
// --redis-timeout), never from the gRPC thread; everything else is submitted at once.
// GetExpertStats and SetExpertPlacement (MoE expert placement) are in expert_service.cc.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/grammar/output_constraint.h"
#include "deltaserve/v1/worker.grpc.pb.h"
#include "worker/cache/redis_snapshot_tier.h"
#include "worker/service/model_info.h"
#include "worker/service/request_from_proto.h"
#include "worker/sched/served_model.h"

namespace deltaserve::worker {

class ModelExperts;  // expert_service.h

// Counters for /metrics (monotonic since start).
struct WorkerCounters {
  std::atomic<int64_t> requests{0};
  std::atomic<int64_t> requests_failed{0};
  std::atomic<int64_t> requests_cancelled{0};
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> completion_tokens{0};
};

// See the file comment. The models must outlive the service.
class WorkerService final : public deltaserve::v1::Worker::CallbackService {
 public:
  // `models`: served name -> model (its scheduler already started).
  WorkerService(std::string worker_id, std::string device,
                std::map<std::string, ServedModel*> models);

  grpc::ServerWriteReactor<deltaserve::v1::GenerateEvent>* Generate(
      grpc::CallbackServerContext* context,
      const deltaserve::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* GetWorkerInfo(grpc::CallbackServerContext* context,
                                          const deltaserve::v1::WorkerInfoRequest* request,
                                          deltaserve::v1::WorkerInfo* response) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const deltaserve::v1::DrainRequest* request,
                                  deltaserve::v1::DrainResponse* response) override;
  // MoE expert placement (expert_service.cc): NOT_FOUND for an unknown model,
  // FAILED_PRECONDITION for a dense one (and for a placement on a model without tiers).
  grpc::ServerUnaryReactor* GetExpertStats(grpc::CallbackServerContext* context,
                                           const deltaserve::v1::ExpertStatsRequest* request,
                                           deltaserve::v1::ExpertStats* response) override;
  grpc::ServerUnaryReactor* SetExpertPlacement(
      grpc::CallbackServerContext* context,
      const deltaserve::v1::SetExpertPlacementRequest* request,
      deltaserve::v1::SetExpertPlacementResponse* response) override;

  // Stops admitting new requests (Generate answers UNAVAILABLE); running ones finish.
  void StartDraining() { draining_ = true; }
  bool draining() const { return draining_; }
  // Generate streams not yet finished.
  int64_t active_streams() const { return active_streams_; }
  // True once a Drain call asked the process to exit when idle.
  bool exit_requested() const { return exit_requested_; }
  const WorkerCounters& counters() const { return counters_; }
  const std::map<std::string, ServedModel*>& models() const { return models_; }
  // The Redis tier of a model's snapshots (--redis), set before serving starts; Generate looks
  // up prefixes there that the RAM tier lacks. Null when the model has none.
  void SetRedisTier(const std::string& model, RedisSnapshotTier* tier) { tiers_[model] = tier; }
  RedisSnapshotTier* redis_tier(const std::string& model) const {
    auto it = tiers_.find(model);
    return it == tiers_.end() ? nullptr : it->second;
  }
  // The placement state of an MoE model (expert_service.h), set before serving starts; it must
  // outlive the service. An MoE model without one answers FAILED_PRECONDITION.
  void SetModelExperts(const std::string& model, ModelExperts* experts) {
    experts_[model] = experts;
  }
  const std::map<std::string, ModelExperts*>& model_experts() const { return experts_; }

 private:
  std::string worker_id_;
  std::string device_;
  std::map<std::string, ServedModel*> models_;
  std::map<std::string, RedisSnapshotTier*> tiers_;
  std::map<std::string, ModelExperts*> experts_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> exit_requested_{false};
  std::atomic<int64_t> active_streams_{0};
  WorkerCounters counters_;
};

}  // namespace deltaserve::worker
