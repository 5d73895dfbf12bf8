// Attention over a paged, typed KV cache for the CPU backend (Backend::StoreKv and
// Backend::PagedAttention; MODEL_SPEC §2.3 steps 5-6): grouped-query heads, f32 arithmetic on K
// and V read in their cache type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0), never a dequantized
// copy of the cache. Pages are head-major (backend.h, KvPool): StoreKv writes each head's row
// into its head's block of the page, and an item streams one head's contiguous keys.
//
// The kernel is flash-attention style: a work item is a block of query tokens times the query
// heads of one kv head (so every K/V row is read once for all of them) against a range of keys,
// walked in tiles of up to 32 keys (ending at page ends) with an online softmax (running max and
// sum per row, the accumulator rescaled when the max grows). The tiles are written once over the
// vector width of the kernel level (paged_attention_tiles.h) and sized in vectors so that they
// stay in registers: scores from tiles of 4 query rows x 4 keys with AVX-512 (16 floats a
// vector), 2 x 4 with AVX2 and AVX-VNNI (8 floats), 4 x 1 at the scalar level, each a dot
// product over head_dim reduced with a transposing shuffle tree; p·V from tiles of 4 rows x 64
// columns (AVX-512), 4 x 24 (AVX2) or 4 x 8, so neither loop reloads an accumulator per key.
// f32 K/V are read in place, f16 K/V converted inside those tiles (paged_attention_avx512.cc at
// avx512, paged_attention_avx2.cc at avx2 and avx_vnni); other types (and f16 at the scalar level)
// are decoded tile by tile into f32. The next tile's K/V are prefetched while one is computed.
// Decode (one token) has too few items for the threads, so the keys are split into ranges whose
// partial results (max, sum, accumulator) are merged at the end (flash-decoding).
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
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

namespace internal {

// PagedAttentionCpu on the path of ClampIsa(isa) instead of ActiveIsa(): the explicit-ISA entry
// point with which paged_attention_test compares every level this CPU supports in one run.
KernelStatus PagedAttentionCpuIsa(ThreadPool& pool, const Mat& q, const PagedKvView& kv,
                                  int64_t n_past, int64_t n_head, int64_t n_head_kv, float scale,
                                  Mat& out, CpuIsa isa);

}  // namespace internal

}  // namespace deltaserve::kernels
