// Argument checks of LaunchStoreKv and LaunchPagedAttention (cuda_ops.h): the rules of the CPU
// backend's StoreKvCpu / PagedAttentionCpu (kernels/cpu/paged_attention.cc), mirrored because
// those live inside the CPU op. One difference: the CPU also checks every page id of the table
// against the pools; here the table is device memory that a launcher may not read, so the
// kernels skip positions whose page is outside the pools instead (paged_attention.cuh,
// PageInPool). None of these dereferences a pointer. tests/kernels/cuda_attention_math_test.cc
// holds them to the CPU backend's answers case by case.
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/paged_attention.cuh"

namespace deltaserve::kernels::cuda {

// Bytes of n values of a KV cache type (RowBytes of quants.h for these types); 0 otherwise.
inline size_t KvRowBytes(WeightType type, int64_t n) {
  const BlockLayout layout = BlockLayoutOf(type);
  if (layout.block_size == 0) return 0;
  return static_cast<size_t>(n / layout.block_size * layout.block_bytes);
}

// A pool against the row length kv_dim = n_head_kv * head_dim.
inline bool KvPoolValid(const KvPool& pool, int64_t kv_dim, int64_t head_dim) {
  if (!IsKvCacheType(pool.type) || pool.data == nullptr || pool.n_pages <= 0) return false;
  const BlockLayout layout = BlockLayoutOf(pool.type);
  return head_dim % layout.block_size == 0 && pool.row_bytes == KvRowBytes(pool.type, kv_dim);
}

// The view for positions [0, n_positions): pools, page size, head split, table length.
inline bool KvViewValid(const PagedKvView& kv, int64_t n_head_kv, int64_t head_dim,
                        int64_t n_positions) {
  const int64_t kv_dim = n_head_kv * head_dim;
  if (kv.n_head_kv != n_head_kv || !KvPoolValid(kv.k, kv_dim, head_dim) ||
      !KvPoolValid(kv.v, kv_dim, head_dim) || kv.page_tokens <= 0 || kv.n_pages < 0 ||
      kv.page_table == nullptr) {
    return false;
  }
  const int64_t pages_used = (n_positions + kv.page_tokens - 1) / kv.page_tokens;
  return pages_used <= kv.n_pages;
}

inline KernelStatus CheckStoreKv(const Mat& k, const Mat& v, const PagedKvView& kv,
                                 int64_t first_pos) {
  if (!k.Valid() || !v.Valid() || k.rows != v.rows || k.cols != v.cols || first_pos < 0 ||
      k.cols == 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (kv.n_head_kv <= 0 || k.cols % kv.n_head_kv != 0 ||
      !KvViewValid(kv, kv.n_head_kv, k.cols / kv.n_head_kv, first_pos + k.rows)) {
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

// kOk, kInvalidArgument as the CPU backend decides, or kUnsupportedType for a well-formed call
// this backend has no kernel for: head_dim above kMaxAttnHeadDim, or more kv heads than a grid
// dimension holds.
inline KernelStatus CheckPagedAttention(const Mat& q, const PagedKvView& kv, int64_t n_past,
                                        int64_t n_head, int64_t n_head_kv, const Mat& out) {
  if (!q.Valid() || !out.Valid() || n_past < 0 || n_head <= 0 || n_head_kv <= 0 ||
      n_head % n_head_kv != 0 || q.cols % n_head != 0 || q.cols == 0) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t head_dim = q.cols / n_head;
  if (out.rows != q.rows || out.cols != q.cols ||
      !KvViewValid(kv, n_head_kv, head_dim, n_past + q.rows)) {
    return KernelStatus::kInvalidArgument;
  }
  if (head_dim > kMaxAttnHeadDim || n_head_kv > 65535) return KernelStatus::kUnsupportedType;
  return KernelStatus::kOk;
}

}  // namespace deltaserve::kernels::cuda
