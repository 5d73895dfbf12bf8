// AVX-512 VNNI prefill kernel of the int8-activation path (Int8RowsAvx512Vnni, matmul_int8.h)
// and the weight-row decoder that feeds it (DecodeInt8RowsAvx512, matmul_int8_decode.h's
// DecodeInt8RowsSimdImpl built with these flags), for batches beyond the fused kernels
// (MultiplyInt8 in matmul.cc). Built with the flags of matmul_avx512.cc; called only
// when the CPU has AVX-512 F/BW/VL and VNNI.
//
// The 16 lanes of a register are 16 activation rows (one packed panel): vpdpbusd multiplies the
// panel's 4 consecutive u8 values per row with 4 int8 weights broadcast from one weight row,
// so a 32-value block costs 8 vpdpbusd per (weight row, panel) and the per-block f32 scaling
// (convert, multiply, add) is paid once per 8 of them. Tiles: 4 weight rows x 3 panels (Tile),
// 4 x 2 for the K-quants (TileK).
//
// Zen 5 (this project's bench machine, bench/matmul_bench.cc and a register-only loop): 2
// vpdpbusd zmm a cycle, sharing the two pipes with FMA and vmulps; vcvtdq2ps, vaddps and
// broadcasts from memory cost none of those slots. So the kernel counts FMA-pipe slots per
// block: 8 vpdpbusd + 2 (Q8_0), + 1 with a min, TileK 4 + 1 (Q6_K) and 8 + 2 (Q4_K). It runs
// at 64-72% of the vpdpbusd peak (one thread, 64 rows x 512 tokens, n = 1024 and 3584), from
// 42-52% before the tiles were unrolled per G.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/matmul_int8_avx512_common.h"
#include "kernels/cpu/matmul_int8_decode.h"

namespace deltaserve::kernels::internal {
namespace {


// Register tile of the prefill kernel: up to kTileRows weight rows x kTilePanels panels, one
// int32 block accumulator and one f32 accumulator per (row, panel).
constexpr int kTileRows = 4;
constexpr int kTilePanels = 3;

inline int32_t Load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Weight rows of one tile and the panels it multiplies, as plain pointers.
struct TileArgs {
  const int8_t* wq;     // row 0's q; row i at wq + i * n
  const float* ws;      // row 0's scales; row i at ws + i * nb
  const float* wm;      // mins, as ws
  const int32_t* wsum;  // block sums, as ws
  const uint8_t* aq;    // panel 0's q; panel p at aq + p * n * kActPanel
  const float* ad;      // panel 0's d; panel p at ad + p * nb * kActPanel
  const float* as;      // dsum, as ad
  int64_t n;
  int64_t nb;
  float* out;  // out[i * kTilePanels * kActPanel + p * kActPanel + lane]
};

// The exact int32 sums of block b, sum (q_a + 128) q_w - 128 wsum, for R rows x P panels. G is
// a compile-time constant so the block's G / 4 vpdpbusd steps unroll and every accumulator
// stays in a register: with G at run time GCC kept the loop and moved the accumulators through
// copies every step.
template <int G, int R, int P>
__attribute__((always_inline)) inline void BlockSums(const TileArgs& t, int64_t b,
                                                     __m512i (&acc)[R][P]) {
  const int64_t n = t.n;
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const __m512i init = _mm512_set1_epi32(-128 * t.wsum[i * t.nb + b]);
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[i][p] = init;
  }
  const int8_t* wk = t.wq + b * G;
  const uint8_t* ak = t.aq + b * G * kActPanel;
#pragma GCC unroll 8
  for (int d = 0; d < G / 4; ++d) {
    __m512i av[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) av[p] = _mm512_loadu_si512(ak + p * n * kActPanel + d * 64);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      // A broadcast from memory costs no vector-pipe slot on Zen 5 (measured).
      const __m512i wv = _mm512_set1_epi32(Load32(wk + i * n + 4 * d));
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) acc[i][p] = _mm512_dpbusd_epi32(acc[i][p], av[p], wv);
    }
  }
}

template <int R, int P>
__attribute__((always_inline)) inline void StoreTile(const TileArgs& t,
                                                     const __m512 (&accf)[R][P]) {
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      _mm512_storeu_ps(t.out + (i * kTilePanels + p) * kActPanel, accf[i][p]);
    }
  }
}

