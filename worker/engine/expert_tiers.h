// MoE experts in two tiers (docs/moe_placement.md): on a worker whose backend memory is not host
// memory (CUDA, the `sim` test device) and whose expert budget (--expert-vram) holds fewer than
// all experts, each (layer, expert) of a qwen35moe model lives either in a device slot or only in
// host memory (the GGUF mapping). A forward pass runs the device-resident experts of each MoE
// layer on the backend and the host-resident ones on CPU threads at the same time, then adds the
// two partial sums: weights never cross PCIe per token, only the routed tokens' activations and
// outputs do.
//
// Device memory is one arena, divided into a region per distinct expert size (a slot class of
// ExpertSlotLayout: layers whose experts take the same bytes) of slots of exactly that size; any
// slot of a class may hold any of its layers' experts, so within a class the planner may give hot
// layers more experts than cold ones. The budget (--expert-vram) is first split over the classes
// by SlotsFor (each its share of the bytes in proportion to its experts' bytes), so the same
// bytes hold as many experts as their sizes allow rather than as many slots of the largest
// layer's size; a placement may then divide the same bytes differently (any placement whose
// slots fit the arena is accepted: common::SplitForPlacement), and Advance moves the regions'
// boundaries. The regions of all classes but the last are laid out from the arena's start, the
// last class's from its end, so with two sizes a new split only touches the slots at the
// boundary between them (experts there are evicted and copied again into their new region);
// with more sizes the middle regions may shift and be copied again. The backend sees, per
// layer, expert stacks over its class's region (WeightView::matrix_stride = the class's
// slot_bytes, a base and a stride per layer) and expert ids remapped to slots; ids of experts
// not on that side are -1 (MoeFfn skips them).
//
// Moves: SetTarget records a target placement (any thread); Advance (the engine thread, between
// steps) copies experts into free slots, a bounded number of bytes per call, and switches an
// expert to its device slot only once its copy is complete; evictions take effect at once (the
// next step computes that expert on the host). A placement never changes the model's output
// beyond the backend's rounding: both tiers compute the same function.
//
//   ExpertTiers* tiers = model->expert_tiers();   // null: dense model or no tiers
//   RETURN_IF_ERROR(tiers->SetTarget(placement));  // from SetExpertPlacement
//   ... scheduler, between steps:  tiers->Advance(/*max_bytes=*/64 << 20);
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/expert_placement.h"
#include "kernels/backend.h"
#include "worker/engine/expert_layout.h"

namespace deltaserve::worker {

// How Qwen35Model::Load places a qwen35moe model's routed experts (ignored for dense models):
//   Qwen35Model::Load(std::move(file), backend, ExpertTierOptions{...})
// and the model then answers expert_tiers() (null when there are no tiers: a host-memory
// backend, a dense model, or a budget that holds every expert, which loads every expert stack
// onto the device as before).
struct ExpertTierOptions {
  // Device bytes for routed experts (--expert-vram): ExpertSlotLayout::SlotsFor gives the slots.
  // max(): every expert on the device, no tiers.
  uint64_t device_bytes = std::numeric_limits<uint64_t>::max();
  // The start-up placement (saved, or from warm-up counts); none: EvenExpertPlacement. Its
  // experts are copied into their slots during Load (counted in bytes_moved).
  std::optional<common::ExpertPlacement> initial;
  // CPU threads computing host-resident experts (0: one per core).
  int host_threads = 0;
};

// Called by Forward after each pass with every MoE layer's expert ids, [n_layer][n_tokens][k]
// (the tokens of the pass in batch order), on the engine thread: routing counts and traces
// (--record-routing). Qwen35Model::set_routing_observer.
using RoutingObserver =
    std::function<void(absl::Span<const int32_t> ids, int64_t n_tokens, int64_t k)>;

// Counters since the model was loaded (ExpertStats, the worker's /metrics).
struct ExpertTierStats {
  uint64_t routed_total = 0;   // (token, expert) pairs routed
  uint64_t routed_device = 0;  // of those, to a device-resident expert
  uint64_t moves_in = 0;       // experts whose copy into a slot completed
  uint64_t moves_out = 0;      // experts evicted from a slot
  uint64_t bytes_moved = 0;    // bytes copied into device slots (start-up placement included)
  int64_t moves_pending = 0;   // moves still needed to reach the target
  uint64_t generation = 0;     // the generation passed with the last SetTarget
};

// What SetTarget queued.
struct ExpertMoves {
  int64_t moves_in = 0;
  int64_t moves_out = 0;
  uint64_t bytes_to_copy = 0;
};

// Implemented by worker/engine/expert_tiers.cc; owned by Qwen35Model (expert_tiers()).
class ExpertTiers {
 public:
  virtual ~ExpertTiers() = default;

