// The per-type arithmetic of the 256-bit fused int8 products (the decode step's matrix-vector
// products and the 2-16 row batches, matmul_int8_avx2_fused.h), written once over an `Ops`
// class that says how unsigned x signed bytes are multiplied: vpmaddubsw + vpmaddwd on AVX2
// (Avx2Ops, matmul_int8_avx2.cc), vpdpbusd / vpdpwssd on AVX-VNNI (VnniOps,
// matmul_int8_avxvnni.cc). Both give the same exact integer sums, and every f32 operation is
// the same one in the same order, so the two levels compute the same bits.
//
// Each type is a kernel class K with
//   Block, kUnitBlocks   the weight blocks one unit covers (256 values: 8 legacy blocks of 32,
//                        or one K-quant super-block)
//   Unit, Decode         a unit of one weight row decoded into registers: unsigned bytes per
//                        32 values, scales
//   Acc, Init, Apply     one (weight row, activation row) accumulator, and one unit applied to
//                        one activation row (TokenX)
//   Finish               the product
// The drivers decode each unit once and apply it to one or several activation rows; a
// (row, token) pair sees the same operations whatever the others, so a batch output equals the
// one-token output bit for bit.
//
// Integer ranges: vpmaddubsw adds two u8 x s8 products into a saturating int16, so the unsigned
// side is kept small: 4-bit (Q4_*), 5-bit (Q5_*), 6-bit (Q6_K) weights, and for Q8_0 |w| <= 128
// times x with w's sign (activations are within [-127, 127], matmul_int8.cc): at most
// 2 * 128 * 127 = 32512. The VNNI form has no saturation; it takes Q8_0 as w + 128 and
// 128 * qsum off instead (one XOR instead of vpabsb + vpsignb).
//
// Included only by the files built with -mavx2 -mfma -mf16c (quants.cmake); internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/matmul_int8_x86.h"
#include "kernels/cpu/quants.h"

namespace deltaserve::kernels::internal {
namespace {

// One activation row (an Int8FlatRow's pointers).
struct TokenX {
  const int8_t* q;
  const float* d;
  const float* dsum;
  const int32_t* qsum;
};

inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// {sum of s[0], ..., sum of s[7]}.
inline __m256i Reduce8(const __m256i (&s)[8]) {
  const __m256i t0 = _mm256_hadd_epi32(s[0], s[1]);
  const __m256i t1 = _mm256_hadd_epi32(s[2], s[3]);
  const __m256i t2 = _mm256_hadd_epi32(s[4], s[5]);
  const __m256i t3 = _mm256_hadd_epi32(s[6], s[7]);
  // Per 128-bit half: the half-sums of s0..s3 (u0) and s4..s7 (u1).
  const __m256i u0 = _mm256_hadd_epi32(t0, t1);
  const __m256i u1 = _mm256_hadd_epi32(t2, t3);
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                          _mm256_permute2x128_si256(u0, u1, 0x31));
}

// --- legacy blocks of 32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) --------------------------------------

struct Q4_0Type {
  using Block = BlockQ4_0;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 8;  // value = nibble - 8
  static constexpr bool kMin = false;
  static __m256i Weights(const Block& b) { return Nibbles(b.qs); }
};
struct Q4_1Type {
  using Block = BlockQ4_1;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = true;
  static __m256i Weights(const Block& b) { return Nibbles(b.qs); }
};
struct Q5_0Type {
  using Block = BlockQ5_0;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 16;
  static constexpr bool kMin = false;
  static __m256i Weights(const Block& b) { return _mm256_or_si256(Nibbles(b.qs), FifthBits(b.qh)); }
};
struct Q5_1Type {
  using Block = BlockQ5_1;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = true;
  static __m256i Weights(const Block& b) { return _mm256_or_si256(Nibbles(b.qs), FifthBits(b.qh)); }
};
struct Q8_0Type {
  using Block = BlockQ8_0;
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = false;
  static __m256i Weights(const Block& b) { return Load256(b.qs); }
};

constexpr int Log2(int v) { return v <= 1 ? 0 : 1 + Log2(v / 2); }

// Groups of 8 blocks: per block one 32-byte vector of unsigned weights times the 32 activation
// bytes (8 int32 lane sums), the 8 blocks' lanes reduced to 8 block sums at once (Reduce8), the
// weight offset taken off as offset * qsum, and one convert and FMA with d_w * d_x per group;
// a type with a min adds m * dsum (dsum = d_x * qsum). The 8 f16 scales (and mins: the 32-bit
// word at each block's start holds d, then m) are read as one vector.
template <class Ops, class T>
struct LegacyKernel {
  using Block = typename T::Block;
  static constexpr int kUnitBlocks = 8;
  static constexpr int kBlockValues = kQk;
  // Q8_0: |w| times x with w's sign (AVX2), or w + 128 (VNNI).
  static constexpr bool kSignTrick = T::kSigned && !Ops::kVnni;
  static constexpr int kOffset = T::kSigned ? (Ops::kVnni ? 128 : 0) : T::kOffset;

