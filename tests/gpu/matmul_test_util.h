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

// backend.h MoeFfn in double from the decoded expert stacks (an id < 0 is skipped, as the op
// skips it), with the bound of |result - want| for the GPU's path (gemm: f16 operands) and for
// the CPU backend with f32 activations, propagated through the three products: gate and up
// each within GpuBound; h = silu(g) * u within 1.1 * eg * (|u| + eu) + (|silu(g)| + 1.1 * eg) *
// eu + 1e-6 |h| (|silu'| <= 1.1; expf and the division); down within sum_f |Wd| * eh_f +
// GpuBound; y = sum_j w_j d_j within sum_j w_j ed_j + 1e-6 sum |w_j d_j| (f32 sum of k terms);
// times 1.01 for second-order terms (the f16 rounding of the perturbed h).
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
      if (e < 0) continue;  // skipped: the other tier's expert (backend.h MoeFfn)
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

// --- expert stacks over a slot arena (worker/engine/expert_tiers.h) ---------------------------

// The bytes of `slot_expert.size()` slots, slot s holding the gate, up and down matrices of expert
// slot_expert[s] (each part at a 256-byte boundary inside the slot, as the engine's device arena
// lays them out), or 0xFF bytes when slot_expert[s] < 0 (NaN in f32/f16/bf16 and in the block
// scales: reading a wrong slot poisons the result).
struct ExpertArena {
  std::vector<uint8_t> bytes;
  size_t slot_bytes = 0;
  size_t up_at = 0;
  size_t down_at = 0;
  int64_t n_slots = 0;

  // The three stacks over the arena copied to `base` (host or device memory):
  // count = n_slots, matrix_stride = slot_bytes.
  WeightView Gate(const HostWeights& g, const void* base) const { return At(g, base, 0); }
  WeightView Up(const HostWeights& u, const void* base) const { return At(u, base, up_at); }
  WeightView Down(const HostWeights& d, const void* base) const { return At(d, base, down_at); }

 private:
  WeightView At(const HostWeights& w, const void* base, size_t at) const {
    WeightView v = w.View(static_cast<const uint8_t*>(base) + at);
    v.count = n_slots;
    v.matrix_stride = slot_bytes;
    return v;
  }
};

inline ExpertArena MakeExpertArena(const HostWeights& gate, const HostWeights& up,
                                   const HostWeights& down,
                                   const std::vector<int32_t>& slot_expert) {
  auto round = [](size_t n) { return (n + 255) / 256 * 256; };
  const size_t gb = gate.row_bytes * gate.out, ub = up.row_bytes * up.out,
               db = down.row_bytes * down.out;
  ExpertArena a;
  a.up_at = round(gb);
  a.down_at = a.up_at + round(ub);
  a.slot_bytes = a.down_at + round(db);
  a.n_slots = static_cast<int64_t>(slot_expert.size());
  a.bytes.assign(a.slot_bytes * slot_expert.size(), 0xFF);
  for (size_t s = 0; s < slot_expert.size(); ++s) {
    const int32_t e = slot_expert[s];
    if (e < 0) continue;
    uint8_t* slot = a.bytes.data() + s * a.slot_bytes;
    std::copy_n(gate.bytes.data() + e * gb, gb, slot);
    std::copy_n(up.bytes.data() + e * ub, ub, slot + a.up_at);
    std::copy_n(down.bytes.data() + e * db, db, slot + a.down_at);
  }
  return a;
}

// A route split between an arena and the host: for each assignment, its slot in `slot_expert`
// (device ids, -1 when the expert has no slot) and the original id where it has none (host ids,
// -1 where it has one); `expert_ids` are the original ids of the device side (-1 elsewhere), what
// MoeReference takes for the device half.
struct SplitRoute {
  std::vector<int32_t> slot_ids;
  std::vector<int32_t> device_experts;
  std::vector<int32_t> host_ids;
};

inline SplitRoute SplitByArena(const std::vector<int32_t>& ids,
                               const std::vector<int32_t>& slot_expert) {
  SplitRoute r;
  for (int32_t e : ids) {
    const auto it = std::find(slot_expert.begin(), slot_expert.end(), e);
    const bool on_device = e >= 0 && it != slot_expert.end();
    r.slot_ids.push_back(on_device ? static_cast<int32_t>(it - slot_expert.begin()) : -1);
    r.device_experts.push_back(on_device ? e : -1);
    r.host_ids.push_back(on_device ? -1 : e);
  }
  return r;
}

}  // namespace deltaserve::kernels::gpu_test
