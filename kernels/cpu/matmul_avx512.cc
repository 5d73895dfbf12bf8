// AVX-512 leaf kernels (built with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512bf16
// -mfma -mf16c, see quants.cmake): 16 f32 lanes. Called only when IsaSupported(kAvx512).
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 flags the deliberately undefined pass-through operand (_mm512_undefined_ps) of its own
// avx512fintrin.h once it is inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/matmul_simd.h"

namespace deltaserve::kernels::internal {
namespace {

// Lane traits for matmul_simd.h.
struct V512 {
  static constexpr int kLanes = 16;
  // 4 x 4 accumulators + 4 x vectors + 1 weight vector fit the 32 zmm registers.
  static constexpr int kMaxNx = 4;
  using F = __m512;
  using I = __m512i;

  static F Zero() { return _mm512_setzero_ps(); }
  static F Set1(float v) { return _mm512_set1_ps(v); }
  static F Load(const float* p) { return _mm512_loadu_ps(p); }
  static F LoadN(const float* p, int n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  static void Store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Add(F a, F b) { return _mm512_add_ps(a, b); }
  static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static float Sum(F v) { return _mm512_reduce_add_ps(v); }
  static F ToF(I v) { return _mm512_cvtepi32_ps(v); }

  // 16 bytes / halves widened to 16 lanes.
  static I U8(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I I8(const int8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F Half(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F Bf16(const uint16_t* p) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }

  static I And(I a, int m) { return _mm512_and_si512(a, _mm512_set1_epi32(m)); }
  static I Or(I a, I b) { return _mm512_or_si512(a, b); }
  static I AddI(I a, int v) { return _mm512_add_epi32(a, _mm512_set1_epi32(v)); }
  template <int k>
  static I Shl(I a) {
    return _mm512_slli_epi32(a, k);
  }
  template <int k>
  static I Shr(I a) {
    return _mm512_srli_epi32(a, k);
  }
  // a | (b & m) in one vpternlogd.
  static I OrAnd(I a, I b, int m) {
    return _mm512_ternarylogic_epi32(a, b, _mm512_set1_epi32(m), 0xF8);
  }
  // Lane i = bit i of `bits` (a variable shift: faster here than a masked broadcast).
  static I Bits(uint32_t bits) {
    const __m512i shifted =
        _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(bits)),
                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    return _mm512_and_si512(shifted, _mm512_set1_epi32(1));
  }
  // Every lane shifted right by a run-time count.
  static I SrlN(I v, int count) { return _mm512_srl_epi32(v, _mm_cvtsi32_si128(count)); }
  // Lane i = bit b of lane i of v.
  static I BitOf(I v, int b) {
    return _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(b)), _mm512_set1_epi32(1));
  }
};

}  // namespace

const MatMulKernels& Avx512Kernels() { return Kernels<V512>::kTable; }

}  // namespace deltaserve::kernels::internal
