// Start-up placement of an MoE model with expert tiers (docs/moe_placement.md, "Start-up"):
// which experts a worker puts in device memory before it serves its first request.
//
//   1. saved: with --redis, the record the router keeps for the model's fingerprint
//      (common/expert_placement_record.h): the fleet's decayed routing counts, of which this
//      worker takes the hottest its own budget holds (HottestExpertPlacement);
//   2. warmup: else the routing counts of a short prefill of varied text (prose, code, numbers,
//      several languages) through the model;
//   3. even: else (the warm-up failed or routed nothing) EvenExpertPlacement, the placement the
//      model was loaded with.
// A step that cannot be used is a degraded start, never a failed one: Redis down, no record
// (the fleet's first worker), a record refused (a bad blob: ModelExperts counts it for
// /metrics) each log one line and fall through to the next. The chosen experts are copied in
// before the scheduler starts, so the first request finds them there.
//
//   StartupPlacementOptions o;  o.redis = redis_options;
//   ApplyStartupPlacement("qwen", experts, o);       // before experts.model().scheduler().Start()
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/expert_placement.h"
#include "common/redis_url.h"
#include "worker/engine/expert_tiers.h"
#include "worker/sched/served_model.h"
#include "worker/service/expert_service.h"

namespace deltaserve::worker {

struct StartupPlacementOptions {
  // --redis: where the router keeps placement records; unset: no saved placement.
  std::optional<common::RedisOptions> redis;
  // Bound on the one GET (connect included).
  absl::Duration redis_timeout = absl::Seconds(2);
  // Tokens of the warm-up prefill (at most the context less one); 0: no warm-up.
  int64_t warmup_tokens = 512;
};

// Chooses the start-up placement of `experts`'s model, served as `name` (for the log lines; see
// the file comment), moves its experts there and records the source
// (ModelExperts::startup_source). Runs the warm-up through the
// model's scheduler with Step(), so it must come before the scheduler is started (and before a
// snapshot publisher is set). A model without tiers gets kStartupAll and nothing runs. Then
// marks the start of serving (ModelExperts::MarkServingStart: the routed counts of the load and
// the warm-up are not reported). Returns the source.
std::string ApplyStartupPlacement(const std::string& name, ModelExperts& experts,
                                  const StartupPlacementOptions& options);

// The saved record's heat for a model of fingerprint `fingerprint_hex` and shape
// n_layer x n_expert: nullopt when Redis holds no record for it; Unavailable / DeadlineExceeded
// and the like when Redis fails; InvalidArgument when the record is refused (not a record,
// another fingerprint or shape).
absl::StatusOr<std::optional<std::vector<std::vector<double>>>> ReadSavedExpertHeat(
    const common::RedisOptions& redis, absl::Duration timeout, const std::string& fingerprint_hex,
    int64_t n_layer, int64_t n_expert);

// The tokens of the warm-up text for `tokenizer`, `n` of them (the text repeated as needed).
std::vector<int32_t> WarmupPrompt(const common::Tokenizer& tokenizer, int64_t n);

// Runs a prefill of WarmupPrompt(n) through `model`'s scheduler (not started: Step() on this
// thread) and returns the tokens routed per [layer][expert] meanwhile; the model's counters are
// reset afterwards, so /metrics counts only requests (the scheduler's own step and prompt
// counters do include it).
absl::StatusOr<std::vector<std::vector<double>>> WarmupRoutingCounts(ServedModel& model,
                                                                     int64_t n);

// Makes `target` the tiers' placement (generation 0) and advances until no move is pending.
absl::Status MoveExpertsTo(ExpertTiers& tiers, const common::ExpertPlacement& target);

}  // namespace deltaserve::worker
