// The AVX-512 work item of the paged attention kernel for f16 K/V (paged_attention_tiles.h):
// decode and short verification batches read each kv head's f16 keys and values in place from
// the head-major pages and convert them 16 at a time inside the score and p·V tiles. Compiled
// with AVX-512 flags (ops.cmake); paged_attention.cc calls it only when the CPU has AVX-512.
#include <immintrin.h>

#include "kernels/cpu/paged_attention_tiles.h"

namespace deltaserve::kernels::internal {
namespace {

// A K/V source reading f16 rows in place.
struct F16Rows {
  using T = uint16_t;
  static constexpr bool kDecodes = false;
  DELTASERVE_ALWAYS_INLINE static void Load(VecF<16>& out, const uint16_t* src) {
    const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    std::memcpy(&out, &x, sizeof(out));
  }
};

}  // namespace

// GCC 12's _mm512_cvtph_ps starts from an undefined vector, which -Wmaybe-uninitialized flags.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
void AttendItemF16Avx512(const AttentionProblem& p, int64_t t0, int64_t nt, int64_t kvh,
                         int64_t key_begin, int64_t key_end, AttentionScratch& s, float* partial) {
  AttendItemBody<16, F16Rows, F16Rows>(p, t0, nt, kvh, key_begin, key_end, s, partial);
}
#pragma GCC diagnostic pop

}  // namespace deltaserve::kernels::internal
