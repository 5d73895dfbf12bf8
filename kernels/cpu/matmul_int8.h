// Internal to the CPU matrix products: the int8-activation path (matmul.h,
// MatMulActivations::kInt8). The activations of one MatMul call are quantized once, the way
// llama.cpp does before its integer dot products (Q8_0 blocks of 32 for the legacy block types,
// Q8_K super-blocks of 256 for the K-quants), and packed for the integer micro-kernel; weight
// rows are decoded to int8 plus per-block f32 scales, so every product is an exact int32 sum per
// block, scaled once per block in f32.
//
// Layouts (G = Int8Group(type), 32 or 16 values per scaled block; panels of kActPanel rows):
//   activations  q    [panel][n / 4][kActPanel][4]  u8 = int8 value + 128
//                d    [panel][n / G][kActPanel]     f32 block scale (Q8_0: f16-rounded)
//                dsum [panel][n / G][kActPanel]     d * (sum of the block's int8 values)
//   weight rows  q    [row][n]                      int8, x = scale * q + minc
//                scale, minc [row][n / G]           f32; minc is zero except for K-quant mins
//                wsum [row][n / G]                  int32 sum of the block's q
// so that  sum_k w[k] * x[k] = sum_b scale_b * d_b * (sum_k (q_a + 128) * q_w - 128 * wsum_b)
//                               + minc_b * dsum_b.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"

namespace deltaserve::kernels::internal {

// Activation rows per packed panel: the 16 int32 lanes of one AVX-512 register.
inline constexpr int kActPanel = 16;
// Weight rows decoded together (one task's chunk); every chunk streams all activation panels.
// 32 rather than 16: at 2,048 tokens (activations beyond L2) 16 rows ran 4% slower, 64 rows 2%
// faster than 32 but with half the tasks to balance.
inline constexpr int kInt8ChunkRows = 32;

// Values per scaled block of the int8 path for `type`: 32 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K), 16 (Q6_K), or 0 when the type has none (F32/F16/BF16 keep the f32 path).
int Int8Group(WeightType type);

// Quantized, packed activations as the kernels read them (plain pointers: the ISA files use no
// library templates, see quants.h).
struct Int8ActivationsView {
  int64_t rows = 0;
  int64_t n = 0;
  int group = 0;
  int super = 0;  // values per activation scale d: 32 (Q8_0-style) or 256 (Q8_K-style)
  int64_t panels = 0;
  const uint8_t* q = nullptr;
  const float* d = nullptr;
  const float* dsum = nullptr;
};

// One call's activations, quantized and packed (layouts above). Reused between calls.
struct Int8Activations {
  int64_t rows = 0;    // activation rows (the last panel is zero-padded)
  int64_t n = 0;       // values per row
  int group = 0;       // G
  int super = 0;       // values per scale d: 32, or 256 for the K-quants (d repeated per G)
  int64_t panels = 0;  // ceil(rows / kActPanel)
  std::vector<uint8_t> q;
  std::vector<float> d;
  std::vector<float> dsum;

