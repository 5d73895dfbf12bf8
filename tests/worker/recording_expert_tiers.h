// An ExpertTiers for tests of what drives it (the service, the scheduler, the start-up
// placement): it keeps placements only, no weights, and moves experts the way the contract
// (worker/engine/expert_tiers.h) says one Advance does: evictions first, then copies into free
// slots up to the byte limit, at least one. Every call is counted.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "common/expert_placement.h"
#include "worker/engine/expert_tiers.h"

namespace deltaserve::worker {

// See the file comment. Starts from EvenExpertPlacement; routed_total / routed_device are fixed
// (1000 / 250) so that a test can tell them from the engine's counters.
class RecordingTiers : public ExpertTiers {
 public:
  RecordingTiers(int64_t n_layer, int64_t n_expert, int64_t n_slots, uint64_t slot_bytes)
      : n_layer_(n_layer), n_expert_(n_expert), n_slots_(n_slots), slot_bytes_(slot_bytes) {
    current_ = target_ = common::EvenExpertPlacement(n_layer, n_expert, n_slots);
  }
  int64_t n_layer() const override { return n_layer_; }
  int64_t n_expert() const override { return n_expert_; }
  uint64_t slot_bytes() const override { return slot_bytes_; }
  int64_t n_slots() const override { return n_slots_; }
  common::ExpertPlacement Current() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }
  common::ExpertPlacement Target() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return target_;
  }
  absl::StatusOr<ExpertMoves> SetTarget(const common::ExpertPlacement& target,
                                        uint64_t generation) override {
    if (target.n_layer != n_layer_ || target.n_expert != n_expert_) {
      return absl::InvalidArgumentError("shape");
    }
    if (absl::Status s = common::ValidateExpertPlacement(target, n_slots_); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    target_ = target;
    generation_ = generation;
    ExpertMoves m;
    for (int64_t l = 0; l < n_layer_; ++l) {
      for (int32_t e = 0; e < n_expert_; ++e) {
        const bool want = target_.Contains(l, e), have = current_.Contains(l, e);
        m.moves_in += want && !have;
        m.moves_out += have && !want;
      }
    }
    m.bytes_to_copy = static_cast<uint64_t>(m.moves_in) * slot_bytes_;
    return m;
  }
  absl::StatusOr<uint64_t> Advance(uint64_t max_bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++advances_;
    if (fail_next_) {
      fail_next_ = false;
      return absl::InternalError("injected copy failure");
    }
    for (int64_t l = 0; l < n_layer_; ++l) {
      auto& d = current_.device[static_cast<size_t>(l)];
      const size_t before = d.size();
      std::erase_if(d, [&](int32_t e) { return !target_.Contains(l, e); });
      moves_out_ += before - d.size();
    }
    uint64_t copied = 0;
    for (int64_t l = 0; l < n_layer_; ++l) {
      for (int32_t e : target_.device[static_cast<size_t>(l)]) {
        if (current_.Contains(l, e)) continue;
        if (copied > 0 && copied + slot_bytes_ > max_bytes) return copied;
        auto& d = current_.device[static_cast<size_t>(l)];
        d.insert(std::lower_bound(d.begin(), d.end(), e), e);
        copied += slot_bytes_;
        ++moves_in_;
        bytes_moved_ += slot_bytes_;
      }
    }
    return copied;
  }
  ExpertTierStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    ExpertTierStats s;
    s.moves_in = moves_in_;
    s.moves_out = moves_out_;
    s.bytes_moved = bytes_moved_;
    s.generation = generation_;
    s.routed_total = 1000;
    s.routed_device = 250;
    for (int64_t l = 0; l < n_layer_; ++l) {
      for (int32_t e = 0; e < n_expert_; ++e) {
        s.moves_pending += target_.Contains(l, e) != current_.Contains(l, e);
      }
    }
    return s;
  }

  void FailNextAdvance() {
    std::lock_guard<std::mutex> lock(mu_);
    fail_next_ = true;
  }
  int advances() const {
    std::lock_guard<std::mutex> lock(mu_);
    return advances_;
  }

 private:
  const int64_t n_layer_, n_expert_, n_slots_;
  const uint64_t slot_bytes_;
  mutable std::mutex mu_;
  common::ExpertPlacement current_, target_;
  uint64_t generation_ = 0, moves_in_ = 0, moves_out_ = 0, bytes_moved_ = 0;
  int advances_ = 0;
  bool fail_next_ = false;
};

}  // namespace deltaserve::worker
