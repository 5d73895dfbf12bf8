// The paged attention kernels of LaunchPagedAttention (attention.cu): causal softmax attention of
// one sequence's T newest tokens over its paged KV cache, K and V each read in its own cache type
// (kv_codec.cuh).
//
// Layouts: q and out are [T][n_head * head_dim] f32 (rows `stride` floats apart; out may alias
// q); the cache is paged and head-major (paged_attention.cuh, backend.h). Query head h reads kv
// head h / group; token t sees positions 0 .. n_past + t.
//
// PagedAttentionKernel<kD> (kD = head_dim rounded up to 64 / 128 / 256): grid (row blocks, kv
// heads, key splits), kAttnWarps warps. A block takes RowsPerBlock(kD) rows (token, query head)
// of one kv head, loads their q into shared memory, and walks its key range in tiles of 32 keys:
//   1. the tile's K rows, decoded to f32 into shared memory (warp w takes keys w, w + 4, ...,
//      lanes along head_dim: each key's run is contiguous, and a tile's keys may span pages);
//   2. scores: lane j of the warp owning row r computes scale * q_r . k_j (the tile's rows are
//      kD + 1 floats apart, so the 32 lanes hit 32 banks), then the warp's max and sum update the
//      row's online softmax (paged_attention.cuh, EnterTile / ProbOf);
//   3. the tile's V rows decoded into the same shared memory; acc_r += p_rj * v_j with lanes
//      along head_dim and p_rj broadcast by shuffle.
// Every row of a block shares each K/V tile (the group's query heads, GQA, and consecutive
// tokens when the group is small). Decode (T <= kMaxSplitTokens) splits the keys over grid z
// (flash-decoding, PlanSplits) and writes (max, sum, acc) partials to ctx.scratch, combined by
// MergePartialsKernel; prefill has one split per block and writes normalised rows directly,
// the blocks with the most keys (the last tokens) scheduled first.
// Aliasing: a block reads all its q rows before the tile loop and writes only those rows' output
// after it; every (token, head) belongs to exactly one block (and in split mode out is written
// only by the merge kernel, after every split has run), so out may alias q.
// This is the straightforward f32 kernel (CUDA cores, shared-memory tiles); a tensor-core
// prefill path is future work. The kernels use only the subset of CUDA that
// tests/kernels/cuda_emulator runs on the CPU (cuda_attention_kernels_test), plus gridDim and
// __shfl_sync, which that test supplies.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace deltaserve::kernels::cuda {

inline constexpr unsigned kAttnFullMask = 0xFFFFFFFFu;
inline constexpr int kAttnThreads = kAttnWarps * 32;
inline constexpr int kMergeThreads = 128;  // MergePartialsKernel

struct AttnParams {
  const float* q;
  int64_t q_stride;
  float* out;
  int64_t out_stride;
  const uint8_t* k_pool;
  const uint8_t* v_pool;
  WeightType k_type;
  WeightType v_type;
  KvPageGeometry k_geom;
  KvPageGeometry v_geom;
  const int32_t* page_table;
  int64_t page_limit;  // pages in both pools
  int64_t n_past;
  int64_t n_tokens;
  int64_t n_keys;  // n_past + n_tokens
  int64_t n_head;
  int64_t n_head_kv;
  int64_t group;  // n_head / n_head_kv
  int head_dim;
  float scale;
  SplitPlan plan;
  float* part_stats;  // null: no splits, write out directly
  float* part_acc;
};

