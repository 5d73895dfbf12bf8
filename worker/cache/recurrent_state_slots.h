// The recurrent state of the Gated DeltaNet layers for many sequences: a pool of fixed-size
// slots in backend memory, one per running sequence from admission to finish, whatever its
// context length (MODEL_SPEC §4.2). A slot holds, per DeltaNet layer, the conv window
// [kernel-1][C] and the delta-rule state [n_v_heads][head_dim][head_dim], all f32. Slots can be
// copied (a snapshot before speculative tokens, a fork of a conversation) and restored.
//
//   auto slots = RecurrentStateSlots::Create(backend, layout, /*n_slots=*/8);
//   ASSIGN_OR_RETURN(std::unique_ptr<RecurrentSlot> s, RecurrentSlot::Acquire(slots));
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/engine/sequence_state.h"

namespace deltaserve::worker {

// Sizes of one sequence's recurrent state.
struct RecurrentStateLayout {
  int n_layers = 0;           // DeltaNet layers
  int64_t conv_floats = 0;    // (kernel - 1) * conv channels, per layer
  int64_t delta_floats = 0;   // n_v_heads * head_dim * head_dim, per layer

  // Where DeltaNet layer `layer`'s conv window and delta-rule matrices start in a slot, in
  // floats: [layer][conv | delta].
  int64_t conv_offset(int layer) const {
    return static_cast<int64_t>(layer) * (conv_floats + delta_floats);
  }
  int64_t delta_offset(int layer) const { return conv_offset(layer) + conv_floats; }
  // Bytes of one slot (every layer, f32).
  uint64_t bytes() const {
    return static_cast<uint64_t>(n_layers) * (conv_floats + delta_floats) * sizeof(float);
  }
};

// See the file comment. Not thread-safe: the engine thread owns it.
class RecurrentStateSlots {
 public:
  // Allocates n_slots slots (zeroed). ResourceExhausted when the backend has no memory.
  static absl::StatusOr<std::shared_ptr<RecurrentStateSlots>> Create(
      kernels::Backend& backend, const RecurrentStateLayout& layout, int n_slots);

  const RecurrentStateLayout& layout() const { return layout_; }
  int total_slots() const { return n_slots_; }
  int free_slots() const { return static_cast<int>(free_.size()); }

  // Takes a free slot, zeroed; ResourceExhausted when none is left.
  absl::StatusOr<int> Acquire();
  void Release(int slot);
  // The state of `slot` for DeltaNet layer `layer`.
  float* conv(int slot, int layer) const;
  float* delta(int slot, int layer) const;
  // Copies the whole state of slot `from` into slot `to` (snapshot / restore).
  absl::Status Copy(int from, int to);
  // Sets a slot's state to zero (a fresh sequence).
  absl::Status Zero(int slot);
  // Copies the whole state of `slot` (layout().bytes(), [layer][conv | delta] f32) to host memory
  // and back: what a session snapshot keeps and restores.
  absl::Status CopyToHost(int slot, void* dst) const;
  absl::Status CopyFromHost(int slot, const void* src);

 private:
  RecurrentStateSlots() = default;
  uint8_t* SlotBase(int slot) const;

  kernels::Backend* backend_ = nullptr;
  RecurrentStateLayout layout_;
  int n_slots_ = 0;
  kernels::DeviceBuffer memory_;  // [n_slots][layer][conv | delta]
  kernels::DeviceBuffer zeros_;   // one zero slot, the source of Zero()
  std::vector<int> free_;
  std::vector<bool> in_use_;
};

// A slot held by one sequence (the engine's RecurrentState), returned to the pool on
// destruction.
class RecurrentSlot : public RecurrentState {
 public:
  static absl::StatusOr<std::unique_ptr<RecurrentSlot>> Acquire(
      std::shared_ptr<RecurrentStateSlots> slots);
  ~RecurrentSlot() override;
  RecurrentSlot(const RecurrentSlot&) = delete;
  RecurrentSlot& operator=(const RecurrentSlot&) = delete;

  float* conv(int layer) const override { return slots_->conv(slot_, layer); }
  float* delta(int layer) const override { return slots_->delta(slot_, layer); }
  int index() const { return slot_; }
  RecurrentStateSlots& pool() const { return *slots_; }
  // Copies this state into `dst` (a snapshot) / from `src` (a restore).
  absl::Status CopyTo(RecurrentSlot& dst) const { return slots_->Copy(slot_, dst.slot_); }
  absl::Status CopyFrom(const RecurrentSlot& src) { return slots_->Copy(src.slot_, slot_); }

 private:
  RecurrentSlot(std::shared_ptr<RecurrentStateSlots> slots, int slot)
      : slots_(std::move(slots)), slot_(slot) {}
  std::shared_ptr<RecurrentStateSlots> slots_;
  int slot_;
};

}  // namespace deltaserve::worker
