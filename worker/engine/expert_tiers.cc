#include "worker/engine/expert_tiers.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"

namespace deltaserve::worker {

using kernels::KernelStatus;

absl::StatusOr<std::unique_ptr<ArenaExpertTiers>> ArenaExpertTiers::Create(
    kernels::Backend& device, const ExpertSlotLayout& layout, std::vector<ExpertStacks> host,
    const common::ExpertSlotClasses& slots, int host_threads) {
  if (layout.n_layer <= 0 || layout.n_expert <= 0 || layout.classes.empty() ||
      static_cast<int64_t>(host.size()) != layout.n_layer ||
      static_cast<int64_t>(layout.expert_bytes.size()) != layout.n_layer ||
      slots.layer_class != layout.layer_class || slots.slots.size() != layout.classes.size() ||
      !slots.Check(layout.n_layer).ok()) {
    return absl::InvalidArgumentError("expert tiers: inconsistent expert layout");
  }
  for (size_t c = 0; c < layout.classes.size(); ++c) {
    if (layout.classes[c].slot_bytes == 0 || slots.slot_bytes[c] != layout.classes[c].slot_bytes) {
      return absl::InvalidArgumentError("expert tiers: inconsistent expert layout");
    }
  }
  for (int64_t layer = 0; layer < layout.n_layer; ++layer) {
    const ExpertStacks& l = host[static_cast<size_t>(layer)];
    for (const kernels::WeightView* w : {&l.gate, &l.up, &l.down}) {
      if (w->data == nullptr || w->count != layout.n_expert || w->matrix_stride != 0) {
        return absl::InvalidArgumentError("expert tiers: a layer's host expert stacks are missing");
      }
    }
    const ExpertSlotClass& k = layout.ClassOf(layer);
    if (k.gate_at + l.gate.out * l.gate.row_bytes > k.up_at ||
        k.up_at + l.up.out * l.up.row_bytes > k.down_at ||
        k.down_at + l.down.out * l.down.row_bytes > k.slot_bytes) {
      return absl::InvalidArgumentError("expert tiers: an expert does not fit its slot");
    }
  }
  std::unique_ptr<ArenaExpertTiers> t(new ArenaExpertTiers(device, layout, std::move(host), slots));
  if (t->budget_bytes_ > 0) {
    t->arena_ = device.Allocate(static_cast<size_t>(t->budget_bytes_));
    if (t->arena_.data() == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("backend ", common::Sv(device.name()), " has no memory for ",
                       slots.total_slots(), " expert slots (", t->budget_bytes_, " bytes)"));
    }
  }
  t->host_backend_ = kernels::MakeCpuBackend(host_threads);
  return t;
}

ArenaExpertTiers::ArenaExpertTiers(kernels::Backend& device, const ExpertSlotLayout& layout,
                                   std::vector<ExpertStacks> host,
                                   const common::ExpertSlotClasses& slots)
    : device_(device),
      layout_(layout),
      host_(std::move(host)),
      budget_bytes_(slots.device_bytes()),
      slots_(slots),
      target_slots_(slots),
      slot_of_(static_cast<size_t>(layout.n_layer * layout.n_expert), -1),
      target_(common::ExpertPlacement::Empty(layout.n_layer, layout.n_expert)) {
  region_at_ = RegionsOf(slots_);
  free_slots_.resize(slots.slots.size());
  for (size_t c = 0; c < slots.slots.size(); ++c) {
    for (int64_t s = 0; s < slots.slots[c]; ++s) free_slots_[c].push_back(static_cast<int32_t>(s));
  }
}

int64_t ArenaExpertTiers::n_slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_.total_slots();
}

common::ExpertSlotClasses ArenaExpertTiers::slot_classes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_;
}

std::vector<uint64_t> ArenaExpertTiers::RegionsOf(const common::ExpertSlotClasses& split) const {
  const size_t n = split.slots.size();
  std::vector<uint64_t> at(n, 0);
  uint64_t next = 0;
  for (size_t c = 0; c + 1 < n; ++c) {
    at[c] = next;
    next += static_cast<uint64_t>(split.slots[c]) * split.slot_bytes[c];
  }
  if (n > 1) {
    at[n - 1] = budget_bytes_ - static_cast<uint64_t>(split.slots[n - 1]) * split.slot_bytes[n - 1];
  }
  return at;
}

int32_t ArenaExpertTiers::TakeFreeSlot(size_t c) {
  std::vector<int32_t>& free = free_slots_[c];
  if (free.empty()) return -1;
  // The region of the last class (of several) ends at the arena's end: its highest slots first;
  // the others start at their region's start: their lowest first. A later split then finds the
  // experts away from the boundaries that move.
  const bool from_top = free_slots_.size() > 1 && c + 1 == free_slots_.size();
  const auto it = from_top ? std::max_element(free.begin(), free.end())
                           : std::min_element(free.begin(), free.end());
  const int32_t slot = *it;
  *it = free.back();
  free.pop_back();
  return slot;
}

