#pragma once
// TEST DOUBLE — not a worker. An in-process grpc::Server on 127.0.0.1 (port chosen by gRPC, or
// a given one to come back on after Stop) implementing deltaserve.v1.Worker for the routing
// tests: GetWorkerInfo reports scripted models, load and a small byte-level tokenizer (256
// single-byte tokens, digest fixed); Generate streams scripted text pieces, or refuses with a
// status, fails after N tokens, or holds after the first token until the client cancels. It
// records calls, requests and cancels. For MoE placement tests it answers GetExpertStats with
// scripted statistics and applies SetExpertPlacement to them at once (checked as a worker checks
// it), or leaves the moves pending, or refuses. The real worker is worker/service/.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "deltaserve/v1/worker.grpc.pb.h"

namespace deltaserve::router::testing {

struct ScriptedModel {
  std::string name = "m";
  int32_t context_length = 4096;
  int32_t max_parallel = 4;
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t free_kv_pages = 100;
  int64_t total_kv_pages = 100;
  std::string tokenizer_digest = "bytes-v1";
  // ModelInfo.snapshot_key_root (raw bytes; empty: snapshots off) and
  // ModelLoad.snapshot_key_prefixes, sent as scripted.
  std::string snapshot_key_root;
  std::vector<uint64_t> snapshot_key_prefixes;
  // ModelInfo.chat_template as sent (empty: none, so the router falls back to its built-in
  // Qwen3 renderer).
  std::string chat_template;
  // The vocabulary sent with the model (null: ByteTokenizer()); n_vocab is its size.
  std::shared_ptr<const deltaserve::v1::Tokenizer> tokenizer;
  // ModelInfo.architecture; "qwen35moe" makes the router's placement controller plan the model.
  std::string architecture = "qwen35";
};

struct GenerateScript {
  std::vector<std::string> pieces = {"Hel", "lo", "!"};  // one TokenEvent each
  // Refuse every call with this status before any event (OK: don't).
  grpc::StatusCode refuse = grpc::StatusCode::OK;
  // After this many pieces end the call with `break_code` and no final event (-1: never).
  int break_after = -1;
  grpc::StatusCode break_code = grpc::StatusCode::INTERNAL;
  // After the first piece, wait until the client cancels.
  bool hold_after_first = false;
  // After the first piece, wait until ScriptedWorker::Release() (or a cancel), then go on.
  bool hold_until_release = false;
  deltaserve::v1::FinishReason finish = deltaserve::v1::FINISH_REASON_STOP;
  int32_t cached_prompt_tokens = 0;
  // Usage.reasoning_tokens of each final event; -1: counted from the text, each piece one token:
  // the pieces that lie wholly between the end of a "<think>" and the first "</think>" of the
  // pieces' text (from its start when no "<think>" comes before: a prompt that opened the block);
  // 0 without a "</think>".
  int32_t reasoning_tokens = -1;
  // GenerateRequest.n > 1: every piece is sent once per choice, as "<choice>:<piece>" with its
  // choice_index, then one final event per choice; this choice's final is ERROR (-1: none).
  int error_choice = -1;
};

class ScriptedWorker {
 public:
  explicit ScriptedWorker(std::vector<ScriptedModel> models);
  ~ScriptedWorker();

  // Starts serving on `host`:`port` (0: any free port, remembered for a restart); `host` another
  // loopback address (127.0.0.2) for two workers on one port (DNS discovery tests).
  void Start(int port = 0, const std::string& host = "127.0.0.1");
  // Shuts the server down at once (streams in flight are cut).
  void Stop();
  std::string address() const;
  int port() const { return port_; }

  void SetScript(GenerateScript script);
  // One script per Generate call, in order; the last one stays for any further call.
  void SetScripts(std::vector<GenerateScript> scripts);
  void SetModels(std::vector<ScriptedModel> models);
  void SetDraining(bool draining);
  void SetInfoFails(bool fails);  // GetWorkerInfo answers UNAVAILABLE
  // Lets streams held by hold_until_release go on (and any later one pass without holding).
  void Release();

  // GetExpertStats answers `stats` for `model` (its model field set); a model without stats
  // answers FAILED_PRECONDITION, an unknown one NOT_FOUND. SetExpertPlacement is checked as a
  // worker checks it (common::ValidateExpertPlacement against device_slots: INVALID_ARGUMENT,
  // RESOURCE_EXHAUSTED) and then applied to the stats at once: device_experts, moves_in/out and
  // placement_generation change.
  void SetExpertStats(const std::string& model, deltaserve::v1::ExpertStats stats);
  deltaserve::v1::ExpertStats expert_stats(const std::string& model) const;
  void SetExpertStatsFails(bool fails);  // GetExpertStats answers UNAVAILABLE
  // SetExpertPlacement answers `code` and changes nothing (OK: accepts).
  void SetPlacementRefusal(grpc::StatusCode code);
  // Accepted placements stay pending: moves_pending is set, device_experts do not change.
  void SetPlacementsPending(bool pending);
  // Every SetExpertPlacement request received (refused ones too), in order.
  std::vector<deltaserve::v1::SetExpertPlacementRequest> placement_requests() const;

  int generate_calls() const { return generate_calls_.load(); }
  int tokenizer_fetches() const { return tokenizer_fetches_.load(); }
  deltaserve::v1::GenerateRequest last_request() const;
  // Every Generate request received, in order.
  std::vector<deltaserve::v1::GenerateRequest> requests() const;
  std::string last_request_id_metadata() const;
  // True once a held Generate saw ServerContext::IsCancelled().
  bool WaitForCancel(int timeout_ms);

  // The test vocabulary: token id b is the single byte b.
  static deltaserve::v1::Tokenizer ByteTokenizer();

 private:
  class Service;
  // The stats of `model` (mu_ held), null when none were set.
  deltaserve::v1::ExpertStats* StatsLocked(const std::string& model);
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string host_ = "127.0.0.1";
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ScriptedModel> models_;
  GenerateScript script_;
  std::vector<GenerateScript> queued_;  // SetScripts: consumed front first
  bool draining_ = false;
  bool info_fails_ = false;
  bool cancel_seen_ = false;
  bool released_ = false;
  deltaserve::v1::GenerateRequest last_request_;
  std::vector<deltaserve::v1::GenerateRequest> requests_;
  std::string last_request_id_metadata_;
  std::vector<std::pair<std::string, deltaserve::v1::ExpertStats>> expert_stats_;
  bool expert_stats_fail_ = false;
  grpc::StatusCode placement_refusal_ = grpc::StatusCode::OK;
  bool placements_pending_ = false;
  std::vector<deltaserve::v1::SetExpertPlacementRequest> placement_requests_;
  std::atomic<int> generate_calls_{0};
  std::atomic<int> tokenizer_fetches_{0};
};

}  // namespace deltaserve::router::testing
