// Per-sequence state of the hybrid engine: for every Gated DeltaNet layer the conv window and
// the delta-rule matrices (f32, fixed size whatever the context; a slot of RecurrentStateSlots),
// and for the attention layers the KV of every position so far, behind SequenceKv (the paged,
// typed cache of worker/cache implements it).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/backend.h"

namespace deltaserve::worker {

// Attention K and V of one sequence, for each attention layer: a page table into a paged cache.
class SequenceKv {
 public:
  virtual ~SequenceKv() = default;
  // Positions this sequence may hold at most.
  virtual int64_t capacity() const = 0;
  // Makes positions [0, n) backed by pages, the pages holding [first_write, n) private to this
  // sequence (copy-on-write). ResourceExhausted when the cache has no free page left,
  // OutOfRange past capacity(); nothing held is lost on failure.
  virtual absl::Status Prepare(int64_t first_write, int64_t n) = 0;
  // The page table (host memory): page ids of positions [i * page_tokens(), ...).
  virtual absl::Span<const int32_t> pages() const = 0;
  virtual int64_t page_tokens() const = 0;
  // Layer `layer`'s view for the kernels, with `page_table` a copy of pages() in backend memory.
  virtual kernels::PagedKvView View(int layer, const int32_t* page_table) const = 0;
};

// One sequence's recurrent state: per DeltaNet layer a conv window [kernel-1][C] and a
// delta-rule state [n_v_heads][head_dim][head_dim], f32, in backend memory.
class RecurrentState {
 public:
  virtual ~RecurrentState() = default;
  virtual float* conv(int deltanet_layer) const = 0;
  virtual float* delta(int deltanet_layer) const = 0;
};

// Everything one sequence carries between forward passes.
struct SequenceState {
  int64_t n_past = 0;  // tokens already processed
  std::unique_ptr<RecurrentState> state;
  std::unique_ptr<SequenceKv> kv;
};

}  // namespace deltaserve::worker
