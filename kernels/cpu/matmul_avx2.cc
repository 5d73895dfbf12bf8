// AVX2 leaf kernels (built with -mavx2 -mfma -mf16c, see quants.cmake): 8 f32 lanes. Called
// only when IsaSupported(kAvx2).
#include <immintrin.h>

#include "kernels/cpu/matmul_simd.h"

namespace deltaserve::kernels::internal {
namespace {

// Lane traits for matmul_simd.h.
struct V256 {
  static constexpr int kLanes = 8;
  // 4 x 3 accumulators + 3 x vectors + 1 weight vector = the 16 ymm registers.
  static constexpr int kMaxNx = 3;
  using F = __m256;
  using I = __m256i;

  static F Zero() { return _mm256_setzero_ps(); }
  static F Set1(float v) { return _mm256_set1_ps(v); }
  static F Load(const float* p) { return _mm256_loadu_ps(p); }
  static F LoadN(const float* p, int n) {
    const __m256i mask =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_ps(p, mask);
  }
  static void Store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Add(F a, F b) { return _mm256_add_ps(a, b); }
  static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static float Sum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static F ToF(I v) { return _mm256_cvtepi32_ps(v); }

  // 8 bytes / halves widened to 8 lanes.
  static I U8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static I I8(const int8_t* p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static F Half(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F Bf16(const uint16_t* p) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }

  static I And(I a, int m) { return _mm256_and_si256(a, _mm256_set1_epi32(m)); }
  static I Or(I a, I b) { return _mm256_or_si256(a, b); }
  static I AddI(I a, int v) { return _mm256_add_epi32(a, _mm256_set1_epi32(v)); }
  template <int k>
  static I Shl(I a) {
    return _mm256_slli_epi32(a, k);
  }
  template <int k>
  static I Shr(I a) {
    return _mm256_srli_epi32(a, k);
  }
  // a | (b & m).
  static I OrAnd(I a, I b, int m) { return Or(a, And(b, m)); }
  // Lane i = bit i of `bits`.
  static I Bits(uint32_t bits) {
    const __m256i shifted = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(bits)),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_and_si256(shifted, _mm256_set1_epi32(1));
  }
  // Every lane shifted right by a run-time count.
  static I SrlN(I v, int count) { return _mm256_srl_epi32(v, _mm_cvtsi32_si128(count)); }
  // Lane i = bit b of lane i of v.
  static I BitOf(I v, int b) {
    return _mm256_and_si256(_mm256_srl_epi32(v, _mm_cvtsi32_si128(b)), _mm256_set1_epi32(1));
  }
};

}  // namespace

const MatMulKernels& Avx2Kernels() { return Kernels<V256>::kTable; }

}  // namespace deltaserve::kernels::internal