  virtual int64_t n_layer() const = 0;
  virtual int64_t n_expert() const = 0;
  // Device bytes of the largest slot, and slots in all arenas (experts the budget holds).
  virtual uint64_t slot_bytes() const = 0;
  virtual int64_t n_slots() const = 0;
  // The slots per expert size now and each layer's size class. Any thread.
  virtual common::ExpertSlotClasses slot_classes() const {
    return common::ExpertSlotClasses::Single(n_layer(), n_slots(), slot_bytes());
  }
  // The bytes the sizes' slots share, when a placement may divide them differently from
  // slot_classes() (common::SplitForPlacement); 0 when each size's slots are fixed.
  virtual uint64_t slot_budget_bytes() const { return 0; }

  // The placement the forward pass uses now (experts whose copy is complete). Any thread.
  virtual common::ExpertPlacement Current() const = 0;
  // The target the moves work towards. Any thread.
  virtual common::ExpertPlacement Target() const = 0;

  // Validates `target` (against slot_classes(), or, with a slot_budget_bytes(), against those
  // bytes: common::SplitForPlacement; a shape other than the model's is InvalidArgument) and
  // makes it the target, replacing any earlier one not yet reached; nothing changes on error.
  // Any thread; returns at once.
  virtual absl::StatusOr<ExpertMoves> SetTarget(const common::ExpertPlacement& target,
                                                uint64_t generation) = 0;
  // The engine thread, between forward passes: evicts what the target no longer holds and
  // copies up to `max_bytes` of new experts into free slots (at least one expert per call when
  // one is pending, whatever `max_bytes`); an expert is used from its slot from the next pass
  // on. Returns the bytes copied.
  virtual absl::StatusOr<uint64_t> Advance(uint64_t max_bytes) = 0;

  virtual ExpertTierStats stats() const = 0;
};

// One layer's routed expert stacks: in host memory ({in, out, n_expert}, matrix_stride 0: the
// GGUF mapping, where every expert stays whatever the placement), or over the device arena.
struct ExpertStacks {
  kernels::WeightView gate;
  kernels::WeightView up;
  kernels::WeightView down;
};

// The engine's ExpertTiers (expert_tiers.cc), made by Qwen35Model::Load: the device arena, each
// layer's expert -> slot table, the moves, and the host tier (a CPU backend and the thread that
// runs it beside the device). The methods below the interface are the forward pass's, on the
// engine thread.
class ArenaExpertTiers final : public ExpertTiers {
 public:
  // Allocates one arena of slots.device_bytes() on `device` (none when that is 0), divided as
  // `slots` says at first, and a CPU backend of `host_threads` threads. Every expert starts on
  // the host (an empty placement). `host` has one entry per layer, each stack's shape as in the
  // file; `slots` is layout.SlotsFor(bytes) or any split of the same classes.
  static absl::StatusOr<std::unique_ptr<ArenaExpertTiers>> Create(
      kernels::Backend& device, const ExpertSlotLayout& layout, std::vector<ExpertStacks> host,
      const common::ExpertSlotClasses& slots, int host_threads);
  ~ArenaExpertTiers() override;

  int64_t n_layer() const override { return layout_.n_layer; }
  int64_t n_expert() const override { return layout_.n_expert; }
  uint64_t slot_bytes() const override { return layout_.slot_bytes; }
  int64_t n_slots() const override;
  common::ExpertSlotClasses slot_classes() const override;
  uint64_t slot_budget_bytes() const override { return budget_bytes_; }
  common::ExpertPlacement Current() const override;
  common::ExpertPlacement Target() const override;
  absl::StatusOr<ExpertMoves> SetTarget(const common::ExpertPlacement& target,
                                        uint64_t generation) override;
  absl::StatusOr<uint64_t> Advance(uint64_t max_bytes) override;
  ExpertTierStats stats() const override;

