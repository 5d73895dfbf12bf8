// Per-sequence state of the hybrid engine: for every Gated DeltaNet layer the conv window and
// the delta-rule matrices (f32, fixed size whatever the context), and for the attention layers
// the KV of every position so far. The KV sits behind SequenceKv so that the paged, quantized
// cache of the serving engine can replace this contiguous one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.h"

namespace deltaserve::worker {

// Attention K and V of one sequence, for each attention layer.
class SequenceKv {
 public:
  virtual ~SequenceKv() = default;
  // Positions this store can hold.
  virtual int64_t capacity() const = 0;
  // Rows [0, n) of attention layer `slot`'s keys / values: f32 [n][n_head_kv * head_dim] in
  // backend memory (n <= capacity()).
  virtual kernels::Mat Keys(int slot, int64_t n) = 0;
  virtual kernels::Mat Values(int slot, int64_t n) = 0;
};

// SequenceKv with one contiguous f32 buffer per layer for K and for V, sized for `capacity`.
class ContiguousKv : public SequenceKv {
 public:
  // Null buffers inside mean the backend ran out of memory; check ok().
  ContiguousKv(kernels::Backend& backend, int n_slots, int64_t capacity, int64_t kv_dim);
  bool ok() const;
  int64_t capacity() const override { return capacity_; }
  kernels::Mat Keys(int slot, int64_t n) override;
  kernels::Mat Values(int slot, int64_t n) override;

 private:
  int64_t capacity_;
  int64_t kv_dim_;
  std::vector<kernels::DeviceBuffer> k_;
  std::vector<kernels::DeviceBuffer> v_;
};

// Everything one sequence carries between forward passes.
struct SequenceState {
  int64_t n_past = 0;                        // tokens already processed
  std::vector<kernels::DeviceBuffer> conv;   // per DeltaNet layer: [kernel-1][C] f32
  std::vector<kernels::DeviceBuffer> delta;  // per DeltaNet layer: [nv][dv][dk] f32
  std::unique_ptr<SequenceKv> kv;            // attention layers, in layer order
};

}  // namespace deltaserve::worker
