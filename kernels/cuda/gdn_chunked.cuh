// The chunked (WY) form of the gated delta rule for prefill (MODEL_SPEC §3), as two kernels run
// once per pass of up to kGdnPassChunks chunks of kGdnChunk tokens (chunks start at the call's
// first token; a pass starts on a chunk boundary). All arithmetic is f32 on CUDA cores (SIMT),
// through the per-element functions of gdn_math.h; see "Tensor cores" below.
//
// 1. GdnChunkPrepKernel, grid (chunks in the pass, n_v), kGdnChunkThreads threads: everything
//    of a chunk that does not depend on the state, all chunks in parallel. Block (c, h):
//    γ (double cumsum), the decays, the Gram products K Kᵀ and Q Kᵀ over 32-column shared tiles
//    of K and Q, A (into shared memory) and P (into the record), T = (I + A)⁻¹ by forward
//    substitution in place in shared memory (one row per step and barrier, its entries in
//    parallel), then W = T diag(β e^γ) K and U = T diag(β) V over 32-column tiles of K and V.
//    Writes the chunk record (layout: gdn_math.h) of slot c, head h.
// 2. GdnChunkScanKernel, grid (ceil(d / kGdnScanRows), n_v), kGdnChunkThreads threads: the part
//    that runs in order over the chunks. Column r of S (row r of the state layout) only ever
//    mixes with column r of U, V′ and O, so block (x, h) owns state rows [16x, 16x + 16) of head
//    h, keeps them in shared memory for the whole pass, and per chunk computes
//      V′[:, rows] = U − W S,   O[:, rows] = qdec ⊙ (Q S) + P V′,
//      S[:, rows] ← exp(γ_{n−1}) S + (kdec ⊙ K)ᵀ V′,
//    reading q and k straight from the (strided) inputs and W, U, P, the decays from the record.
//
// Layouts: GdnProblem (gdn_math.h); the state is [n_v][d (v)][d (k)]. out may alias v: v is
// only read by the prep kernel of the pass that writes those rows of out, which runs before it.
//
// Tensor cores. The products are small (n = 64 rows, d = 128): Q Kᵀ, K Kᵀ, T·K, T·V, W·S, Q·S
// and Kᵀ·V′. A wmma/mma version would stage tiles in shared memory as tf32 (or bf16 for the
// Gram products), which rounds inputs to 10 (7) mantissa bits: a relative error of ~1e-3 on
// A and T that the forward substitution carries into W and U, outside the 1e-5-scale tolerance
// these kernels are tested to. It needs its own error analysis (or 3xTF32 splitting) and a
// measured GPU run; these SIMT kernels are the reference it will be checked against.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/gdn_math.h"

namespace deltaserve::kernels::cuda {

inline constexpr int kGdnChunkThreads = 256;
// State rows (columns of S) per scan block.
inline constexpr int kGdnScanRows = 16;

__global__ void __launch_bounds__(kGdnChunkThreads)
    GdnChunkPrepKernel(GdnProblem p, int64_t n_tokens, float* scratch) {
  constexpr int kC = kGdnChunk;
  constexpr int kLd = kC + 1;  // padded rows: a warp reading a column is conflict-free
  constexpr int kTl = kGdnTile + 1;
  __shared__ double gamma[kC];
  __shared__ float beta[kC];
  __shared__ float w_weight[kC];
  __shared__ float at[kC * kLd];      // A, then T (strictly lower parts)
  __shared__ float tile_a[kC * kTl];  // K columns
  __shared__ float tile_b[kC * kTl];  // Q columns, then V columns

  const int tid = static_cast<int>(threadIdx.x);
  const int c = static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y);
  const int d = p.d;
  const int64_t t0 = static_cast<int64_t>(c) * kC;
  const int n = static_cast<int>(n_tokens - t0 < kC ? n_tokens - t0 : kC);
  const GdnRecordLayout lay = GdnRecord(d);
  float* rec = scratch + GdnRecordOffset(c, h, p.n_v, d);

  if (tid == 0) GdnCumsum(p.g + t0 * p.g_stride + h, p.g_stride, n, gamma);
  if (tid < n) beta[tid] = p.Beta(t0 + tid, h);
  __syncthreads();
  if (tid < n) {
    w_weight[tid] = GdnWWeight(gamma, beta, tid);
    rec[lay.dec + kGdnDecQuery + tid] = GdnQueryDecay(gamma, tid, p.scale);
    rec[lay.dec + kGdnDecKey + tid] = GdnKeyDecay(gamma, n, tid);
  }
  if (tid == 0) rec[lay.dec + kGdnDecChunk] = expf(static_cast<float>(gamma[n - 1]));

