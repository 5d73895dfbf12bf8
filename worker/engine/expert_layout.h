// Where a qwen35moe model's routed experts go in a device expert arena (worker/engine/
// expert_tiers.h), computed from a GGUF file's tensor table alone (no tensor data is read): the
// size of one slot, where each of an expert's three matrices starts inside it, and one expert's
// bytes per layer. The engine lays its arena out with it, and the memory planner sizes
// --expert-vram with the same numbers, so the two cannot disagree.
//
//   ASSIGN_OR_RETURN(ExpertSlotLayout l, ExpertSlotLayoutOf(file, hp));
//   uint64_t n_slots = device_bytes / l.slot_bytes;
//   // slot s, layer i: gate at s * l.slot_bytes + l.gate_at, up at + l.up_at, down at + l.down_at
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf_file.h"
#include "common/qwen35_hparams.h"

namespace deltaserve::worker {

// Each matrix of a slot starts on this boundary (the CUDA kernels' fast lanes need 16 bytes;
// 256 keeps every block type's rows aligned whatever the layer's types).
inline constexpr uint64_t kExpertSlotAlign = 256;

struct ExpertSlotLayout {
  int64_t n_layer = 0;   // MoE layers (every layer of a qwen35moe model)
  int64_t n_expert = 0;  // experts per layer
  // Offsets inside a slot: the largest gate matrix of any layer, rounded up to kExpertSlotAlign,
  // comes before up, and likewise up before down; so any slot holds any layer's expert.
  uint64_t gate_at = 0;
  uint64_t up_at = 0;
  uint64_t down_at = 0;
  uint64_t slot_bytes = 0;  // down_at + the largest down matrix, rounded up
  // Per layer: one expert's gate + up + down bytes as the file stores them (what a move copies).
  std::vector<uint64_t> expert_bytes;
  // Every routed expert stack's bytes in the file (n_expert experts of every layer).
  uint64_t routed_bytes = 0;

  int64_t n_experts() const { return n_layer * n_expert; }
  // Slots `device_bytes` holds (0 when slot_bytes is 0).
  int64_t SlotsFor(uint64_t device_bytes) const {
    return slot_bytes == 0 ? 0 : static_cast<int64_t>(device_bytes / slot_bytes);
  }
};

// The layout of a qwen35moe file's ffn_{gate,up,down}_exps stacks ({in, out, n_expert} each);
// InvalidArgument for a dense model, NotFound naming a missing stack, InvalidArgument for a stack
// whose expert count is not hp.n_expert.
absl::StatusOr<ExpertSlotLayout> ExpertSlotLayoutOf(const common::GgufFile& file,
                                                    const common::Qwen35HParams& hp);

// ExpertSlotLayoutOf(file, its hyperparameters).slot_bytes: the device bytes one expert takes
// in the arena, the unit of --expert-vram. 0 for a file that is not a valid qwen35moe model.
uint64_t ExpertSlotBytes(const common::GgufFile& file);

}  // namespace deltaserve::worker