// The kernel's parameters for a call that CheckPagedAttention accepted; part_stats / part_acc
// point into `scratch` when the call splits its keys (PlanSplits), else are null.
inline AttnParams MakeAttnParams(const Mat& q, const PagedKvView& kv, int64_t n_past,
                                 int64_t n_head, int64_t n_head_kv, float scale, const Mat& out,
                                 void* scratch) {
  AttnParams p;
  p.q = q.data;
  p.q_stride = q.stride;
  p.out = out.data;
  p.out_stride = out.stride;
  p.k_pool = static_cast<const uint8_t*>(kv.k.data);
  p.v_pool = static_cast<const uint8_t*>(kv.v.data);
  p.k_type = kv.k.type;
  p.v_type = kv.v.type;
  p.k_geom = {kv.page_tokens, kv.n_head_kv, static_cast<int64_t>(kv.k.row_bytes) / kv.n_head_kv};
  p.v_geom = {kv.page_tokens, kv.n_head_kv, static_cast<int64_t>(kv.v.row_bytes) / kv.n_head_kv};
  p.page_table = kv.page_table;
  p.page_limit = kv.k.n_pages < kv.v.n_pages ? kv.k.n_pages : kv.v.n_pages;
  p.n_past = n_past;
  p.n_tokens = q.rows;
  p.n_keys = n_past + q.rows;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.group = n_head / n_head_kv;
  p.head_dim = static_cast<int>(q.cols / n_head);
  p.scale = scale;
  p.plan = PlanSplits(p.n_tokens, p.n_keys);
  p.part_stats = nullptr;
  p.part_acc = nullptr;
  if (p.plan.n_splits > 1) {
    p.part_stats = static_cast<float*>(scratch);
    p.part_acc = p.part_stats + PartialStatsFloats(p.plan.n_splits, p.n_tokens * n_head);
  }
  return p;
}

// Grid of PagedAttentionKernel<kD>: (row blocks, kv heads, splits), kAttnThreads threads.
struct AttnGrid {
  int64_t x, y, z;
};
inline AttnGrid AttentionGrid(const AttnParams& p, int kD) {
  return {RowBlocks(p.n_tokens, p.group, RowsPerBlock(kD)), p.n_head_kv, p.plan.n_splits};
}

__device__ __forceinline__ float AttnWarpMax(float x) {
  for (int o = 16; o > 0; o >>= 1) {
    const float y = __shfl_xor_sync(kAttnFullMask, x, o);
    x = x < y ? y : x;
  }
  return x;
}

__device__ __forceinline__ float AttnWarpSum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kAttnFullMask, x, o);
  return x;
}

// Decodes the nk rows (rows[j] null: a position whose page is outside the pools, read as zeros)
// into tile[j][0, kD); columns from head_dim on, and rows from nk on, are zero. Warp w takes
// keys w, w + kAttnWarps, ... Branch-free on purpose: a row that is absent (or a column past
// head_dim) is read from `fallback` (the pool's first row, always readable) and its value
// dropped, so the loads of all of a warp's keys can be in flight together.
template <WeightType kType, int kD>
__device__ __forceinline__ void DecodeTileT(const uint8_t* const* rows, int nk, int head_dim,
                                            const uint8_t* fallback, float (*tile)[kD + 1]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int jj = 0; jj < kAttnKeyTile / kAttnWarps; ++jj) {
    const int j = warp + kAttnWarps * jj;
    const uint8_t* row = j < nk ? rows[j] : nullptr;
    const bool live = row != nullptr;
    if (!live) row = fallback;
#pragma unroll
    for (int c = 0; c < kD / 32; ++c) {
      const int d = lane + 32 * c;
      const float x = DecodeKvValueT<kType>(row, d < head_dim ? d : 0);
      tile[j][d] = (live && d < head_dim) ? x : 0.0f;
    }
  }
}

