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
  constexpr int kPairs = kC * kC / kGdnChunkThreads;  // (i, j) pairs per thread
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

  // Gram products: thread owns pairs e = tid + 256 m, i = e / 64, j = e % 64 (a warp shares i).
  float kk[kPairs], qk[kPairs];
#pragma unroll
  for (int m = 0; m < kPairs; ++m) kk[m] = qk[m] = 0.0f;
  for (int k0 = 0; k0 < d; k0 += kGdnTile) {
    const int cols = d - k0 < kGdnTile ? d - k0 : kGdnTile;
    for (int e = tid; e < kC * kGdnTile; e += kGdnChunkThreads) {
      const int i = e / kGdnTile, x = e % kGdnTile;
      const bool in = i < n && x < cols;
      tile_a[i * kTl + x] = in ? p.KRow(t0 + i, h)[k0 + x] : 0.0f;
      tile_b[i * kTl + x] = in ? p.QRow(t0 + i, h)[k0 + x] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kPairs; ++m) {
      const int e = tid + kGdnChunkThreads * m;
      const int i = e / kC, j = e % kC;
      if (j <= i && i < n) {
        kk[m] += GdnDot(tile_a + i * kTl, 1, tile_a + j * kTl, 1, cols);
        qk[m] += GdnDot(tile_b + i * kTl, 1, tile_a + j * kTl, 1, cols);
      }
    }
    __syncthreads();
  }
  // A (kept) and P (to the record; zero above the diagonal and in rows/columns past n).
#pragma unroll
  for (int m = 0; m < kPairs; ++m) {
    const int e = tid + kGdnChunkThreads * m;
    const int i = e / kC, j = e % kC;
    const bool in = i < n && j < n;
    at[i * kLd + j] = in ? GdnAEntry(kk[m], beta, gamma, i, j) : 0.0f;
    rec[lay.p + i * kC + j] = in ? GdnPEntry(qk[m], p.scale, gamma, i, j) : 0.0f;
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
  constexpr int kSld = kGdnMaxHeadDim + 1;            // odd: rows r of a warp hit distinct banks
  constexpr int kPairs = kC * kR / kGdnChunkThreads;  // (i, r) pairs per thread
  __shared__ float s[kR * kSld];  // state rows [r0, r0 + rows), row r = S[:, r0 + r]
  __shared__ float vp[kC * kR];   // V′[:, r0 .. r0 + rows)
  __shared__ float qs[kC * kR];   // Q S[:, r0 .. r0 + rows) (unscaled q)
  __shared__ float dec[3 * kC];

  const int tid = static_cast<int>(threadIdx.x);
  const int h = static_cast<int>(blockIdx.y);
  const int d = p.d;
  const int r0 = static_cast<int>(blockIdx.x) * kR;
  const int rows = d - r0 < kR ? d - r0 : kR;
  const GdnRecordLayout lay = GdnRecord(d);

  for (int e = tid; e < rows * d; e += kGdnChunkThreads) {
    s[(e / d) * kSld + e % d] = p.StateRow(h, r0 + e / d)[e % d];
  }
  const int64_t chunks = GdnChunks(n_tokens);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t t0 = c * kC;
    const int n = static_cast<int>(n_tokens - t0 < kC ? n_tokens - t0 : kC);
    const float* rec = scratch + GdnRecordOffset(c, h, p.n_v, d);
    for (int e = tid; e < 3 * kC; e += kGdnChunkThreads) dec[e] = rec[lay.dec + e];
    __syncthreads();  // also: the state and dec writes are visible

    // V′ and the inter-chunk part of O; pairs e = tid + 256 m, i = e / 16, r = e % 16.
#pragma unroll
    for (int m = 0; m < kPairs; ++m) {
      const int e = tid + kGdnChunkThreads * m;
      const int i = e / kR, r = e % kR;
      if (i < n && r < rows) {
        const float* s_row = s + r * kSld;
        vp[i * kR + r] = GdnVPrime(rec[lay.u + i * d + r0 + r], rec + lay.w + i * d, s_row, d);
        qs[i * kR + r] = GdnDot(p.QRow(t0 + i, h), 1, s_row, 1, d);
      }
    }
    __syncthreads();

    // Outputs (same pairs), then the state; neither reads what the other writes.
#pragma unroll
    for (int m = 0; m < kPairs; ++m) {
      const int e = tid + kGdnChunkThreads * m;
      const int i = e / kR, r = e % kR;
      if (i < n && r < rows) {
        p.OutRow(t0 + i, h)[r0 + r] =
            GdnOutEntry(qs[i * kR + r], dec[kGdnDecQuery + i], rec + lay.p + i * kC, vp + r, kR, i);
      }
    }
    const float* k_chunk = p.KRow(t0, h);
    for (int e = tid; e < rows * d; e += kGdnChunkThreads) {
      const int r = e / d, x = e % d;
      float& s_xr = s[r * kSld + x];
      s_xr = GdnStateEntry(s_xr, dec[kGdnDecChunk], k_chunk + x, p.k_stride, dec + kGdnDecKey,
                           vp + r, kR, n);
    }
    __syncthreads();  // the next chunk reads the new state and overwrites vp and dec
  }
  for (int e = tid; e < rows * d; e += kGdnChunkThreads) {
    p.StateRow(h, r0 + e / d)[e % d] = s[(e / d) * kSld + e % d];
  }
}

}  // namespace deltaserve::kernels::cuda
