// The 256-bit prefill kernels of the int8 path (Int8RowsFn of matmul_int8.h: weight rows decoded
// to int8 by DecodeInt8Rows, activations quantized into packed panels), for batches beyond the
// fused kernels (MultiplyInt8 in matmul.cc). Instantiated by matmul_int8_avx2.cc (Int8RowsAvx2)
// and matmul_int8_avxvnni.cc (Int8RowsAvxVnni).
//
// A packed panel (kActPanel = 16 activation rows) is two halves of 8 rows: for every 4 values
// k .. k + 3 a panel holds 64 bytes, the first 32 of them rows 0-7 (4 bytes per row), the next 32
// rows 8-15. So one 256-bit load is a half-panel, whose 8 int32 lanes are 8 activation rows,
// and a weight row's 4 bytes broadcast against it give each row's 4-product sum. A tile is R
// weight rows x H half-panels over all n values, one int32 block accumulator and one f32
// accumulator per (row, half).
//
// AVX-VNNI (TileVnni): vpdpbusd of the u8 activations (q + 128) and the int8 weights, 128 *
// wsum taken off, as the AVX-512 tiles (matmul_int8_avx512_tiles.cc).
// AVX2 (TileAvx2): vpmaddubsw saturates pairs of u8 x s8 products to int16, so the roles turn:
// the weights are the unsigned side (q + offset: 0..15, 0..31 or 0..63; Q8_0 as |q| with its
// sign moved to x), the activations the signed one (the packed bytes with 128 taken off by one
// XOR per load, shared by the R rows). Pairs are added in int16 over kSpan steps while they
// cannot overflow (2 * 15 * 127 * 8 < 2^15 for 4-bit weights: one vpmaddwd a block), then
// widened with vpmaddwd; the offset comes off in f32 with the block sums of x, as a min:
// (minc - offset * scale) * dsum.
//
// Included only by the files built with -mavx2 -mfma -mf16c (quants.cmake); internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_int8.h"

namespace deltaserve::kernels::internal {
namespace {

// One tile's weight rows and the half-panels it multiplies, as plain pointers.
struct Tile256Args {
  const int8_t* wq;     // row 0's q; row i at wq + i * n
  const float* ws;      // row 0's scales; row i at ws + i * nb
  const float* wm;      // mins, as ws
  const int32_t* wsum;  // block sums, as ws
  const uint8_t* aq;    // the first panel's q
  const float* ad;      // the first panel's d
  const float* as;      // dsum, as ad
  int h0;               // the first half of the tile (0 or 1: lanes 0-7 or 8-15 of aq's panel)
  int64_t n;
  int64_t nb;
  float* out;  // out[i * 8 * kMaxHalves + h * 8 + lane]
};

constexpr int kMaxHalves = 4;

inline int32_t TileLoad32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Half h of the tile (counted from t.h0): its q at step k4 (values 4 k4 .. 4 k4 + 3), and its d.
inline const uint8_t* HalfQ(const Tile256Args& t, int h, int64_t k4) {
  const int g = t.h0 + h;
  return t.aq + (g >> 1) * t.n * kActPanel + k4 * 4 * kActPanel + (g & 1) * 32;
}
inline int64_t HalfBlock(const Tile256Args& t, int h, int64_t b) {
  const int g = t.h0 + h;
  return (g >> 1) * t.nb * kActPanel + b * kActPanel + (g & 1) * 8;
}

template <int R, int H>
__attribute__((always_inline)) inline void StoreTile256(const Tile256Args& t,
                                                        const __m256 (&accf)[R][H]) {
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(t.out + (i * kMaxHalves + h) * 8, accf[i][h]);
  }
}

// The VNNI tile: per block the exact int32 sums sum (q_a + 128) q_w - 128 wsum, then one
// convert, one multiply of the two scales and one FMA per (row, half), plus the min's FMA.
template <class Ops, int G, bool kMin, int R, int H>
__attribute__((noinline)) void TileVnni(const Tile256Args& t) {
  const int64_t nb = t.nb;
  __m256 accf[R][H];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) accf[i][h] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i acc[R][H];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m256i init = _mm256_set1_epi32(-128 * t.wsum[i * nb + b]);
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) acc[i][h] = init;
    }
    const int8_t* wk = t.wq + b * G;
#pragma GCC unroll 8
    for (int d = 0; d < G / 4; ++d) {
      __m256i av[H];
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) {
        av[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(HalfQ(t, h, b * G / 4 + d)));
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256i wv = _mm256_set1_epi32(TileLoad32(wk + i * t.n + 4 * d));
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) acc[i][h] = Ops::DotBytes(acc[i][h], av[h], wv);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m256 sc = _mm256_set1_ps(t.ws[i * nb + b]);
      const __m256 mc = _mm256_set1_ps(kMin ? t.wm[i * nb + b] : 0.0f);
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) {
        const __m256 dv = _mm256_loadu_ps(t.ad + HalfBlock(t, h, b));
        accf[i][h] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][h]), _mm256_mul_ps(dv, sc), accf[i][h]);
        if constexpr (kMin) {
          accf[i][h] = _mm256_fmadd_ps(mc, _mm256_loadu_ps(t.as + HalfBlock(t, h, b)), accf[i][h]);
        }
      }
    }
  }
  StoreTile256<R, H>(t, accf);
}

// The AVX2 tile (file comment): kOffset added to the weights (0 for types stored unsigned),
// kSign for Q8_0, int16 sums over kSpan steps.
template <int G, bool kMin, int kOffset, bool kSign, int kSpan, int R, int H>
__attribute__((noinline)) void TileAvx2(const Tile256Args& t) {
  static_assert(G / 4 % kSpan == 0);
  const int64_t nb = t.nb;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 accf[R][H];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) accf[i][h] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* wk = t.wq + b * G;
    __m256i acc[R][H];
