// The weight-row decoder of the int8 path (matmul_int8.h), written once as plain loops and
// included by matmul_int8.cc (baseline ISA), matmul_int8_avx2.cc and matmul_int8_avx512_tiles.cc,
// where the compiler vectorizes it with their flags; with AVX2 or more (__AVX2__) also the
// hand-vectorized decoders of the types that carry most of a Q8_0 / Q4_K_M / Q5_K_M model
// (DecodeInt8RowsSimdImpl). Internal linkage: each includer gets a private copy built with its
// own -m flags (see quants.h on why no inline function is shared across ISA files).
#pragma once

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <cstring>

#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/quants.h"

#if defined(__AVX2__)
#include "kernels/cpu/matmul_int8_x86.h"
#endif

namespace deltaserve::kernels::internal {
namespace {

#if defined(__F16C__)
inline float Int8HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }
#else
inline float Int8HalfToFloat(uint16_t h) { return Fp16ToFp32(h); }
#endif

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (quants.h's GetScaleMinK4,
// privately).
inline void ScaleMinK4(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Decodes `rows` rows into q [rows][n], scale / minc / wsum [rows][n / g] (minc zeroed by the
// caller); returns Int8WeightRows::has_min. Uses no library templates (see above).
inline bool DecodeInt8RowsImpl(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                               int64_t n, int g, int8_t* q_out, float* scale_out, float* minc_out,
                               int32_t* wsum_out) {
  const int64_t nb = n / g;
  bool has_min = false;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = w + r * row_bytes;
    int8_t* q = q_out + r * n;
    float* scale = scale_out + r * nb;
    float* minc = minc_out + r * nb;
    switch (type) {
      case WeightType::kQ8_0: {
        const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
        for (int64_t i = 0; i < n / kQk; ++i) {
          std::memcpy(q + i * kQk, b[i].qs, kQk);
          scale[i] = Int8HalfToFloat(b[i].d);
        }
        break;
      }
      case WeightType::kQ4_0:
      case WeightType::kQ4_1: {
        const bool one = type == WeightType::kQ4_1;
        const int bias = one ? 0 : -8;
        for (int64_t i = 0; i < n / kQk; ++i) {
          const uint8_t* qs;
          if (one) {
            const auto& b = reinterpret_cast<const BlockQ4_1*>(src)[i];
            qs = b.qs;
            scale[i] = Int8HalfToFloat(b.d);
            minc[i] = Int8HalfToFloat(b.m);
            has_min = true;
          } else {
            const auto& b = reinterpret_cast<const BlockQ4_0*>(src)[i];
            qs = b.qs;
            scale[i] = Int8HalfToFloat(b.d);
          }
          for (int j = 0; j < kQk / 2; ++j) {
            q[i * kQk + j] = static_cast<int8_t>((qs[j] & 0xF) + bias);
            q[i * kQk + j + kQk / 2] = static_cast<int8_t>((qs[j] >> 4) + bias);
          }
        }
        break;
      }
      case WeightType::kQ5_0:
      case WeightType::kQ5_1: {
        const bool one = type == WeightType::kQ5_1;
        const int bias = one ? 0 : -16;
        for (int64_t i = 0; i < n / kQk; ++i) {
          const uint8_t* qs;
          uint32_t qh;
          if (one) {
            const auto& b = reinterpret_cast<const BlockQ5_1*>(src)[i];
            qs = b.qs;
            std::memcpy(&qh, b.qh, 4);
            scale[i] = Int8HalfToFloat(b.d);
            minc[i] = Int8HalfToFloat(b.m);
            has_min = true;
          } else {
            const auto& b = reinterpret_cast<const BlockQ5_0*>(src)[i];
            qs = b.qs;
            std::memcpy(&qh, b.qh, 4);
            scale[i] = Int8HalfToFloat(b.d);
          }
          for (int j = 0; j < kQk / 2; ++j) {
            const int lo = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
            const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
            q[i * kQk + j] = static_cast<int8_t>(lo + bias);
            q[i * kQk + j + kQk / 2] = static_cast<int8_t>(hi + bias);
          }
        }
        break;
      }
      case WeightType::kQ4_K:
      case WeightType::kQ5_K: {
        const bool five = type == WeightType::kQ5_K;
        has_min = true;
        for (int64_t i = 0; i < n / kQkK; ++i) {
          const uint8_t* scales;
          const uint8_t* qs;
          const uint8_t* qh = nullptr;
          uint16_t dh;
          uint16_t mh;
          if (five) {
            const auto& b = reinterpret_cast<const BlockQ5_K*>(src)[i];
            scales = b.scales, qs = b.qs, qh = b.qh, dh = b.d, mh = b.dmin;
          } else {
            const auto& b = reinterpret_cast<const BlockQ4_K*>(src)[i];
            scales = b.scales, qs = b.qs, dh = b.d, mh = b.dmin;
          }
          const float d = Int8HalfToFloat(dh);
          const float dmin = Int8HalfToFloat(mh);
          for (int j = 0; j < 8; ++j) {
            uint8_t sc;
            uint8_t m;
            ScaleMinK4(j, scales, &sc, &m);
            scale[i * 8 + j] = d * static_cast<float>(sc);
            minc[i * 8 + j] = -(dmin * static_cast<float>(m));
          }
          int8_t* out = q + i * kQkK;
          for (int c = 0; c < 4; ++c) {
            for (int l = 0; l < 32; ++l) {
              int lo = qs[32 * c + l] & 0xF;
              int hi = qs[32 * c + l] >> 4;
              if (five) {
                lo |= ((qh[l] >> (2 * c)) & 1) << 4;
                hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
              }
              out[64 * c + l] = static_cast<int8_t>(lo);
              out[64 * c + 32 + l] = static_cast<int8_t>(hi);
            }
          }
        }
        break;
      }
      case WeightType::kQ6_K: {
        const auto* blocks = reinterpret_cast<const BlockQ6_K*>(src);
        for (int64_t i = 0; i < n / kQkK; ++i) {
          const BlockQ6_K& b = blocks[i];
          const float d = Int8HalfToFloat(b.d);
          for (int j = 0; j < 16; ++j) scale[i * 16 + j] = d * static_cast<float>(b.scales[j]);
          int8_t* out = q + i * kQkK;
          for (int h = 0; h < 2; ++h) {
            const uint8_t* ql = b.ql + 64 * h;
            const uint8_t* qh = b.qh + 32 * h;
            for (int l = 0; l < 32; ++l) {
              out[128 * h + l] = static_cast<int8_t>(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
              out[128 * h + l + 32] =
                  static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
              out[128 * h + l + 64] =
                  static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
              out[128 * h + l + 96] =
                  static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
          }
        }
        break;
      }
      default:
        break;
    }
    int32_t* wsum = wsum_out + r * nb;
    for (int64_t b = 0; b < nb; ++b) {
      int32_t s = 0;
      for (int j = 0; j < g; ++j) s += q[b * g + j];
      wsum[b] = s;
    }
  }
  return has_min;
}

#if defined(__AVX2__)
// Hand-vectorized decoders of every type, the same values as DecodeInt8RowsImpl. The plain loops
// vectorize poorly: Q4_0 rows took 2.6x as long as Q4_K rows to decode (1024 x 3584, AVX2, one
// thread), which made the prefill kernel slower than the batch one up to 16 tokens.

// Q4_0, Q4_1, Q5_0 and Q5_1: 32 values a block, the legacy _0 types stored with an offset.
template <class Block, bool kFive, bool kMin>
inline void DecodeLegacy(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t n, int8_t* q,
                         float* scale, float* minc, int32_t* wsum) {
  const int64_t nb = n / kQk;
  constexpr int kOffset = kMin ? 0 : (kFive ? 16 : 8);
  const __m256i offset = _mm256_set1_epi8(kOffset);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const Block*>(w + r * row_bytes);
    for (int64_t i = 0; i < nb; ++i) {
      __m256i v = Nibbles(b[i].qs);
      if constexpr (kFive) v = _mm256_or_si256(v, FifthBits(b[i].qh));
      Store256(q + (r * nb + i) * kQk, _mm256_sub_epi8(v, offset));
      scale[r * nb + i] = _cvtsh_ss(b[i].d);
      if constexpr (kMin) minc[r * nb + i] = _cvtsh_ss(b[i].m);
      wsum[r * nb + i] = ByteSum32(v) - kOffset * kQk;
    }
  }
}

inline void DecodeQ8_0(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t n, int8_t* q,
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

inline void DecodeQ6K(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t n, int8_t* q,
                      float* scale, int32_t* wsum) {
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

// DecodeInt8RowsImpl with the hand-vectorized decoders above where the type has one.
inline bool DecodeInt8RowsSimdImpl(WeightType type, const uint8_t* w, size_t row_bytes,
                                   int64_t rows, int64_t n, int g, int8_t* q, float* scale,
                                   float* minc, int32_t* wsum) {
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
    case WeightType::kQ4_0:
      DecodeLegacy<BlockQ4_0, false, false>(w, row_bytes, rows, n, q, scale, minc, wsum);
      return false;
    case WeightType::kQ4_1:
      DecodeLegacy<BlockQ4_1, false, true>(w, row_bytes, rows, n, q, scale, minc, wsum);
      return true;
    case WeightType::kQ5_0:
      DecodeLegacy<BlockQ5_0, true, false>(w, row_bytes, rows, n, q, scale, minc, wsum);
      return false;
    case WeightType::kQ5_1:
      DecodeLegacy<BlockQ5_1, true, true>(w, row_bytes, rows, n, q, scale, minc, wsum);
      return true;
    default:
      return DecodeInt8RowsImpl(type, w, row_bytes, rows, n, g, q, scale, minc, wsum);
  }
}
#endif  // __AVX2__

}  // namespace
}  // namespace deltaserve::kernels::internal
