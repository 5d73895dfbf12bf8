// Where the router keeps each MoE model's placement record (common/expert_placement_record.h):
// Redis at `placement.redis`, so a new or restarted worker (and a restarted router) starts from
// what the fleet learned. One RedisClient behind a mutex, with the placement's own deadline
// (placement.redis_timeout_ms), not the request path's. Redis being down is a degraded mode,
// never an error of the placement loop: the controller counts and logs a failed save or load
// and goes on planning.
//
//   ASSIGN_OR_RETURN(auto store, RedisPlacementStore::Create(url, absl::Seconds(1)));
//   absl::StatusOr<std::optional<ExpertPlacementRecord>> r = store->Load(fingerprint);
//   absl::Status s = store->Save(record);
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/expert_placement_record.h"
#include "common/redis_client.h"

namespace deltaserve::router {

class RedisPlacementStore {
 public:
  // Parses `url` (redis:// or rediss://) and prepares the client; does not connect (the first
  // call does). InvalidArgument for a bad URL or TLS file.
  static absl::StatusOr<std::unique_ptr<RedisPlacementStore>> Create(std::string_view url,
                                                                     absl::Duration timeout);

  // The model's record: nullopt when none is stored; InvalidArgument (naming the key) when the
  // stored bytes are not a valid record; Unavailable / DeadlineExceeded when Redis is down.
  absl::StatusOr<std::optional<common::ExpertPlacementRecord>> Load(
      std::string_view model_fingerprint);
  // Validates and stores `record` under ExpertPlacementRecordKey(its fingerprint), no expiry.
  absl::Status Save(const common::ExpertPlacementRecord& record);

  // The URL with the password masked, for logs and the admin view.
  const std::string& redacted_url() const { return redacted_url_; }

 private:
  RedisPlacementStore(std::unique_ptr<common::RedisClient> client, std::string redacted_url)
      : client_(std::move(client)), redacted_url_(std::move(redacted_url)) {}

  std::mutex mu_;  // the client is not thread-safe
  std::unique_ptr<common::RedisClient> client_;
  const std::string redacted_url_;
};

}  // namespace deltaserve::router
