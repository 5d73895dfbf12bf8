// AVX-512 VNNI one-activation-row products of the int8 path (Int8FusedAvx512Vnni,
// matmul_int8.h): the decode step's matrix-vector products, every type one weight row at a time
// (one contiguous stream with a software prefetch); Q4_K and Q6_K through kernels that can also
// take up to four rows side by side (DotQ4KRows / DotQ6KRows: integer sums per super-block),
// Q8_0 in groups of 16 blocks (matmul_int8_avx512_q8_0.h). Built with the AVX-512 flags of
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

// One Q8_0 row times x, in groups of 16 blocks (matmul_int8_avx512_q8_0.h).
float DotQ8_0(const BlockQ8_0* b, int64_t nb, const Int8FlatRow& x) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kQ8Group <= nb; i += kQ8Group) {
    PrefetchAhead<kQ8Group * sizeof(BlockQ8_0)>(b + i, kQ8PrefetchBytes);
    __m512i s[8];
    for (int j = 0; j < 8; ++j) {
      s[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), Q8PairUnsigned(b + i + 2 * j),
                                 _mm512_loadu_si512(x.q + (i + 2 * j) * kQk));
    }
    acc = Q8GroupFma(s, Q8Scales16(b + i), x.d + i, x.qsum + i, acc);
  }
  return _mm512_reduce_add_ps(acc) + Q8_0Tail(b + i, nb - i, x.q + i * kQk, x.d + i);
}

// One Q5_K row times x (Q4_K goes through DotQ4KRows below): unsigned weights times signed x,
// 64 values (two sub-blocks) per vpdpbusd, the lanes of each sub-block scaled by d * sc * d_x;
// the mins folded in through the block sums of x.
template <bool kFive, class Block>
float DotK45(const Block* b, int64_t nsb, const Int8FlatRow& x) {
  __m512 acc = _mm512_setzero_ps();
  __m256 acc_min = _mm256_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  const __m256i low = _mm256_set1_epi8(0xF);
  const __m512i idx[4] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                          _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
                          _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5),
                          _mm512_setr_epi32(6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7)};
  for (int64_t i = 0; i < nsb; ++i) {
    const Block& blk = b[i];
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
    const float da = x.d[8 * i];
    const __m512 scale = _mm512_zextps256_ps512(
        _mm256_mul_ps(_mm256_mul_ps(sc, _mm256_set1_ps(_cvtsh_ss(blk.d))), _mm256_set1_ps(da)));
    acc_min = _mm256_fmadd_ps(_mm256_mul_ps(mn, _mm256_set1_ps(_cvtsh_ss(blk.dmin))),
                              _mm256_loadu_ps(x.dsum + 8 * i), acc_min);
    __m256i h = _mm256_setzero_si256();
    if constexpr (kFive) h = Load256(blk.qh);
    const int8_t* xq = x.q + i * kQkK;
    for (int c = 0; c < 4; ++c) {
      const __m256i bytes = Load256(blk.qs + 32 * c);
      __m256i lo = _mm256_and_si256(bytes, low);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low);
      if constexpr (kFive) {
        lo = _mm256_or_si256(lo, BitTo4(h, 2 * c));
        hi = _mm256_or_si256(hi, BitTo4(h, 2 * c + 1));
      }
      const __m512i s = _mm512_dpbusd_epi32(zero, Join(lo, hi), _mm512_loadu_si512(xq + 64 * c));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_permutexvar_ps(idx[c], scale), acc);
    }
  }
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(acc_min), _mm256_extractf128_ps(acc_min, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  m = _mm_add_ss(m, _mm_movehdup_ps(m));
  return _mm512_reduce_add_ps(acc) - _mm_cvtss_f32(m);
}

// Writes the first R of the four row sums.
template <int R>
inline void StoreRows(__m128 v, float* y) {
  if constexpr (R == 4) {
    _mm_storeu_ps(y, v);
  } else {
    _mm_mask_storeu_ps(y, static_cast<__mmask8>((1u << R) - 1), v);
  }
}

