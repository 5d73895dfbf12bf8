// AVX-512 VNNI micro-kernel of the int8-activation path (matmul_int8.h), built with the flags
// of matmul_avx512.cc; called only when the CPU has AVX-512 F/BW/VL and VNNI.
//
// The 16 lanes of a register are 16 activation rows (one packed panel): vpdpbusd multiplies the
// panel's 4 consecutive u8 values per row with 4 int8 weights broadcast from one weight row,
// so a 32-value block costs 8 vpdpbusd per (weight row, panel) and the per-block f32 scaling
// (convert, multiply, add) is paid once per 8 of them. Tile: 4 weight rows x 2 panels.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/matmul_int8_decode.h"

namespace deltaserve::kernels::internal {
namespace {

constexpr int kRows = 4;

inline int32_t Load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Weight rows wr[0..3] (repeat the last for a short tile) times panels p0 .. p0 + P - 1;
// out[i][p * 16 + lane].
template <int P, bool kMin>
void Tile(const Int8WeightRows& w, const int64_t* wr, const Int8ActivationsView& a, int64_t p0,
          float out[kRows][2 * kActPanel]) {
  const int64_t n = w.n;
  const int g = w.group;
  const int64_t nb = n / g;
  const int dwords = g / 4;
  __m512 accf[kRows][P];
  for (int i = 0; i < kRows; ++i) {
    for (int p = 0; p < P; ++p) accf[i][p] = _mm512_setzero_ps();
  }
  const int8_t* wq[kRows];
  const float* ws[kRows];
  const float* wm[kRows];
  const int32_t* wsum[kRows];
  for (int i = 0; i < kRows; ++i) {
    wq[i] = w.q + wr[i] * n;
    ws[i] = w.scale + wr[i] * nb;
    wm[i] = w.minc + wr[i] * nb;
    wsum[i] = w.wsum + wr[i] * nb;
  }
  const uint8_t* aq[P];
  const float* ad[P];
  const float* as[P];
  for (int p = 0; p < P; ++p) {
    aq[p] = a.q + (p0 + p) * n * kActPanel;
    ad[p] = a.d + (p0 + p) * nb * kActPanel;
    as[p] = a.dsum + (p0 + p) * nb * kActPanel;
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m512i acci[kRows][P];
    for (int i = 0; i < kRows; ++i) {
      const __m512i init = _mm512_set1_epi32(-128 * wsum[i][b]);
      for (int p = 0; p < P; ++p) acci[i][p] = init;
    }
    for (int d = 0; d < dwords; ++d) {
      const int64_t k = b * g + 4 * d;
      __m512i av[P];
      for (int p = 0; p < P; ++p) av[p] = _mm512_loadu_si512(aq[p] + k * kActPanel);
      for (int i = 0; i < kRows; ++i) {
        const __m512i wv = _mm512_set1_epi32(Load32(wq[i] + k));
        for (int p = 0; p < P; ++p) acci[i][p] = _mm512_dpbusd_epi32(acci[i][p], av[p], wv);
      }
    }
    __m512 dv[P];
    __m512 sv[P];
    for (int p = 0; p < P; ++p) {
      dv[p] = _mm512_loadu_ps(ad[p] + b * kActPanel);
      if constexpr (kMin) sv[p] = _mm512_loadu_ps(as[p] + b * kActPanel);
    }
    for (int i = 0; i < kRows; ++i) {
      const __m512 sc = _mm512_set1_ps(ws[i][b]);
      for (int p = 0; p < P; ++p) {
        accf[i][p] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[i][p]), _mm512_mul_ps(dv[p], sc), accf[i][p]);
      }
      if constexpr (kMin) {
        const __m512 mc = _mm512_set1_ps(wm[i][b]);
        for (int p = 0; p < P; ++p) accf[i][p] = _mm512_fmadd_ps(mc, sv[p], accf[i][p]);
      }
    }
  }
  for (int i = 0; i < kRows; ++i) {
    for (int p = 0; p < P; ++p) _mm512_storeu_ps(out[i] + p * kActPanel, accf[i][p]);
  }
}

}  // namespace

