// Prefill GEMM tile on GGUF block types with tensor cores (WMMA, f16 inputs, f32 accumulation).
// One block of kGemmThreads threads (4 warps) computes a kGemmTileOut x kGemmTileRows tile
// C[o][t] = sum_k W[o0 + o][k] * x_t[k]:
//
//   per reduction slice of kGemmTileK values:
//     Ws [kGemmTileOut][kGemmTileK] f16  <- the weight rows decoded (dequant.cuh, exact f32)
//                                           and rounded to f16, zeros past the valid rows
//     Xs [kGemmTileRows][kGemmTileK] f16 <- the activation rows rounded to f16, zeros for the
//                                           missing rows (xrow[t] == nullptr) and past `in`
//     warp (wo, wt) of the 2 x 2 grid: 2 x 2 WMMA 16x16x16 products on its 32 x 32 sub-tile
//   Cs [kGemmTileRows][kGemmTileOut] f32 <- accumulators; then yrow[t][y_col0 + o] = Cs[t][o]
//                                           for the valid (t, o), consecutive threads writing
//                                           consecutive o (coalesced).
// A is Ws row-major, B is Xs read column-major (B[k][t] = Xs[t][k]), C stored column-major
// (Cs[t][o]). Rows of Ws/Xs are padded to kLd halves (a multiple of 8 halves, 16 bytes, as
// WMMA requires; every fragment pointer 32-byte aligned).
//
// The unit loaders (GemmWeightUnit, GemmActivationUnit) are DS_HOST_DEVICE: the CPU test replays
// a tile's slices with them.
//
// Numerics: each product w * x is taken from w and x rounded to f16 (relative error <= 2^-11
// each, so <= ~2^-10 per product), summed in f32. Against the exact product the error is
// bounded by ~1e-3 * sum_k |w_k x_k| (plus f32 summation), and for random signs it is about
// 2^-11 * sqrt(sum_k (w_k x_k)^2) in RMS. Values beyond the f16 range (|v| > 65504) become inf:
// model weights and post-norm activations stay far below it (kernels/cuda/README.md).
#pragma once

#include <cstdint>

#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/gemv.cuh"  // LoadActivations8
#include "kernels/cuda/matmul_plan.cuh"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <mma.h>
#endif

namespace deltaserve::kernels::cuda {

// Row pitch of the f16 slices in shared memory (a multiple of 8 halves, as WMMA requires).
inline constexpr int kGemmLd = kGemmTileK + 8;
// Units of 8 values per row of a slice.
inline constexpr int kGemmUnitsPerRow = kGemmTileK / 8;

// Unit u (0 .. kGemmTileOut * kGemmUnitsPerRow - 1) of the weight slice starting at column k0:
// row r = u / kGemmUnitsPerRow of the tile, values k0 + 8 (u % kGemmUnitsPerRow) .. + 7,
// decoded exactly into v (zeros past n_out rows or past `in`). Returns its offset in Ws.
template <WeightType T>
DS_HOST_DEVICE DS_INLINE int GemmWeightUnit(const uint8_t* w, size_t row_bytes, int n_out,
                                            int64_t in, int64_t k0, int u, float* v) {
  const int r = u / kGemmUnitsPerRow;
  const int c = u % kGemmUnitsPerRow;
  const int64_t k = k0 + 8 * c;
  for (int i = 0; i < 8; ++i) v[i] = 0.0f;
  if (r < n_out && k < in) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
    if (k + 8 <= in) {
      DecodeUnit<T>(row, k / 8, v);
    } else if constexpr (kDqDense<T>) {  // the end of a row whose length is not 8m
      DS_UNROLL
      for (int i = 0; i < 8; ++i) {
        if (k + i < in) v[i] = DecodeValue<T>(row, k + i);
      }
    }
  }
  return r * kGemmLd + 8 * c;
}

