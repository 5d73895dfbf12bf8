// The Q8_0 arithmetic shared by the AVX-512 VNNI decode kernels (DotQ8_0 in
// matmul_int8_avx512_rows.cc, BatchQ8_0Row in matmul_int8_avx512_batch.cc), so that a token's
// product is the same bits whichever of the two computes it.
//
// Blocks go in groups of 16 (512 values, 544 bytes of weights). Per pair of blocks one vpdpbusd
// multiplies w + 128 (unsigned: one XOR of the signed weights) by the signed activations x; the
// eight pair products of a group are reduced to the 16 exact integer block sums, 128 * sum(x) of
// each block (Int8FlatRow::qsum) is taken off, and one int -> float conversion and one FMA with
// d_w * d_x (the 16 weight scales gathered at once) finish the group. Before, every pair paid a
// sign fix-up of x (three instructions), a conversion, an FMA and two scalar scale products:
// ~17 instructions per 64 values against ~9 now: one thread with the weights in cache went from
// 32.5 to 48.2 GB/s on the dev box (AMD EPYC, Zen 5; 1024 x 1024). From DRAM the software
// prefetch below is what counts. Blocks past the last whole group go through
// Q8_0Tail, the per-pair form.
//
// Layouts: a BlockQ8_0 is {f16 d, int8 qs[32]} (34 bytes, so qs is never aligned); x is the
// flat int8 row of Int8FlatRow with d and qsum per 32 values.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/matmul_int8_avx512_common.h"
#include "kernels/cpu/quants.h"

namespace deltaserve::kernels::internal {
namespace {

// Blocks per group (see the file comment).
constexpr int kQ8Group = 16;

// The one-row kernel prefetches each group's bytes this far ahead (the rows of a range are
// contiguous, so this runs into the next rows). The hardware prefetchers alone left the
// 1024 x 248320 Q8_0 matrix (an output head's shape) at 34.7 GB/s on two threads; 4, 8 and 16 KiB
// ahead gave 40.5, 40.2 and 40.3 (medians of 60 calls, interleaved in one process), and on a
// 1024 x 6144 matrix that stays in cache they cost 2, 5 and 10%.
constexpr size_t kQ8PrefetchBytes = 4096;

// qs of blocks b[0] and b[1] as one vector of w + 128 (unsigned bytes).
inline __m512i Q8PairUnsigned(const BlockQ8_0* b) {
  const __m512i w = Join(Load256(reinterpret_cast<const uint8_t*>(b[0].qs)),
                         Load256(reinterpret_cast<const uint8_t*>(b[1].qs)));
  return _mm512_xor_si512(w, _mm512_set1_epi8(static_cast<char>(0x80)));
}

// d of the 16 blocks from b, as floats (one gather: the scales are 34 bytes apart).
inline __m512 Q8Scales16(const BlockQ8_0* b) {
  // Index k * 17 at scale 2 is byte 34 k; the 32-bit load there holds d and the first two qs.
  const __m512i idx =
      _mm512_setr_epi32(0, 17, 34, 51, 68, 85, 102, 119, 136, 153, 170, 187, 204, 221, 238, 255);
  const __m512i raw = _mm512_i32gather_epi32(idx, b, 2);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw));
}

// The 16 block sums of s[j] = vpdpbusd of block pair j (lanes 0..7 belong to block 2j, lanes
// 8..15 to block 2j + 1), in block order.
inline __m512i Q8BlockSums16(const __m512i (&s)[8]) {
  // Per 128-bit lane: pairs of pair products interleaved and added (4 ints -> 2 per product) ...
  __m512i t[4];
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2 * j], s[2 * j + 1]),
                            _mm512_unpackhi_epi32(s[2 * j], s[2 * j + 1]));
  }
  // ... then to one int per product and 128-bit lane: u0 lane k = the lane-k sums of s0..s3 ...
  const __m512i u0 =
      _mm512_add_epi32(_mm512_unpacklo_epi64(t[0], t[1]), _mm512_unpackhi_epi64(t[0], t[1]));
  const __m512i u1 =
      _mm512_add_epi32(_mm512_unpacklo_epi64(t[2], t[3]), _mm512_unpackhi_epi64(t[2], t[3]));
  // ... then lanes 0 + 1 (the first block of each pair) and 2 + 3 (the second): v holds blocks
  // 0 2 4 6 | 1 3 5 7 | 8 10 12 14 | 9 11 13 15.
  const __m512i v = _mm512_add_epi32(_mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
  return _mm512_permutexvar_epi32(order, v);
}

// acc + (block sums of s - 128 qsum) * (dw * d_x) for one group; xd and qsum point at the
// group's first block.
inline __m512 Q8GroupFma(const __m512i (&s)[8], __m512 dw, const float* xd, const int32_t* qsum,
                         __m512 acc) {
  const __m512i sums =
      _mm512_sub_epi32(Q8BlockSums16(s), _mm512_slli_epi32(_mm512_loadu_si512(qsum), 7));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(dw, _mm512_loadu_ps(xd)), acc);
}

// The products of nb (< kQ8Group) blocks with x (xq, xd at the first of them): pairs through
// |w| times x with w's sign, an odd last block alone.
inline float Q8_0Tail(const BlockQ8_0* b, int64_t nb, const int8_t* xq, const float* xd) {
  __m512 acc = _mm512_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m512i wv = Join(Load256(reinterpret_cast<const uint8_t*>(b[i].qs)),
                            Load256(reinterpret_cast<const uint8_t*>(b[i + 1].qs)));
    const __m512i av = _mm512_loadu_si512(xq + i * kQk);
    const __m512i sa = _mm512_mask_sub_epi8(av, _mm512_movepi8_mask(wv), zero, av);
    const __m512i s = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(wv), sa);
    const __m512 sc = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(xd[i] * _cvtsh_ss(b[i].d)),
                                           _mm512_set1_ps(xd[i + 1] * _cvtsh_ss(b[i + 1].d)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc);
  }
  float sum = _mm512_reduce_add_ps(acc);
  if (i < nb) {
    const __m256i wv = Load256(reinterpret_cast<const uint8_t*>(b[i].qs));
    const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + i * kQk));
    const __m256i sa = _mm256_sign_epi8(av, wv);
    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wv), sa);
    alignas(32) int32_t t[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t), s);
    int32_t si = 0;
    for (int k = 0; k < 8; ++k) si += t[k];
    sum += static_cast<float>(si) * (xd[i] * _cvtsh_ss(b[i].d));
  }
  return sum;
}

}  // namespace
}  // namespace deltaserve::kernels::internal