void ArenaExpertTiers::ApplySplitLocked() {
  const std::vector<uint64_t> at = RegionsOf(target_slots_);
  for (auto& free : free_slots_) free.clear();
  std::vector<std::vector<char>> used(target_slots_.slots.size());
  for (size_t c = 0; c < used.size(); ++c) {
    used[c].assign(static_cast<size_t>(target_slots_.slots[c]), 0);
  }
  for (int64_t l = 0; l < layout_.n_layer; ++l) {
    const auto c = static_cast<size_t>(layout_.layer_class[static_cast<size_t>(l)]);
    const uint64_t size = layout_.classes[c].slot_bytes;
    for (int32_t e = 0; e < layout_.n_expert; ++e) {
      int32_t& slot = slot_of_[l * layout_.n_expert + e];
      if (slot < 0) continue;
      // The same bytes under the new split: a slot of the class's new region, or gone.
      const uint64_t bytes_at = region_at_[c] + static_cast<uint64_t>(slot) * size;
      const bool kept = bytes_at >= at[c] && (bytes_at - at[c]) % size == 0 &&
                        (bytes_at - at[c]) / size < static_cast<uint64_t>(target_slots_.slots[c]);
      if (kept) {
        slot = static_cast<int32_t>((bytes_at - at[c]) / size);
        used[c][static_cast<size_t>(slot)] = 1;
      } else {
        slot = -1;
        ++moves_out_;
      }
    }
  }
  for (size_t c = 0; c < used.size(); ++c) {
    for (size_t s = 0; s < used[c].size(); ++s) {
      if (used[c][s] == 0) free_slots_[c].push_back(static_cast<int32_t>(s));
    }
  }
  slots_ = target_slots_;
  region_at_ = at;
}

ArenaExpertTiers::~ArenaExpertTiers() {
  {
    std::lock_guard<std::mutex> lock(host_mu_);
    host_stop_ = true;
  }
  host_cv_.notify_all();
  if (host_thread_.joinable()) host_thread_.join();
}

common::ExpertPlacement ArenaExpertTiers::CurrentLocked() const {
  common::ExpertPlacement p = common::ExpertPlacement::Empty(layout_.n_layer, layout_.n_expert);
  for (int64_t l = 0; l < layout_.n_layer; ++l) {
    for (int32_t e = 0; e < layout_.n_expert; ++e) {
      if (slot_of_[l * layout_.n_expert + e] >= 0) p.device[l].push_back(e);
    }
  }
  return p;
}

common::ExpertPlacement ArenaExpertTiers::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return CurrentLocked();
}

common::ExpertPlacement ArenaExpertTiers::Target() const {
  std::lock_guard<std::mutex> lock(mu_);
  return target_;
}

void ArenaExpertTiers::CountPendingLocked() {
  int64_t pending = 0;
  for (int64_t l = 0; l < layout_.n_layer; ++l) {
    for (int32_t e = 0; e < layout_.n_expert; ++e) {
      const bool resident = slot_of_[l * layout_.n_expert + e] >= 0;
      if (resident != target_.Contains(l, e)) ++pending;
    }
  }
  moves_pending_ = pending;
}

absl::StatusOr<ExpertMoves> ArenaExpertTiers::SetTarget(const common::ExpertPlacement& target,
                                                        uint64_t generation) {
  if (target.n_layer != layout_.n_layer || target.n_expert != layout_.n_expert) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the placement is for ", target.n_layer, " layers of ", target.n_expert,
        " experts; the model has ", layout_.n_layer, " layers of ", layout_.n_expert, " experts"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<common::ExpertSlotClasses> split =
      common::SplitForPlacement(target, target_slots_, budget_bytes_);
  if (!split.ok()) return split.status();
  ExpertMoves moves;
  for (int64_t l = 0; l < layout_.n_layer; ++l) {
    for (int32_t e = 0; e < layout_.n_expert; ++e) {
      const bool resident = slot_of_[l * layout_.n_expert + e] >= 0;
      const bool wanted = target.Contains(l, e);
      if (wanted && !resident) {
        ++moves.moves_in;
        moves.bytes_to_copy += layout_.expert_bytes[static_cast<size_t>(l)];
      } else if (resident && !wanted) {
        ++moves.moves_out;
      }
    }
  }
  target_ = target;
  target_slots_ = *std::move(split);
  generation_ = generation;
  moves_pending_ = moves.moves_in + moves.moves_out;
  return moves;
}

