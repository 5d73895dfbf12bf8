#include "worker/cache/recurrent_state_slots.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace deltaserve::worker {

absl::StatusOr<std::shared_ptr<RecurrentStateSlots>> RecurrentStateSlots::Create(
    kernels::Backend& backend, const RecurrentStateLayout& layout, int n_slots) {
  if (layout.n_layers < 0 || layout.conv_floats < 0 || layout.delta_floats < 0 || n_slots < 0) {
    return absl::InvalidArgumentError("bad recurrent state layout or slot count");
  }
  std::shared_ptr<RecurrentStateSlots> s(new RecurrentStateSlots());
  s->backend_ = &backend;
  s->layout_ = layout;
  s->n_slots_ = n_slots;
  const uint64_t slot_bytes = layout.bytes();
  s->memory_ = backend.Allocate(slot_bytes * n_slots);
  s->zeros_ = backend.Allocate(slot_bytes);
  if (s->memory_.data() == nullptr || s->zeros_.data() == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("no memory for ", n_slots,
                                                     " recurrent state slots of ", slot_bytes,
                                                     " bytes"));
  }
  s->in_use_.assign(n_slots, false);
  for (int i = n_slots - 1; i >= 0; --i) s->free_.push_back(i);
  return s;
}

uint8_t* RecurrentStateSlots::SlotBase(int slot) const {
  return static_cast<uint8_t*>(memory_.data()) + static_cast<uint64_t>(slot) * layout_.bytes();
}

float* RecurrentStateSlots::conv(int slot, int layer) const {
  return reinterpret_cast<float*>(SlotBase(slot)) + layout_.conv_offset(layer);
}

float* RecurrentStateSlots::delta(int slot, int layer) const {
  return reinterpret_cast<float*>(SlotBase(slot)) + layout_.delta_offset(layer);
}

absl::StatusOr<int> RecurrentStateSlots::Acquire() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", n_slots_, " recurrent state slots are in use"));
  }
  const int slot = free_.back();
  free_.pop_back();
  in_use_[slot] = true;
  if (auto s = Zero(slot); !s.ok()) {
    Release(slot);
    return s;
  }
  return slot;
}

void RecurrentStateSlots::Release(int slot) {
  if (slot < 0 || slot >= n_slots_ || !in_use_[slot]) return;  // double release: ignored
  in_use_[slot] = false;
  free_.push_back(slot);
}

absl::Status RecurrentStateSlots::Copy(int from, int to) {
  if (from < 0 || from >= n_slots_ || to < 0 || to >= n_slots_) {
    return absl::InvalidArgumentError(absl::StrCat("no slot ", from, " or ", to));
  }
  if (from == to) return absl::OkStatus();
  if (backend_->CopyOnDevice(SlotBase(to), SlotBase(from), layout_.bytes()) !=
      kernels::KernelStatus::kOk) {
    return absl::InternalError("copying a recurrent state slot failed");
  }
  return absl::OkStatus();
}

absl::Status RecurrentStateSlots::Zero(int slot) {
  if (layout_.bytes() == 0) return absl::OkStatus();
  if (backend_->CopyOnDevice(SlotBase(slot), zeros_.data(), layout_.bytes()) !=
      kernels::KernelStatus::kOk) {
    return absl::InternalError("clearing a recurrent state slot failed");
  }
  return absl::OkStatus();
}

absl::Status RecurrentStateSlots::CopyToHost(int slot, void* dst) const {
  if (slot < 0 || slot >= n_slots_) return absl::InvalidArgumentError(absl::StrCat("no slot ", slot));
  if (layout_.bytes() == 0) return absl::OkStatus();
  if (backend_->CopyToHost(dst, SlotBase(slot), layout_.bytes()) != kernels::KernelStatus::kOk) {
    return absl::InternalError("copying a recurrent state slot to the host failed");
  }
  return absl::OkStatus();
}

absl::Status RecurrentStateSlots::CopyFromHost(int slot, const void* src) {
  if (slot < 0 || slot >= n_slots_) return absl::InvalidArgumentError(absl::StrCat("no slot ", slot));
  if (layout_.bytes() == 0) return absl::OkStatus();
  if (backend_->CopyToDevice(SlotBase(slot), src, layout_.bytes()) != kernels::KernelStatus::kOk) {
    return absl::InternalError("copying a recurrent state slot from the host failed");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RecurrentSlot>> RecurrentSlot::Acquire(
    std::shared_ptr<RecurrentStateSlots> slots) {
  absl::StatusOr<int> slot = slots->Acquire();
  if (!slot.ok()) return slot.status();
  return std::unique_ptr<RecurrentSlot>(new RecurrentSlot(std::move(slots), *slot));
}

RecurrentSlot::~RecurrentSlot() { slots_->Release(slot_); }

}  // namespace deltaserve::worker
