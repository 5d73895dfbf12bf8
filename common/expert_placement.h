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
#include "absl/status/statusor.h"

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

// Device expert slots by expert size. Quantisations such as Q4_K_M store some layers' experts
// in more bytes than others (a Q6_K down projection), so a worker keeps one device arena per
// distinct expert size (a "class"), each with slots of exactly that size and holding only its
// layers' experts: the same bytes hold as many experts as their sizes allow, not as many as the
// largest layer's would. A placement is then within budget when each class holds at most its
// slots. One class for every layer is the plain budget of `n` slots (Single).
//
//   ExpertSlotClasses c = SplitExpertBudget({0, 0, 1, 1}, {6912, 7680}, 256, device_bytes);
//   RETURN_IF_ERROR(ValidateExpertPlacement(p, c));
struct ExpertSlotClasses {
  std::vector<int32_t> layer_class;  // [n_layer]: the class of the layer's experts
  std::vector<uint64_t> slot_bytes;  // [n_class]: one slot (0 where unknown)
  std::vector<int64_t> slots;        // [n_class]: device slots of the class

  static ExpertSlotClasses Single(int64_t n_layer, int64_t n_slots, uint64_t slot_bytes = 0);
  int64_t n_class() const { return static_cast<int64_t>(slots.size()); }
  int64_t total_slots() const;
  uint64_t device_bytes() const;  // sum of slots x slot_bytes
  std::vector<int64_t> LayersOf(int32_t c) const;
  // InvalidArgument unless layer_class has n_layer entries in [0, n_class), the three lists
  // agree in length and no class has negative slots.
  absl::Status Check(int64_t n_layer) const;
  bool operator==(const ExpertSlotClasses&) const = default;
};

// Slots for `device_bytes` split over the classes of `layer_class` (class sizes `slot_bytes`):
// each class first gets the share of the budget its experts take of all routed expert bytes
// (class c: its layers x n_expert x slot_bytes[c]) and floor(share / slot_bytes[c]) slots, never
// more than its experts; the bytes left over then go one slot at a time to the class whose
// experts are largest that still has experts off the device and fits in what is left. So no
// class can take one more slot within the budget, and a budget of all the routed bytes holds
// every expert.
ExpertSlotClasses SplitExpertBudget(std::vector<int32_t> layer_class,
                                    std::vector<uint64_t> slot_bytes, int64_t n_expert,
                                    uint64_t device_bytes);

// ValidateExpertPlacement(p, classes.total_slots()), and then ResourceExhausted when a class
// holds more experts than its slots ("layers 0, 1, ...: 300 experts in device memory, their
// slots of 7,680 B hold 256").
absl::Status ValidateExpertPlacement(const ExpertPlacement& p, const ExpertSlotClasses& classes);

// A worker whose slot classes share one budget of slot bytes re-divides it between the classes to
// fit the placements it is given (worker/engine/expert_tiers.h): `p` is within budget when its
// experts' slots take at most `budget_bytes` (class c's experts x slot_bytes[c], summed). The
// classes `p` is then held in: `current` itself when each class's slots already hold its
// experts (a placement that fits changes nothing); else each class gets the slots of its
// experts, then, from the bytes left, back towards its slots in `current` (lowest class first),
// then one slot at a time to the largest class that still has experts off the device and fits.
// ResourceExhausted when the bytes exceed the budget ("600 experts in device memory take
// 1200000 B of slots, the budget holds 1000000 B"; with one size, in experts as
// ValidateExpertPlacement says it), InvalidArgument when `p` or `current` does not fit the model
// (ValidateExpertPlacement's messages).
absl::StatusOr<ExpertSlotClasses> SplitForPlacement(const ExpertPlacement& p,
                                                    const ExpertSlotClasses& current,
                                                    uint64_t budget_bytes);

// EvenExpertPlacement and HottestExpertPlacement within each class, over its layers.
ExpertPlacement EvenExpertPlacement(int64_t n_layer, int64_t n_expert,
                                    const ExpertSlotClasses& classes);
ExpertPlacement HottestExpertPlacement(const std::vector<std::vector<double>>& heat,
                                       const ExpertSlotClasses& classes);

// "layer 0: 3 experts (1, 5, 9); layer 1: ..." for logs and errors; at most `max_layers` layers.
std::string DescribeExpertPlacement(const ExpertPlacement& p, int max_layers = 4);

}  // namespace deltaserve::common