  // Gram products (GdnDot, accumulated over the column tiles) in 4 x 4 register tiles: thread
  // (ti, tj) = (tid / 16, tid % 16) owns rows i = ti + 16a and columns j = tj + 16b (a, b < 4).
  // Per column x it loads 4 k_i, 4 q_i and 4 k_j for 32 FMAs (a warp: 2 rows i, broadcast; 16
  // rows j, distinct banks). Pairs above the diagonal or past n are computed too and masked by
  // GdnAEntry / GdnPEntry.
  constexpr int kT = 4;
  constexpr int kTs = kC / kT;
  static_assert(kTs * kTs == kGdnChunkThreads, "one 4 x 4 tile per thread");
  const int ti = tid / kTs, tj = tid % kTs;
  float kk[kT][kT] = {}, qk[kT][kT] = {};
  for (int k0 = 0; k0 < d; k0 += kGdnTile) {
    const int cols = d - k0 < kGdnTile ? d - k0 : kGdnTile;
    for (int e = tid; e < kC * kGdnTile; e += kGdnChunkThreads) {
      const int i = e / kGdnTile, x = e % kGdnTile;
      const bool in = i < n && x < cols;
      tile_a[i * kTl + x] = in ? p.KRow(t0 + i, h)[k0 + x] : 0.0f;
      tile_b[i * kTl + x] = in ? p.QRow(t0 + i, h)[k0 + x] : 0.0f;
    }
    __syncthreads();
    for (int x = 0; x < cols; ++x) {
      float ki[kT], qi[kT], kj[kT];
#pragma unroll
      for (int a = 0; a < kT; ++a) {
        ki[a] = tile_a[(ti + kTs * a) * kTl + x];
        qi[a] = tile_b[(ti + kTs * a) * kTl + x];
        kj[a] = tile_a[(tj + kTs * a) * kTl + x];
      }
#pragma unroll
      for (int a = 0; a < kT; ++a) {
#pragma unroll
        for (int b = 0; b < kT; ++b) {
          kk[a][b] += ki[a] * kj[b];
          qk[a][b] += qi[a] * kj[b];
        }
      }
    }
    __syncthreads();
  }
  // A (kept) and P (to the record; zero above the diagonal and in rows/columns past n).
#pragma unroll
  for (int a = 0; a < kT; ++a) {
#pragma unroll
    for (int b = 0; b < kT; ++b) {
      const int i = ti + kTs * a, j = tj + kTs * b;
      const bool in = i < n && j < n;
      at[i * kLd + j] = in ? GdnAEntry(kk[a][b], beta, gamma, i, j) : 0.0f;
      rec[lay.p + i * kC + j] = in ? GdnPEntry(qk[a][b], p.scale, gamma, i, j) : 0.0f;
    }
  }
  __syncthreads();

  // T = (I + A)⁻¹, row i from A's row i and T's rows < i. Thread j owns column j of T: it alone
  // writes T_ij and, of T, reads back only its own column (T_lj, l < i), so one barrier per row
  // suffices: all of A's row i is read before anyone overwrites it. The W/U tile loop's first
  // barrier orders the last row's writes before T is read by everyone.
  for (int i = 1; i < n; ++i) {
    const float t_ij = tid < i ? GdnInverseEntry(at, kLd, i, tid) : 0.0f;
    __syncthreads();
    if (tid < i) at[i * kLd + tid] = t_ij;
  }

