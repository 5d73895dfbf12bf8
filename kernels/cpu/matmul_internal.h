// Internal to the CPU matrix products: the per-ISA kernel table that matmul.cc drives, and
// entry points with an explicit ISA for tests and benchmarks (the public functions in matmul.h
// use ActiveIsa()).
//
// matmul.cc owns blocking and threading; an ISA file (matmul_avx2.cc, matmul_avx512.cc, built
// with their own -m flags) only provides the three leaf kernels below, so nothing compiled with
// wider instructions runs unless cpu_features.h said the CPU has them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels::internal {

// Weight rows multiplied together by one dot_tile call, and the most activation rows one call
// takes; `out` of dot_tile is [kTileRows][kMaxTileCols].
inline constexpr int kTileRows = 4;
inline constexpr int kMaxTileCols = 4;

// The one activation row of a fused product, with its partial sums (computed once per
// product by matmul.cc): K-quant kernels fold each sub-block's min or offset into
// scale * sum(x) instead of applying it to every value.
struct FusedActivation {
  const float* x;       // [n]
  const float* sums16;  // [n / 16]: sums16[i] = x[16i] + ... + x[16i + 15]; null if n % 16
  const float* sums32;  // [n / 32], likewise; null if n % 32
  int64_t n;
};

struct MatMulKernels {
  // Decodes n values (whole blocks) of `type` into out, bit-identical to DequantizeRow. Returns
  // false, writing nothing, for a type this ISA does not decode (the caller uses the scalar one).
  bool (*dequantize_row)(WeightType type, const void* blocks, float* out, int64_t n);
  // out[i * kMaxTileCols + j] = sum_k w[i][k] * x[j][k] over k < n, for i < kTileRows and
  // j < nx (1 <= nx <= max_nx). Pointers need no alignment.
  void (*dot_tile)(const float* const* w, const float* const* x, int nx, int64_t n, float* out);
  int max_nx;
  // True when fused_rows handles `type`; may be null (no fused kernels).
  bool (*has_fused_rows)(WeightType type);
  // The one-activation-row product: y[r] = sum_k W[r][k] * x[k] for r < rows, rows
  // `row_bytes` apart starting at w, each row decoded in registers and never stored.
  void (*fused_rows)(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                     const FusedActivation& x, float* y);
};

const MatMulKernels& ScalarKernels();  // matmul.cc
#if defined(DELTASERVE_HAVE_X86_SIMD)
const MatMulKernels& Avx2Kernels();    // matmul_avx2.cc
const MatMulKernels& Avx512Kernels();  // matmul_avx512.cc
#endif

// The kernels of ClampIsa(isa).
const MatMulKernels& KernelsFor(CpuIsa isa);

// MatMulCpu / GetRowsCpu / DequantizeRow on the path of ClampIsa(isa); MatMulCpuIsa with the
// activation mode given, or ActiveMatMulActivations().
KernelStatus MatMulCpuIsa(ThreadPool& pool, const WeightView& w, const Mat& x, Mat& y, CpuIsa isa);
KernelStatus MatMulCpuIsa(ThreadPool& pool, const WeightView& w, const Mat& x, Mat& y, CpuIsa isa,
                          MatMulActivations mode);
// True when MatMulCpuIsa in int8 mode takes the int8 path for `type` on ClampIsa(isa) with a
// batch of `rows` activation rows.
bool UsesInt8Path(WeightType type, CpuIsa isa, int64_t rows);
// True when, on that path, the product of `type` weights with `in` values per row takes a fused
// kernel (one-row or batch) for a batch of `rows`: then each output is the one of its activation
// row alone, bit for bit (larger batches take the panel kernel).
bool UsesFusedInt8Kernel(WeightType type, int64_t in, CpuIsa isa, int64_t rows);
// The weight-row decoder of the int8 path at ClampIsa(isa) (null where it has none).
Int8DecodeFn Int8DecoderFor(CpuIsa isa);
// Products one MatMulGroupCpuIsa job takes at most (larger groups run in pieces).
inline constexpr int kMaxMatMulGroup = 8;
// MatMulGroupCpu on the path of ClampIsa(isa) in activation mode `mode`.
KernelStatus MatMulGroupCpuIsa(ThreadPool& pool, const WeightView* w, int n, const Mat& x, Mat* y,
                               CpuIsa isa, MatMulActivations mode);
KernelStatus GetRowsCpuIsa(const WeightView& table, const int32_t* ids, int64_t n, Mat& out,
                           CpuIsa isa);
KernelStatus DequantizeRowIsa(WeightType type, const void* blocks, float* out, int64_t n,
                              CpuIsa isa);

}  // namespace deltaserve::kernels::internal