// R (<= 4) Q4_K rows times x. Per row and super-block the 8 sub-block sums stay integer:
// vpmaddubsw (u4 weights times s8 x, pairs in int16: |.| <= 2 * 15 * 128) then vpdpwssd with
// the 6-bit sub-block scale as int16, so one int32 -> f32 conversion and one FMA per super-block
// (sum |.| <= 256 * 15 * 128 * 63 < 2^31). The mins come in through x's sub-block sums, as in
// DotK45. The rows share the activation loads and their lane shuffles and are independent
// dependency chains.
//
// A 64-byte load of qs at 64 p holds qs groups c = 2p, 2p + 1: its low nibbles are values
// 128 p + l and 128 p + 64 + l (sub-blocks 4p, 4p + 2), its high nibbles 128 p + 32 + l and
// 128 p + 96 + l (4p + 1, 4p + 3); x is regrouped to match with one 128-bit lane shuffle.
template <int R>
void DotQ4KRows(const uint8_t* w, size_t row_bytes, int64_t nsb, const Int8FlatRow& x, float* y) {
  const __m512i m4 = _mm512_set1_epi8(0xF);
  // vpshufb controls picking scale byte j (high byte zeroed) into every int16 lane of the low
  // 256 bits and j + 2 into the high 256 bits, j = 4p + e (e = 0 low nibbles, 1 high).
  auto ctl = [](int j) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set1_epi16(static_cast<int16_t>(0x8000 | j))),
        _mm256_set1_epi16(static_cast<int16_t>(0x8000 | (j + 2))), 1);
  };
  const __m512i sel[2][2] = {{ctl(0), ctl(1)}, {ctl(4), ctl(5)}};
  const BlockQ4_K* b[R];
  const size_t ahead = PrefetchDistance(row_bytes);
  __m512 acc[4];
  __m256 acc_min[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    b[r] = reinterpret_cast<const BlockQ4_K*>(w + r * row_bytes);
    acc[r] = _mm512_setzero_ps();
    acc_min[r] = _mm256_setzero_ps();
  }
#pragma GCC unroll 4
  for (int r = R; r < 4; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    const int8_t* xq = x.q + i * kQkK;
    __m512i xv[2][2];
#pragma GCC unroll 4
    for (int p = 0; p < 2; ++p) {
      const __m512i a0 = _mm512_loadu_si512(xq + 128 * p);
      const __m512i a1 = _mm512_loadu_si512(xq + 128 * p + 64);
      xv[p][0] = _mm512_shuffle_i64x2(a0, a1, 0x44);
      xv[p][1] = _mm512_shuffle_i64x2(a0, a1, 0xEE);
    }
    const float da = x.d[8 * i];
    const __m256 dsum = _mm256_loadu_ps(x.dsum + 8 * i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const BlockQ4_K& blk = b[r][i];
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
      __m512i si = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int p = 0; p < 2; ++p) {
        const __m512i v = _mm512_loadu_si512(blk.qs + 64 * p);
        const __m512i lo = _mm512_and_si512(v, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        si = _mm512_dpwssd_epi32(si, _mm512_maddubs_epi16(lo, xv[p][0]),
                                 _mm512_shuffle_epi8(scb, sel[p][0]));
        si = _mm512_dpwssd_epi32(si, _mm512_maddubs_epi16(hi, xv[p][1]),
                                 _mm512_shuffle_epi8(scb, sel[p][1]));
      }
      acc[r] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_set1_ps(_cvtsh_ss(blk.d) * da), acc[r]);
      // dmin * m first: the batch kernel shares that product between tokens.
      acc_min[r] =
          _mm256_fmadd_ps(_mm256_mul_ps(mn, _mm256_set1_ps(_cvtsh_ss(blk.dmin))), dsum, acc_min[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_sub_ps(acc[r], _mm512_zextps256_ps512(acc_min[r]));
  }
  StoreRows<R>(ReduceRows4(acc), y);
}

// R (<= 4) Q6_K rows times x, integer within a super-block as DotQ4KRows (vpmaddubsw pairs
// |.| <= 2 * 63 * 128, then vpdpwssd with the signed 8-bit scale: sum |.| <= 256 * 63 * 128 *
// 128 < 2^31); the -32 folded in as in DotQ6K. A 64-byte load of ql at 64 h: low nibbles are
// values 128 h .. 128 h + 63 in order, high nibbles 128 h + 64 .. 128 h + 127; the two high bits
// come from qh[32 h + l] (bits 2k .. 2k + 1 for value 128 h + 32 k + l), moved to bits 4-5 by
// one variable 64-bit shift per 256-bit half.
template <int R>
void DotQ6KRows(const uint8_t* w, size_t row_bytes, int64_t nsb, const Int8FlatRow& x, float* y) {
  const __m512i m4 = _mm512_set1_epi8(0xF);
  const __m512i m2 = _mm512_set1_epi8(0x30);
  const __m512i shl_lo = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2);  // bits 0-1 | 2-3 -> 4-5
  const __m512i shr_hi = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);  // bits 4-5 | 6-7 -> 4-5
  // vpermw indices: int16 lane L of the product of values 128 h + 64 e .. + 63 is sub-block
  // 8 h + 4 e + L / 8.
  auto perm = [](int64_t j) {
    const int64_t k = 0x0001000100010001LL;
    return _mm512_setr_epi64(k * j, k * j, k * (j + 1), k * (j + 1), k * (j + 2), k * (j + 2),
                             k * (j + 3), k * (j + 3));
  };
  const __m512i sel[4] = {perm(0), perm(4), perm(8), perm(12)};
  const BlockQ6_K* b[R];
  const size_t ahead = PrefetchDistance(row_bytes);
  __m512 acc[4];
  __m512 acc_off[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    b[r] = reinterpret_cast<const BlockQ6_K*>(w + r * row_bytes);
    acc[r] = _mm512_setzero_ps();
    acc_off[r] = _mm512_setzero_ps();
  }
