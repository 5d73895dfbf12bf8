// The feed-forward half of each Qwen3.5 layer (Qwen35Model::RunFfn): the dense SwiGLU FFN, or
// MoE routing, the routed experts and the shared expert (MODEL_SPEC §2.6); and the routed
// experts over two tiers (expert_tiers.h): device slots on the backend, the rest on CPU threads.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/engine/qwen35.h"
#include "worker/engine/qwen35_ops.h"

namespace deltaserve::worker {

using engine_internal::CheckKernel;
using kernels::KernelStatus;
using kernels::Mat;

absl::Status Qwen35Model::MakeExpertTiers(const common::ExpertSlotClasses& slots,
                                          const ExpertTierOptions& options) {
  std::vector<ExpertStacks> host;
  for (const LayerWeights& l : weights_.layers) {
    host.push_back({l.moe.gate_exps, l.moe.up_exps, l.moe.down_exps});
  }
  absl::StatusOr<std::unique_ptr<ArenaExpertTiers>> tiers = ArenaExpertTiers::Create(
      *backend_, *expert_layout_, std::move(host), slots, options.host_threads);
  if (!tiers.ok()) return tiers.status();
  tiers_ = std::move(*tiers);
  const common::ExpertPlacement initial = options.initial.value_or(
      common::EvenExpertPlacement(hp_.n_layer, hp_.n_expert, tiers_->slot_classes()));
  if (absl::StatusOr<ExpertMoves> moves = tiers_->SetTarget(initial, 0); !moves.ok()) {
    return absl::Status(moves.status().code(),
                        absl::StrCat("the start-up expert placement: ", moves.status().message()));
  }
  absl::StatusOr<uint64_t> copied = tiers_->Advance(std::numeric_limits<uint64_t>::max());
  return copied.ok() ? absl::OkStatus() : copied.status();
}

absl::Status Qwen35Model::RunFfn(const LayerWeights& l) {
  if (!hp_.is_moe) {
    Mat gate = ws_.ff_gate.Cols(0, hp_.n_ff), up = ws_.ff_up.Cols(0, hp_.n_ff);
    const kernels::WeightView group_w[] = {l.ffn.gate, l.ffn.up};
    Mat group_y[] = {gate, up};
    DS_RUN(MatMulGroup, group_w, 2, ws_.xn, group_y);
    DS_RUN(SwiGlu, gate, up, gate);
    DS_RUN(MatMul, l.ffn.down, gate, ws_.mix);
    return absl::OkStatus();
  }
  const MoeWeights& m = l.moe;
  const int64_t k = hp_.n_expert_used;
  // This layer's slice of the route buffer: the pass's [n_layer][T][k] ids are copied to the
  // host once, after the last layer (Forward), for the routing counters.
  auto* route_ids = static_cast<int32_t*>(route_ids_buf_.data()) + layer_ * n_tokens_ * k;
  Mat router = ws_.router.Cols(0, hp_.n_expert);
  Mat route_w = ws_.route_w.Cols(0, k);
  DS_RUN(MatMul, m.router, ws_.xn, router);
  DS_RUN(MoeRoute, router, k, route_ids, route_w.data);
  if (absl::Status s = RunRoutedExperts(l, route_ids, route_w); !s.ok()) return s;
  if (m.has_shared) {
    const int64_t ff = hp_.n_ff_shared_expert;
    Mat gate = ws_.ff_gate.Cols(0, ff), up = ws_.ff_up.Cols(0, ff);
    const kernels::WeightView group_w[] = {m.shared.gate, m.shared.up, m.shared_gate};
    Mat group_y[] = {gate, up, ws_.shared_g};
    DS_RUN(MatMulGroup, group_w, 3, ws_.xn, group_y);
    DS_RUN(SwiGlu, gate, up, gate);
    DS_RUN(MatMul, m.shared.down, gate, ws_.shared_out);
    DS_RUN(MulSigmoid, ws_.shared_out, ws_.shared_g);
    DS_RUN(Add, ws_.mix, ws_.shared_out);
  }
  return absl::OkStatus();
}

absl::Status Qwen35Model::RunRoutedExperts(const LayerWeights& l, const int32_t* route_ids,
                                           const Mat& route_w) {
  if (tiers_ != nullptr) return RunTieredExperts(route_ids, route_w);
  const MoeWeights& m = l.moe;
  DS_RUN(MoeFfn, ws_.xn, route_ids, route_w.data, hp_.n_expert_used, m.gate_exps, m.up_exps,
         m.down_exps, ws_.mix);
  return absl::OkStatus();
}

// One MoE layer's routed experts over the two tiers, for the T tokens of the pass:
//   1. the routes (ids, weights) and the normalised input xn come to the host (one wait for the
//      backend: the only host round trip of the layer);
//   2. each (token, expert) pair goes to the expert's device slot or, when it has none, to the
//      host: device ids are slots (-1 elsewhere), host ids the original ids (-1 elsewhere);
//   3. the host thread runs the CPU backend's MoeFfn over the mapped stacks with the host ids
//      while this thread queues the backend's MoeFfn over the arena with the device ids;
//   4. the host's partial sum goes to the backend and is added to the device's (or is the
//      layer's output when no pair went to the device).
// Both tiers compute each expert's rows with the same products; only the order in which the k
// weighted expert outputs of a token are summed changes (per tier, then the two partial sums).
absl::Status Qwen35Model::RunTieredExperts(const int32_t* route_ids, const Mat& route_w) {
  const int64_t t_n = n_tokens_, k = hp_.n_expert_used, d = hp_.n_embd, e_n = hp_.n_expert;
  const auto n = static_cast<size_t>(t_n * k);
  if (route_w.stride != k || ws_.xn.stride != d || ws_.mix.stride != d ||
      ws_.shared_out.stride != d) {
    return absl::InternalError("expert tiers: the routes or activations are not contiguous");
  }
  tier_route_ids_.resize(n);
  tier_weights_.resize(n);
  tier_x_.resize(static_cast<size_t>(t_n * d));
  DS_RUN(CopyToHost, tier_route_ids_.data(), route_ids, n * sizeof(int32_t));
  DS_RUN(CopyToHost, tier_weights_.data(), route_w.data, n * sizeof(float));
  DS_RUN(CopyToHost, tier_x_.data(), ws_.xn.data, tier_x_.size() * sizeof(float));

  const int32_t* slot_of = tiers_->SlotTable(layer_);
  tier_device_ids_.resize(n);
  tier_host_ids_.resize(n);
  uint64_t on_device = 0;
  for (size_t a = 0; a < n; ++a) {
    const int32_t e = tier_route_ids_[a];
    if (e < 0 || e >= e_n) {
      return absl::InternalError(absl::StrCat("MoeRoute gave expert ", e, " in layer ", layer_));
    }
    const int32_t slot = slot_of[e];
    tier_device_ids_[a] = slot;
    tier_host_ids_[a] = slot < 0 ? e : -1;
    if (slot >= 0) ++on_device;
  }
  tiers_->CountRouted(n, on_device);
  const bool device_side = on_device > 0, host_side = on_device < n;

  if (device_side) {
    if (static_cast<int64_t>(n) > tier_ids_capacity_) {
      tier_ids_capacity_ = std::max<int64_t>(static_cast<int64_t>(n), 2 * tier_ids_capacity_);
      tier_ids_buf_ = backend_->Allocate(static_cast<size_t>(tier_ids_capacity_) * sizeof(int32_t));
      if (tier_ids_buf_.data() == nullptr) {
        tier_ids_capacity_ = 0;
        return absl::ResourceExhaustedError("no memory for the device expert ids");
      }
    }
    DS_RUN(CopyToDevice, tier_ids_buf_.data(), tier_device_ids_.data(), n * sizeof(int32_t));
  }
  if (host_side) {
    tier_y_.resize(tier_x_.size());
    const ExpertStacks& h = tiers_->HostStacks(layer_);
    tiers_->StartHost([this, t_n, k, d, &h](kernels::Backend& host) {
      const Mat x{tier_x_.data(), t_n, d, d};
      Mat y{tier_y_.data(), t_n, d, d};
      return host.MoeFfn(x, tier_host_ids_.data(), tier_weights_.data(), k, h.gate, h.up, h.down,
                         y);
    });
  }
  // From here the host job reads this model's buffers: it is waited for before any return.
  absl::Status device_status;
  if (device_side) {
    const ExpertStacks arena = tiers_->DeviceStacks(layer_);
    device_status =
        CheckKernel(backend_->MoeFfn(ws_.xn, static_cast<const int32_t*>(tier_ids_buf_.data()),
                                     route_w.data, k, arena.gate, arena.up, arena.down, ws_.mix),
                    "MoeFfn");
  }
  if (!host_side) return device_status;
  const KernelStatus host_status = tiers_->WaitHost();
  if (!device_status.ok()) return device_status;
  if (host_status != KernelStatus::kOk) return CheckKernel(host_status, "MoeFfn (host experts)");
  const size_t bytes = tier_y_.size() * sizeof(float);
  if (!device_side) {
    DS_RUN(CopyToDevice, ws_.mix.data, tier_y_.data(), bytes);
    return absl::OkStatus();
  }
  // shared_out is free until the shared expert below writes it (after this Add, in order).
  DS_RUN(CopyToDevice, ws_.shared_out.data, tier_y_.data(), bytes);
  DS_RUN(Add, ws_.mix, ws_.shared_out);
  return absl::OkStatus();
}

}  // namespace deltaserve::worker