// The cache type is uniform over a call: one switch per tile, each case a loop of its own type.
template <int kD>
__device__ __forceinline__ void DecodeTile(WeightType type, const uint8_t* const* rows, int nk,
                                           int head_dim, const uint8_t* fallback,
                                           float (*tile)[kD + 1]) {
  switch (type) {
    case WeightType::kF32:
      DecodeTileT<WeightType::kF32, kD>(rows, nk, head_dim, fallback, tile);
      break;
    case WeightType::kF16:
      DecodeTileT<WeightType::kF16, kD>(rows, nk, head_dim, fallback, tile);
      break;
    case WeightType::kBF16:
      DecodeTileT<WeightType::kBF16, kD>(rows, nk, head_dim, fallback, tile);
      break;
    case WeightType::kQ8_0:
      DecodeTileT<WeightType::kQ8_0, kD>(rows, nk, head_dim, fallback, tile);
      break;
    case WeightType::kQ4_0:
      DecodeTileT<WeightType::kQ4_0, kD>(rows, nk, head_dim, fallback, tile);
      break;
    case WeightType::kQ4_1:
      DecodeTileT<WeightType::kQ4_1, kD>(rows, nk, head_dim, fallback, tile);
      break;
    case WeightType::kQ5_0:
      DecodeTileT<WeightType::kQ5_0, kD>(rows, nk, head_dim, fallback, tile);
      break;
    default:
      break;  // refused by CheckPagedAttention
  }
}

template <int kD>
__global__ void __launch_bounds__(kAttnThreads, 3) PagedAttentionKernel(const AttnParams p) {
  constexpr int kRpw = RowsPerWarp(kD);
  constexpr int kRows = RowsPerBlock(kD);
  constexpr int kCols = kD / 32;  // accumulator columns per lane
  __shared__ float q_s[kRows][kD];
  __shared__ float tile[kAttnKeyTile][kD + 1];
  __shared__ const uint8_t* k_rows[kAttnKeyTile];
  __shared__ const uint8_t* v_rows[kAttnKeyTile];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t kvh = blockIdx.y;
  const int64_t n_rows = p.n_tokens * p.group;
  // The last row blocks see the most keys: they get the lowest block ids, so they start first.
  const int64_t r0 = (static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x) * kRows;
  const int hd = p.head_dim;

  for (int i = threadIdx.x; i < kRows * kD; i += kAttnThreads) {
    const int rr = i / kD, d = i % kD;
    float x = 0.0f;
    if (r0 + rr < n_rows && d < hd) {
      const AttnRow row = RowOf(r0 + rr, kvh, p.group);
      x = p.q[row.token * p.q_stride + row.head * hd + d];
    }
    q_s[rr][d] = x;
  }

  // This warp's rows: block rows warp, warp + kAttnWarps, ...; limit 0 for rows past the end.
  int64_t limit[kRpw];
  SoftmaxRow state[kRpw];
  float acc[kRpw][kCols];
  float prob[kRpw];
#pragma unroll
  for (int i = 0; i < kRpw; ++i) {
    const int64_t r = r0 + warp + kAttnWarps * i;
    limit[i] = r < n_rows ? TokenKeyLimit(p.n_past, r / p.group) : 0;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[i][c] = 0.0f;
  }

  KeyRange keys{0, p.n_keys};
  if (p.part_stats != nullptr) keys = SplitRange(p.plan, p.n_keys, blockIdx.z);
  const int64_t block_end = BlockKeyEnd(r0, kRows, p.n_tokens, p.group, p.n_past);
  if (keys.end > block_end) keys.end = block_end;

  for (int64_t kb = keys.begin; kb < keys.end; kb += kAttnKeyTile) {
    const int nk = static_cast<int>(keys.end - kb < kAttnKeyTile ? keys.end - kb : kAttnKeyTile);
    __syncthreads();  // the previous tile's V (and, the first time, q_s) is no longer being read
    const int j = static_cast<int>(threadIdx.x);
    if (j < nk) {
      const int64_t pos = kb + j;
      const int64_t page = p.page_table[pos / p.k_geom.page_tokens];
      const bool ok = PageInPool(page, p.page_limit);
      k_rows[j] = ok ? p.k_pool + KvHeadByteOffset(p.k_geom, page, pos, kvh) : nullptr;
      v_rows[j] = ok ? p.v_pool + KvHeadByteOffset(p.v_geom, page, pos, kvh) : nullptr;
    }
    __syncthreads();
    DecodeTile<kD>(p.k_type, k_rows, nk, hd, p.k_pool, tile);
    __syncthreads();

    // Scores of key kb + lane for each of this warp's rows, sharing each K value over the rows.
    float dot[kRpw];
#pragma unroll
    for (int i = 0; i < kRpw; ++i) dot[i] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < kD; ++d) {
      const float kd = tile[lane][d];
#pragma unroll
      for (int i = 0; i < kRpw; ++i) dot[i] += q_s[warp + kAttnWarps * i][d] * kd;
    }
    const bool key_ok = lane < nk && k_rows[lane] != nullptr;
#pragma unroll
    for (int i = 0; i < kRpw; ++i) {
      const float s = (key_ok && kb + lane < limit[i]) ? p.scale * dot[i] : NegInf();
      const float factor = EnterTile(state[i], AttnWarpMax(s));
      prob[i] = ProbOf(s, state[i].max);
      state[i].sum = state[i].sum * factor + AttnWarpSum(prob[i]);
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[i][c] *= factor;
    }

    __syncthreads();  // every warp is done with the K tile
    DecodeTile<kD>(p.v_type, v_rows, nk, hd, p.v_pool, tile);
    __syncthreads();
    for (int j = 0; j < nk; ++j) {
#pragma unroll
      for (int i = 0; i < kRpw; ++i) {
        const float pj = __shfl_sync(kAttnFullMask, prob[i], j);
        if (pj == 0.0f) continue;  // masked (or underflowed) for this row: nothing to add
#pragma unroll
        for (int c = 0; c < kCols; ++c) acc[i][c] += pj * tile[j][lane + 32 * c];
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kRpw; ++i) {
    const int64_t r = r0 + warp + kAttnWarps * i;
    if (r >= n_rows) continue;
    const AttnRow row = RowOf(r, kvh, p.group);
    if (p.part_stats == nullptr) {
      const float inv = 1.0f / state[i].sum;
      float* o = p.out + row.token * p.out_stride + row.head * hd;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        if (lane + 32 * c < hd) o[lane + 32 * c] = acc[i][c] * inv;
      }
    } else {
      const int64_t out_row = row.token * p.n_head + row.head;
      const int64_t n_out_rows = p.n_tokens * p.n_head;
      if (lane == 0) {
        float* st = p.part_stats + PartialStatsIndex(blockIdx.z, n_out_rows, out_row);
        st[0] = state[i].max;
        st[1] = state[i].sum;
      }
      float* a = p.part_acc + PartialAccIndex(blockIdx.z, n_out_rows, out_row, hd);
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        if (lane + 32 * c < hd) a[lane + 32 * c] = acc[i][c];
      }
    }
  }
}