// R weight rows times P panels over all n values, activations in blocks of G with their own
// scale (the legacy types): per block and (row, panel) one convert, one multiply of the two
// scales and one FMA (two FMA-pipe slots to the block's G / 4 vpdpbusd), plus the min's FMA.
template <int G, bool kMin, int R, int P>
__attribute__((noinline)) void Tile(const TileArgs& t) {
  const int64_t nb = t.nb;
  __m512 accf[R][P];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) accf[i][p] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m512i acc[R][P];
    BlockSums<G, R, P>(t, b, acc);
    __m512 dv[P];
    __m512 sv[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      dv[p] = _mm512_loadu_ps(t.ad + p * nb * kActPanel + b * kActPanel);
      if constexpr (kMin) sv[p] = _mm512_loadu_ps(t.as + p * nb * kActPanel + b * kActPanel);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512 sc = _mm512_set1_ps(t.ws[i * nb + b]);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        accf[i][p] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][p]), _mm512_mul_ps(dv[p], sc), accf[i][p]);
      }
      if constexpr (kMin) {
        const __m512 mc = _mm512_set1_ps(t.wm[i * nb + b]);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) accf[i][p] = _mm512_fmadd_ps(mc, sv[p], accf[i][p]);
      }
    }
  }
  StoreTile<R, P>(t, accf);
}

// As Tile, for the K-quants, whose activation scale d is one per super-block of 256: the
// blocks' sums are scaled by the weight scale alone into a super-block accumulator, which is
// scaled by d once per super-block, so a block costs one FMA-pipe slot (plus the min's), not
// two. Q6_K (G = 16, 4 vpdpbusd a block) gains the most.
template <int G, bool kMin, int R, int P>
__attribute__((noinline)) void TileK(const TileArgs& t) {
  constexpr int kBlocks = kQkK / G;
  const int64_t nb = t.nb;
  __m512 accf[R][P];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) accf[i][p] = _mm512_setzero_ps();
  }
  for (int64_t b0 = 0; b0 < nb; b0 += kBlocks) {
    __m512 accs[R][P];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) accs[i][p] = _mm512_setzero_ps();
    }
    for (int64_t b = b0; b < b0 + kBlocks; ++b) {
      __m512i acc[R][P];
      BlockSums<G, R, P>(t, b, acc);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512 sc = _mm512_set1_ps(t.ws[i * nb + b]);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          accs[i][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][p]), sc, accs[i][p]);
        }
      }
      if constexpr (kMin) {
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          const __m512 sv = _mm512_loadu_ps(t.as + p * nb * kActPanel + b * kActPanel);
#pragma GCC unroll 8
          for (int i = 0; i < R; ++i) {
            accf[i][p] = _mm512_fmadd_ps(_mm512_set1_ps(t.wm[i * nb + b]), sv, accf[i][p]);
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const __m512 dv = _mm512_loadu_ps(t.ad + p * nb * kActPanel + b0 * kActPanel);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) accf[i][p] = _mm512_fmadd_ps(accs[i][p], dv, accf[i][p]);
    }
  }
  StoreTile<R, P>(t, accf);
}

template <int G, bool kMin, bool kK, int R, int P>
void RunTile(const TileArgs& t) {
  if constexpr (kK) {
    TileK<G, kMin, R, P>(t);
  } else {
    Tile<G, kMin, R, P>(t);
  }
}

// RunTile for run-time R in 1 .. kTileRows.
template <int G, bool kMin, bool kK, int P>
void TileRows(int rows, const TileArgs& t) {
  static_assert(kTileRows == 4);
  switch (rows) {
    case 4:
      RunTile<G, kMin, kK, 4, P>(t);
      break;
    case 3:
      RunTile<G, kMin, kK, 3, P>(t);
      break;
    case 2:
      RunTile<G, kMin, kK, 2, P>(t);
      break;
    default:
      RunTile<G, kMin, kK, 1, P>(t);
      break;
  }
}

// Panels per tile: three for Tile (2 x 12 accumulators), two for TileK (3 x 8 of the 32
// registers). With two panels Tile ran 2-4% slower on Q8_0 (64 rows x 512 tokens, one thread).
template <bool kK>
constexpr int kPanelsOf = kK ? 2 : 3;

template <int G, bool kMin, bool kK>
void TileAny(int rows, int panels, const TileArgs& t) {
  static_assert(kTilePanels == 3);
  if (panels == 3 && !kK) {
    TileRows<G, kMin, kK, kK ? 1 : 3>(rows, t);
  } else if (panels == 2) {
    TileRows<G, kMin, kK, 2>(rows, t);
  } else {
    TileRows<G, kMin, kK, 1>(rows, t);
  }
}

}  // namespace

bool DecodeInt8RowsAvx512(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                          int64_t n, int g, int8_t* q, float* scale, float* minc, int32_t* wsum) {
  return DecodeInt8RowsSimdImpl(type, w, row_bytes, rows, n, g, q, scale, minc, wsum);
}

