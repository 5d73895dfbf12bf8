// A model's MoE expert placement as stored in Redis (docs/moe_placement.md): the fleet's decayed
// routing counts ("heat") and the device set the router last planned, keyed by the weights'
// fingerprint. The router's placement controller writes it after each plan; a worker that starts
// reads it to start warm instead of from an even spread. The bytes are untrusted when read back
// (anyone with access to Redis can write them), so Parse checks every field and bound and
// refuses with a message naming what is wrong.
//
//   ExpertPlacementRecord r = ...;
//   redis->Set(ExpertPlacementRecordKey(r.model_fingerprint), SerializeExpertPlacementRecord(r));
//   absl::StatusOr<ExpertPlacementRecord> back = ParseExpertPlacementRecord(*blob);
//   ExpertPlacement mine = HottestExpertPlacement(back->heat, my_slots);  // any budget
//
// The blob is one JSON object:
//   {"format":"deltaserve-expert-placement","version":1,"model_fingerprint":"<hex>",
//    "n_layer":40,"n_expert":256,"half_life_seconds":300,"updated_unix_ms":1795000000000,
//    "heat":[[<n_expert numbers>] x n_layer],"device":[[<ascending expert ids>] x n_layer]}
// Keys beyond these are ignored (a later minor addition); another format or version is refused.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/expert_placement.h"

namespace deltaserve::common {

inline constexpr std::string_view kExpertPlacementRecordFormat = "deltaserve-expert-placement";
inline constexpr int kExpertPlacementRecordVersion = 1;
// Bounds on what Parse accepts (the largest published MoE models have ~100 layers and 512
// experts; these leave room while keeping a hostile blob from costing much).
inline constexpr int64_t kMaxPlacementRecordLayers = 1024;
inline constexpr int64_t kMaxPlacementRecordExperts = 4096;
inline constexpr int64_t kMaxPlacementRecordCells = int64_t{1} << 20;  // n_layer * n_expert
inline constexpr size_t kMaxPlacementRecordBytes = size_t{64} << 20;
inline constexpr size_t kMaxModelFingerprintChars = 128;

struct ExpertPlacementRecord {
  // Lowercase hex digest of the weights (ExpertStats.model_fingerprint).
  std::string model_fingerprint;
  int64_t n_layer = 0;
  int64_t n_expert = 0;
  // Half-life of the decayed counts in `heat`, seconds (> 0).
  double half_life_seconds = 0;
  // When the router wrote the record (Unix time, milliseconds): the counts decay from there.
  int64_t updated_unix_ms = 0;
  // heat[layer][expert]: decayed routed tokens summed over the fleet's workers; finite, >= 0.
  std::vector<std::vector<double>> heat;
  // The device set the router last planned for the fleet's largest expert budget (valid for
  // n_layer x n_expert). A worker with another budget plans its own from `heat`.
  ExpertPlacement device;

  bool operator==(const ExpertPlacementRecord&) const = default;
};

// OK when every field is within the bounds above and consistent (heat and device have n_layer
// rows, heat rows n_expert finite non-negative numbers, device a valid placement); else
// InvalidArgument naming the first bad field ("heat[3][17] is negative (-2)").
absl::Status ValidateExpertPlacementRecord(const ExpertPlacementRecord& record);

// The JSON blob of `record`. For a record that ValidateExpertPlacementRecord accepts, Parse
// returns it exactly (numbers are written with round-trip precision).
std::string SerializeExpertPlacementRecord(const ExpertPlacementRecord& record);

// The record in `bytes`, or InvalidArgument: not JSON, another format or version, a missing or
// mistyped field, a shape that does not match n_layer x n_expert, heat that is negative or not a
// number, sizes over the bounds above.
absl::StatusOr<ExpertPlacementRecord> ParseExpertPlacementRecord(std::string_view bytes);

// The Redis key of a model's record: "deltaserve:placement:v1:<fingerprint>".
std::string ExpertPlacementRecordKey(std::string_view model_fingerprint);

}  // namespace deltaserve::common
