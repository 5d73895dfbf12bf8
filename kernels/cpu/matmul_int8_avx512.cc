// AVX-512 VNNI micro-kernel of the int8-activation path (matmul_int8.h), built with the flags
// of matmul_avx512.cc; called only when the CPU has AVX-512 F/BW/VL and VNNI.
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
//
// The activation quantizer (QuantizeInt8PanelsAvx512) is here too: AVX-512 F/BW only.
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

// The multi-row kernels read R rows side by side, R streams advancing 144 / 210 bytes a step,
// which the hardware prefetchers follow poorly: without help, Q6_K 1024 x 151936 on one thread
// took 11.4 ms against 4.4 ms for the single-row kernel (bench/matmul_bench.cc). So each block
// read also prefetches the block kPrefetchBytes ahead (rounded up to whole rows). A/B on one
// thread, weights from DRAM, p10 of 300 calls: Q4_K 1024 x 6144 0.104 ms at 8 KiB, 0.110 at
// 6 KiB, 0.098 at 10 KiB, 0.099 at 16 rows (9 KiB); Q6_K 0.162 / 0.155 / 0.176 / 0.176; T1 and
// NTA hints no better than T0.
constexpr size_t kPrefetchBytes = 8192;

// Bytes from a block to the one to prefetch: whole rows, at least the four being read.
inline size_t PrefetchDistance(size_t row_bytes) {
  const size_t rows = (kPrefetchBytes + row_bytes - 1) / row_bytes;
  return (rows < 4 ? 4 : rows) * row_bytes;
}

// Prefetches the lines of the kBytes-byte block at p + ahead (every line, as consecutive calls
// walk contiguous blocks).
template <int kBytes>
inline void PrefetchAhead(const void* p, size_t ahead) {
  const char* q = static_cast<const char*>(p) + ahead;
  for (int o = 0; o < kBytes; o += 64) _mm_prefetch(q + o, _MM_HINT_T0);
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

// Rows in blocks of four through Kernel<4>::Run, the 1 .. 3 left through Kernel<left>::Run.
template <template <int> class Kernel>
void RowsByFour(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t nsb, const Int8FlatRow& x,
                float* y) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) Kernel<4>::Run(w + r * row_bytes, row_bytes, nsb, x, y + r);
  switch (rows - r) {
    case 3:
      Kernel<3>::Run(w + r * row_bytes, row_bytes, nsb, x, y + r);
      break;
    case 2:
      Kernel<2>::Run(w + r * row_bytes, row_bytes, nsb, x, y + r);
      break;
    case 1:
      Kernel<1>::Run(w + r * row_bytes, row_bytes, nsb, x, y + r);
      break;
    default:
      break;
  }
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

// --- fused batch products (Int8FusedBatchAvx512Vnni) ---------------------------------------
//
// One weight row at a time, its blocks decoded in registers once per super-block (block pair
// for Q8_0) and applied to a block of T <= kBatchTokens activation rows, whose T accumulators
// (two for the K-quants) stay in registers across the row. Per (row, token) the arithmetic is
// that of the one-row kernels above, so each output equals theirs bit for bit: the integer sums
// are exact whatever the order, and the f32 operations are the same ones in the same order. A
// row is streamed start to end, as one hardware-prefetched stream, plus the software prefetch of
// the one-row kernels; it stays in L1 while further token blocks run over it. A (token,
// super-block) costs 4 vpmaddubsw + 4 vpdpwssd + 3 f32 FMA-pipe operations for Q4_K / Q6_K:
// Q4_K 1024 x 3584 (weights in L3, 2 threads) took 0.030 / 0.048 / 0.073 / 0.126 / 0.21 ms at
// 1 / 2 / 4 / 8 / 16 tokens, against 0.030 / 0.056 / 0.225 / 0.222 / 0.229 through the
// one-row kernel per token (2) and MultiplyInt8 (4 and more) before.

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
};

