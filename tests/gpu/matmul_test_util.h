// Helpers of the CUDA matrix-product tests (cuda_matmul_test.cc, cuda_moe_test.cc): random
// quantized weights with their exactly decoded values, and the error bounds the tests assert,
// each derived from what the kernels and the CPU reference compute:
//
// - GEMV (<= 8 rows): weights decoded exactly (dequant.cuh is bit-identical to DequantizeRow,
//   cuda_dequant_test), x in f32, f32 FMAs in a different order than a double sum: error
//   <= kF32SumRel * sum_k |w_k x_k| (n <= a few thousand terms, ~n * 2^-24 worst case, observed
//   ~1e-7; the CPU matmul tests use the same 1e-5).
// - GEMM (> 8 rows, tensor cores): w and x rounded to f16 (round to nearest even, relative
//   error <= 2^-11 each, absolute <= 2^-25 below the f16 normal range), products summed in f32:
//   |error| <= 2 * 2^-11 * sum |w x| + 2^-25 * sum (|w| + |x|) + kF32SumRel * sum |w x|.
//   Against a double product of the f16-rounded operands (what the tensor cores multiply) only
//   the f32 summation term remains: that sharper check catches a wrong element, which the
//   f16 bound alone could hide in a long sum.
// - The CPU backend, default mode, quantizes x to int8 for quantized weights (matmul.h,
//   matmul_int8.h): x_k moves by at most d_b / 2 with d_b = amax_b / 127 of its block (32 values
//   for Q4_0..Q8_0, 256 for the K-quants), the legacy scale also rounded to f16 (q * f16(d) with
//   |q| <= 127 moves by <= 127 * 2^-11 * d more): so CPU vs exact <= sum_k |w_k| * 0.6 * d_b(k).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/quants.h"
#include "tests/kernels/quant_test_util.h"

namespace deltaserve::kernels::gpu_test {

inline constexpr double kF32SumRel = 1e-5;
inline constexpr double kF16Rel = 2.0 * 0x1p-11;  // two operands rounded to f16
inline constexpr double kF16Abs = 0x1p-25;        // f16 subnormal rounding

// The weight types and their names: tests/kernels/quant_test_util.h's, shared with the CPU tests.
using testing::AllWeightTypes;
using testing::TypeName;

inline bool IsQuantized(WeightType type) { return BlockLayoutOf(type).block_size > 1; }

// `count` matrices [out][in] of `type` from N(0, scale) values, as bytes and decoded floats.
struct HostWeights {
  WeightType type = WeightType::kF32;
  int64_t in = 0;
  int64_t out = 0;
  int64_t count = 1;
  size_t row_bytes = 0;
  std::vector<uint8_t> bytes;  // [count][out][row_bytes]
  std::vector<float> decoded;  // [count][out][in]

  const float* Row(int64_t matrix, int64_t o) const {
    return decoded.data() + (matrix * out + o) * in;
  }
  WeightView View(const void* data) const { return {data, type, in, out, row_bytes, count}; }
};

inline HostWeights MakeHostWeights(WeightType type, int64_t in, int64_t out, int64_t count,
                                   float scale, std::mt19937& rng) {
  HostWeights w;
  w.type = type;
  w.in = in;
  w.out = out;
  w.count = count;
  w.row_bytes = RowBytes(type, in);
  w.bytes.resize(w.row_bytes * static_cast<size_t>(out * count));
  w.decoded.resize(static_cast<size_t>(in * out * count));
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(static_cast<size_t>(in));
  for (int64_t r = 0; r < out * count; ++r) {
    for (float& v : values) v = normal(rng);
    uint8_t* dst = w.bytes.data() + static_cast<size_t>(r) * w.row_bytes;
    EXPECT_EQ(QuantizeRow(type, values.data(), dst, in), KernelStatus::kOk);
    EXPECT_EQ(DequantizeRow(type, dst, w.decoded.data() + r * in, in), KernelStatus::kOk);
  }
  return w;
}

inline double RoundF16(double v) { return Fp16ToFp32(Fp32ToFp16(static_cast<float>(v))); }

// One output of a product: the double sum of w.x, of the f16-rounded operands, and the sums
// the bounds above are made of.
struct DotRef {
  double exact = 0;
  double f16 = 0;
  double abs_wx = 0;        // sum |w x|
  double abs_w_plus_x = 0;  // sum |w| + |x|
  double int8_shift = 0;    // sum |w_k| * 0.6 * d_b(k): the CPU int8 path's bound
};

inline DotRef Dot(WeightType type, const float* w, const float* x, int64_t n) {
  DotRef r;
  const int64_t group =
      type == WeightType::kQ4_K || type == WeightType::kQ5_K || type == WeightType::kQ6_K ? 256
                                                                                          : 32;
  double d = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (IsQuantized(type) && k % group == 0) {
      double amax = 0;
      for (int64_t i = k; i < k + group && i < n; ++i)
        amax = std::max(amax, std::fabs(double{x[i]}));
      d = amax / 127;
    }
    r.exact += double{w[k]} * x[k];
    r.f16 += RoundF16(w[k]) * RoundF16(x[k]);
    r.abs_wx += std::fabs(double{w[k]} * x[k]);
    r.abs_w_plus_x += std::fabs(double{w[k]}) + std::fabs(double{x[k]});
    if (IsQuantized(type)) r.int8_shift += std::fabs(double{w[k]}) * 0.6 * d;
  }
  return r;
}

