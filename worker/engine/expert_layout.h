// Where a qwen35moe model's routed experts go in the device expert arenas (worker/engine/
// expert_tiers.h), computed from a GGUF file's tensor table alone (no tensor data is read): the
// distinct expert sizes ("slot classes": layers whose gate, up and down matrices take the same
// bytes share one), each class's slot size and where an expert's three matrices start inside
// it, and one expert's bytes per layer. The engine lays its arenas out with it, and the memory
// planner sizes --expert-vram with the same numbers, so the two cannot disagree.
//
//   ASSIGN_OR_RETURN(ExpertSlotLayout l, ExpertSlotLayoutOf(file, hp));
//   common::ExpertSlotClasses slots = l.SlotsFor(device_bytes);  // slots per class
//   // class c's slot s, layer i of that class: gate at s * slot_bytes + gate_at, up at + up_at...
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/expert_placement.h"
#include "common/gguf_file.h"
#include "common/qwen35_hparams.h"

namespace deltaserve::worker {

// Each matrix of a slot starts on this boundary (the CUDA kernels' fast lanes need 16 bytes;
// 256 keeps every block type's rows aligned whatever the layer's types).
inline constexpr uint64_t kExpertSlotAlign = 256;

// One expert size: the slot of an arena that holds experts of this size only.
struct ExpertSlotClass {
  // Offsets inside a slot: gate, then up and down, each start rounded up to kExpertSlotAlign.
  uint64_t gate_at = 0;
  uint64_t up_at = 0;
  uint64_t down_at = 0;
  uint64_t slot_bytes = 0;  // down_at + the down matrix, rounded up
  // One expert's gate, up and down bytes (what identifies the class).
  uint64_t gate_bytes = 0, up_bytes = 0, down_bytes = 0;
};

struct ExpertSlotLayout {
  int64_t n_layer = 0;   // MoE layers (every layer of a qwen35moe model)
  int64_t n_expert = 0;  // experts per layer
  // The distinct expert sizes in order of their first layer, and each layer's class.
  std::vector<ExpertSlotClass> classes;
  std::vector<int32_t> layer_class;
  // The largest class's slot (the unit of the old single-arena layout; reported for display).
  uint64_t slot_bytes = 0;
  // Per layer: one expert's gate + up + down bytes as the file stores them (what a move copies).
  std::vector<uint64_t> expert_bytes;
  // Every routed expert stack's bytes in the file (n_expert experts of every layer).
  uint64_t routed_bytes = 0;

  int64_t n_experts() const { return n_layer * n_expert; }
  const ExpertSlotClass& ClassOf(int64_t layer) const {
    return classes[static_cast<size_t>(layer_class[static_cast<size_t>(layer)])];
  }
  // The slots of each class that `device_bytes` holds (common::SplitExpertBudget: each class
  // its share of the bytes in proportion to its experts' bytes, the rest to whichever class
  // still fits a slot), never more than a class's experts.
  common::ExpertSlotClasses SlotsFor(uint64_t device_bytes) const;
};

// The layout of a qwen35moe file's ffn_{gate,up,down}_exps stacks ({in, out, n_expert} each);
// InvalidArgument for a dense model, NotFound naming a missing stack, InvalidArgument for a stack
// whose expert count is not hp.n_expert.
absl::StatusOr<ExpertSlotLayout> ExpertSlotLayoutOf(const common::GgufFile& file,
                                                    const common::Qwen35HParams& hp);

// ExpertSlotLayoutOf(file, its hyperparameters).slot_bytes: the device bytes the largest expert
// takes in its arena. 0 for a file that is not a valid qwen35moe model.
uint64_t ExpertSlotBytes(const common::GgufFile& file);

}  // namespace deltaserve::worker
