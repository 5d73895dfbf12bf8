// Index math and softmax algebra of the CUDA paged attention kernels (attention.cu), as
// DS_HOST_DEVICE functions the CPU unit tests exercise (tests/kernels/cuda_attention_math_test.cc).
//
// Cache layout (kernels/backend.h, KvPool / PagedKvView): position `pos` of a sequence lives in
// slot pos % page_tokens of page page_table[pos / page_tokens]; inside a page the layout is
// head-major, [n_head_kv][page_tokens][head_bytes], so one kv head's rows of a page are one
// contiguous run. head_bytes = row_bytes / n_head_kv (head_dim values in the pool's type).
//
// Work decomposition of PagedAttention(q [T][n_head * head_dim], n_past):
// - Rows: for kv head kvh, row r in [0, T * group) is (token r / group, query head kvh * group +
//   r % group), group = n_head / n_head_kv. A thread block takes RowsPerBlock(kD) consecutive rows
//   of one kv head, so the query heads of a kv head (and, when the group is smaller than the
//   block, several tokens) share every K/V tile the block loads (GQA).
// - Keys: a block walks its key range in tiles of kAttnKeyTile (32) keys, one key per lane,
//   decoding each tile of K, then of V, into f32 shared memory. Token t sees keys [0, n_past + t].
// - Splits (flash-decoding): calls with at most kMaxSplitTokens tokens divide the keys into
//   PlanSplits(...).n_splits ranges, one per grid z; each block then writes, per row, its
//   running max, sum and unnormalised accumulator (the "partial") to scratch, and a merge kernel
//   combines them. Longer calls (prefill) have one range and write the output directly.
// - Online softmax per row: m (running max of scaled scores), l (sum of exp(s - m)), acc (sum of
//   exp(s - m) * v); a tile with a larger max rescales l and acc by exp(m_old - m_new).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_compat.h"