namespace {

// Output columns gathered per token row before they go to y: whole 64-byte lines of y.
constexpr int kColGroup = 32;
static_assert(kColGroup % kTileRows == 0);

// The tile's out[i][p * 16 + lane] (rows i < 4 of panel p) transposed into yb[token][col .. +4].
inline void TransposeTile(const float* out, int panels, float (*yb)[kColGroup], int col) {
  for (int p = 0; p < panels; ++p) {
    __m512 r[kTileRows];
    for (int i = 0; i < kTileRows; ++i) {
      r[i] = _mm512_load_ps(out + (i * kTilePanels + p) * kActPanel);
    }
    // Per 128-bit lane k: u[j] = the four rows' values of token 4k + j.
    const __m512 lo01 = _mm512_unpacklo_ps(r[0], r[1]);
    const __m512 hi01 = _mm512_unpackhi_ps(r[0], r[1]);
    const __m512 lo23 = _mm512_unpacklo_ps(r[2], r[3]);
    const __m512 hi23 = _mm512_unpackhi_ps(r[2], r[3]);
    __m512 u[4];
    u[0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(lo01), _mm512_castps_pd(lo23)));
    u[1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(lo01), _mm512_castps_pd(lo23)));
    u[2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(hi01), _mm512_castps_pd(hi23)));
    u[3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(hi01), _mm512_castps_pd(hi23)));
    float(*dst)[kColGroup] = yb + p * kActPanel;
    for (int j = 0; j < 4; ++j) {
      _mm_storeu_ps(dst[j] + col, _mm512_castps512_ps128(u[j]));
      _mm_storeu_ps(dst[4 + j] + col, _mm512_extractf32x4_ps(u[j], 1));
      _mm_storeu_ps(dst[8 + j] + col, _mm512_extractf32x4_ps(u[j], 2));
      _mm_storeu_ps(dst[12 + j] + col, _mm512_extractf32x4_ps(u[j], 3));
    }
  }
}

}  // namespace

// Per group of kTilePanels panels and kColGroup weight rows: the tiles' outputs gather in yb,
// then each token's kColGroup values go to y in two vector stores, the y lines prefetched
// while the tiles run. Four scalar stores per token and tile straight into y (T rows of up to
// 6,144 floats, beyond L2) were 10% slower on Q8_0 1024 x 6144 at T = 512 (12.5 against
// 11.2 ms, one thread), 0-5% on the other shapes of bench/matmul_bench.cc --shape=qwen35-0.8b.
void Int8RowsAvx512Vnni(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y,
                        int64_t col0) {
  alignas(64) float out[kTileRows * kTilePanels * kActPanel] = {};
  alignas(64) float yb[kTilePanels * kActPanel][kColGroup];
  const int64_t n = w.n;
  const int64_t nb = n / w.group;
  const bool k = a.super == kQkK;
  const int tile_panels = k ? kPanelsOf<true> : kPanelsOf<false>;
  for (int64_t p0 = 0; p0 < a.panels; p0 += tile_panels) {
    // No std::min here: library templates instantiated in this file could be linked into
    // baseline code (see quants.h).
    const int np = static_cast<int>(a.panels - p0 >= tile_panels ? tile_panels : a.panels - p0);
    const int64_t t0 = p0 * kActPanel;
    const int64_t tn = a.rows - t0 < np * kActPanel ? a.rows - t0 : np * kActPanel;
    for (int64_t c0 = 0; c0 < w.rows; c0 += kColGroup) {
      const int cols = static_cast<int>(w.rows - c0 < kColGroup ? w.rows - c0 : kColGroup);
      for (int64_t t = 0; t < tn; ++t) {
        const float* line = y.data + (t0 + t) * y.stride + col0 + c0;
        _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(line + cols - 1), _MM_HINT_T0);
      }
      for (int64_t r0 = c0; r0 < c0 + cols; r0 += kTileRows) {
        const int valid = static_cast<int>(c0 + cols - r0 < kTileRows ? c0 + cols - r0 : kTileRows);
        const TileArgs args{w.q + r0 * n,
                            w.scale + r0 * nb,
                            w.minc + r0 * nb,
                            w.wsum + r0 * nb,
                            a.q + p0 * n * kActPanel,
                            a.d + p0 * nb * kActPanel,
                            a.dsum + p0 * nb * kActPanel,
                            n,
                            nb,
                            out};
        if (k && w.group == 16) {
          // Q6_K: no min.
          TileAny<16, false, true>(valid, np, args);
        } else if (k) {
          if (w.has_min) {
            TileAny<32, true, true>(valid, np, args);
          } else {
            TileAny<32, false, true>(valid, np, args);
          }
        } else if (w.has_min) {
          TileAny<32, true, false>(valid, np, args);
        } else {
          TileAny<32, false, false>(valid, np, args);
        }
        // Rows past `valid` carry an earlier tile's values into columns past `cols`, never
        // stored.
        TransposeTile(out, np, yb, static_cast<int>(r0 - c0));
      }
      const __mmask16 lo = cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
      const __mmask16 hi = cols <= 16 ? 0 : static_cast<__mmask16>((1u << (cols - 16)) - 1);
      for (int64_t t = 0; t < tn; ++t) {
        float* dst = y.data + (t0 + t) * y.stride + col0 + c0;
        _mm512_mask_storeu_ps(dst, lo, _mm512_load_ps(yb[t]));
        if (hi != 0) _mm512_mask_storeu_ps(dst + 16, hi, _mm512_load_ps(yb[t] + 16));
      }
    }
  }
}

}  // namespace deltaserve::kernels::internal