template <int T>
inline TokenBlock<T> TokensOf(const Int8FlatBatch& x, int64_t t0) {
  TokenBlock<T> tb;
  const int64_t nb = x.n / x.group;
  for (int t = 0; t < T; ++t) {
    tb.q[t] = x.q + (t0 + t) * x.n;
    tb.d[t] = x.d + (t0 + t) * nb;
    tb.dsum[t] = x.dsum + (t0 + t) * nb;
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

// One Q8_0 row times T tokens, as DotQ8_0 (whose reduction and odd last block it repeats).
template <int T>
void BatchQ8_0Row(const BlockQ8_0* b, int64_t nb, size_t /*ahead*/, const TokenBlock<T>& x,
                  float* y, int64_t y_stride) {
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m512i wv = Join(Load256(reinterpret_cast<const uint8_t*>(b[i].qs)),
                            Load256(reinterpret_cast<const uint8_t*>(b[i + 1].qs)));
    const __mmask64 neg = _mm512_movepi8_mask(wv);
    const __m512i aw = _mm512_abs_epi8(wv);
    // The lanes of x.d * w.d, as DotQ8_0's scalar products.
    const __m512 wd = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(_cvtsh_ss(b[i].d)),
                                           _mm512_set1_ps(_cvtsh_ss(b[i + 1].d)));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512i av = _mm512_loadu_si512(x.q[t] + i * kQk);
      const __m512i sa = _mm512_mask_sub_epi8(av, neg, zero, av);
      const __m512i s = _mm512_dpbusd_epi32(zero, aw, sa);
      const __m512 sc = _mm512_mul_ps(
          _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(x.d[t][i]), _mm512_set1_ps(x.d[t][i + 1])),
          wd);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    float sum = _mm512_reduce_add_ps(acc[t]);
    if (i < nb) {
      const __m256i wv = Load256(reinterpret_cast<const uint8_t*>(b[i].qs));
      const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q[t] + i * kQk));
      const __m256i sa = _mm256_sign_epi8(av, wv);
      const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wv), sa);
      alignas(32) int32_t v[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(v), s);
      int32_t si = 0;
      for (int k = 0; k < 8; ++k) si += v[k];
      sum += static_cast<float>(si) * (x.d[t][i] * _cvtsh_ss(b[i].d));
    }
    y[t * y_stride] = sum;
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
      RowsByFour<Q4KRows>(w, row_bytes, rows, x.n / kQkK, x, y);
      return true;
    case WeightType::kQ5_K:
      for (int64_t r = 0; r < rows; ++r) {
        y[r] = DotK45<true>(reinterpret_cast<const BlockQ5_K*>(w + r * row_bytes), x.n / kQkK, x);
      }
      return true;
    case WeightType::kQ6_K:
      RowsByFour<Q6KRows>(w, row_bytes, rows, x.n / kQkK, x, y);
      return true;
    default:
      return false;
  }
}

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

namespace {

// Copies the 4-byte groups of q (count bytes) to their places in a panel row: group j at
// dst + j * 4 * kActPanel.
inline void PackGroups(const uint8_t* q, int count, uint8_t* dst) {
  for (int j = 0; j < count / 4; ++j) std::memcpy(dst + j * 4 * kActPanel, q + 4 * j, 4);
}

// 16 int32 values (within int8 range) as bytes + 128.
// With kOffset false: the signed bytes as they are (the flat rows of the fused kernels).
template <bool kOffset = true>
inline void StoreOffsetBytes(__m512i v, uint8_t* q) {
  __m128i b = _mm512_cvtepi32_epi8(v);
  if constexpr (kOffset) b = _mm_xor_si128(b, _mm_set1_epi8(static_cast<char>(0x80)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), b);
}

inline __m512 Abs(__m512 v) { return _mm512_abs_ps(v); }

// One Q8_K-style super-block of 256 values (QuantizeValues in matmul_int8.cc, the same floats):
// q (+ 128) into qb, the 256 / g block sums into sums, returns d.
template <bool kOffset = true>
float QuantizeSuperBlock(const float* x, int g, uint8_t* qb, int32_t* sums) {
  __m512 v[16];
  __m512 am = _mm512_setzero_ps();
  for (int j = 0; j < 16; ++j) {
    v[j] = _mm512_loadu_ps(x + 16 * j);
    am = _mm512_max_ps(am, Abs(v[j]));
  }
  const float amax = _mm512_reduce_max_ps(am);
  if (amax == 0.0f) {
    std::memset(qb, kOffset ? 128 : 0, kQkK);
    for (int b = 0; b < kQkK / g; ++b) sums[b] = 0;
    return 0.0f;
  }
  // The first value of largest magnitude, signed, as the scalar loop's strict > keeps it.
  float max = 0.0f;
  const __m512 amax_v = _mm512_set1_ps(amax);
  for (int j = 0; j < 16; ++j) {
    const __mmask16 m = _mm512_cmp_ps_mask(Abs(v[j]), amax_v, _CMP_EQ_OQ);
    if (m != 0) {
      max = x[16 * j + __builtin_ctz(m)];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m512 is = _mm512_set1_ps(iscale);
  const __m512i top = _mm512_set1_epi32(127);
  int32_t s16[16];
  for (int j = 0; j < 16; ++j) {
    const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(is, v[j])), top);
    s16[j] = _mm512_reduce_add_epi32(q);
    StoreOffsetBytes<kOffset>(q, qb + 16 * j);
  }
  for (int b = 0; b < kQkK / g; ++b) {
    sums[b] = g == 16 ? s16[b] : s16[2 * b] + s16[2 * b + 1];
  }
  return 1.0f / iscale;
}

// One Q8_0-style block of 32 values: q (+ 128) into qb, the block sum into *sum, returns d.
template <bool kOffset = true>
float QuantizeBlock32(const float* x, uint8_t* qb, int32_t* sum) {
  const __m512 v0 = _mm512_loadu_ps(x);
  const __m512 v1 = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(Abs(v0), Abs(v1)));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const __m512 idv = _mm512_set1_ps(id);
  const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, idv));
  const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, idv));
  *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  StoreOffsetBytes<kOffset>(q0, qb);
  StoreOffsetBytes<kOffset>(q1, qb + 16);
  return _cvtsh_ss(_cvtss_sh(amax / 127.0f, 0));
}

}  // namespace

