// AVX-512 VNNI fused batch products of the int8 path (Int8FusedBatchAvx512Vnni,
// matmul_int8.h): 2-16 activation rows (continuous batching, speculative verification), each
// weight block decoded in registers once for up to 8 of them. Built with the AVX-512 flags of
// quants.cmake; called only when the CPU has AVX-512 F/BW/VL and VNNI.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/matmul_int8_avx512_common.h"
#include "kernels/cpu/matmul_int8_avx512_q8_0.h"
#include "kernels/cpu/quants.h"

namespace deltaserve::kernels::internal {
namespace {

// One weight row at a time, its blocks decoded in registers once per super-block (block pair
// for Q8_0) and applied to a block of T <= kBatchTokens activation rows, whose T accumulators
// (two for the K-quants) stay in registers across the row. Per (row, token) the arithmetic is
// that of the one-row kernels (matmul_int8_avx512_rows.cc), so each output equals theirs bit
// for bit: the integer sums are exact whatever the order, and the f32 operations are the same
// ones in the same order. A row is streamed start to end, as one hardware-prefetched stream,
// plus the software prefetch of the one-row kernels; it stays in L1 while further token blocks
// run over it. A (token, super-block) costs 4 vpmaddubsw + 4 vpdpwssd + 3 f32 FMA-pipe
// operations for Q4_K / Q6_K: Q4_K 1024 x 3584 (weights in L3, 2 threads) took 0.030 / 0.048 /
// 0.073 / 0.126 / 0.21 ms at 1 / 2 / 4 / 8 / 16 tokens, against 0.030 / 0.056 / 0.225 / 0.222 /
// 0.229 through the one-row kernel per token (2) and MultiplyInt8 (4 and more) before.

// Tokens per block: 8 x (zmm + ymm) accumulators for Q4_K and Q5_K, 8 x 2 zmm for Q6_K, beside
// the 8 registers of the decoded super-block (four weight vectors, four scale vectors; no
// spills in GCC 12's code for T = 8).
constexpr int kBatchTokens = 8;

// Rows t0 .. t0 + T of x, as per-token pointers.
template <int T>
struct TokenBlock {
  const int8_t* q[T];
  const float* d[T];
  const float* dsum[T];
  const int32_t* qsum[T];
};

template <int T>
inline TokenBlock<T> TokensOf(const Int8FlatBatch& x, int64_t t0) {
  TokenBlock<T> tb;
  const int64_t nb = x.n / x.group;
  for (int t = 0; t < T; ++t) {
    tb.q[t] = x.q + (t0 + t) * x.n;
    tb.d[t] = x.d + (t0 + t) * nb;
    tb.dsum[t] = x.dsum + (t0 + t) * nb;
    tb.qsum[t] = x.qsum + (t0 + t) * nb;
  }
  return tb;
}

// Writes the T row sums of acc to y[t * y_stride], reduced as ReduceRows4 reduces each row.
template <int T>
inline void StoreTokens(const __m512 (&acc)[T], float* y, int64_t y_stride) {
#pragma GCC unroll 8
  for (int t0 = 0; t0 < T; t0 += 4) {
    __m512 a[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) a[j] = t0 + j < T ? acc[t0 + j] : _mm512_setzero_ps();
    alignas(16) float s[4];
    _mm_store_ps(s, ReduceRows4(a));
    for (int j = 0; j < 4 && t0 + j < T; ++j) y[(t0 + j) * y_stride] = s[j];
  }
}

// One Q4_K row times T tokens (x in the batch order: sub-blocks 0, 2, 1, 3 of each 128 values,
// so the 64-byte loads of x are DotQ4KRows's regrouped xv[p][e] as they are).
template <int T>
void BatchQ4KRow(const BlockQ4_K* b, int64_t nsb, size_t ahead, const TokenBlock<T>& x, float* y,
                 int64_t y_stride) {
  const __m512i m4 = _mm512_set1_epi8(0xF);
  auto ctl = [](int j) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set1_epi16(static_cast<int16_t>(0x8000 | j))),
        _mm256_set1_epi16(static_cast<int16_t>(0x8000 | (j + 2))), 1);
  };
  const __m512i sel[2][2] = {{ctl(0), ctl(1)}, {ctl(4), ctl(5)}};
  __m512 acc[T];
  __m256 acc_min[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm512_setzero_ps();
    acc_min[t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nsb; ++i) {
    const BlockQ4_K& blk = b[i];
    PrefetchAhead<sizeof(BlockQ4_K)>(&blk, ahead);
    uint64_t u01;
    uint32_t u2;
    std::memcpy(&u01, blk.scales, sizeof(u01));
    std::memcpy(&u2, blk.scales + 8, sizeof(u2));
    const auto u0 = static_cast<uint32_t>(u01);
    const auto u1 = static_cast<uint32_t>(u01 >> 32);
    const uint32_t sc_lo = u0 & 0x3F3F3F3F;
    const uint32_t m_lo = u1 & 0x3F3F3F3F;
    const uint32_t sc_hi = (u2 & 0x0F0F0F0F) | (((u0 >> 6) & 0x03030303) << 4);
    const uint32_t m_hi = ((u2 >> 4) & 0x0F0F0F0F) | (((u1 >> 6) & 0x03030303) << 4);
    const __m512i scb =
        _mm512_set1_epi64(static_cast<int64_t>(sc_lo | (static_cast<uint64_t>(sc_hi) << 32)));
    const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
        _mm_cvtsi64_si128(static_cast<int64_t>(m_lo | (static_cast<uint64_t>(m_hi) << 32)))));
    __m512i wq[4];
    __m512i ws[4];
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {
      const __m512i v = _mm512_loadu_si512(blk.qs + 64 * p);
      wq[2 * p] = _mm512_and_si512(v, m4);
      wq[2 * p + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      ws[2 * p] = _mm512_shuffle_epi8(scb, sel[p][0]);
      ws[2 * p + 1] = _mm512_shuffle_epi8(scb, sel[p][1]);
    }
    const float d = _cvtsh_ss(blk.d);
    const __m256 mnd = _mm256_mul_ps(mn, _mm256_set1_ps(_cvtsh_ss(blk.dmin)));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const int8_t* xq = x.q[t] + i * kQkK;
      __m512i si = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        si = _mm512_dpwssd_epi32(si, _mm512_maddubs_epi16(wq[k], _mm512_loadu_si512(xq + 64 * k)),
                                 ws[k]);
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_set1_ps(d * x.d[t][8 * i]), acc[t]);
      acc_min[t] = _mm256_fmadd_ps(mnd, _mm256_loadu_ps(x.dsum[t] + 8 * i), acc_min[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_sub_ps(acc[t], _mm512_zextps256_ps512(acc_min[t]));
  StoreTokens<T>(acc, y, y_stride);
}

// One Q6_K row times T tokens, as DotQ6KRows.
template <int T>
void BatchQ6KRow(const BlockQ6_K* b, int64_t nsb, size_t ahead, const TokenBlock<T>& x, float* y,
                 int64_t y_stride) {
  const __m512i m4 = _mm512_set1_epi8(0xF);
  const __m512i m2 = _mm512_set1_epi8(0x30);
  const __m512i shl_lo = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2);
  const __m512i shr_hi = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
  auto perm = [](int64_t j) {
    const int64_t k = 0x0001000100010001LL;
    return _mm512_setr_epi64(k * j, k * j, k * (j + 1), k * (j + 1), k * (j + 2), k * (j + 2),
                             k * (j + 3), k * (j + 3));
  };
  const __m512i sel[4] = {perm(0), perm(4), perm(8), perm(12)};
  __m512 acc[T];
  __m512 acc_off[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm512_setzero_ps();
    acc_off[t] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < nsb; ++i) {
    const BlockQ6_K& blk = b[i];
    PrefetchAhead<sizeof(BlockQ6_K)>(&blk, ahead);
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
    const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
    __m512i wq[4];
    __m512i ws[4];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i a = _mm512_loadu_si512(blk.ql + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h)));
      wq[2 * h] = _mm512_ternarylogic_epi32(a, _mm512_and_si512(_mm512_sllv_epi64(qh, shl_lo), m2),
                                            m4, 0xE4);
      wq[2 * h + 1] = _mm512_ternarylogic_epi32(
          _mm512_srli_epi16(a, 4), _mm512_and_si512(_mm512_srlv_epi64(qh, shr_hi), m2), m4, 0xE4);
      ws[2 * h] = _mm512_permutexvar_epi16(sel[2 * h], sc16);
      ws[2 * h + 1] = _mm512_permutexvar_epi16(sel[2 * h + 1], sc16);
    }
    const float d = _cvtsh_ss(blk.d);
    const __m512 scd =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)), _mm512_set1_ps(d));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const int8_t* xq = x.q[t] + i * kQkK;
      __m512i si = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        si = _mm512_dpwssd_epi32(si, _mm512_maddubs_epi16(wq[k], _mm512_loadu_si512(xq + 64 * k)),
                                 ws[k]);
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_set1_ps(d * x.d[t][16 * i]), acc[t]);
      acc_off[t] = _mm512_fmadd_ps(scd, _mm512_loadu_ps(x.dsum[t] + 16 * i), acc_off[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm512_fnmadd_ps(_mm512_set1_ps(32.0f), acc_off[t], acc[t]);
  }
  StoreTokens<T>(acc, y, y_stride);
}

