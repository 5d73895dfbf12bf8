// The kernel of LaunchStoreKv (kv_store.cu): encodes rows [0, T) of k and v ([T][n_head_kv *
// head_dim] f32, rows `stride` floats apart, device memory) into cache positions first_pos ..
// first_pos + T - 1 of a paged KV view, each pool in its own type. One thread per block of the
// cache type (32 values for the quantized types, one value for F32 / F16 / BF16) of one (token,
// kv head), K blocks first, then V blocks: the store is T * kv_dim values, tiny next to the
// projections that produce them, so the kernel is kept obviously right rather than fast.
// kv_codec.cuh makes the bytes those of the CPU backend's StoreKv (quants.cc's QuantizeRow);
// paged_attention.cuh has the page addressing. A position whose page id is outside the pools is
// skipped (the launcher cannot read the device page table to refuse it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace deltaserve::kernels::cuda {

inline constexpr int kStoreThreads = 256;

// One pool's side of the store.
struct StoreSide {
  const float* x;  // [T][n_head_kv * head_dim], rows `stride` floats apart
  int64_t stride;
  uint8_t* pool;
  WeightType type;
  KvPageGeometry geom;
  int64_t units_per_head;  // head_dim / values per block
  int64_t unit_values;
  int64_t unit_bytes;
};

struct StoreParams {
  StoreSide side[2];  // K, V
  const int32_t* page_table;
  int64_t page_limit;  // pages in both pools
  int64_t first_pos;
  int64_t n_head_kv;
  int64_t head_dim;
  int64_t units_k;  // T * n_head_kv * side[0].units_per_head
  int64_t units;    // units_k + the same for V: the threads of the grid
};

inline StoreSide MakeStoreSide(const Mat& x, const KvPool& pool, const PagedKvView& kv,
                               int64_t head_dim) {
  const KvBlockLayout layout = KvLayoutOf(pool.type);
  StoreSide s;
  s.x = x.data;
  s.stride = x.stride;
  s.pool = static_cast<uint8_t*>(pool.data);
  s.type = pool.type;
  s.geom = {kv.page_tokens, kv.n_head_kv, static_cast<int64_t>(pool.row_bytes) / kv.n_head_kv};
  s.units_per_head = head_dim / layout.values;
  s.unit_values = layout.values;
  s.unit_bytes = layout.bytes;
  return s;
}

// The kernel's parameters for a call that CheckStoreKv accepted.
inline StoreParams MakeStoreParams(const Mat& k, const Mat& v, const PagedKvView& kv,
                                   int64_t first_pos) {
  const int64_t head_dim = k.cols / kv.n_head_kv;
  StoreParams p;
  p.side[0] = MakeStoreSide(k, kv.k, kv, head_dim);
  p.side[1] = MakeStoreSide(v, kv.v, kv, head_dim);
  p.page_table = kv.page_table;
  p.page_limit = kv.k.n_pages < kv.v.n_pages ? kv.k.n_pages : kv.v.n_pages;
  p.first_pos = first_pos;
  p.n_head_kv = kv.n_head_kv;
  p.head_dim = head_dim;
  p.units_k = k.rows * kv.n_head_kv * p.side[0].units_per_head;
  p.units = p.units_k + k.rows * kv.n_head_kv * p.side[1].units_per_head;
  return p;
}

// Blocks of kStoreThreads threads covering p.units.
inline int64_t StoreBlocks(const StoreParams& p) {
  return (p.units + kStoreThreads - 1) / kStoreThreads;
}

__global__ void StoreKvKernel(const StoreParams p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kStoreThreads + threadIdx.x;
  if (i >= p.units) return;
  const bool is_v = i >= p.units_k;
  const StoreSide& s = p.side[is_v ? 1 : 0];
  const int64_t local = is_v ? i - p.units_k : i;
  const int64_t unit = local % s.units_per_head;
  const int64_t head = local / s.units_per_head % p.n_head_kv;
  const int64_t token = local / (s.units_per_head * p.n_head_kv);
  const int64_t pos = p.first_pos + token;
  const int64_t page = p.page_table[pos / s.geom.page_tokens];
  if (!PageInPool(page, p.page_limit)) return;
  uint8_t* dst = s.pool + KvHeadByteOffset(s.geom, page, pos, head) + unit * s.unit_bytes;
  const float* src = s.x + token * s.stride + head * p.head_dim + unit * s.unit_values;
  EncodeKvBlock(s.type, src, dst);
}

}  // namespace deltaserve::kernels::cuda
