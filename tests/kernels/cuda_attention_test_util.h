// Shared by the host tests of the CUDA paged attention (cuda_attention_math_test,
// cuda_attention_kernels_test): the KV cache types and a one-layer paged cache in host memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/quants.h"

namespace deltaserve::kernels::attention_test {

inline constexpr WeightType kCacheTypes[] = {
    WeightType::kF32,  WeightType::kF16,  WeightType::kBF16, WeightType::kQ8_0,
    WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0};

// A paged cache of one layer in host memory: pools with 3 spare pages, a shuffled page table
// (consecutive positions live in pages far apart), every byte 0xFF to start with (NaN in
// f32/f16/bf16 values and in block scales: a read of a position nobody wrote shows).
struct HostCache {
  HostCache(WeightType kt, WeightType vt, int64_t n_head_kv, int64_t head_dim, int64_t page_tokens,
            int64_t n_positions, uint32_t seed) {
    const int64_t pages = (n_positions + page_tokens - 1) / page_tokens;
    const int64_t pool_pages = pages + 3;
    std::vector<int32_t> ids(pool_pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    table.assign(ids.begin(), ids.begin() + pages);
    const int64_t kv_dim = n_head_kv * head_dim;
    k_bytes.assign(RowBytes(kt, kv_dim) * page_tokens * pool_pages, 0xFF);
    v_bytes.assign(RowBytes(vt, kv_dim) * page_tokens * pool_pages, 0xFF);
    view.k = {k_bytes.data(), kt, RowBytes(kt, kv_dim), pool_pages};
    view.v = {v_bytes.data(), vt, RowBytes(vt, kv_dim), pool_pages};
    view.page_tokens = page_tokens;
    view.page_table = table.data();
    view.n_pages = pages;
    view.n_head_kv = n_head_kv;
  }
  HostCache(const HostCache&) = delete;
  HostCache& operator=(const HostCache&) = delete;

  std::vector<int32_t> table;
  std::vector<uint8_t> k_bytes, v_bytes;
  PagedKvView view;
};

}  // namespace deltaserve::kernels::attention_test