// One Q8_0 row times T tokens, as DotQ8_0 (matmul_int8_avx512_q8_0.h): each group's weights
// and scales are loaded once for all T tokens.
template <int T>
void BatchQ8_0Row(const BlockQ8_0* b, int64_t nb, size_t ahead, const TokenBlock<T>& x, float* y,
                  int64_t y_stride) {
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kQ8Group <= nb; i += kQ8Group) {
    PrefetchAhead<kQ8Group * sizeof(BlockQ8_0)>(b + i, ahead);
    __m512i wu[8];
    for (int j = 0; j < 8; ++j) wu[j] = Q8PairUnsigned(b + i + 2 * j);
    const __m512 dw = Q8Scales16(b + i);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      __m512i s[8];
      for (int j = 0; j < 8; ++j) {
        s[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wu[j],
                                   _mm512_loadu_si512(x.q[t] + (i + 2 * j) * kQk));
      }
      acc[t] = Q8GroupFma(s, dw, x.d[t] + i, x.qsum[t] + i, acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    y[t * y_stride] =
        _mm512_reduce_add_ps(acc[t]) + Q8_0Tail(b + i, nb - i, x.q[t] + i * kQk, x.d[t] + i);
  }
}

// One Q5_K row times T tokens, as DotK45<true> (its per-token scale product d * sc * d_x and
// both reductions repeated).
template <int T>
void BatchQ5KRow(const BlockQ5_K* b, int64_t nsb, size_t ahead, const TokenBlock<T>& x, float* y,
                 int64_t y_stride) {
  const __m256i low = _mm256_set1_epi8(0xF);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i idx[4] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                          _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
                          _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5),
                          _mm512_setr_epi32(6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7)};
  __m512 acc[T];
  __m256 acc_min[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm512_setzero_ps();
    acc_min[t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nsb; ++i) {
    const BlockQ5_K& blk = b[i];
    PrefetchAhead<sizeof(BlockQ5_K)>(&blk, ahead);
    uint32_t w[3];
    std::memcpy(w, blk.scales, sizeof(w));
    const uint32_t sc_lo = w[0] & 0x3F3F3F3F;
    const uint32_t m_lo = w[1] & 0x3F3F3F3F;
    const uint32_t sc_hi = (w[2] & 0x0F0F0F0F) | (((w[0] >> 6) & 0x03030303) << 4);
    const uint32_t m_hi = ((w[2] >> 4) & 0x0F0F0F0F) | (((w[1] >> 6) & 0x03030303) << 4);
    const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
        _mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo))));
    const __m256 mn = _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo))));
    const __m256 scd = _mm256_mul_ps(sc, _mm256_set1_ps(_cvtsh_ss(blk.d)));
    const __m256 mnd = _mm256_mul_ps(mn, _mm256_set1_ps(_cvtsh_ss(blk.dmin)));
    const __m256i h = Load256(blk.qh);
    __m512i wq[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i bytes = Load256(blk.qs + 32 * c);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(bytes, low), BitTo4(h, 2 * c));
      const __m256i hi =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low), BitTo4(h, 2 * c + 1));
      wq[c] = Join(lo, hi);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 scale =
          _mm512_zextps256_ps512(_mm256_mul_ps(scd, _mm256_set1_ps(x.d[t][8 * i])));
      acc_min[t] = _mm256_fmadd_ps(mnd, _mm256_loadu_ps(x.dsum[t] + 8 * i), acc_min[t]);
      const int8_t* xq = x.q[t] + i * kQkK;
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m512i s = _mm512_dpbusd_epi32(zero, wq[c], _mm512_loadu_si512(xq + 64 * c));
        acc[t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_permutexvar_ps(idx[c], scale), acc[t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(acc_min[t]), _mm256_extractf128_ps(acc_min[t], 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    y[t * y_stride] = _mm512_reduce_add_ps(acc[t]) - _mm_cvtss_f32(m);
  }
}

template <class Block, int T>
struct BatchKernel;
template <int T>
struct BatchKernel<BlockQ4_K, T> {
  static void Run(const BlockQ4_K* b, int64_t nblocks, size_t ahead, const TokenBlock<T>& x,
                  float* y, int64_t y_stride) {
    BatchQ4KRow<T>(b, nblocks, ahead, x, y, y_stride);
  }
};
template <int T>
struct BatchKernel<BlockQ5_K, T> {
  static void Run(const BlockQ5_K* b, int64_t nblocks, size_t ahead, const TokenBlock<T>& x,
                  float* y, int64_t y_stride) {
    BatchQ5KRow<T>(b, nblocks, ahead, x, y, y_stride);
  }
};
template <int T>
struct BatchKernel<BlockQ6_K, T> {
  static void Run(const BlockQ6_K* b, int64_t nblocks, size_t ahead, const TokenBlock<T>& x,
                  float* y, int64_t y_stride) {
    BatchQ6KRow<T>(b, nblocks, ahead, x, y, y_stride);
  }
};
template <int T>
struct BatchKernel<BlockQ8_0, T> {
  static void Run(const BlockQ8_0* b, int64_t nblocks, size_t ahead, const TokenBlock<T>& x,
                  float* y, int64_t y_stride) {
    BatchQ8_0Row<T>(b, nblocks, ahead, x, y, y_stride);
  }
};

// Every row times tokens [t0, t0 + T).
template <class Block, int T>
void BatchRowsOfBlock(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t nblocks,
                      const Int8FlatBatch& x, int64_t t0, float* y, int64_t y_stride) {
  const TokenBlock<T> tb = TokensOf<T>(x, t0);
  const size_t ahead = PrefetchDistance(row_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    BatchKernel<Block, T>::Run(reinterpret_cast<const Block*>(w + r * row_bytes), nblocks, ahead,
                               tb, y + t0 * y_stride + r, y_stride);
  }
}

// Rows outer, token blocks inner (a row stays in L1 for its later blocks); the tokens split
// into ceil(rows / kBatchTokens) blocks of near-equal size (17 = 6 + 6 + 5, not 8 + 8 + 1).
template <class Block>
void BatchRows(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t nblocks,
               const Int8FlatBatch& x, float* y, int64_t y_stride) {
  static_assert(kBatchTokens == 8);
  const int64_t n_blocks = (x.rows + kBatchTokens - 1) / kBatchTokens;
  // Weight rows in groups of 16 so that the row group, not the whole range, is what the later
  // token blocks find in L1.
  constexpr int64_t kRowGroup = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowGroup) {
    const int64_t nr = rows - r0 < kRowGroup ? rows - r0 : kRowGroup;
    const uint8_t* wr = w + r0 * row_bytes;
    int64_t t0 = 0;
    for (int64_t blk = 0; blk < n_blocks; ++blk) {
      const int64_t tn = x.rows / n_blocks + (blk < x.rows % n_blocks ? 1 : 0);
      float* yr = y + r0;
      switch (tn) {
        case 8:
          BatchRowsOfBlock<Block, 8>(wr, row_bytes, nr, nblocks, x, t0, yr, y_stride);
          break;
        case 7:
          BatchRowsOfBlock<Block, 7>(wr, row_bytes, nr, nblocks, x, t0, yr, y_stride);
          break;
        case 6:
          BatchRowsOfBlock<Block, 6>(wr, row_bytes, nr, nblocks, x, t0, yr, y_stride);
          break;
        case 5:
          BatchRowsOfBlock<Block, 5>(wr, row_bytes, nr, nblocks, x, t0, yr, y_stride);
          break;
        case 4:
          BatchRowsOfBlock<Block, 4>(wr, row_bytes, nr, nblocks, x, t0, yr, y_stride);
          break;
        case 3:
          BatchRowsOfBlock<Block, 3>(wr, row_bytes, nr, nblocks, x, t0, yr, y_stride);
          break;
        case 2:
          BatchRowsOfBlock<Block, 2>(wr, row_bytes, nr, nblocks, x, t0, yr, y_stride);
          break;
        default:
          BatchRowsOfBlock<Block, 1>(wr, row_bytes, nr, nblocks, x, t0, yr, y_stride);
          break;
      }
      t0 += tn;
    }
  }
}

}  // namespace

bool Int8FusedBatchAvx512VnniHas(WeightType type) {
  return type == WeightType::kQ8_0 || type == WeightType::kQ4_K || type == WeightType::kQ5_K ||
         type == WeightType::kQ6_K;
}

bool Int8FusedBatchAvx512Vnni(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                              const Int8FlatBatch& x, float* y, int64_t y_stride) {
  switch (type) {
    case WeightType::kQ8_0:
      BatchRows<BlockQ8_0>(w, row_bytes, rows, x.n / kQk, x, y, y_stride);
      return true;
    case WeightType::kQ4_K:
      BatchRows<BlockQ4_K>(w, row_bytes, rows, x.n / kQkK, x, y, y_stride);
      return true;
    case WeightType::kQ5_K:
      BatchRows<BlockQ5_K>(w, row_bytes, rows, x.n / kQkK, x, y, y_stride);
      return true;
    case WeightType::kQ6_K:
      BatchRows<BlockQ6_K>(w, row_bytes, rows, x.n / kQkK, x, y, y_stride);
      return true;
    default:
      return false;
  }
}

}  // namespace deltaserve::kernels::internal