// Bound of |GPU - exact| for one output (see the file comment); gemm: the tensor-core path.
inline double GpuBound(const DotRef& r, bool gemm) {
  double b = kF32SumRel * r.abs_wx + 1e-30;
  if (gemm) b += kF16Rel * r.abs_wx + kF16Abs * r.abs_w_plus_x;
  return b;
}

// --- the MoE FFN ----------------------------------------------------------------------------

inline double Silu(double v) { return v / (1.0 + std::exp(-v)); }

// backend.h MoeFfn in double from the decoded expert stacks, with the bound of |result - want|
// for the GPU's path (gemm: f16 operands) and for the CPU backend with f32 activations,
// propagated through the three products: gate and up each within GpuBound; h = silu(g) * u
// within 1.1 * eg * (|u| + eu) + (|silu(g)| + 1.1 * eg) * eu + 1e-6 |h| (|silu'| <= 1.1; expf and
// the division); down within sum_f |Wd| * eh_f + GpuBound; y = sum_j w_j d_j within
// sum_j w_j ed_j + 1e-6 sum |w_j d_j| (f32 sum of k terms); times 1.01 for second-order terms
// (the f16 rounding of the perturbed h).
struct MoeExpected {
  std::vector<double> want;       // [T][n_embd]
  std::vector<double> bound;      // |GPU - want| <=
  std::vector<double> cpu_bound;  // |CPU (f32 activations) - want| <=
};

inline MoeExpected MoeReference(const HostWeights& gate, const HostWeights& up,
                                const HostWeights& down, const float* x, int64_t xs,
                                int64_t n_tokens, const std::vector<int32_t>& ids,
                                const std::vector<float>& weights, int64_t k, bool gemm) {
  const int64_t n_embd = gate.in;
  const int64_t ff = gate.out;
  MoeExpected r;
  r.want.assign(n_tokens * n_embd, 0.0);
  r.bound.assign(n_tokens * n_embd, 0.0);
  r.cpu_bound.assign(n_tokens * n_embd, 0.0);
  std::vector<double> abs_sum(n_embd);
  std::vector<double> h(ff), eh(ff), ehc(ff);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * xs;
    double* want = r.want.data() + t * n_embd;
    double* bound = r.bound.data() + t * n_embd;
    double* cpu_bound = r.cpu_bound.data() + t * n_embd;
    std::fill(abs_sum.begin(), abs_sum.end(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      const double wj = weights[t * k + j];
      for (int64_t f = 0; f < ff; ++f) {
        const DotRef rg = Dot(gate.type, gate.Row(e, f), xt, n_embd);
        const DotRef ru = Dot(up.type, up.Row(e, f), xt, n_embd);
        const double eg = GpuBound(rg, gemm), eu = GpuBound(ru, gemm);
        const double egc = GpuBound(rg, false), euc = GpuBound(ru, false);
        const double sg = Silu(rg.exact);
        h[f] = sg * ru.exact;
        eh[f] = 1.1 * eg * (std::fabs(ru.exact) + eu) + (std::fabs(sg) + 1.1 * eg) * eu +
                1e-6 * std::fabs(h[f]);
        ehc[f] = 1.1 * egc * (std::fabs(ru.exact) + euc) + (std::fabs(sg) + 1.1 * egc) * euc +
                 1e-6 * std::fabs(h[f]);
      }
      const std::vector<float> hf(h.begin(), h.end());
      for (int64_t o = 0; o < n_embd; ++o) {
        const float* wd = down.Row(e, o);
        const DotRef rd = Dot(down.type, wd, hf.data(), ff);
        double prop = 0, propc = 0;
        for (int64_t f = 0; f < ff; ++f) {
          prop += std::fabs(double{wd[f]}) * eh[f];
          propc += std::fabs(double{wd[f]}) * ehc[f];
        }
        want[o] += wj * rd.exact;
        bound[o] += wj * (prop + GpuBound(rd, gemm));
        cpu_bound[o] += wj * (propc + GpuBound(rd, false));
        abs_sum[o] += std::fabs(wj * rd.exact);
      }
    }
    for (int64_t o = 0; o < n_embd; ++o) {
      bound[o] = 1.01 * (bound[o] + 1e-6 * abs_sum[o]) + 1e-6;
      cpu_bound[o] = 1.01 * (cpu_bound[o] + 1e-6 * abs_sum[o]) + 1e-6;
    }
  }
  return r;
}

}  // namespace deltaserve::kernels::gpu_test