  Int8ActivationsView View() const {
    return {rows, n, group, super, panels, q.data(), d.data(), dsum.data()};
  }
};

// Sizes `acts` for x under `type` (Int8Group(type) != 0, x.cols % block size == 0).
void PrepareInt8Activations(WeightType type, const Mat& x, Int8Activations& acts);
// Quantizes and packs panels [p0, p1) of x into acts (prepared by PrepareInt8Activations):
// Q8_0-style blocks of 32 (d = f16(amax / 127), q = round(x * 127 / amax)) for the legacy
// types, Q8_K-style blocks of 256 (d = max / -127 with the signed max, q = round(x / d)) for
// the K-quants, as llama.cpp's quantize_row_q8_0 / quantize_row_q8_K.
// Through QuantizeInt8PanelsSimd at level `isa` (the level of the kernel that reads them) when
// it can: the same bytes and floats, bit for bit.
void QuantizeInt8Panels(WeightType type, const Mat& x, Int8Activations& acts, int64_t p0,
                        int64_t p1, CpuIsa isa);

// Writable storage of prepared activations, for the ISA files (which use no library templates).
struct Int8ActivationsOut {
  int64_t n = 0;
  int group = 0;
  uint8_t* q = nullptr;
  float* d = nullptr;
  float* dsum = nullptr;
};

// The implementations of QuantizeInt8Panels: plain C++, AVX2 and AVX-512 F/BW (vectorized over
// the values of a row; on Zen 5 0.2-0.4 ns a value against 1.1-1.5 for the plain one).
// k_quant selects the Q8_K-style blocks of 256.
void QuantizeInt8PanelsScalar(bool k_quant, const Mat& x, const Int8ActivationsOut& a, int64_t p0,
                              int64_t p1);
#if defined(DELTASERVE_HAVE_X86_SIMD)
void QuantizeInt8PanelsAvx2(bool k_quant, const Mat& x, const Int8ActivationsOut& a, int64_t p0,
                            int64_t p1);
void QuantizeInt8PanelsAvx512(bool k_quant, const Mat& x, const Int8ActivationsOut& a, int64_t p0,
                              int64_t p1);
#endif
// The SIMD quantizer of level `isa` (AVX2 for kAvx2 and kAvxVnni, AVX-512 for kAvx512) when this
// build and the CPU have it; false (nothing written) for kScalar or a level the CPU lacks.
bool QuantizeInt8PanelsSimd(CpuIsa isa, bool k_quant, const Mat& x, const Int8ActivationsOut& a,
                            int64_t p0, int64_t p1);

// Weight rows decoded for the int8 kernels (layouts above); views into caller buffers.
struct Int8WeightRows {
  int64_t rows = 0;
  int64_t n = 0;
  int group = 0;
  bool has_min = false;  // minc nonzero somewhere (Q4_1, Q5_1, Q4_K, Q5_K)
  const int8_t* q = nullptr;
  const float* scale = nullptr;
  const float* minc = nullptr;
  const int32_t* wsum = nullptr;
  WeightType type = WeightType::kF32;  // the type decoded (the AVX2 tiles' weight offsets)
};

// Reusable storage for DecodeInt8Rows.
struct Int8WeightBuffer {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<float> minc;
  std::vector<int32_t> wsum;
};

// The decoder proper, one copy per ISA (identical results): fills q [rows][n] and scale /
// minc / wsum [rows][n / g] (minc pre-zeroed); returns has_min.
using Int8DecodeFn = bool (*)(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                              int64_t n, int g, int8_t* q, float* scale, float* minc,
                              int32_t* wsum);
bool DecodeInt8RowsBaseline(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                            int64_t n, int g, int8_t* q, float* scale, float* minc, int32_t* wsum);
#if defined(DELTASERVE_HAVE_X86_SIMD)
bool DecodeInt8RowsAvx2(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                        int64_t n, int g, int8_t* q, float* scale, float* minc, int32_t* wsum);
bool DecodeInt8RowsAvx512(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                          int64_t n, int g, int8_t* q, float* scale, float* minc, int32_t* wsum);
#endif

// Decodes `rows` weight rows (row_bytes apart from w, n values each) of `type` into buf with
// `decode` (the baseline one when null).
Int8WeightRows DecodeInt8Rows(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                              int64_t n, Int8WeightBuffer& buf, Int8DecodeFn decode = nullptr);

// One activation row quantized as above but not packed, for the fused few-row products:
// q [n] int8 (no offset), d and dsum [n / G], qsum [n / G] the integer sums of q per G-block
// (the Q8_0 kernels multiply x by w + 128 and take 128 * qsum off; see DotQ8_0).
struct Int8FlatRow {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const float* dsum = nullptr;
  int64_t n = 0;
  const int32_t* qsum = nullptr;
};

// Storage of the flat rows of one call: row t at q + t * n, d / dsum / qsum + t * (n / G).
struct Int8FlatActivations {
  int64_t n = 0;
  int group = 0;
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<float> dsum;
  std::vector<int32_t> qsum;