  struct Unit {
    __m256i u[8];  // unsigned weights per block
    __m256i w[8];  // the signed weights (kSignTrick only)
    __m256 dw;     // block scales
    __m256 m;      // block mins (T::kMin)
    int nb;        // blocks in this unit (8 but at a row's end)
  };
  struct Acc {
    __m256 v;
  };

  static void Init(Acc& a) { a.v = _mm256_setzero_ps(); }

  static void Decode(const Block* b, int nb, Unit& u) {
    u.nb = nb;
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      if (k >= nb) {
        u.u[k] = u.w[k] = _mm256_setzero_si256();
        continue;
      }
      const __m256i v = T::Weights(b[k]);
      if constexpr (kSignTrick) {
        u.w[k] = v;
        u.u[k] = _mm256_abs_epi8(v);
      } else if constexpr (T::kSigned) {
        u.u[k] = _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80)));
      } else {
        u.u[k] = v;
      }
    }
    __m256i words;
    if (nb == 8) {
      words = _mm256_setr_epi32(LoadI32(&b[0]), LoadI32(&b[1]), LoadI32(&b[2]), LoadI32(&b[3]),
                                LoadI32(&b[4]), LoadI32(&b[5]), LoadI32(&b[6]), LoadI32(&b[7]));
    } else {
      alignas(32) int32_t tail[8] = {};
      for (int k = 0; k < nb; ++k) tail[k] = LoadI32(&b[k]);
      words = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
    }
    // Per 128-bit half: the four d (low halves of the words), then the four m.
    const __m256i ctl = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1,
                                         4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    const __m256i halves =
        _mm256_permute4x64_epi64(_mm256_shuffle_epi8(words, ctl), _MM_SHUFFLE(3, 1, 2, 0));
    u.dw = _mm256_cvtph_ps(_mm256_castsi256_si128(halves));
    if constexpr (T::kMin) u.m = _mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1));
  }

  // ib: the unit's first block.
  static void Apply(const Unit& u, const TokenX& x, int64_t ib, Acc& a) {
    __m256i s[8];
    const int8_t* xq = x.q + ib * kQk;
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      if (k >= u.nb) {
        s[k] = _mm256_setzero_si256();
        continue;
      }
      __m256i xv = Load256(xq + k * kQk);
      if constexpr (kSignTrick) xv = _mm256_sign_epi8(xv, u.w[k]);
      s[k] = Ops::DotBytes(_mm256_setzero_si256(), u.u[k], xv);
    }
    __m256i sums = Reduce8(s);
    __m256 xd;
    __m256 xs;
    __m256i qsum;
    if (u.nb == 8) {
      xd = _mm256_loadu_ps(x.d + ib);
      if constexpr (T::kMin) xs = _mm256_loadu_ps(x.dsum + ib);
      if constexpr (kOffset != 0) qsum = Load256(x.qsum + ib);
    } else {
      const __m256i mask =
          _mm256_cmpgt_epi32(_mm256_set1_epi32(u.nb), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      xd = _mm256_maskload_ps(x.d + ib, mask);
      if constexpr (T::kMin) xs = _mm256_maskload_ps(x.dsum + ib, mask);
      if constexpr (kOffset != 0) qsum = _mm256_maskload_epi32(x.qsum + ib, mask);
    }
    if constexpr (kOffset != 0) {
      sums = _mm256_sub_epi32(sums, _mm256_slli_epi32(qsum, Log2(kOffset)));
    }
    a.v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(u.dw, xd), a.v);
    if constexpr (T::kMin) a.v = _mm256_fmadd_ps(u.m, xs, a.v);
  }

  static float Finish(const Acc& a) { return Hsum(a.v); }
};

