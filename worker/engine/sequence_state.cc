#include "worker/engine/sequence_state.h"

namespace deltaserve::worker {

ContiguousKv::ContiguousKv(kernels::Backend& backend, int n_slots, int64_t capacity,
                           int64_t kv_dim)
    : capacity_(capacity), kv_dim_(kv_dim) {
  const size_t bytes = static_cast<size_t>(capacity) * kv_dim * sizeof(float);
  for (int i = 0; i < n_slots; ++i) {
    k_.push_back(backend.Allocate(bytes));
    v_.push_back(backend.Allocate(bytes));
  }
}

bool ContiguousKv::ok() const {
  for (size_t i = 0; i < k_.size(); ++i) {
    if (k_[i].data() == nullptr || v_[i].data() == nullptr) return false;
  }
  return true;
}

kernels::Mat ContiguousKv::Keys(int slot, int64_t n) {
  return {k_[slot].floats(), n, kv_dim_, kv_dim_};
}

kernels::Mat ContiguousKv::Values(int slot, int64_t n) {
  return {v_[slot].floats(), n, kv_dim_, kv_dim_};
}

}  // namespace deltaserve::worker
