// Inline helpers shared by the AVX-512 files of the int8-activation path
// (matmul_int8_avx512_*.cc): 512-bit joins and the four-row reduction, beside the 256-bit
// helpers of matmul_int8_x86.h (loads, bit moves of the 5-bit types, byte sums, the software
// prefetch of the multi-row decode kernels).
// Included only by files built with the AVX-512 flags of quants.cmake; internal linkage, so each
// includer gets its own copy compiled with those flags (see quants.h on sharing code across ISA
// files).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_int8_x86.h"

namespace deltaserve::kernels::internal {
namespace {

inline __m512i Join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// {sum of a[0], ..., sum of a[3]}: one transposing reduction for four rows.
inline __m128 ReduceRows4(const __m512 a[4]) {
  // Per 128-bit lane, t0 = [a0 pairs, a1 pairs, a0 pairs, a1 pairs], t1 the same of a2, a3.
  const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
  const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
  const __m512d t0d = _mm512_castps_pd(t0);
  const __m512d t1d = _mm512_castps_pd(t1);
  const __m512 u = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(t0d, t1d)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(t0d, t1d)));
  const __m256 v = _mm256_add_ps(_mm512_castps512_ps256(u),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
}

}  // namespace
}  // namespace deltaserve::kernels::internal
