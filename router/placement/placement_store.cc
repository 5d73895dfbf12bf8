#include "router/placement/placement_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/redis_url.h"
#include "common/str_util.h"

namespace deltaserve::router {

absl::StatusOr<std::unique_ptr<RedisPlacementStore>> RedisPlacementStore::Create(
    std::string_view url, absl::Duration timeout) {
  absl::StatusOr<common::RedisOptions> options = common::ParseRedisUrl(url);
  if (!options.ok()) return options.status();
  std::string redacted = options->RedactedUrl();
  absl::StatusOr<std::unique_ptr<common::RedisClient>> client =
      common::RedisClient::Create(*std::move(options), timeout);
  if (!client.ok()) return client.status();
  return std::unique_ptr<RedisPlacementStore>(
      new RedisPlacementStore(*std::move(client), std::move(redacted)));
}

absl::StatusOr<std::optional<common::ExpertPlacementRecord>> RedisPlacementStore::Load(
    std::string_view model_fingerprint) {
  const std::string key = common::ExpertPlacementRecordKey(model_fingerprint);
  absl::StatusOr<std::optional<std::string>> blob;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blob = client_->Get(key);
  }
  if (!blob.ok()) return blob.status();
  if (!blob->has_value()) return std::nullopt;
  absl::StatusOr<common::ExpertPlacementRecord> record = common::ParseExpertPlacementRecord(**blob);
  if (!record.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": ", record.status().message()));
  }
  if (record->model_fingerprint != model_fingerprint) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": the record is for fingerprint ", record->model_fingerprint));
  }
  return *std::move(record);
}

absl::Status RedisPlacementStore::Save(const common::ExpertPlacementRecord& record) {
  if (absl::Status s = common::ValidateExpertPlacementRecord(record); !s.ok()) return s;
  const std::string blob = common::SerializeExpertPlacementRecord(record);
  std::lock_guard<std::mutex> lock(mu_);
  return client_->Set(common::ExpertPlacementRecordKey(record.model_fingerprint), blob);
}

}  // namespace deltaserve::router