namespace {

// Sums of the 32 unsigned bytes of v: s16[0] over bytes 0..15, s16[1] over 16..31.
inline void ByteSums16(__m256i v, int32_t s16[2]) {
  alignas(32) uint64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), _mm256_sad_epu8(v, _mm256_setzero_si256()));
  s16[0] = static_cast<int32_t>(t[0] + t[1]);
  s16[1] = static_cast<int32_t>(t[2] + t[3]);
}
inline int32_t ByteSum32(__m256i v) {
  int32_t s[2];
  ByteSums16(v, s);
  return s[0] + s[1];
}
inline __m256i Load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline void Store256(int8_t* p, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}
// Bit `bit` of every byte of h, moved to bit 4 (per byte: 16-bit shifts never carry a set bit
// across bytes after the mask).
inline __m256i BitTo4(__m256i h, int bit) {
  const __m256i b =
      _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(bit)), _mm256_set1_epi8(1));
  return _mm256_slli_epi16(b, 4);
}

// Hand-vectorized decoders of the types that carry most of a Q8_0 / Q4_K_M / Q5_K_M model; the
// same values as DecodeInt8RowsImpl.
void DecodeQ8_0(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t n, int8_t* q,
                float* scale, int32_t* wsum) {
  const int64_t nb = n / kQk;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(w + r * row_bytes);
    for (int64_t i = 0; i < nb; ++i) {
      const __m256i v = Load256(reinterpret_cast<const uint8_t*>(b[i].qs));
      Store256(q + (r * nb + i) * kQk, v);
      scale[r * nb + i] = _cvtsh_ss(b[i].d);
      wsum[r * nb + i] = ByteSum32(_mm256_xor_si256(v, flip)) - 128 * kQk;
    }
  }
}

template <bool kFive, class Block>
void DecodeK45(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t n, int8_t* q, float* scale,
               float* minc, int32_t* wsum) {
  const int64_t nsb = n / kQkK;
  const __m256i low = _mm256_set1_epi8(0xF);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* blocks = reinterpret_cast<const Block*>(w + r * row_bytes);
    for (int64_t i = 0; i < nsb; ++i) {
      const Block& b = blocks[i];
      const int64_t j0 = (r * nsb + i) * 8;
      const float d = _cvtsh_ss(b.d);
      const float dmin = _cvtsh_ss(b.dmin);
      for (int j = 0; j < 8; ++j) {
        uint8_t sc;
        uint8_t m;
        ScaleMinK4(j, b.scales, &sc, &m);
        scale[j0 + j] = d * static_cast<float>(sc);
        minc[j0 + j] = -(dmin * static_cast<float>(m));
      }
      int8_t* out = q + (r * nsb + i) * kQkK;
      __m256i h = _mm256_setzero_si256();
      if constexpr (kFive) h = Load256(b.qh);
      for (int c = 0; c < 4; ++c) {
        const __m256i bytes = Load256(b.qs + 32 * c);
        __m256i lo = _mm256_and_si256(bytes, low);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low);
        if constexpr (kFive) {
          lo = _mm256_or_si256(lo, BitTo4(h, 2 * c));
          hi = _mm256_or_si256(hi, BitTo4(h, 2 * c + 1));
        }
        Store256(out + 64 * c, lo);
        Store256(out + 64 * c + 32, hi);
        wsum[j0 + 2 * c] = ByteSum32(lo);
        wsum[j0 + 2 * c + 1] = ByteSum32(hi);
      }
    }
  }
}

void DecodeQ6K(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t n, int8_t* q, float* scale,
               int32_t* wsum) {
  const int64_t nsb = n / kQkK;
  const __m256i low = _mm256_set1_epi8(0xF);
  const __m256i two = _mm256_set1_epi8(3);
  const __m256i bias = _mm256_set1_epi8(32);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* blocks = reinterpret_cast<const BlockQ6_K*>(w + r * row_bytes);
    for (int64_t i = 0; i < nsb; ++i) {
      const BlockQ6_K& b = blocks[i];
      const int64_t j0 = (r * nsb + i) * 16;
      const float d = _cvtsh_ss(b.d);
      for (int j = 0; j < 16; ++j) scale[j0 + j] = d * static_cast<float>(b.scales[j]);
      int8_t* out = q + (r * nsb + i) * kQkK;
      for (int half = 0; half < 2; ++half) {
        const __m256i a = Load256(b.ql + 64 * half);
        const __m256i c = Load256(b.ql + 64 * half + 32);
        const __m256i h = Load256(b.qh + 32 * half);
        __m256i u[4];
        u[0] = _mm256_or_si256(_mm256_and_si256(a, low),
                               _mm256_slli_epi16(_mm256_and_si256(h, two), 4));
        u[1] =
            _mm256_or_si256(_mm256_and_si256(c, low),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), two), 4));
        u[2] =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), two), 4));
        u[3] =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), two), 4));
        for (int k = 0; k < 4; ++k) {
          Store256(out + 128 * half + 32 * k, _mm256_sub_epi8(u[k], bias));
          int32_t s[2];
          ByteSums16(u[k], s);
          // Sub-block of values 128 half + 32 k + 16 e, e = 0, 1.
          wsum[j0 + 8 * half + 2 * k] = s[0] - 32 * 16;
          wsum[j0 + 8 * half + 2 * k + 1] = s[1] - 32 * 16;
        }
      }
    }
  }
}