  // W and U, 32 columns at a time: thread entries e = tid + 256 m, i = e / 32, x = e % 32.
  for (int k0 = 0; k0 < d; k0 += kGdnTile) {
    const int cols = d - k0 < kGdnTile ? d - k0 : kGdnTile;
    for (int e = tid; e < kC * kGdnTile; e += kGdnChunkThreads) {
      const int i = e / kGdnTile, x = e % kGdnTile;
      const bool in = i < n && x < cols;
      tile_a[i * kTl + x] = in ? p.KRow(t0 + i, h)[k0 + x] : 0.0f;
      tile_b[i * kTl + x] = in ? p.VRow(t0 + i, h)[k0 + x] : 0.0f;
    }
    __syncthreads();
    for (int e = tid; e < kC * kGdnTile; e += kGdnChunkThreads) {
      const int i = e / kGdnTile, x = e % kGdnTile;
      if (i < n && x < cols) {
        rec[lay.w + i * d + k0 + x] = GdnWyEntry(at, kLd, w_weight, tile_a + x, kTl, i);
        rec[lay.u + i * d + k0 + x] = GdnWyEntry(at, kLd, beta, tile_b + x, kTl, i);
      }
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kGdnChunkThreads)
    GdnChunkScanKernel(GdnProblem p, int64_t n_tokens, const float* scratch) {
  constexpr int kC = kGdnChunk;
  constexpr int kR = kGdnScanRows;
  constexpr int kSld = kGdnMaxHeadDim + 1;    // odd: rows r of a warp hit distinct banks
  constexpr int kRg = kGdnChunkThreads / kC;  // row groups: threads per token
  constexpr int kRpt = kR / kRg;              // rows per thread in V′, Q S and O
  static_assert(kRg * kC == kGdnChunkThreads && kRpt * kRg == kR, "thread ownership");
  __shared__ float s[kR * kSld];  // state rows [r0, r0 + rows), row r = S[:, r0 + r]
  __shared__ float vp[kC * kR];   // V′[:, r0 .. r0 + rows)
  __shared__ float dec[3 * kC];

  const int tid = static_cast<int>(threadIdx.x);
  const int h = static_cast<int>(blockIdx.y);
  const int d = p.d;
  const int r0 = static_cast<int>(blockIdx.x) * kR;
  const int rows = d - r0 < kR ? d - r0 : kR;
  const GdnRecordLayout lay = GdnRecord(d);
  const int i = tid / kRg, g = tid % kRg;                              // V′, Q S, O
  const int split = kGdnChunkThreads / d, sx = tid % d, sg = tid / d;  // state update

  // Rows past d (the last block of a head size that is not a multiple of 16) are zero in s and
  // vp: phases 1 and 2 read them for lanes whose results are dropped, and they stay defined.
  for (int e = tid; e < kR * d; e += kGdnChunkThreads) {
    s[(e / d) * kSld + e % d] = e / d < rows ? p.StateRow(h, r0 + e / d)[e % d] : 0.0f;
  }
  for (int e = tid; e < kC * kR; e += kGdnChunkThreads) vp[e] = 0.0f;
  const int64_t chunks = GdnChunks(n_tokens);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t t0 = c * kC;
    const int n = static_cast<int>(n_tokens - t0 < kC ? n_tokens - t0 : kC);
    const float* rec = scratch + GdnRecordOffset(c, h, p.n_v, d);
    for (int e = tid; e < 3 * kC; e += kGdnChunkThreads) dec[e] = rec[lay.dec + e];
    __syncthreads();  // also: the state and dec writes are visible

    // V′ (GdnVPrime) and Q S: thread (i, g) = (tid / 4, tid % 4) owns rows r = g + 4b (b < 4)
    // of token i, so each w_ix and q_ix it loads serves four rows (a warp: 8 tokens, 4 broadcast
    // s rows).
    float w_s[kRpt] = {}, q_s[kRpt] = {};
    if (i < n) {
      const float* w_row = rec + lay.w + i * d;
      const float* q_row = p.QRow(t0 + i, h);
      for (int x = 0; x < d; ++x) {
        const float w = w_row[x], q = q_row[x];
#pragma unroll
        for (int b = 0; b < kRpt; ++b) {
          const float s_xr = s[(g + kRg * b) * kSld + x];
          w_s[b] += w * s_xr;
          q_s[b] += q * s_xr;
        }
      }
#pragma unroll
      for (int b = 0; b < kRpt; ++b) {
        const int r = g + kRg * b;
        if (r < rows) vp[i * kR + r] = rec[lay.u + i * d + r0 + r] - w_s[b];
      }
    }
    __syncthreads();

    // Outputs (GdnOutEntry; same ownership, q_s stays in registers), then the state; neither
    // reads what the other writes.
    if (i < n) {
      const float* p_row = rec + lay.p + i * kC;
      float o[kRpt] = {};
      for (int j = 0; j <= i; ++j) {
        const float p_ij = p_row[j];
#pragma unroll
        for (int b = 0; b < kRpt; ++b) o[b] += p_ij * vp[j * kR + g + kRg * b];
      }
      float* out_row = p.OutRow(t0 + i, h) + r0;
#pragma unroll
      for (int b = 0; b < kRpt; ++b) {
        const int r = g + kRg * b;
        if (r < rows) out_row[r] = dec[kGdnDecQuery + i] * q_s[b] + o[b];
      }
    }
    // State (GdnStateEntry): thread owns column x = tid % d of rows r = sg + split m (sg =
    // tid / d, split = 256 / d), so each kdec_i k_ix it loads serves all its rows (a warp:
    // consecutive x, coalesced, vp broadcast).
    if (sg < split) {
      float acc[kR] = {};
      const float* k_col = p.KRow(t0, h) + sx;
      for (int j = 0; j < n; ++j) {
        const float kv = dec[kGdnDecKey + j] * k_col[j * p.k_stride];
#pragma unroll
        for (int m = 0; m < kR; ++m) {
          const int r = sg + split * m;
          if (r < rows) acc[m] += kv * vp[j * kR + r];
        }
      }
#pragma unroll
      for (int m = 0; m < kR; ++m) {
        const int r = sg + split * m;
        if (r < rows) s[r * kSld + sx] = dec[kGdnDecChunk] * s[r * kSld + sx] + acc[m];
      }
    }
    __syncthreads();  // the next chunk reads the new state and overwrites vp and dec
  }
  for (int e = tid; e < rows * d; e += kGdnChunkThreads) {
    p.StateRow(h, r0 + e / d)[e % d] = s[(e / d) * kSld + e % d];
  }
}

}  // namespace deltaserve::kernels::cuda
