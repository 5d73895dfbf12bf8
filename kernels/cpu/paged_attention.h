// Attention over a paged, typed KV cache for the CPU backend (Backend::StoreKv and
// Backend::PagedAttention; MODEL_SPEC §2.3 steps 5-6): grouped-query heads, f32 arithmetic on K
// and V read in their cache type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0), never a dequantized
// copy of the cache. Pages are head-major (backend.h, KvPool): StoreKv writes each head's row
// into its head's block of the page, and an item streams one head's contiguous keys.
//
// The kernel is flash-attention style: a work item is a block of query tokens times the query
// heads of one kv head (so every K/V row is read once for all of them) against a range of keys,
// walked in tiles of up to 32 keys (ending at page ends) with an online softmax (running max and
// sum per row, the accumulator rescaled when the max grows). Scores come from 4x4 register tiles
// (4 query rows x 4 keys, dot products over head_dim, reduced with a transposing shuffle tree),
// and p·V from 4 rows x 64 columns tiles, so neither loop reloads an accumulator per key. f32
// K/V are read in place, f16 K/V converted inside those tiles on AVX-512 CPUs
// (paged_attention_avx512.cc); other types (and f16 without AVX-512) are decoded tile by tile
// into f32. The next tile's K/V are prefetched while one is computed. Decode
// (one token) has too few items for the threads, so the keys are split into ranges whose
// partial results (max, sum, accumulator) are merged at the end (flash-decoding).
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels {

// Encodes rows [0, T) of k and v ([T][n_head_kv * head_dim] f32) into the cache positions
// first_pos .. first_pos + T - 1 of `kv` (pages must exist for them).
KernelStatus StoreKvCpu(const Mat& k, const Mat& v, const PagedKvView& kv, int64_t first_pos);

// Causal attention of one sequence's T newest tokens (positions n_past .. n_past + T - 1, whose
// K/V are already stored) over positions 0 .. n_past + T - 1 of `kv`. q and out are
// [T][n_head * head_dim] (out may alias q). Query head h reads kv head h / (n_head / n_head_kv);
// token t attends to positions 0 .. n_past + t with softmax(scale * q·k).
KernelStatus PagedAttentionCpu(ThreadPool& pool, const Mat& q, const PagedKvView& kv,
                               int64_t n_past, int64_t n_head, int64_t n_head_kv, float scale,
                               Mat& out);

}  // namespace deltaserve::kernels