// --- fused few-row products -------------------------------------------------------------------

inline __m512i Join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// One Q8_0 row times x: |w| (unsigned) times x with w's sign, two blocks per vpdpbusd.
float DotQ8_0(const BlockQ8_0* b, int64_t nb, const Int8FlatRow& x) {
  __m512 acc = _mm512_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m512i wv = Join(Load256(reinterpret_cast<const uint8_t*>(b[i].qs)),
                            Load256(reinterpret_cast<const uint8_t*>(b[i + 1].qs)));
    const __m512i av = _mm512_loadu_si512(x.q + i * kQk);
    const __m512i sa = _mm512_mask_sub_epi8(av, _mm512_movepi8_mask(wv), zero, av);
    const __m512i s = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(wv), sa);
    const __m512 sc = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(x.d[i] * _cvtsh_ss(b[i].d)),
                                           _mm512_set1_ps(x.d[i + 1] * _cvtsh_ss(b[i + 1].d)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc);
  }
  float sum = _mm512_reduce_add_ps(acc);
  if (i < nb) {
    const __m256i wv = Load256(reinterpret_cast<const uint8_t*>(b[i].qs));
    const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + i * kQk));
    const __m256i sa = _mm256_sign_epi8(av, wv);
    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wv), sa);
    alignas(32) int32_t t[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t), s);
    int32_t si = 0;
    for (int k = 0; k < 8; ++k) si += t[k];
    sum += static_cast<float>(si) * (x.d[i] * _cvtsh_ss(b[i].d));
  }
  return sum;
}

// One Q4_K / Q5_K row times x: unsigned weights times signed x, 64 values (two sub-blocks) per
// vpdpbusd, the lanes of each sub-block scaled by d * sc * d_x; the mins folded in through the
// block sums of x.
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