void QuantizeInt8PanelsAvx512(bool k_quant, const Mat& x, const Int8ActivationsOut& a, int64_t p0,
                              int64_t p1) {
  const int64_t n = a.n;
  const int g = a.group;
  const int64_t nb = n / g;
  const int super = k_quant ? kQkK : kQk;
  alignas(64) uint8_t qb[kQkK];
  int32_t sums[kQkK / 16];
  // Column chunks outer, rows inner: the 16 rows of a chunk fill the same 64-byte lines while
  // they are in L1 (rows outer ran 4x slower at n = 3584, whose panel outgrows L1).
  for (int64_t p = p0; p < p1; ++p) {
    uint8_t* panel = a.q + p * n * kActPanel;
    for (int64_t c0 = 0; c0 < n; c0 += kQkK) {
      const int64_t c1 = n - c0 < kQkK ? n : c0 + kQkK;
      for (int lane = 0; lane < kActPanel; ++lane) {
        const int64_t t = p * kActPanel + lane;
        for (int64_t k0 = c0; k0 < c1; k0 += super) {
          float* d_out = a.d + p * nb * kActPanel + k0 / g * kActPanel + lane;
          float* s_out = a.dsum + p * nb * kActPanel + k0 / g * kActPanel + lane;
          float d = 0.0f;
          if (t >= x.rows) {
            std::memset(qb, 128, static_cast<size_t>(super));
            for (int i = 0; i < super / g; ++i) sums[i] = 0;
          } else if (k_quant) {
            d = QuantizeSuperBlock(x.data + t * x.stride + k0, g, qb, sums);
          } else {
            d = QuantizeBlock32(x.data + t * x.stride + k0, qb, sums);
          }
          PackGroups(qb, super, panel + k0 * kActPanel + lane * 4);
          for (int i = 0; i < super / g; ++i) {
            d_out[i * kActPanel] = d;
            s_out[i * kActPanel] = d * static_cast<float>(sums[i]);
          }
        }
      }
    }
  }
}

void QuantizeInt8FlatAvx512(bool k_quant, const Mat& x, const Int8FlatOut& a, int64_t t0,
                            int64_t t1) {
  const int64_t n = a.n;
  const int g = a.group;
  const int64_t nb = n / g;
  const int super = k_quant ? kQkK : kQk;
  int32_t sums[kQkK / 16];
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t k0 = 0; k0 < n; k0 += super) {
      auto* q = reinterpret_cast<uint8_t*>(a.q + t * n + k0);
      const float* xt = x.data + t * x.stride + k0;
      const float d =
          k_quant ? QuantizeSuperBlock<false>(xt, g, q, sums) : QuantizeBlock32<false>(xt, q, sums);
      for (int i = 0; i < super / g; ++i) {
        a.d[t * nb + k0 / g + i] = d;
        a.dsum[t * nb + k0 / g + i] = d * static_cast<float>(sums[i]);
      }
    }
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