// --- K-quants: super-blocks of 256 ------------------------------------------------------------

// The 6-bit scales (low 64 bits) and mins (high 64 bits) of a Q4_K / Q5_K block, one byte each.
inline void ScalesMinsK4(const uint8_t* s, uint64_t* sc, uint64_t* mn) {
  uint64_t u01;
  uint32_t u2;
  std::memcpy(&u01, s, sizeof(u01));
  std::memcpy(&u2, s + 8, sizeof(u2));
  const auto u0 = static_cast<uint32_t>(u01);
  const auto u1 = static_cast<uint32_t>(u01 >> 32);
  const uint32_t sc_lo = u0 & 0x3F3F3F3F;
  const uint32_t m_lo = u1 & 0x3F3F3F3F;
  const uint32_t sc_hi = (u2 & 0x0F0F0F0F) | (((u0 >> 6) & 0x03030303) << 4);
  const uint32_t m_hi = ((u2 >> 4) & 0x0F0F0F0F) | (((u1 >> 6) & 0x03030303) << 4);
  *sc = sc_lo | (static_cast<uint64_t>(sc_hi) << 32);
  *mn = m_lo | (static_cast<uint64_t>(m_hi) << 32);
}

// Q4_K and Q5_K: sub-block j (32 values) is one vector of unsigned weights; per super-block the
// sub-block sums stay integer, vpmaddubsw pairs (|.| <= 2 * 31 * 127) times the 6-bit scale as
// int16 (vpmaddwd / vpdpwssd; sum |.| <= 256 * 31 * 127 * 63 < 2^31), one convert and one FMA
// with d * d_x per super-block; the mins through x's sub-block sums: dmin * m_j * dsum_j.
// qs[32 c + l] holds value 64 c + l (low nibble) and 64 c + 32 + l (high nibble); Q5_K's fifth
// bits are bits 2c and 2c + 1 of qh[l].
template <class Ops, bool kFive>
struct K45Kernel {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  static constexpr int kUnitBlocks = 1;
  static constexpr int kBlockValues = kQkK;

  struct Unit {
    __m256i u[8];
    __m256i sc[8];  // the scale of sub-block j in every int16
    __m256 mnd;     // dmin * m_j
    float d;
  };
  struct Acc {
    __m256 v;
    __m256 min;
  };

  static void Init(Acc& a) { a.v = a.min = _mm256_setzero_ps(); }

  static void Decode(const Block* b, int, Unit& u) {
    uint64_t sc;
    uint64_t mn;
    ScalesMinsK4(b->scales, &sc, &mn);
    const __m256i sc16 =
        _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc))));
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      u.sc[j] =
          _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * j)));
    }
    u.mnd = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(mn)))),
        _mm256_set1_ps(_cvtsh_ss(b->dmin)));
    u.d = _cvtsh_ss(b->d);
    const __m256i low = _mm256_set1_epi8(0xF);
    __m256i h;
    if constexpr (kFive) h = Load256(b->qh);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i v = Load256(b->qs + 32 * c);
      __m256i lo = _mm256_and_si256(v, low);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
      if constexpr (kFive) {
        // Bits 0 and 1 of each byte of h (qh >> 2c) to bit 4; 16-bit shifts, masked per byte.
        const __m256i bit4 = _mm256_set1_epi8(0x10);
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(h, 4), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(h, 3), bit4));
        h = _mm256_srli_epi16(h, 2);
      }
      u.u[2 * c] = lo;
      u.u[2 * c + 1] = hi;
    }
  }

  static void Apply(const Unit& u, const TokenX& x, int64_t ib, Acc& a) {
    const int8_t* xq = x.q + ib * kQkK;
    __m256i si = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      si = Ops::DotWords(si, _mm256_maddubs_epi16(u.u[j], Load256(xq + 32 * j)), u.sc[j]);
    }
    a.v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_set1_ps(u.d * x.d[8 * ib]), a.v);
    a.min = _mm256_fmadd_ps(u.mnd, _mm256_loadu_ps(x.dsum + 8 * ib), a.min);
  }

  static float Finish(const Acc& a) { return Hsum(_mm256_sub_ps(a.v, a.min)); }
};

