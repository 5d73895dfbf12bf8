// AVX2 kernels of the int8-activation path (matmul_int8.h): the fused decode and batch products
// (matmul_int8_avx2_fused.h), the prefill tiles (matmul_int8_avx2_tiles.h) and the weight-row
// decoder (matmul_int8_decode.h), with vpmaddubsw + vpmaddwd as the integer dot product. Built
// with -mavx2 -mfma -mf16c (quants.cmake); called only at the avx2 level and above
// (cpu_features.h). The avx_vnni level shares the decoder and the activation quantizer
// (matmul_int8_avx2_quantize.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/matmul_int8_avx2_fused.h"
#include "kernels/cpu/matmul_int8_avx2_tiles.h"
#include "kernels/cpu/matmul_int8_decode.h"

namespace deltaserve::kernels::internal {
namespace {

// The integer dot products of matmul_int8_avx2_types.h on plain AVX2.
struct Avx2Ops {
  static constexpr bool kVnni = false;
  // acc + the sums of each 4 consecutive u8 x s8 products (no pair may pass int16: the callers'
  // ranges keep them below).
  static __m256i DotBytes(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  // acc + the sums of each 2 consecutive int16 products.
  static __m256i DotWords(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
  }
};

template <int G, bool kMin, int kOffset, bool kSign, int kSpan>
struct Avx2TileOf {
  template <int R, int H>
  static void Run(const Tile256Args& t) {
    TileAvx2<G, kMin, kOffset, kSign, kSpan, R, H>(t);
  }
};

// Tiles of 2 weight rows x 2 halves (one panel): 4 int16 and up to 4 int32 block accumulators,
// 4 f32 ones and the 2 activation vectors in the 16 ymm registers.
constexpr int kAvx2TileRows = 2;
constexpr int kAvx2TileHalves = 2;

template <int G, bool kMin, int kOffset, bool kSign, int kSpan>
void RowsWith(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y, int64_t col0) {
  Int8Rows256<Avx2TileOf<G, kMin, kOffset, kSign, kSpan>, kAvx2TileRows, kAvx2TileHalves>(w, a, y,
                                                                                          col0);
}

}  // namespace

bool Int8FusedAvx2(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                   const Int8FlatRow& x, float* y) {
  return Int8Fused256<Avx2Ops>(type, w, row_bytes, rows, x, y);
}

bool Int8FusedBatchAvx2(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                        const Int8FlatBatch& x, float* y, int64_t y_stride) {
  return Int8FusedBatch256<Avx2Ops>(type, w, row_bytes, rows, x, y, y_stride);
}

bool Int8Fused256Has(WeightType type) { return Int8Group(type) != 0; }

bool DecodeInt8RowsAvx2(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                        int64_t n, int g, int8_t* q, float* scale, float* minc, int32_t* wsum) {
  return DecodeInt8RowsSimdImpl(type, w, row_bytes, rows, n, g, q, scale, minc, wsum);
}

// Int16 sums over kSpan steps (4 values each) stay below 2^15: 8 steps of 4-bit weights
// (2 * 15 * 127 a pair), 4 of 5-bit, 2 of 6-bit, 1 of |Q8_0| <= 128.
void Int8RowsAvx2(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y, int64_t col0) {
  switch (w.type) {
    case WeightType::kQ4_0:
      return RowsWith<32, false, 8, false, 8>(w, a, y, col0);
    case WeightType::kQ4_1:
    case WeightType::kQ4_K:
      return RowsWith<32, true, 0, false, 8>(w, a, y, col0);
    case WeightType::kQ5_0:
      return RowsWith<32, false, 16, false, 4>(w, a, y, col0);
    case WeightType::kQ5_1:
    case WeightType::kQ5_K:
      return RowsWith<32, true, 0, false, 4>(w, a, y, col0);
    case WeightType::kQ6_K:
      return RowsWith<16, false, 32, false, 2>(w, a, y, col0);
    case WeightType::kQ8_0:
      return RowsWith<32, false, 0, true, 1>(w, a, y, col0);
    default:
      return;
  }
}

}  // namespace deltaserve::kernels::internal
