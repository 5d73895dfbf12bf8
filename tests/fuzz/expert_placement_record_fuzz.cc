// libFuzzer target for the Redis record of a model's expert placement
// (common/expert_placement_record.h), which a worker reads at start and which anyone with access
// to Redis can write. Properties: no crash, no out-of-bounds read, no allocation beyond the
// record's bounds (ASan, -rss_limit_mb); a refusal is InvalidArgument with a message that says
// what it is about; an accepted record passes ValidateExpertPlacementRecord, and serializing it
// gives a blob that parses to the same record and serializes to the same bytes.
// Seeds: tests/fuzz/seeds/expert_placement_record/.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/expert_placement_record.h"
#include "tests/fuzz/fuzz_check.h"

namespace deltaserve::common {
namespace {

constexpr const char* kTarget = "expert_placement_record_fuzz";

void Check(bool ok, const char* what) { fuzz::Check(ok, kTarget, what); }

void ParseAndCheck(std::string_view bytes) {
  absl::StatusOr<ExpertPlacementRecord> r = ParseExpertPlacementRecord(bytes);
  if (!r.ok()) {
    Check(r.status().code() == absl::StatusCode::kInvalidArgument, "refusal is InvalidArgument");
    const std::string message(r.status().message());
    Check(message.rfind("expert placement record: ", 0) == 0, "refusal names the record");
    Check(message.size() > 25 && message.size() < 4096, "refusal message is short and not empty");
    return;
  }
  Check(ValidateExpertPlacementRecord(*r).ok(), "an accepted record is valid");
  Check(r->device.size() <= r->n_layer * r->n_expert, "device set within the model");
  const std::string blob = SerializeExpertPlacementRecord(*r);
  absl::StatusOr<ExpertPlacementRecord> again = ParseExpertPlacementRecord(blob);
  Check(again.ok(), "a serialized record parses");
  Check(*again == *r, "a serialized record parses to the same record");
  Check(SerializeExpertPlacementRecord(*again) == blob, "serializing is stable");
}

}  // namespace
}  // namespace deltaserve::common

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  deltaserve::common::ParseAndCheck(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