// One block per output row (token, query head): out = sum_s w_s acc_s / sum_s w_s sum_s with
// w_s = exp(max_s - max) over the splits.
__global__ void MergePartialsKernel(const float* stats, const float* acc, int64_t n_splits,
                                    int64_t n_rows, int64_t n_head, int head_dim, float* out,
                                    int64_t out_stride) {
  __shared__ float weight[kMaxSplits];
  __shared__ float inv_sum;
  const int64_t row = blockIdx.x;
  const size_t stride = PartialStatsIndex(1, n_rows, 0);  // between one split's pairs and the next
  const float* row_stats = stats + PartialStatsIndex(0, n_rows, row);
  const float max = MergedMax(row_stats, n_splits, stride);
  for (int64_t s = threadIdx.x; s < n_splits; s += kMergeThreads) {
    weight[s] = MergeWeight(row_stats[s * stride], max);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int64_t s = 0; s < n_splits; ++s) sum += weight[s] * row_stats[s * stride + 1];
    inv_sum = 1.0f / sum;
  }
  __syncthreads();
  float* o = out + row / n_head * out_stride + row % n_head * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += kMergeThreads) {
    float x = 0.0f;
    for (int64_t s = 0; s < n_splits; ++s) {
      if (weight[s] != 0.0f) x += weight[s] * acc[PartialAccIndex(s, n_rows, row, head_dim) + d];
    }
    o[d] = x * inv_sum;
  }
}

}  // namespace deltaserve::kernels::cuda
