#include "worker/engine/forward_counters.h"

#include <algorithm>

namespace deltaserve::worker {
namespace {

template <size_t N>
size_t Bucket(const std::array<double, N>& bounds, double v) {
  return static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
}

}  // namespace

ForwardCounters::ForwardCounters(int64_t n_layer, int64_t n_expert)
    : n_layer_(n_layer), n_expert_(n_expert) {
  if (n_layer > 0 && n_expert > 0) {
    routed_ = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(n_layer * n_expert));
  }
  Reset();
}

void ForwardCounters::CountPass(int64_t sequences, int64_t prefill, int64_t decode) {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  passes_.fetch_add(1, kRelaxed);
  prefill_.fetch_add(static_cast<uint64_t>(prefill), kRelaxed);
  decode_.fetch_add(static_cast<uint64_t>(decode), kRelaxed);
  sequence_buckets_[Bucket(kSequenceBounds, static_cast<double>(sequences))].fetch_add(1, kRelaxed);
  token_buckets_[Bucket(kTokenBounds, static_cast<double>(prefill + decode))].fetch_add(1,
                                                                                        kRelaxed);
  sequences_sum_.fetch_add(static_cast<uint64_t>(sequences), kRelaxed);
  tokens_sum_.fetch_add(static_cast<uint64_t>(prefill + decode), kRelaxed);
}

void ForwardCounters::CountRoutes(int64_t layer, const int32_t* ids, int64_t n) {
  if (routed_ == nullptr || layer < 0 || layer >= n_layer_) return;
  std::atomic<uint64_t>* row = routed_.get() + layer * n_expert_;
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] >= 0 && ids[i] < n_expert_) row[ids[i]].fetch_add(1, std::memory_order_relaxed);
  }
}

void ForwardCounters::CountGraphLaunch(bool instantiated) {
  (instantiated ? graph_inst_ : graph_upd_).fetch_add(1, std::memory_order_relaxed);
  graph_launch_.fetch_add(1, std::memory_order_relaxed);
}

void ForwardCounters::CountGraphFallback() {
  graph_fallback_.fetch_add(1, std::memory_order_relaxed);
}

void ForwardCounters::Reset() {
  for (auto* a : {&passes_, &prefill_, &decode_, &sequences_sum_, &tokens_sum_, &graph_inst_,
                  &graph_upd_, &graph_launch_, &graph_fallback_}) {
    a->store(0);
  }
  for (auto& a : sequence_buckets_) a.store(0);
  for (auto& a : token_buckets_) a.store(0);
  if (routed_ != nullptr) {
    for (int64_t i = 0; i < n_layer_ * n_expert_; ++i) routed_[i].store(0);
  }
}

std::vector<uint64_t> ForwardCounters::sequence_buckets() const {
  std::vector<uint64_t> out;
  for (const auto& a : sequence_buckets_) out.push_back(a.load(std::memory_order_relaxed));
  return out;
}

std::vector<uint64_t> ForwardCounters::token_buckets() const {
  std::vector<uint64_t> out;
  for (const auto& a : token_buckets_) out.push_back(a.load(std::memory_order_relaxed));
  return out;
}

uint64_t ForwardCounters::routed(int64_t layer, int64_t expert) const {
  if (routed_ == nullptr || layer < 0 || layer >= n_layer_ || expert < 0 || expert >= n_expert_) {
    return 0;
  }
  return routed_[layer * n_expert_ + expert].load(std::memory_order_relaxed);
}

}  // namespace deltaserve::worker