// Unit u of the activation slice at k0: tile row t = u / kGemmUnitsPerRow from xrow (nullptr:
// no row, zeros), zeros past `in`. Returns its offset in Xs.
DS_HOST_DEVICE DS_INLINE int GemmActivationUnit(const float* xrow, int64_t in, int64_t k0, int u,
                                                float* v) {
  const int t = u / kGemmUnitsPerRow;
  const int c = u % kGemmUnitsPerRow;
  const int64_t k = k0 + 8 * c;
  for (int i = 0; i < 8; ++i) v[i] = 0.0f;
  if (xrow != nullptr && k < in) {
    if (k + 8 <= in) {
      LoadActivations8(xrow + k, v);
    } else {
      DS_UNROLL
      for (int i = 0; i < 8; ++i) {
        if (k + i < in) v[i] = LoadActivation(xrow + k + i);
      }
    }
  }
  return t * kGemmLd + 8 * c;
}

#if defined(__CUDACC__)

struct GemmShared {
  static constexpr int kLd = kGemmLd;            // halves per row of Ws / Xs
  static constexpr int kLdc = kGemmTileOut + 4;  // floats per row of Cs
  __align__(32) __half ws[kGemmTileOut * kLd];
  __align__(32) __half xs[kGemmTileRows * kLd];
  __align__(32) float cs[kGemmTileRows * kLdc];
  const float* xrow[kGemmTileRows];  // activation row t of the tile, nullptr: none
  float* yrow[kGemmTileRows];        // output row t of the tile, nullptr: none
};

// Eight f32 values rounded to f16, stored as one 16-byte word at dst (16-byte aligned).
__device__ __forceinline__ void StoreHalf8(__half* dst, const float* v) {
  __align__(16) __half2 h[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(h);
}

// The tile whose weight rows start at `w` (n_out <= kGemmTileOut valid rows, row_bytes apart),
// activation and output rows from sh.xrow / sh.yrow (filled by the caller before the call; the
// first __syncthreads below publishes them). Called by all kGemmThreads threads of the block.
template <WeightType T>
__device__ void GemmTile(GemmShared& sh, const uint8_t* w, size_t row_bytes, int n_out, int64_t in,
                         int64_t y_col0) {
  namespace wmma = nvcuda::wmma;
  constexpr int kLd = GemmShared::kLd;
  constexpr int kLdc = GemmShared::kLdc;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int wo = warp / 2;  // 32-row block of the output features
  const int wt = warp % 2;  // 32-row block of the activation rows

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  }

  for (int64_t k0 = 0; k0 < in; k0 += kGemmTileK) {
    __syncthreads();  // the previous slice's fragments are loaded (and xrow/yrow are visible)
    for (int u = tid; u < kGemmTileOut * kGemmUnitsPerRow; u += kGemmThreads) {
      float v[8];
      const int at = GemmWeightUnit<T>(w, row_bytes, n_out, in, k0, u, v);
      StoreHalf8(&sh.ws[at], v);
    }
    for (int u = tid; u < kGemmTileRows * kGemmUnitsPerRow; u += kGemmThreads) {
      float v[8];
      const int at = GemmActivationUnit(sh.xrow[u / kGemmUnitsPerRow], in, k0, u, v);
      StoreHalf8(&sh.xs[at], v);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kGemmTileK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        wmma::load_matrix_sync(a[i], &sh.ws[(wo * 32 + 16 * i) * kLd + kk], kLd);
        wmma::load_matrix_sync(b[i], &sh.xs[(wt * 32 + 16 * i) * kLd + kk], kLd);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(&sh.cs[(wt * 32 + 16 * j) * kLdc + wo * 32 + 16 * i], acc[i][j], kLdc,
                              wmma::mem_col_major);
    }
  }
  __syncthreads();
  for (int idx = tid; idx < kGemmTileRows * kGemmTileOut; idx += kGemmThreads) {
    const int t = idx / kGemmTileOut;
    const int o = idx % kGemmTileOut;
    float* yp = sh.yrow[t];
    if (yp != nullptr && o < n_out) yp[y_col0 + o] = sh.cs[t * kLdc + o];
  }
}

#endif  // __CUDACC__

}  // namespace deltaserve::kernels::cuda
