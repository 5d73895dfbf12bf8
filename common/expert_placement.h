// Which experts of a mixture-of-experts model live in device memory (docs/moe_placement.md): the
// value the router's placement planner produces, SetExpertPlacement carries and a worker's
// ExpertTiers applies, and its checks. Shared by worker/ and router/, so both refuse the same
// placements with the same messages.
//
//   ExpertPlacement p = ExpertPlacement::Empty(/*n_layer=*/40, /*n_expert=*/256);
//   p.device[3] = {7, 12};
//   RETURN_IF_ERROR(ValidateExpertPlacement(p, /*max_slots=*/1024));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace deltaserve::common {

struct ExpertPlacement {
  int64_t n_layer = 0;
  int64_t n_expert = 0;
  // device[layer]: the device-resident experts of that layer, ascending and unique. Every layer
  // of a qwen35moe model is an MoE layer, so index = GGUF block number.
  std::vector<std::vector<int32_t>> device;

  static ExpertPlacement Empty(int64_t n_layer, int64_t n_expert) {
    ExpertPlacement p;
    p.n_layer = n_layer;
    p.n_expert = n_expert;
    p.device.resize(static_cast<size_t>(n_layer < 0 ? 0 : n_layer));
    return p;
  }
  // Device-resident experts over all layers.
  int64_t size() const {
    int64_t n = 0;
    for (const auto& l : device) n += static_cast<int64_t>(l.size());
    return n;
  }
  bool Contains(int64_t layer, int32_t expert) const;
  bool operator==(const ExpertPlacement&) const = default;
};

// OK when `p` has n_layer lists, each ascending without duplicates and every id in
// [0, n_expert), and at most `max_slots` experts in all. InvalidArgument naming the first bad
// layer and expert ("layer 3: expert 300 is not in [0, 256)"), ResourceExhausted when over
// ("1,030 experts in device memory, the budget holds 1,024").
absl::Status ValidateExpertPlacement(const ExpertPlacement& p, int64_t max_slots);

// The same experts spread evenly: layer l gets max_slots / n_layer experts (the first
// max_slots % n_layer layers one more), the lowest ids. The start-up placement of a worker that
// has no saved placement and no warm-up counts.
ExpertPlacement EvenExpertPlacement(int64_t n_layer, int64_t n_expert, int64_t max_slots);

// The `max_slots` (layer, expert) pairs of highest `heat` ([n_layer][n_expert]); ties go to the
// lower layer, then the lower expert id. A start-up placement from counts (saved or warm-up).
ExpertPlacement HottestExpertPlacement(const std::vector<std::vector<double>>& heat,
                                       int64_t max_slots);

// "layer 0: 3 experts (1, 5, 9); layer 1: ..." for logs and errors; at most `max_layers` layers.
std::string DescribeExpertPlacement(const ExpertPlacement& p, int max_layers = 4);

}  // namespace deltaserve::common