// One Q6_K row times x: q in [0, 63] unsigned times signed x, the -32 folded in as
// -32 * d * sc * dsum per 16-value sub-block.
float DotQ6K(const BlockQ6_K* b, int64_t nsb, const Int8FlatRow& x) {
  __m512 acc = _mm512_setzero_ps();
  __m512 acc_off = _mm512_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  const __m256i low = _mm256_set1_epi8(0xF);
  const __m256i two = _mm256_set1_epi8(3);
  // Lane L of the product of values 64 e' .. 64 e' + 63 (e' = 2 half + e) is sub-block
  // 4 e' + L / 4.
  const __m512i idx[4] = {
      _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
      _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7),
      _mm512_setr_epi32(8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11),
      _mm512_setr_epi32(12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15)};
  for (int64_t i = 0; i < nsb; ++i) {
    const BlockQ6_K& blk = b[i];
    const __m512 scw = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                         reinterpret_cast<const __m128i*>(blk.scales)))),
                                     _mm512_set1_ps(_cvtsh_ss(blk.d)));
    const __m512 scale = _mm512_mul_ps(scw, _mm512_set1_ps(x.d[16 * i]));
    acc_off = _mm512_fmadd_ps(scw, _mm512_loadu_ps(x.dsum + 16 * i), acc_off);
    const int8_t* xq = x.q + i * kQkK;
    for (int half = 0; half < 2; ++half) {
      const __m256i a = Load256(blk.ql + 64 * half);
      const __m256i c = Load256(blk.ql + 64 * half + 32);
      const __m256i h = Load256(blk.qh + 32 * half);
      const __m256i u0 =
          _mm256_or_si256(_mm256_and_si256(a, low), _mm256_slli_epi16(_mm256_and_si256(h, two), 4));
      const __m256i u1 =
          _mm256_or_si256(_mm256_and_si256(c, low),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), two), 4));
      const __m256i u2 =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), two), 4));
      const __m256i u3 =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), two), 4));
      const __m512i s0 =
          _mm512_dpbusd_epi32(zero, Join(u0, u1), _mm512_loadu_si512(xq + 128 * half));
      const __m512i s1 =
          _mm512_dpbusd_epi32(zero, Join(u2, u3), _mm512_loadu_si512(xq + 128 * half + 64));
      acc =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_permutexvar_ps(idx[2 * half], scale), acc);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_permutexvar_ps(idx[2 * half + 1], scale),
                            acc);
    }
  }
  return _mm512_reduce_add_ps(acc) - 32.0f * _mm512_reduce_add_ps(acc_off);
}

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
      for (int64_t r = 0; r < rows; ++r) {
        y[r] = DotK45<false>(reinterpret_cast<const BlockQ4_K*>(w + r * row_bytes), x.n / kQkK, x);
      }
      return true;
    case WeightType::kQ5_K:
      for (int64_t r = 0; r < rows; ++r) {
        y[r] = DotK45<true>(reinterpret_cast<const BlockQ5_K*>(w + r * row_bytes), x.n / kQkK, x);
      }
      return true;
    case WeightType::kQ6_K:
      for (int64_t r = 0; r < rows; ++r) {
        y[r] = DotQ6K(reinterpret_cast<const BlockQ6_K*>(w + r * row_bytes), x.n / kQkK, x);
      }
      return true;
    default:
      return false;
  }
}

bool DecodeInt8RowsAvx512(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                          int64_t n, int g, int8_t* q, float* scale, float* minc, int32_t* wsum) {
  switch (type) {
    case WeightType::kQ8_0:
      DecodeQ8_0(w, row_bytes, rows, n, q, scale, wsum);
      return false;
    case WeightType::kQ4_K:
      DecodeK45<false, BlockQ4_K>(w, row_bytes, rows, n, q, scale, minc, wsum);
      return true;
    case WeightType::kQ5_K:
      DecodeK45<true, BlockQ5_K>(w, row_bytes, rows, n, q, scale, minc, wsum);
      return true;
    case WeightType::kQ6_K:
      DecodeQ6K(w, row_bytes, rows, n, q, scale, wsum);
      return false;
    default:
      return DecodeInt8RowsImpl(type, w, row_bytes, rows, n, g, q, scale, minc, wsum);
  }
}

void Int8RowsAvx512Vnni(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y,
                        int64_t col0) {
  alignas(64) float out[kRows][2 * kActPanel];
  for (int64_t p0 = 0; p0 < a.panels; p0 += 2) {
    // No std::min here: library templates instantiated in this file could be linked into
    // baseline code (see quants.h).
    const int np = a.panels - p0 >= 2 ? 2 : 1;
    const int64_t t0 = p0 * kActPanel;
    const int64_t tn = a.rows - t0 < np * kActPanel ? a.rows - t0 : np * kActPanel;
    for (int64_t r0 = 0; r0 < w.rows; r0 += kRows) {
      const int valid = static_cast<int>(w.rows - r0 < kRows ? w.rows - r0 : kRows);
      int64_t wr[kRows];
      for (int i = 0; i < kRows; ++i) wr[i] = r0 + (i < valid ? i : valid - 1);
      if (np == 2) {
        if (w.has_min) {
          Tile<2, true>(w, wr, a, p0, out);
        } else {
          Tile<2, false>(w, wr, a, p0, out);
        }
      } else {
        if (w.has_min) {
          Tile<1, true>(w, wr, a, p0, out);
        } else {
          Tile<1, false>(w, wr, a, p0, out);
        }
      }
      for (int64_t t = 0; t < tn; ++t) {
        float* dst = y.data + (t0 + t) * y.stride + col0 + r0;
        for (int i = 0; i < valid; ++i) dst[i] = out[i][t];
      }
    }
  }
}

}  // namespace deltaserve::kernels::internal