absl::StatusOr<uint64_t> ArenaExpertTiers::Advance(uint64_t max_bytes) {
  struct Move {
    int64_t layer;
    int32_t expert;
  };
  std::vector<Move> ins;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Evictions first: they free the slots the copies need, and take effect at the next pass.
    for (int64_t l = 0; l < layout_.n_layer; ++l) {
      for (int32_t e = 0; e < layout_.n_expert; ++e) {
        int32_t& slot = slot_of_[l * layout_.n_expert + e];
        if (slot >= 0 && !target_.Contains(l, e)) {
          free_slots_[static_cast<size_t>(layout_.layer_class[static_cast<size_t>(l)])].push_back(
              slot);
          slot = -1;
          ++moves_out_;
        }
      }
    }
    // Then the arena's division, once the slots the new split takes from a class are free of
    // the experts the target drops.
    if (target_slots_.slots != slots_.slots) ApplySplitLocked();
    for (int64_t l = 0; l < layout_.n_layer; ++l) {
      for (int32_t e : target_.device[static_cast<size_t>(l)]) {
        if (slot_of_[l * layout_.n_expert + e] < 0) ins.push_back({l, e});
      }
    }
    CountPendingLocked();
  }
  // The copies run without the lock (SetTarget and the readers stay responsive); only this
  // thread changes slots. A target replaced meanwhile may no longer want an expert copied here:
  // it is installed anyway and evicted by the next call.
  uint64_t copied = 0;
  for (const Move& m : ins) {
    const uint64_t bytes = layout_.expert_bytes[static_cast<size_t>(m.layer)];
    if (copied > 0 && copied + bytes > max_bytes) break;
    const auto c = static_cast<size_t>(layout_.layer_class[static_cast<size_t>(m.layer)]);
    const int32_t slot = TakeFreeSlot(c);
    if (slot < 0) {
      return absl::InternalError("expert tiers: no free slot for a placement that fits");
    }
    const ExpertSlotClass& k = layout_.classes[c];
    auto* base = static_cast<uint8_t*>(arena_.data()) + region_at_[c] +
                 static_cast<size_t>(slot) * k.slot_bytes;
    const ExpertStacks& h = host_[static_cast<size_t>(m.layer)];
    const std::pair<const kernels::WeightView*, uint64_t> parts[] = {
        {&h.gate, k.gate_at}, {&h.up, k.up_at}, {&h.down, k.down_at}};
    for (const auto& [w, at] : parts) {
      const kernels::WeightView one = w->Matrix(m.expert);
      const KernelStatus s = device_.CopyToDevice(base + at, one.data, one.out * one.row_bytes);
      if (s != KernelStatus::kOk) {
        free_slots_[c].push_back(slot);
        return absl::InternalError(
            absl::StrCat("copying expert ", m.expert, " of layer ", m.layer,
                         " to the device failed: ", common::Sv(kernels::KernelStatusName(s))));
      }
    }
    // The copy is complete (queued before any later op on a GPU): the next pass uses the slot.
    std::lock_guard<std::mutex> lock(mu_);
    slot_of_[m.layer * layout_.n_expert + m.expert] = slot;
    ++moves_in_;
    bytes_moved_ += bytes;
    copied += bytes;
    CountPendingLocked();
  }
  return copied;
}

ExpertTierStats ArenaExpertTiers::stats() const {
  ExpertTierStats s;
  s.routed_total = routed_total_.load(std::memory_order_relaxed);
  s.routed_device = routed_device_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  s.moves_in = moves_in_;
  s.moves_out = moves_out_;
  s.bytes_moved = bytes_moved_;
  s.moves_pending = moves_pending_;
  s.generation = generation_;
  return s;
}

ExpertStacks ArenaExpertTiers::DeviceStacks(int64_t layer) const {
  const ExpertStacks& h = host_[static_cast<size_t>(layer)];
  const auto c = static_cast<size_t>(layout_.layer_class[static_cast<size_t>(layer)]);
  const ExpertSlotClass& k = layout_.classes[c];
  auto over_arena = [&](kernels::WeightView w, uint64_t at) {
    w.data = static_cast<const uint8_t*>(arena_.data()) + region_at_[c] + at;
    w.count = slots_.slots[c];
    w.matrix_stride = k.slot_bytes;
    return w;
  };
  return {over_arena(h.gate, k.gate_at), over_arena(h.up, k.up_at), over_arena(h.down, k.down_at)};
}

void ArenaExpertTiers::StartHost(std::function<KernelStatus(kernels::Backend&)> work) {
  {
    std::lock_guard<std::mutex> lock(host_mu_);
    host_job_ = std::move(work);
    host_busy_ = true;
    if (!host_thread_.joinable()) host_thread_ = std::thread([this] { HostLoop(); });
  }
  host_cv_.notify_all();
}

KernelStatus ArenaExpertTiers::WaitHost() {
  std::unique_lock<std::mutex> lock(host_mu_);
  host_cv_.wait(lock, [this] { return !host_busy_; });
  return host_status_;
}

void ArenaExpertTiers::HostLoop() {
  std::unique_lock<std::mutex> lock(host_mu_);
  while (true) {
    host_cv_.wait(lock, [this] { return host_stop_ || static_cast<bool>(host_job_); });
    if (host_stop_) return;
    std::function<KernelStatus(kernels::Backend&)> job = std::move(host_job_);
    host_job_ = nullptr;
    lock.unlock();
    const KernelStatus s = job(*host_backend_);
    lock.lock();
    host_status_ = s;
    host_busy_ = false;
    host_cv_.notify_all();
  }
}

}  // namespace deltaserve::worker