namespace deltaserve::kernels::cuda {

inline constexpr int kAttnKeyTile = 32;          // keys per tile: one per lane of a warp
inline constexpr int kAttnWarps = 4;             // warps per attention block
inline constexpr int64_t kMaxSplitTokens = 8;    // calls with at most this many tokens split keys
inline constexpr int64_t kSplitKeys = 128;       // keys per split, before the cap below
inline constexpr int64_t kMaxSplits = 256;       // most splits of one call
inline constexpr int64_t kMaxAttnHeadDim = 256;  // the largest head_dim with a kernel

// The head_dim a kernel instance is compiled for (its registers and shared memory): 64, 128 or
// 256, the smallest not below head_dim; 0 when head_dim is above 256 (no kernel).
DS_HOST_DEVICE DS_INLINE constexpr int HeadDimBucket(int64_t head_dim) {
  return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : head_dim <= 256 ? 256 : 0;
}
// Query rows each warp owns, and rows per block: at kD = 256 a block's shared memory holds 8 q
// rows and one 32 x 257 f32 K or V tile (41 KiB, under the 48 KiB of static shared memory).
DS_HOST_DEVICE DS_INLINE constexpr int RowsPerWarp(int kD) { return kD <= 128 ? 4 : 2; }
DS_HOST_DEVICE DS_INLINE constexpr int RowsPerBlock(int kD) { return kAttnWarps * RowsPerWarp(kD); }

// --- pages --------------------------------------------------------------------------------

// One pool's page geometry (the host values of a KvPool / PagedKvView), for device code.
struct KvPageGeometry {
  int64_t page_tokens = 0;
  int64_t n_head_kv = 0;
  int64_t head_bytes = 0;  // row_bytes / n_head_kv
};

// Byte offset of kv head `head` of position `pos` in its pool, `page` being
// page_table[pos / page_tokens]: kernels::KvHeadOffset with the page id already read.
DS_HOST_DEVICE DS_INLINE size_t KvHeadByteOffset(const KvPageGeometry& g, int64_t page, int64_t pos,
                                                 int64_t head) {
  return static_cast<size_t>(((page * g.n_head_kv + head) * g.page_tokens + pos % g.page_tokens) *
                             g.head_bytes);
}

// True when a page id read from the page table is inside both pools. The launchers cannot
// check the table (it is device memory, and they may not copy it to the host); the kernels skip
// a position whose page is outside, so that a bad table never reads or writes outside a pool.
DS_HOST_DEVICE DS_INLINE bool PageInPool(int64_t page, int64_t pool_pages) {
  return page >= 0 && page < pool_pages;
}

// --- rows ---------------------------------------------------------------------------------

struct AttnRow {
  int64_t token;
  int64_t head;  // query head
};

// Row r of kv head kvh (rows are token-major: r = token * group + head within the group).
DS_HOST_DEVICE DS_INLINE AttnRow RowOf(int64_t r, int64_t kvh, int64_t group) {
  return {r / group, kvh * group + r % group};
}

// Keys that token t sees: positions [0, n_past + t + 1).
DS_HOST_DEVICE DS_INLINE int64_t TokenKeyLimit(int64_t n_past, int64_t token) {
  return n_past + token + 1;
}

// Row blocks per kv head.
DS_HOST_DEVICE DS_INLINE int64_t RowBlocks(int64_t n_tokens, int64_t group, int rows_per_block) {
  return (n_tokens * group + rows_per_block - 1) / rows_per_block;
}

// Keys [0, end) some row of rows [r0, r0 + rows_per_block) sees: its last token's limit.
DS_HOST_DEVICE DS_INLINE int64_t BlockKeyEnd(int64_t r0, int rows_per_block, int64_t n_tokens,
                                             int64_t group, int64_t n_past) {
  int64_t last = r0 + rows_per_block;
  if (last > n_tokens * group) last = n_tokens * group;
  return TokenKeyLimit(n_past, (last - 1) / group);
}

// --- splits -------------------------------------------------------------------------------

struct SplitPlan {
  int64_t n_splits = 1;    // key ranges (grid z); 1: the blocks write the output directly
  int64_t split_keys = 0;  // keys per range (the last ones may hold fewer, or none)
};

// How a call with n_tokens tokens over n_keys keys (n_past + n_tokens) divides its keys:
// min(kMaxSplits, ceil(n_keys / kSplitKeys)) ranges of ceil(n_keys / n_splits) keys when it has
// at most kMaxSplitTokens tokens, else one. A function of (n_tokens, n_keys) alone, never of the
// GPU, so that the scratch size is known to the memory planner and results do not depend on the
// device; non-decreasing in both for n_tokens <= kMaxSplitTokens.
DS_HOST_DEVICE DS_INLINE SplitPlan PlanSplits(int64_t n_tokens, int64_t n_keys) {
  SplitPlan plan;
  plan.split_keys = n_keys;
  if (n_tokens > kMaxSplitTokens || n_keys <= kSplitKeys) return plan;
  int64_t n = (n_keys + kSplitKeys - 1) / kSplitKeys;
  plan.n_splits = n < kMaxSplits ? n : kMaxSplits;
  plan.split_keys = (n_keys + plan.n_splits - 1) / plan.n_splits;
  return plan;
}

struct KeyRange {
  int64_t begin;
  int64_t end;  // begin >= end: empty
};

// Keys of split s: [s * split_keys, min(n_keys, (s + 1) * split_keys)).
DS_HOST_DEVICE DS_INLINE KeyRange SplitRange(const SplitPlan& plan, int64_t n_keys, int64_t s) {
  const int64_t begin = s * plan.split_keys;
  const int64_t end = begin + plan.split_keys;
  return {begin, end < n_keys ? end : n_keys};
}

// Partials in scratch: all (max, sum) pairs first, [n_splits][n_rows][2], then the accumulators,
// [n_splits][n_rows][head_dim], rows numbered token * n_head + query head (the output's order).
DS_HOST_DEVICE DS_INLINE size_t PartialStatsIndex(int64_t split, int64_t n_rows, int64_t row) {
  return static_cast<size_t>((split * n_rows + row) * 2);
}
DS_HOST_DEVICE DS_INLINE size_t PartialAccIndex(int64_t split, int64_t n_rows, int64_t row,
                                                int64_t head_dim) {
  return static_cast<size_t>((split * n_rows + row) * head_dim);
}
DS_HOST_DEVICE DS_INLINE size_t PartialStatsFloats(int64_t n_splits, int64_t n_rows) {
  return static_cast<size_t>(n_splits * n_rows * 2);
}

// Scratch bytes a call with n_tokens tokens over n_keys keys uses: the partials when it splits,
// else none.
DS_HOST_DEVICE DS_INLINE size_t AttentionScratchBytesFor(int64_t n_tokens, int64_t n_head,
                                                         int64_t head_dim, int64_t n_keys) {
  const SplitPlan plan = PlanSplits(n_tokens, n_keys);
  if (plan.n_splits <= 1) return 0;
  return static_cast<size_t>(plan.n_splits * n_tokens * n_head * (head_dim + 2)) * sizeof(float);
}

// PagedAttentionScratchBytes (cuda_ops.h): the most scratch any call with at most n_tokens
// tokens over at most n_ctx keys uses, AttentionScratchBytesFor(min(n_tokens,
// kMaxSplitTokens), n_ctx): calls with more tokens do not split, and below that the partials
// grow with the tokens and (PlanSplits) with the keys. Exactly what a call of that size uses.
DS_HOST_DEVICE DS_INLINE size_t AttentionScratchBound(int64_t n_tokens, int64_t n_head,
                                                      int64_t head_dim, int64_t n_ctx) {
  const int64_t t = n_tokens < kMaxSplitTokens ? n_tokens : kMaxSplitTokens;
  return AttentionScratchBytesFor(t, n_head, head_dim, n_ctx);
}

// --- online softmax -----------------------------------------------------------------------

DS_HOST_DEVICE DS_INLINE float ExpF(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

DS_HOST_DEVICE DS_INLINE float NegInf() { return -__builtin_huge_valf(); }

// A row's running state: max of the scaled scores seen (-inf before any) and sum of exp(s - max).
struct SoftmaxRow {
  float max = -__builtin_huge_valf();
  float sum = 0.0f;
};

// exp(score - max) for a visible key, 0 for a masked one (score -inf).
DS_HOST_DEVICE DS_INLINE float ProbOf(float score, float max) {
  return score == NegInf() ? 0.0f : ExpF(score - max);
}

// Enters a tile whose largest score is tile_max: raises the row's max and returns the factor
// exp(old - new) its sum and accumulator are to be multiplied by (0 while the row has seen no
// key: both are still 0, and -inf - -inf would be NaN). Then the caller adds the tile's
// ProbOf(score, row.max) to row.sum and its p * v to the accumulator.
DS_HOST_DEVICE DS_INLINE float EnterTile(SoftmaxRow& row, float tile_max) {
  const float new_max = row.max < tile_max ? tile_max : row.max;
  const float factor = row.max == NegInf() ? 0.0f : ExpF(row.max - new_max);
  row.max = new_max;
  return factor;
}

// Merging partials: the overall max of n partial maxima (stats pairs `stride` floats apart),
// each partial's weight exp(max_s - max) (0 for a partial that saw no key), and the merged
// output = sum_s w_s acc_s / sum_s w_s sum_s.
DS_HOST_DEVICE DS_INLINE float MergedMax(const float* stats, int64_t n, size_t stride) {
  float m = NegInf();
  for (int64_t s = 0; s < n; ++s) {
    const float x = stats[s * stride];
    m = m < x ? x : m;
  }
  return m;
}
DS_HOST_DEVICE DS_INLINE float MergeWeight(float part_max, float max) {
  return ProbOf(part_max, max);
}

}  // namespace deltaserve::kernels::cuda
