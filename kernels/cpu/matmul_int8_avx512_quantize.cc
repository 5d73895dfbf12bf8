// AVX-512 F/BW activation quantizer of the int8 path (QuantizeInt8PanelsAvx512 for the
// packed prefill panels, QuantizeInt8FlatAvx512 for the flat rows of the fused kernels),
// bit-identical to the plain C++ one in matmul_int8.cc. Built with the AVX-512 flags of
// quants.cmake; called only when the CPU has AVX-512 F and BW.
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
        a.qsum[t * nb + k0 / g + i] = sums[i];
      }
    }
  }
}

}  // namespace deltaserve::kernels::internal
