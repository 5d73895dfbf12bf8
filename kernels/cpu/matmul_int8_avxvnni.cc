// AVX-VNNI kernels of the int8-activation path (matmul_int8.h): the fused decode and batch
// products (matmul_int8_avx2_fused.h) and the prefill tiles (matmul_int8_avx2_tiles.h) with the
// VEX-encoded vpdpbusd / vpdpwssd on ymm (Alder Lake and later Intel client cores, Zen 5). Built
// with -mavx2 -mfma -mf16c -mavxvnni and no AVX-512 flag, so the compiler emits the VEX forms
// that these CPUs run (quants.cmake); called only at the avx_vnni level (cpu_features.h). The
// weight-row decoder and the activation quantizer are the AVX2 level's.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/matmul_int8_avx2_fused.h"
#include "kernels/cpu/matmul_int8_avx2_tiles.h"

#if defined(__AVX512F__) || !defined(__AVXVNNI__)
#error "matmul_int8_avxvnni.cc must be built with -mavxvnni and without AVX-512 (quants.cmake)"
#endif

namespace deltaserve::kernels::internal {
namespace {

// The integer dot products of matmul_int8_avx2_types.h with AVX-VNNI: the same sums as
// Avx2Ops, without its int16 step (so without its range limit).
struct VnniOps {
  static constexpr bool kVnni = true;
  static __m256i DotBytes(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_avx_epi32(acc, u, s);
  }
  static __m256i DotWords(__m256i acc, __m256i a, __m256i b) {
    return _mm256_dpwssd_avx_epi32(acc, a, b);
  }
};

template <int G, bool kMin>
struct VnniTileOf {
  template <int R, int H>
  static void Run(const Tile256Args& t) {
    TileVnni<VnniOps, G, kMin, R, H>(t);
  }
};

// Tiles of 3 weight rows x 2 halves (one panel): 6 int32 and 6 f32 accumulators and the 2
// activation vectors in the 16 ymm registers.
constexpr int kVnniTileRows = 3;
constexpr int kVnniTileHalves = 2;

template <int G, bool kMin>
void RowsWith(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y, int64_t col0) {
  Int8Rows256<VnniTileOf<G, kMin>, kVnniTileRows, kVnniTileHalves>(w, a, y, col0);
}

}  // namespace

bool Int8FusedAvxVnni(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                      const Int8FlatRow& x, float* y) {
  return Int8Fused256<VnniOps>(type, w, row_bytes, rows, x, y);
}

bool Int8FusedBatchAvxVnni(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                           const Int8FlatBatch& x, float* y, int64_t y_stride) {
  return Int8FusedBatch256<VnniOps>(type, w, row_bytes, rows, x, y, y_stride);
}

void Int8RowsAvxVnni(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y, int64_t col0) {
  if (w.group == 16) return RowsWith<16, false>(w, a, y, col0);  // Q6_K: no min
  if (w.has_min) return RowsWith<32, true>(w, a, y, col0);
  RowsWith<32, false>(w, a, y, col0);
}

}  // namespace deltaserve::kernels::internal