  // --- the forward pass (engine thread) ---
  // Layer `layer`'s stacks over its class's region (count: the class's slots, matrix_stride:
  // its slot_bytes), for ids remapped to slots. Only valid when that class has slots.
  ExpertStacks DeviceStacks(int64_t layer) const;
  const ExpertStacks& HostStacks(int64_t layer) const { return host_[static_cast<size_t>(layer)]; }
  // Layer `layer`'s expert -> slot (-1: on the host), as this pass uses it (n_expert entries).
  const int32_t* SlotTable(int64_t layer) const {
    return slot_of_.data() + layer * layout_.n_expert;
  }
  // Runs `work` on the host tier's thread (the CPU backend's MoeFfn) while the engine thread
  // drives the device; WaitHost returns its status. One job at a time.
  void StartHost(std::function<kernels::KernelStatus(kernels::Backend&)> work);
  kernels::KernelStatus WaitHost();
  // (token, expert) pairs of a pass: all of them, and those computed from device slots.
  void CountRouted(uint64_t total, uint64_t device) {
    routed_total_.fetch_add(total, std::memory_order_relaxed);
    routed_device_.fetch_add(device, std::memory_order_relaxed);
  }
  uint64_t arena_bytes() const { return budget_bytes_; }
  const ExpertSlotLayout& layout() const { return layout_; }

 private:
  ArenaExpertTiers(kernels::Backend& device, const ExpertSlotLayout& layout,
                   std::vector<ExpertStacks> host, const common::ExpertSlotClasses& slots);
  // Moves still needed between slot_of_ and target_ (mu_ held).
  void CountPendingLocked();
  // Where each class's region starts in the arena under `split` (see the file comment).
  std::vector<uint64_t> RegionsOf(const common::ExpertSlotClasses& split) const;
  // The engine thread, mu_ held: divides the arena as target_slots_ says; experts whose slot is
  // no longer in their class's region go back to the host (copied again by the moves).
  void ApplySplitLocked();
  // A free slot of class c: the one nearest the region's anchored end (see RegionsOf).
  int32_t TakeFreeSlot(size_t c);
  common::ExpertPlacement CurrentLocked() const;
  void HostLoop();

  kernels::Backend& device_;
  const ExpertSlotLayout layout_;
  const std::vector<ExpertStacks> host_;
  const uint64_t budget_bytes_;  // the arena
  kernels::DeviceBuffer arena_;  // empty when budget_bytes_ is 0
  std::unique_ptr<kernels::Backend> host_backend_;

  mutable std::mutex mu_;
  // The split in use and each class's region start. Written by the engine thread (Advance)
  // under mu_; the engine thread reads them without the lock, others with it.
  common::ExpertSlotClasses slots_;
  std::vector<uint64_t> region_at_;
  common::ExpertSlotClasses target_slots_;  // mu_: the split target_ is held in
  // [n_layer][n_expert]: slot or -1. Written by the engine thread (Advance) under mu_; the engine
  // thread reads it without the lock, others (Current) with it.
  std::vector<int32_t> slot_of_;
  std::vector<std::vector<int32_t>> free_slots_;             // per class; engine thread only
  common::ExpertPlacement target_;                           // mu_
  uint64_t generation_ = 0;                                  // mu_
  uint64_t moves_in_ = 0, moves_out_ = 0, bytes_moved_ = 0;  // mu_
  int64_t moves_pending_ = 0;                                // mu_
  std::atomic<uint64_t> routed_total_{0}, routed_device_{0};

  // The host tier's thread and its one job.
  std::mutex host_mu_;
  std::condition_variable host_cv_;
  std::function<kernels::KernelStatus(kernels::Backend&)> host_job_;
  bool host_busy_ = false, host_stop_ = false;
  kernels::KernelStatus host_status_ = kernels::KernelStatus::kOk;
  std::thread host_thread_;
};

}  // namespace deltaserve::worker