#pragma GCC unroll 4
  for (int r = R; r < 4; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    const int8_t* xq = x.q + i * kQkK;
    __m512i xv[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) xv[k] = _mm512_loadu_si512(xq + 64 * k);
    const float da = x.d[16 * i];
    const __m512 dsum = _mm512_loadu_ps(x.dsum + 16 * i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const BlockQ6_K& blk = b[r][i];
      PrefetchAhead<sizeof(BlockQ6_K)>(&blk, ahead);
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
      const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
      const float d = _cvtsh_ss(blk.d);
      __m512i si = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int h = 0; h < 2; ++h) {
        const __m512i a = _mm512_loadu_si512(blk.ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h)));
        const __m512i lo = _mm512_ternarylogic_epi32(
            a, _mm512_and_si512(_mm512_sllv_epi64(qh, shl_lo), m2), m4, 0xE4);
        const __m512i hi = _mm512_ternarylogic_epi32(
            _mm512_srli_epi16(a, 4), _mm512_and_si512(_mm512_srlv_epi64(qh, shr_hi), m2), m4, 0xE4);
        si = _mm512_dpwssd_epi32(si, _mm512_maddubs_epi16(lo, xv[2 * h]),
                                 _mm512_permutexvar_epi16(sel[2 * h], sc16));
        si = _mm512_dpwssd_epi32(si, _mm512_maddubs_epi16(hi, xv[2 * h + 1]),
                                 _mm512_permutexvar_epi16(sel[2 * h + 1], sc16));
      }
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_set1_ps(d * da), acc[r]);
      const __m512 scf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8));
      // d * sc first, as in DotQ4KRows.
      acc_off[r] = _mm512_fmadd_ps(_mm512_mul_ps(scf, _mm512_set1_ps(d)), dsum, acc_off[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_fnmadd_ps(_mm512_set1_ps(32.0f), acc_off[r], acc[r]);
  }
  StoreRows<R>(ReduceRows4(acc), y);
}

// Rows one at a time through Kernel<1>::Run. Four rows side by side (Kernel<4>, sharing the
// activation loads) read four streams at once, which the hardware prefetchers follow worse than
// one: decode of synth-0.8b-q4_k_m at depth 0 (Zen 4 guest, 2 threads, deltaserve-bench-engine,
// 3 alternating rounds of 5 x 64 tokens) gave 66-79 tok/s four rows at a time, 67-80 two at a
// time and 87-95 one at a time. Each row's sums do not depend on the rows beside it, so the
// outputs are the same either way (and equal the batch kernel's, matmul_int8_avx512_batch.cc).
template <template <int> class Kernel>
void RowsOneByOne(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t nsb,
                  const Int8FlatRow& x, float* y) {
  for (int64_t r = 0; r < rows; ++r) Kernel<1>::Run(w + r * row_bytes, row_bytes, nsb, x, y + r);
}

template <int R>
struct Q4KRows {
  static void Run(const uint8_t* w, size_t row_bytes, int64_t nsb, const Int8FlatRow& x, float* y) {
    DotQ4KRows<R>(w, row_bytes, nsb, x, y);
  }
};
template <int R>
struct Q6KRows {
  static void Run(const uint8_t* w, size_t row_bytes, int64_t nsb, const Int8FlatRow& x, float* y) {
    DotQ6KRows<R>(w, row_bytes, nsb, x, y);
  }
};

}  // namespace

bool Int8FusedAvx512VnniHas(WeightType type) {
  return type == WeightType::kQ8_0 || type == WeightType::kQ4_K || type == WeightType::kQ5_K ||
         type == WeightType::kQ6_K;
}

bool Int8FusedAvx512Vnni(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                         const Int8FlatRow& x, float* y) {
  switch (type) {
    case WeightType::kQ8_0:
      for (int64_t r = 0; r < rows; ++r) {
        y[r] = DotQ8_0(reinterpret_cast<const BlockQ8_0*>(w + r * row_bytes), x.n / kQk, x);
      }
      return true;
    case WeightType::kQ4_K:
      RowsOneByOne<Q4KRows>(w, row_bytes, rows, x.n / kQkK, x, y);
      return true;
    case WeightType::kQ5_K:
      for (int64_t r = 0; r < rows; ++r) {
        y[r] = DotK45<true>(reinterpret_cast<const BlockQ5_K*>(w + r * row_bytes), x.n / kQkK, x);
      }
      return true;
    case WeightType::kQ6_K:
      RowsOneByOne<Q6KRows>(w, row_bytes, rows, x.n / kQkK, x, y);
      return true;
    default:
      return false;
  }
}

}  // namespace deltaserve::kernels::internal
