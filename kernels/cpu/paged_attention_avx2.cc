// The AVX2 work item of the paged attention kernel for f16 K/V (paged_attention_tiles.h), the
// 8-lane counterpart of paged_attention_avx512.cc: prefill blocks, decode and verification
// batches read each kv head's f16 keys and values in place from the head-major pages and convert
// them 8 at a time (F16C vcvtph2ps) inside the score and p·V tiles, instead of decoding every
// tile into an f32 copy first. Compiled with AVX2, FMA and F16C flags (ops.cmake); paged_attention.cc
// calls it only at the avx2 and avx_vnni levels.
#include <immintrin.h>

#include "kernels/cpu/paged_attention_tiles.h"

namespace deltaserve::kernels::internal {
namespace {

// A K/V source reading f16 rows in place.
struct F16Rows {
  using T = uint16_t;
  static constexpr bool kDecodes = false;
  DELTASERVE_ALWAYS_INLINE static void Load(VecF<8>& out, const uint16_t* src) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    std::memcpy(&out, &x, sizeof(out));
  }
};

}  // namespace

void AttendItemF16Avx2(const AttentionProblem& p, int64_t t0, int64_t nt, int64_t kvh,
                       int64_t key_begin, int64_t key_end, AttentionScratch& s, float* partial) {
  AttendItemBody<8, F16Rows, F16Rows>(p, t0, nt, kvh, key_begin, key_end, s, partial);
}

}  // namespace deltaserve::kernels::internal