// Q6_K: 6-bit unsigned weights (q + 32), 16-value sub-blocks with signed 8-bit scales: vector
// k of half h (values 128 h + 32 k ..) holds sub-blocks 8 h + 2 k (low 128 bits) and 8 h + 2 k + 1
// (high), integer per super-block as K45Kernel (pairs |.| <= 2 * 63 * 127, sum |.| <= 256 * 63
// * 127 * 128 < 2^31); the 32 taken off as 32 * sum_j d * sc_j * dsum_j. ql[64 h + l] holds
// values 128 h + l (low nibble) and 128 h + 64 + l (high), ql[64 h + 32 + l] values + 32 and
// + 96; their two high bits are bits 0-1, 4-5, 2-3 and 6-7 of qh[32 h + l].
template <class Ops>
struct Q6KKernel {
  using Block = BlockQ6_K;
  static constexpr int kUnitBlocks = 1;
  static constexpr int kBlockValues = kQkK;

  struct Unit {
    __m256i u[8];
    __m256i sc[8];  // low 128 bits: the scale of sub-block 2k, high: 2k + 1, in every int16
    __m256 scd[2];  // d * sc_j, j = 0..7 and 8..15
    float d;
  };
  struct Acc {
    __m256 v;
    __m256 off;
  };

  static void Init(Acc& a) { a.v = a.off = _mm256_setzero_ps(); }

  static void Decode(const Block* b, int, Unit& u) {
    const __m256i low = _mm256_set1_epi8(0xF);
    const __m256i two = _mm256_set1_epi8(0x30);
    u.d = _cvtsh_ss(b->d);
    const __m256 d = _mm256_set1_ps(u.d);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i a = Load256(b->ql + 64 * h);
      const __m256i c = Load256(b->ql + 64 * h + 32);
      const __m256i q = Load256(b->qh + 32 * h);
      u.u[4 * h] =
          _mm256_or_si256(_mm256_and_si256(a, low), _mm256_and_si256(_mm256_slli_epi16(q, 4), two));
      u.u[4 * h + 1] =
          _mm256_or_si256(_mm256_and_si256(c, low), _mm256_and_si256(_mm256_slli_epi16(q, 2), two));
      u.u[4 * h + 2] =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low), _mm256_and_si256(q, two));
      u.u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low),
                                       _mm256_and_si256(_mm256_srli_epi16(q, 2), two));
      const __m128i s8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->scales + 8 * h));
      const __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(s8));
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const auto lo = static_cast<int16_t>(0x0100 + 0x0404 * k);
        const auto hi = static_cast<int16_t>(0x0302 + 0x0404 * k);
        u.sc[4 * h + k] = _mm256_shuffle_epi8(
            s16, _mm256_setr_epi16(lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi));
      }
      u.scd[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s8)), d);
    }
  }

  static void Apply(const Unit& u, const TokenX& x, int64_t ib, Acc& a) {
    const int8_t* xq = x.q + ib * kQkK;
    __m256i si = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      si = Ops::DotWords(si, _mm256_maddubs_epi16(u.u[k], Load256(xq + 32 * k)), u.sc[k]);
    }
    a.v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_set1_ps(u.d * x.d[16 * ib]), a.v);
    a.off = _mm256_fmadd_ps(u.scd[0], _mm256_loadu_ps(x.dsum + 16 * ib), a.off);
    a.off = _mm256_fmadd_ps(u.scd[1], _mm256_loadu_ps(x.dsum + 16 * ib + 8), a.off);
  }

  static float Finish(const Acc& a) {
    return Hsum(_mm256_fnmadd_ps(_mm256_set1_ps(32.0f), a.off, a.v));
  }
};

}  // namespace
}  // namespace deltaserve::kernels::internal