#pragma GCC unroll 8
    for (int s0 = 0; s0 < G / 4; s0 += kSpan) {
      __m256i acc16[R][H];
#pragma GCC unroll 8
      for (int d = s0; d < s0 + kSpan; ++d) {
        __m256i xs[H];
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) {
          xs[h] = _mm256_xor_si256(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(HalfQ(t, h, b * G / 4 + d))),
              flip);
        }
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const __m256i wb = _mm256_set1_epi32(TileLoad32(wk + i * t.n + 4 * d));
          __m256i wu = wb;
          if constexpr (kSign) {
            wu = _mm256_abs_epi8(wb);
          } else if constexpr (kOffset != 0) {
            wu = _mm256_add_epi8(wb, _mm256_set1_epi8(static_cast<char>(kOffset)));
          }
#pragma GCC unroll 8
          for (int h = 0; h < H; ++h) {
            const __m256i p = _mm256_maddubs_epi16(wu, kSign ? _mm256_sign_epi8(xs[h], wb) : xs[h]);
            acc16[i][h] = d == s0 ? p : _mm256_add_epi16(acc16[i][h], p);
            // Keeps the sums a chain: g++ otherwise reassociates the span's additions into a
            // tree, keeping all its products live, and spills a dozen registers a block.
            asm("" : "+x"(acc16[i][h]));
          }
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) {
          const __m256i wide = _mm256_madd_epi16(acc16[i][h], ones);
          acc[i][h] = s0 == 0 ? wide : _mm256_add_epi32(acc[i][h], wide);
          asm("" : "+x"(acc[i][h]));  // a chain too
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const float scale = t.ws[i * nb + b];
      const __m256 sc = _mm256_set1_ps(scale);
      // The min and the offset, both per unit of x's block sum.
      const __m256 mc =
          _mm256_set1_ps((kMin ? t.wm[i * nb + b] : 0.0f) - static_cast<float>(kOffset) * scale);
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) {
        const __m256 dv = _mm256_loadu_ps(t.ad + HalfBlock(t, h, b));
        accf[i][h] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][h]), _mm256_mul_ps(dv, sc), accf[i][h]);
        if constexpr (kMin || kOffset != 0) {
          accf[i][h] = _mm256_fmadd_ps(mc, _mm256_loadu_ps(t.as + HalfBlock(t, h, b)), accf[i][h]);
        }
      }
    }
  }
  StoreTile256<R, H>(t, accf);
}

// Runs Tile::Run<R, H>(args) for run-time rows in 1 .. R and halves in 1 .. H.
template <class Tile, int R, int H>
void TileAny256(int rows, int halves, const Tile256Args& t) {
  static_assert(R <= 4 && H <= 2);
  if (halves >= 2 && H >= 2) {
    switch (rows) {
      case 4:
        if constexpr (R >= 4) Tile::template Run<4, H>(t);
        break;
      case 3:
        if constexpr (R >= 3) Tile::template Run<3, H>(t);
        break;
      case 2:
        Tile::template Run<2, H>(t);
        break;
      default:
        Tile::template Run<1, H>(t);
        break;
    }
    return;
  }
  switch (rows) {
    case 4:
      if constexpr (R >= 4) Tile::template Run<4, 1>(t);
      break;
    case 3:
      if constexpr (R >= 3) Tile::template Run<3, 1>(t);
      break;
    case 2:
      Tile::template Run<2, 1>(t);
      break;
    default:
      Tile::template Run<1, 1>(t);
      break;
  }
}

// Every weight row of w times every activation row of a, through tiles of R rows x H halves:
// half-panels outer (a tile's activations stay in L1 while the chunk's rows pass), rows inner.
// Outputs go to y one by one: a tile's R x 8H values per n / 4 x R x H multiply steps.
template <class Tile, int R, int H>
void Int8Rows256(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y, int64_t col0) {
  alignas(32) float out[4 * kMaxHalves * 8];
  const int64_t n = w.n;
  const int64_t nb = n / w.group;
  const int64_t halves = (a.rows + 7) / 8;
  for (int64_t g0 = 0; g0 < halves; g0 += H) {
    const int nh = static_cast<int>(halves - g0 < H ? halves - g0 : H);
    const int64_t panel = g0 / 2;
    for (int64_t r0 = 0; r0 < w.rows; r0 += R) {
      const int nr = static_cast<int>(w.rows - r0 < R ? w.rows - r0 : R);
      const Tile256Args args{w.q + r0 * n,
                             w.scale + r0 * nb,
                             w.minc + r0 * nb,
                             w.wsum + r0 * nb,
                             a.q + panel * n * kActPanel,
                             a.d + panel * nb * kActPanel,
                             a.dsum + panel * nb * kActPanel,
                             static_cast<int>(g0 & 1),
                             n,
                             nb,
                             out};
      TileAny256<Tile, R, H>(nr, nh, args);
      for (int h = 0; h < nh; ++h) {
        const int64_t t0 = (g0 + h) * 8;
        const int64_t tn = a.rows - t0 < 8 ? a.rows - t0 : 8;
        for (int64_t l = 0; l < tn; ++l) {
          float* dst = y.data + (t0 + l) * y.stride + col0 + r0;
          for (int i = 0; i < nr; ++i) dst[i] = out[(i * kMaxHalves + h) * 8 + l];
        }
      }
    }
  }
}

}  // namespace
}  // namespace deltaserve::kernels::internal
