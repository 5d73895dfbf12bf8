// AVX2 activation quantizer of the int8 path (QuantizeInt8PanelsAvx2 for the packed prefill
// panels, QuantizeInt8FlatAvx2 for the flat rows of the fused kernels), bit-identical to the
// plain C++ one in matmul_int8.cc, as the AVX-512 one (matmul_int8_avx512_quantize.cc) is.
// Built with -mavx2 -mfma -mf16c (quants.cmake); runs at the avx2 and avx_vnni levels.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/quants.h"

namespace deltaserve::kernels::internal {
namespace {

// Copies the 4-byte groups of q (count bytes) to their places in a panel row: group j at
// dst + j * 4 * kActPanel.
inline void PackGroups(const uint8_t* q, int count, uint8_t* dst) {
  for (int j = 0; j < count / 4; ++j) std::memcpy(dst + j * 4 * kActPanel, q + 4 * j, 4);
}

inline __m256 Abs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float HMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline int32_t HSum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// 32 int32 values (within int8 range, in q[0..3]) as 32 bytes at out, + 128 when kOffset.
template <bool kOffset>
inline void StoreBytes32(const __m256i (&q)[4], uint8_t* out) {
  const __m256i a = _mm256_packs_epi32(q[0], q[1]);  // 0-3 8-11 | 4-7 12-15 (int16)
  const __m256i b = _mm256_packs_epi32(q[2], q[3]);  // 16-19 24-27 | 20-23 28-31
  __m256i v = _mm256_packs_epi16(a, b);              // 0-3 8-11 16-19 24-27 | 4-7 12-15 ...
  v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  if constexpr (kOffset) v = _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), v);
}

// One Q8_K-style super-block of 256 values (QuantizeValues in matmul_int8.cc, the same floats):
// q (+ 128) into qb, the 256 / g block sums into sums, returns d.
template <bool kOffset>
float QuantizeSuperBlock(const float* x, int g, uint8_t* qb, int32_t* sums) {
  __m256 am = _mm256_setzero_ps();
  for (int j = 0; j < 32; ++j) am = _mm256_max_ps(am, Abs(_mm256_loadu_ps(x + 8 * j)));
  const float amax = HMax(am);
  if (amax == 0.0f) {
    std::memset(qb, kOffset ? 128 : 0, kQkK);
    for (int b = 0; b < kQkK / g; ++b) sums[b] = 0;
    return 0.0f;
  }
  // The first value of largest magnitude, signed, as the scalar loop's strict > keeps it.
  float max = 0.0f;
  const __m256 amax_v = _mm256_set1_ps(amax);
  for (int j = 0; j < 32; ++j) {
    const int m =
        _mm256_movemask_ps(_mm256_cmp_ps(Abs(_mm256_loadu_ps(x + 8 * j)), amax_v, _CMP_EQ_OQ));
    if (m != 0) {
      max = x[8 * j + __builtin_ctz(static_cast<unsigned>(m))];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m256 is = _mm256_set1_ps(iscale);
  const __m256i top = _mm256_set1_epi32(127);
  int32_t s16[16];
  for (int j = 0; j < 8; ++j) {
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      q[k] = _mm256_min_epi32(
          _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * j + 8 * k))), top);
    }
    s16[2 * j] = HSum(_mm256_add_epi32(q[0], q[1]));
    s16[2 * j + 1] = HSum(_mm256_add_epi32(q[2], q[3]));
    StoreBytes32<kOffset>(q, qb + 32 * j);
  }
  for (int b = 0; b < kQkK / g; ++b) {
    sums[b] = g == 16 ? s16[b] : s16[2 * b] + s16[2 * b + 1];
  }
  return 1.0f / iscale;
}

// One Q8_0-style block of 32 values: q (+ 128) into qb, the block sum into *sum, returns d.
template <bool kOffset>
float QuantizeBlock32(const float* x, uint8_t* qb, int32_t* sum) {
  __m256 v[4];
  __m256 am = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    am = _mm256_max_ps(am, Abs(v[k]));
  }
  const float amax = HMax(am);
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const __m256 idv = _mm256_set1_ps(id);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], idv));
  *sum = HSum(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
  StoreBytes32<kOffset>(q, qb);
  return _cvtsh_ss(_cvtss_sh(amax / 127.0f, 0));
}

}  // namespace

void QuantizeInt8PanelsAvx2(bool k_quant, const Mat& x, const Int8ActivationsOut& a, int64_t p0,
                            int64_t p1) {
  const int64_t n = a.n;
  const int g = a.group;
  const int64_t nb = n / g;
  const int super = k_quant ? kQkK : kQk;
  alignas(32) uint8_t qb[kQkK];
  int32_t sums[kQkK / 16];
  // Column chunks outer, rows inner, as QuantizeInt8PanelsAvx512 (the 16 rows of a chunk fill
  // the same 64-byte lines while they are in L1).
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
            d = QuantizeSuperBlock<true>(x.data + t * x.stride + k0, g, qb, sums);
          } else {
            d = QuantizeBlock32<true>(x.data + t * x.stride + k0, qb, sums);
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

void QuantizeInt8FlatAvx2(bool k_quant, const Mat& x, const Int8FlatOut& a, int64_t t0,
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
        a.qsum[t * nb + k0 / g + i] = sums[i];
      }
    }
  }
}

}  // namespace deltaserve::kernels::internal