  Int8FlatRow Row(int64_t t) const {
    const int64_t nb = n / group;
    return {q.data() + t * n, d.data() + t * nb, dsum.data() + t * nb, n, qsum.data() + t * nb};
  }
};

// Quantizes the rows of x for `type` (Int8Group(type) != 0), as QuantizeInt8Panels, at level
// `isa`.
void QuantizeInt8Flat(WeightType type, const Mat& x, Int8FlatActivations& acts, CpuIsa isa);
// The same in two steps, for quantizing rows in parallel: sizes acts for x, then quantizes rows
// [t0, t1) (through QuantizeInt8FlatSimd at level `isa`: the same bytes and floats).
void PrepareInt8Flat(WeightType type, const Mat& x, Int8FlatActivations& acts);
void QuantizeInt8FlatRows(WeightType type, const Mat& x, Int8FlatActivations& acts, int64_t t0,
                          int64_t t1, CpuIsa isa);

// Writable storage of flat rows, for the ISA files: row t at q + t * n, d / dsum / qsum +
// t * (n / group).
struct Int8FlatOut {
  int64_t n = 0;
  int group = 0;
  int8_t* q = nullptr;
  float* d = nullptr;
  float* dsum = nullptr;
  int32_t* qsum = nullptr;
};
// The implementations of QuantizeInt8FlatRows (rows [t0, t1) of x), plain C++, AVX2 and AVX-512
// F/BW (the same bytes and floats, bit for bit); k_quant selects the Q8_K-style blocks of 256.
// Per call on the 0.8B shapes (16 rows, 2 threads) the plain one took 37-75 us of a 0.1-0.3 ms
// batch product.
void QuantizeInt8FlatScalar(bool k_quant, const Mat& x, const Int8FlatOut& a, int64_t t0,
                            int64_t t1);
#if defined(DELTASERVE_HAVE_X86_SIMD)
void QuantizeInt8FlatAvx2(bool k_quant, const Mat& x, const Int8FlatOut& a, int64_t t0, int64_t t1);
void QuantizeInt8FlatAvx512(bool k_quant, const Mat& x, const Int8FlatOut& a, int64_t t0,
                            int64_t t1);
#endif
// The SIMD flat quantizer of level `isa`, as QuantizeInt8PanelsSimd.
bool QuantizeInt8FlatSimd(CpuIsa isa, bool k_quant, const Mat& x, const Int8FlatOut& a, int64_t t0,
                          int64_t t1);

// The fused few-row product on int8 activations: y[r] = W[r] . x for r < rows, rows row_bytes
// apart from w, each decoded in registers. False (nothing written) for a type it lacks.
using Int8FusedFn = bool (*)(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                             const Int8FlatRow& x, float* y);
#if defined(DELTASERVE_HAVE_X86_SIMD)
bool Int8FusedAvx512Vnni(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                         const Int8FlatRow& x, float* y);
// True when Int8FusedAvx512Vnni handles `type`.
bool Int8FusedAvx512VnniHas(WeightType type);
// The 256-bit ones (matmul_int8_avx2_fused.h): AVX2 and AVX-VNNI, every int8 type (the same
// bits at both levels).
bool Int8FusedAvx2(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                   const Int8FlatRow& x, float* y);
bool Int8FusedAvxVnni(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                      const Int8FlatRow& x, float* y);
// True when the 256-bit fused products (one row and batch) handle `type`: Int8Group(type) != 0.
bool Int8Fused256Has(WeightType type);
#endif

// The activation rows of a fused batch product: row t at q + t * n, d / dsum / qsum +
// t * (n / group), as Int8FlatActivations, but for the AVX-512 kernel's Q4_K with the four
// 32-value sub-blocks of every 128 values in the order 0, 2, 1, 3 (the order a 64-byte load of
// Q4_K qs holds them: low nibbles of two groups, then high nibbles), which
// OrderInt8FlatForBatch makes (qsum, which only Q8_0 reads, stays in the original order).
struct Int8FlatBatch {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const float* dsum = nullptr;
  int64_t n = 0;
  int group = 0;
  int64_t rows = 0;
  const int32_t* qsum = nullptr;
};

// Reorders acts (quantized by QuantizeInt8Flat for `type`) in place for the AVX-512 fused batch
// kernel when `reorder` (only Q4_K moves anything) and returns the view of its first `rows` rows.
Int8FlatBatch OrderInt8FlatForBatch(WeightType type, Int8FlatActivations& acts, int64_t rows,
                                    bool reorder = true);

// The fused batch product: y[t * y_stride + r] = W[r] . x_t for r < rows and t < x.rows, each
// weight block decoded in registers once for up to 8 activation rows. Every output is the one
// Int8FusedFn computes for x_t alone, bit for bit. False (nothing written) for a type it lacks.
using Int8FusedBatchFn = bool (*)(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                                  const Int8FlatBatch& x, float* y, int64_t y_stride);
#if defined(DELTASERVE_HAVE_X86_SIMD)
bool Int8FusedBatchAvx512Vnni(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                              const Int8FlatBatch& x, float* y, int64_t y_stride);
// True when Int8FusedBatchAvx512Vnni handles `type`.
bool Int8FusedBatchAvx512VnniHas(WeightType type);
// The 256-bit ones, in the original order (no OrderInt8FlatForBatch), every int8 type.
bool Int8FusedBatchAvx2(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                        const Int8FlatBatch& x, float* y, int64_t y_stride);
bool Int8FusedBatchAvxVnni(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                           const Int8FlatBatch& x, float* y, int64_t y_stride);
#endif

// y[t][col0 + r] = product of weight row r and activation row t, for every r < w.rows and
// t < a.rows. The scalar one is the reference of the integer arithmetic (matmul_int8.cc); the
// AVX-512 VNNI one is in matmul_int8_avx512_tiles.cc, the AVX2 and AVX-VNNI ones in
// matmul_int8_avx2_tiles.h.
using Int8RowsFn = void (*)(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y,
                            int64_t col0);
void Int8RowsScalar(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y, int64_t col0);
#if defined(DELTASERVE_HAVE_X86_SIMD)
void Int8RowsAvx512Vnni(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y,
                        int64_t col0);
void Int8RowsAvx2(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y, int64_t col0);
void Int8RowsAvxVnni(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y, int64_t col0);
#endif

}  // namespace deltaserve::kernels::internal
